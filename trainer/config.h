// Config: everything a training run needs, as read from a YAML file (docs/CONFIG.md documents
// every key). LoadConfig validates it completely before anything runs: an unknown key, a wrong
// type, a negative size or a missing file is an InvalidArgument naming the file, line, key and
// value. Every field below carries its default; `key.path` names its YAML key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer.h"
#include "core/enum_names.h"
#include "dense/dense_arch.h"
#include "dense/lr_schedule.h"
#include "dense/optimizer.h"
#include "embedding/embedding_collection.h"
#include "embedding/row_optimizer.h"
#include "io/mlperf_npy.h"
#include "io/reader.h"
#include "sharding/process_grid.h"
#include "sharding/sharded_embedding.h"

namespace tessera {

// Every enum the config reads has its spellings in one EnumName table beside its declaration
// (core/enum_names.h); the reader and ConfigToYaml both go through that table.
enum class DataFormat { kSynthetic, kCriteoTsv, kCriteoCsv, kBinary, kMlperfNpy };
inline constexpr EnumName<DataFormat> kDataFormatNames[] = {
    {DataFormat::kSynthetic, "synthetic"},   {DataFormat::kCriteoTsv, "criteo_tsv"},
    {DataFormat::kCriteoCsv, "criteo_csv"},  {DataFormat::kBinary, "binary"},
    {DataFormat::kMlperfNpy, "mlperf_npy"}};
// data.format's spelling; Parse: InvalidArgument naming the value otherwise.
inline const char* DataFormatName(DataFormat f) { return NameIn(kDataFormatNames, f); }
inline absl::StatusOr<DataFormat> ParseDataFormat(const std::string& name) {
  return ParseIn(kDataFormatNames, name, "data.format");
}

// data.synthetic: power-law ids and a planted model (io/synthetic.h).
struct SyntheticDataConfig {
  int64_t num_train_samples = 1 << 20;   // data.synthetic.train_samples
  int64_t num_eval_samples = 1 << 16;    // data.synthetic.eval_samples
  double zipf_exponent = 1.05;           // data.synthetic.zipf_exponent
  std::vector<int64_t> pooling;          // data.synthetic.pooling: ids per bag, per feature
                                         // (one value = all features). Default: 1
  double planted_scale = 1.0;            // data.synthetic.planted_scale: logit scale of the model
  uint64_t seed = 0;                     // data.synthetic.seed; 0 = the run's seed
  // data.synthetic.id_space: every feature's ids drawn from [0, id_space) (<= 2^40), static
  // tables reducing them mod their rows (modulo hashing), dynamic tables keeping them. 0 = each
  // static table's rows, 2^40 for a dynamic table.
  int64_t id_space = 0;
};

struct DataConfig {
  DataFormat format = DataFormat::kSynthetic;  // data.format: synthetic|criteo_tsv|criteo_csv|
                                         // binary|mlperf_npy
  std::string train_path;                // data.train (files; relative to the config's folder;
                                         // mlperf_npy: the folder of day_<d>_*.npy files)
  std::string eval_path;                 // data.eval
  std::vector<int> train_days;           // data.train_days (mlperf_npy): "0-22" by default
  std::vector<int> eval_days;            // data.eval_days (mlperf_npy): "23" by default
  MlperfSplit eval_split = MlperfSplit::kVal;  // data.eval_split (mlperf_npy): val|test|all
  int64_t batch_size = 2048;             // data.batch_size: per rank (T ranks train T x this)
  int64_t eval_batch_size = 0;           // data.eval_batch_size; 0 = batch_size
  bool shuffle = false;                  // data.shuffle: shuffle batches' order within a window
  BadRecordPolicy on_bad_record = BadRecordPolicy::kFail;  // data.on_bad_record: fail|skip
  int64_t max_bad_records = 1000;        // data.max_bad_records: skip cap, then fail
  int prefetch_batches = 4;              // data.prefetch_batches: reader thread queue depth
  SyntheticDataConfig synthetic;         // data.synthetic
};

struct ModelConfig {
  InteractionType interaction = InteractionType::kDot;  // model.type: dlrm|dcnv2
  int64_t num_dense = 13;                // model.num_dense
  int64_t embedding_dim = 16;            // model.embedding_dim
  std::vector<int64_t> bottom_mlp;       // model.bottom_mlp
  std::vector<int64_t> top_mlp;          // model.top_mlp
  int dcn_num_layers = 3;                // model.dcn.num_layers
  int64_t dcn_low_rank = 0;              // model.dcn.low_rank; 0 = full rank
  std::vector<TableConfig> tables;       // model.tables (or the model.table_rows shorthand:
                                         // one table "t<i>" per feature i)
  int64_t max_table_rows = 0;            // model.max_table_rows: cap every table (0 = no cap)
  std::string init_from;                 // model.init_from: safetensors file to start from
  DenseDtype dense_dtype = DenseDtype::kFp32;  // model.dense_dtype: fp32|bf16 (MLP GEMM inputs;
                                         // bf16: fp32 accumulation and weights; CPU or CUDA)
  // model.embedding_dtype / embedding_rounding: every table's storage.dtype / storage.rounding
  // unless the table sets its own (fp32 | fp16 | bf16; stochastic | nearest).
  RowDtype embedding_dtype = RowDtype::kF32;
  RowRounding embedding_rounding = RowRounding::kStochastic;
  // model.embedding_output_dtype: every table's output_dtype unless the table sets its own
  // (fp32 | bf16: pooled outputs and their gradients in bf16, 16-bit tables only).
  RowDtype embedding_output_dtype = RowDtype::kF32;
};

struct OptimizerConfig {
  RowOptimizerOptions embedding;         // optimizer.embedding.{type,eps,beta1,beta2}
  float embedding_lr = 0.1f;             // optimizer.embedding.lr
  DenseOptimizerOptions dense;           // optimizer.dense.{type,eps,beta1,beta2,weight_decay}
  float dense_lr = 0.1f;                 // optimizer.dense.lr
  LrScheduleOptions schedule;            // optimizer.schedule.{warmup_steps,decay_start,...};
                                         // base_lr is 1 and scales both lrs
};

// train.nonfinite: what a step whose loss or gradients are NaN or infinite does (it never
// updates the model either way; Model::TrainStep).
enum class NonFinitePolicy {
  kStop,  // "stop": the run fails, naming the step and the batch's place in the data
  kSkip,  // "skip": the step is skipped (logged with the same detail) and training goes on
};
inline constexpr EnumName<NonFinitePolicy> kNonFinitePolicyNames[] = {
    {NonFinitePolicy::kStop, "stop"}, {NonFinitePolicy::kSkip, "skip"}};
inline const char* NonFinitePolicyName(NonFinitePolicy p) {
  return NameIn(kNonFinitePolicyNames, p);
}
inline absl::StatusOr<NonFinitePolicy> ParseNonFinitePolicy(const std::string& name) {
  return ParseIn(kNonFinitePolicyNames, name, "train.nonfinite");
}

struct TrainConfig {
  int64_t steps = 0;                     // train.steps; 0 = epochs over the training data
  int64_t epochs = 1;                    // train.epochs
  int64_t eval_every = 0;                // train.eval_every (steps); 0 = only at the end
  int64_t eval_batches = 0;              // train.eval_batches: cap per eval; 0 = whole set
  int64_t log_every = 100;               // train.log_every (steps)
  int64_t checkpoint_every = 0;          // train.checkpoint_every (steps); 0 = by time only
  double checkpoint_minutes = 10;        // train.checkpoint_minutes: also a checkpoint when this
                                         // much wall time passed since the last; 0 = by steps only
  bool resume = true;                    // train.resume: continue from the latest checkpoint in
                                         // output.checkpoint_dir when there is one
  NonFinitePolicy nonfinite = NonFinitePolicy::kStop;  // train.nonfinite: stop|skip
};

struct OutputConfig {
  std::string dir = "runs/default";      // output.dir (created; relative to the working dir)
  std::string metrics = "metrics.jsonl"; // output.metrics: JSON lines, inside dir
  std::string export_path = "model.safetensors";  // output.export, inside dir ("" = none)
  bool progress = true;                  // output.progress: progress line on a terminal
  bool tensorboard = true;               // output.tensorboard: TensorBoard event file in dir
  std::string checkpoint_dir;            // output.checkpoint_dir (relative to output.dir);
                                         // "" = <output.dir>/checkpoints; see CheckpointDir
  std::string mllog;                     // output.mllog: MLPerf Training log (:::MLLOG lines),
                                         // inside dir; "" = none (trainer/mllog.h)
};

// 2D sharding (sharding/); a world of one ignores it.
struct ShardingConfig {
  int group_size = 0;                    // sharding.group_size (N); 0 = the whole world
  GridLayout layout = GridLayout::kReplicasAdjacent;  // sharding.layout:
                                         // replicas_adjacent|groups_contiguous
  ReplicaSync replica_sync = ReplicaSync::kExact;  // sharding.replica_sync: exact|average
  int64_t sync_every = 1;                // sharding.sync_every (k, average mode)
  SyncRows sync_rows = SyncRows::kTouched;  // sharding.sync_rows: touched|all (average mode)
  std::string plan;                      // sharding.plan: plan file (YAML); "" = default plan
  int64_t bucket_bytes = int64_t{25} << 20;  // sharding.bucket_bytes: dense all-reduce bucket
  PayloadDType comm_dtype = PayloadDType::kF32;  // sharding.comm_dtype: fp32|fp16|bf16 (pooled
                                         // all-to-alls)
  bool pipeline = true;                  // sharding.pipeline: next batch's input dist overlaps
  // sharding.transport: auto|mpi|nccl, how device payloads travel when device: cuda shards
  // (PayloadTransport, sharding/sharded_embedding.h).
  PayloadTransport transport = PayloadTransport::kAuto;
  // sharding.profile: the machine profile `sharding.plan: auto` plans with: `auto` (this
  // machine's own, cached per user or calibrated once: trainer/profile_cache.h), a shipped name
  // (planner/profiles/, for planning other clusters) or a file (a value with '/' or ending
  // .yaml/.json, relative to the config's directory, must exist).
  std::string profile = "auto";
  // sharding.peer_timeout_s: a rank waiting in a collective while another member has sent no
  // heartbeat for this long ends the job naming it (sharding/peer_watchdog.h); 0 = off.
  double peer_timeout_s = 30;
  // sharding.collective_timeout_s: a collective wait this long ends the job even with every
  // member alive; 0 = off.
  double collective_timeout_s = 0;
  // sharding.stall_timeout_s: every rank alive and waiting in a collective this long (a transfer
  // the transport does not deliver) ends the job naming what each waits in; also bounds the
  // ranks' first exchange at start-up; 0 = off.
  double stall_timeout_s = 120;
};

struct Config {
  std::string source;                    // the file it was read from
  uint64_t seed = 1234;                  // seed
  int threads = 0;                       // threads; 0 = OMP_NUM_THREADS or all cores
  Device device = Device::kCpu;          // device: cpu|cuda
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainConfig train;
  OutputConfig output;
  ShardingConfig sharding;
};

// The directory checkpoints go to: output.checkpoint_dir resolved against output.dir (itself
// relative to the working directory), "<output.dir>/checkpoints" when empty.
std::string CheckpointDir(const Config& config);
// The RocksDB directory of table `t` (model.tables[t].storage.path resolved against output.dir;
// "<output.dir>/tables/<name>" when empty). Meaningful for storage.tier rocksdb.
std::string TableStoragePath(const Config& config, int t);

// Reads and validates `path`. `overrides` are "dotted.key=value" strings applied on top of the
// file (value parsed as YAML, so "model.bottom_mlp=[64,16]" works) before validation.
// Relative data paths are resolved against the config file's folder.
absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides = {});

// The same, from YAML text (`source_name` is used in messages and to resolve relative paths).
absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& source_name,
                                   const std::vector<std::string>& overrides = {});

// The effective config as YAML (every key, defaults included, tables expanded, paths as
// resolved), for the run directory's log. ParseConfig(ConfigToYaml(c), ...) gives back `c`.
std::string ConfigToYaml(const Config& config);

}  // namespace tessera
