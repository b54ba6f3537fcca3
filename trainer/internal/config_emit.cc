// ConfigToYaml (declared in trainer/config.h): the effective config, every key written out, so
// a run directory records exactly what ran. Kept apart from the parser because it is a plain
// walk over the struct.
#include <charconv>
#include <sstream>

#include "absl/strings/str_join.h"
#include "trainer/config.h"
#include "trainer/internal/config_dynamic.h"
#include "yaml-cpp/yaml.h"

namespace tessera {
namespace {

// Shortest text that reads back to the same bits (0.0123, not 0.0122999996).
template <typename T>
std::string Shortest(T v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

template <typename T>
void Key(YAML::Emitter& e, const char* key, const T& value) {
  e << YAML::Key << key << YAML::Value << value;
}

void Key(YAML::Emitter& e, const char* key, float value) {
  e << YAML::Key << key << YAML::Value << Shortest(value);
}
void Key(YAML::Emitter& e, const char* key, double value) {
  e << YAML::Key << key << YAML::Value << Shortest(value);
}

void IntList(YAML::Emitter& e, const char* key, const std::vector<int64_t>& v) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int64_t x : v) e << x;
  e << YAML::EndSeq;
}

// Enum values are written with the same EnumName table the reader parses them with (the one
// beside each enum's declaration), so what is written reads back to the same value.
template <typename E, size_t N>
void Key(YAML::Emitter& e, const char* key, const EnumName<E> (&names)[N], E value) {
  e << YAML::Key << key << YAML::Value << NameIn(names, value);
}

void EmitModel(YAML::Emitter& e, const ModelConfig& m) {
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  Key(e, "type", kInteractionTypeNames, m.interaction);
  Key(e, "num_dense", m.num_dense);
  Key(e, "embedding_dim", m.embedding_dim);
  IntList(e, "bottom_mlp", m.bottom_mlp);
  IntList(e, "top_mlp", m.top_mlp);
  e << YAML::Key << "dcn" << YAML::Value << YAML::BeginMap;
  Key(e, "num_layers", m.dcn_num_layers);
  Key(e, "low_rank", m.dcn_low_rank);
  e << YAML::EndMap;
  Key(e, "max_table_rows", m.max_table_rows);
  Key(e, "init_from", m.init_from);
  Key(e, "dense_dtype", kDenseDtypeNames, m.dense_dtype);
  Key(e, "embedding_dtype", kRowDtypeNames, m.embedding_dtype);
  Key(e, "embedding_rounding", kRowRoundingNames, m.embedding_rounding);
  Key(e, "embedding_output_dtype", kRowDtypeNames, m.embedding_output_dtype);
  e << YAML::Key << "tables" << YAML::Value << YAML::BeginSeq;
  for (const TableConfig& t : m.tables) {
    e << YAML::Flow << YAML::BeginMap;
    Key(e, "name", t.name);
    if (!t.dynamic.enabled) Key(e, "rows", t.num_rows);  // a dynamic table: capacity_rows
    Key(e, "dim", t.dim);
    Key(e, "pooling", kPoolingModeNames, t.pooling);
    e << YAML::Key << "features" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int f : t.features) e << f;
    e << YAML::EndSeq;
    e << YAML::Key << "init" << YAML::Value << YAML::Flow << YAML::BeginMap;
    Key(e, "type", kRowInitTypeNames, t.init.type);
    if (t.init.scale > 0) Key(e, "scale", t.init.scale);  // absent = sqrt(1 / rows)
    e << YAML::EndMap;
    // Written whenever it or the model's default is not fp32 (rereading keeps it).
    if (t.output_dtype != RowDtype::kF32 || m.embedding_output_dtype != RowDtype::kF32)
      Key(e, "output_dtype", kRowDtypeNames, t.output_dtype);
    // A memory table's storage is written whenever it is not fp32 or the model's defaults are
    // not fp32 / stochastic, so that rereading never applies the model default instead.
    const bool default_storage = t.storage.dtype == RowDtype::kF32 &&
                                 m.embedding_dtype == RowDtype::kF32 &&
                                 t.storage.rounding == m.embedding_rounding;
    // device_cache_rows always (0: no cache); device_cache_bytes only as its alternative.
    auto device_cache = [&e](const TableStorage& st) {
      if (st.device_cache_rows > 0 || st.device_cache_bytes <= 0)
        Key(e, "device_cache_rows", st.device_cache_rows);
      if (st.device_cache_rows <= 0 && st.device_cache_bytes > 0)
        Key(e, "device_cache_bytes", st.device_cache_bytes);
    };
    if (t.storage.tier == StorageTier::kMemory && (!default_storage || t.storage.device_cached())) {
      e << YAML::Key << "storage" << YAML::Value << YAML::Flow << YAML::BeginMap;
      Key(e, "tier", kStorageTierNames, t.storage.tier);
      Key(e, "dtype", kRowDtypeNames, t.storage.dtype);
      Key(e, "rounding", kRowRoundingNames, t.storage.rounding);
      if (t.storage.device_cached()) Key(e, "policy", kCachePolicyNames, t.storage.policy);
      device_cache(t.storage);
      e << YAML::EndMap;
    }
    if (t.storage.tier == StorageTier::kRocksDb) {
      const TableStorage& st = t.storage;
      e << YAML::Key << "storage" << YAML::Value << YAML::Flow << YAML::BeginMap;
      Key(e, "tier", kStorageTierNames, st.tier);
      Key(e, "dtype", kRowDtypeNames, st.dtype);
      Key(e, "rounding", kRowRoundingNames, st.rounding);
      Key(e, "path", st.path);
      if (st.cache_rows > 0) Key(e, "cache_rows", st.cache_rows);
      if (st.cache_rows <= 0) Key(e, "cache_bytes", st.cache_bytes);
      Key(e, "policy", kCachePolicyNames, st.policy);
      Key(e, "reader_threads", st.reader_threads);
      Key(e, "prefetch", st.prefetch);
      device_cache(st);
      e << YAML::EndMap;
    }
    internal::EmitTableDynamic(e, t);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
}

void EmitData(YAML::Emitter& e, const DataConfig& d) {
  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  Key(e, "format", kDataFormatNames, d.format);
  if (d.format != DataFormat::kSynthetic) {
    Key(e, "train", d.train_path);
    Key(e, "eval", d.eval_path);
  }
  if (d.format == DataFormat::kMlperfNpy) {
    Key(e, "train_days", absl::StrJoin(d.train_days, ","));
    Key(e, "eval_days", absl::StrJoin(d.eval_days, ","));
    Key(e, "eval_split", kMlperfSplitNames, d.eval_split);
  }
  Key(e, "batch_size", d.batch_size);
  Key(e, "eval_batch_size", d.eval_batch_size);
  Key(e, "shuffle", d.shuffle);
  Key(e, "on_bad_record", kBadRecordPolicyNames, d.on_bad_record);
  Key(e, "max_bad_records", d.max_bad_records);
  Key(e, "prefetch_batches", d.prefetch_batches);
  if (d.format == DataFormat::kSynthetic) {
    const SyntheticDataConfig& s = d.synthetic;
    e << YAML::Key << "synthetic" << YAML::Value << YAML::BeginMap;
    Key(e, "train_samples", s.num_train_samples);
    Key(e, "eval_samples", s.num_eval_samples);
    Key(e, "zipf_exponent", s.zipf_exponent);
    IntList(e, "pooling", s.pooling);
    Key(e, "planted_scale", s.planted_scale);
    Key(e, "seed", s.seed);
    Key(e, "id_space", s.id_space);
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
}

void EmitOptimizer(YAML::Emitter& e, const OptimizerConfig& o) {
  e << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "embedding" << YAML::Value << YAML::BeginMap;
  Key(e, "type", kRowOptimizerTypeNames, o.embedding.type);
  Key(e, "lr", o.embedding_lr);
  Key(e, "eps", o.embedding.eps);
  Key(e, "beta1", o.embedding.beta1);
  Key(e, "beta2", o.embedding.beta2);
  Key(e, "adagrad_initial", o.embedding.adagrad_initial);
  e << YAML::EndMap;
  e << YAML::Key << "dense" << YAML::Value << YAML::BeginMap;
  Key(e, "type", kDenseOptimizerTypeNames, o.dense.type);
  Key(e, "lr", o.dense_lr);
  Key(e, "eps", o.dense.eps);
  Key(e, "beta1", o.dense.beta1);
  Key(e, "beta2", o.dense.beta2);
  Key(e, "weight_decay", o.dense.weight_decay);
  Key(e, "adagrad_initial", o.dense.adagrad_initial);
  e << YAML::EndMap;
  e << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  Key(e, "warmup_steps", o.schedule.warmup_steps);
  Key(e, "decay_start", o.schedule.decay_start);
  Key(e, "decay_steps", o.schedule.decay_steps);
  Key(e, "decay_power", o.schedule.decay_power);
  Key(e, "end_lr", o.schedule.end_lr);
  e << YAML::EndMap << YAML::EndMap;
}

}  // namespace

std::string ConfigToYaml(const Config& c) {
  YAML::Emitter e;
  e << YAML::Comment("effective config of " + c.source);
  e << YAML::BeginMap;
  Key(e, "seed", c.seed);
  Key(e, "threads", c.threads);
  Key(e, "device", kDeviceNames, c.device);
  EmitModel(e, c.model);
  EmitData(e, c.data);
  EmitOptimizer(e, c.optimizer);
  e << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  Key(e, "steps", c.train.steps);
  Key(e, "epochs", c.train.epochs);
  Key(e, "eval_every", c.train.eval_every);
  Key(e, "eval_batches", c.train.eval_batches);
  Key(e, "log_every", c.train.log_every);
  Key(e, "checkpoint_every", c.train.checkpoint_every);
  Key(e, "checkpoint_minutes", c.train.checkpoint_minutes);
  Key(e, "resume", c.train.resume);
  Key(e, "nonfinite", kNonFinitePolicyNames, c.train.nonfinite);
  e << YAML::EndMap;
  e << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  Key(e, "dir", c.output.dir);
  Key(e, "metrics", c.output.metrics);
  Key(e, "export", c.output.export_path);
  Key(e, "progress", c.output.progress);
  Key(e, "checkpoint_dir", c.output.checkpoint_dir);
  Key(e, "mllog", c.output.mllog);
  Key(e, "tensorboard", c.output.tensorboard);
  e << YAML::EndMap;
  e << YAML::Key << "sharding" << YAML::Value << YAML::BeginMap;
  Key(e, "group_size", c.sharding.group_size);
  Key(e, "layout", kGridLayoutNames, c.sharding.layout);
  Key(e, "replica_sync", kReplicaSyncNames, c.sharding.replica_sync);
  Key(e, "sync_every", c.sharding.sync_every);
  Key(e, "sync_rows", kSyncRowsNames, c.sharding.sync_rows);
  Key(e, "plan", c.sharding.plan);
  Key(e, "bucket_bytes", c.sharding.bucket_bytes);
  Key(e, "comm_dtype", kPayloadDTypeNames, c.sharding.comm_dtype);
  Key(e, "transport", kPayloadTransportNames, c.sharding.transport);
  Key(e, "pipeline", c.sharding.pipeline);
  Key(e, "profile", c.sharding.profile);
  Key(e, "peer_timeout_s", c.sharding.peer_timeout_s);
  Key(e, "collective_timeout_s", c.sharding.collective_timeout_s);
  Key(e, "stall_timeout_s", c.sharding.stall_timeout_s);
  e << YAML::EndMap << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace tessera
