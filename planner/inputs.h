// PlanInputs: everything the planner plans from besides the machine profile: the topology, the
// model's tables with their access statistics, the dense model's shapes and the step's settings.
// Plain data; the trainer and tessera-plan fill it from a training config
// (trainer/auto_plan.h: PlanInputsFromConfig), tests by hand.
//
// Id statistics per table come from one of two places:
//   - the synthetic generator's distribution: ids Zipf(s) over the table's rows (io/zipf.h,
//     scrambled, so every row range gets its share of accesses in proportion to its rows); the
//     expected distinct rows among n draws is computed analytically (ExpectedDistinct below,
//     the formula bench/cost_model.py used, validated against the communicator's byte counters);
//   - a measured data sample (tools/plan_sample.cc): per table the distinct ids per batch of the
//     sample's batch size and the share of accesses that hit the hottest rows.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/table_config.h"

namespace tessera::planner {

// Memory per rank by kind, bytes. 0 = the kind is absent (disk: no RocksDB tier possible).
struct MemoryLimits {
  int64_t device = 0;  // HBM per rank (GPU profiles; 0 on a CPU machine)
  int64_t host = 0;    // host RAM per rank
  int64_t disk = 0;    // local disk per rank for RocksDB tables
};

struct Topology {
  int world_size = 1;      // T
  int ranks_per_node = 1;  // R: ranks sharing a node (and its intra-node links); divides T or >= T
  // The process grid's layout (sharding.layout), which decides which of its groups stay on a
  // node: false = replicas_adjacent (group rank s of sharding group g is world rank s M + g: a
  // shard's replicas are neighbours), true = groups_contiguous (world rank g N + s: a sharding
  // group's ranks are neighbours). World ranks fill the nodes in order (R per node).
  bool groups_contiguous = false;
  MemoryLimits memory;
  std::string transport = "mpi";  // the communicator the profile's collectives are read for
};

// Measured statistics of one table (from a data sample), replacing the Zipf formula.
struct MeasuredIdStats {
  int64_t sample_batch = 0;       // the batch size the counts below were taken at
  double ids_per_sample = 0;      // bag entries per sample, all features of the table
  double distinct_per_batch = 0;  // distinct rows among one batch's ids (mean over batches)
  // hot_rows[i] rows cover hot_coverage[i] of all accesses (ascending), e.g. the top 1%.
  std::vector<int64_t> hot_rows;
  std::vector<double> hot_coverage;
};

struct PlanTable {
  TableConfig config;                     // name, rows, dim, pooling, storage as configured
  double ids_per_bag = 1;                 // mean bag length per feature (pooling factor)
  int num_features = 1;                   // bags per sample (features the table serves)
  double zipf_exponent = 1.05;            // id distribution when `measured` is empty
  std::vector<MeasuredIdStats> measured;  // at most one; overrides the Zipf formula
  // The config fixes the storage (storage.tier given): the planner keeps it; otherwise it may
  // move the table to the RocksDB tier (with a cache size it chooses) when memory is short.
  bool storage_fixed = false;
  // The config names a sharding type for this table (nothing else may be chosen); empty = free.
  std::string fixed_type;
};

enum class Interaction { kDot, kDcn };

struct DenseShape {
  int64_t num_dense = 13;
  std::vector<int64_t> bottom_mlp;
  std::vector<int64_t> top_mlp;
  Interaction interaction = Interaction::kDot;
  int dcn_num_layers = 3;
  int64_t dcn_low_rank = 0;
  int64_t embedding_dim = 16;  // d of the interaction (every table's dim for kDot)
  // Floats of dense optimizer state per parameter (SGD 0, AdaGrad 1, Adam 2).
  int optimizer_state_floats = 0;
};

enum class ReplicaSync { kExact, kAverage };

struct StepSettings {
  int64_t batch_per_rank = 2048;  // local batch B
  int payload_bytes = 4;          // pooled all-to-all element: 4 (fp32) or 2 (fp16/bf16)
  ReplicaSync replica_sync = ReplicaSync::kExact;
  int64_t sync_every = 1;                    // k (average mode)
  bool sync_all_rows = false;                // average mode: sync_rows all (else touched)
  bool pipeline = true;                      // next batch's input dist overlaps the step
  int64_t bucket_bytes = int64_t{25} << 20;  // dense all-reduce bucket
  // Row optimizer state per row of a shard with c columns: fixed + per_col x c floats
  // (row-wise AdaGrad 1 + 0, Adam 0 + 2, SGD 0 + 0).
  int row_state_fixed = 1;
  int row_state_per_col = 0;
  // Steps the run trains (train.steps; tessera-bench: warm-up + timed): sizes the RocksDB
  // memtables and block caches, which fill with the rows a run writes and reads. 0 = an
  // unbounded run (every row of a tiered shard written once, the block cache full).
  int64_t steps = 0;
  int threads = 0;             // compute threads per rank (0 = the profile's)
  std::string device = "cpu";  // the profile device the ranks compute on
};

struct PlanInputs {
  std::string source;  // names the config in messages
  Topology topology;
  std::vector<PlanTable> tables;  // model order
  DenseShape dense;
  StepSettings step;
  // Fixed group size N (sharding.group_size); 0 = the planner chooses among divisors of T.
  int group_size = 0;
};

// Checks what the planner cannot plan: a table with zero rows or dim, no tables, a world size
// below 1, a fixed group size that does not divide T, a bad batch. InvalidArgument naming
// `inputs.source` and the table or key.
[[nodiscard]] absl::Status ValidatePlanInputs(const PlanInputs& inputs);

// Expected distinct rows among n draws of Zipf(s) over `rows` rows: sum_r 1 - (1 - p_r)^n, exact
// over the first 4096 ranks and in geometric groups of ranks beyond (bench/cost_model.py's
// `distinct`). `from_rank` > 0 counts only the rows of rank >= from_rank (the rows outside a
// cache of the from_rank hottest rows).
double ExpectedDistinct(double n, int64_t rows, double s, int64_t from_rank = 0);
// Share of Zipf(s) accesses over `rows` rows that hit the `hot` most frequent ones.
double ZipfCoverage(int64_t hot, int64_t rows, double s);

// Per table: the statistics the estimator reads, from the Zipf formula or the measured sample.
struct IdModel {
  // Distinct rows of a shard holding `shard_rows` of the table's rows among the ids of
  // `samples` samples.
  double Distinct(const PlanTable& t, double samples, int64_t shard_rows) const;
  // Share of accesses that hit the `cached` hottest rows of a shard holding `shard_rows` rows.
  double Coverage(const PlanTable& t, int64_t cached, int64_t shard_rows) const;
};

// Ids per sample of table t (all its features).
inline double IdsPerSample(const PlanTable& t) { return t.ids_per_bag * t.num_features; }

// What the dense model receives per sample: embedding bags (all tables' features) and the
// pooled output's width (each feature's table dim).
struct PooledOutput {
  int64_t features = 0;
  int64_t width = 0;
};
inline PooledOutput PooledOutputOf(const PlanInputs& in) {
  PooledOutput o;
  for (const PlanTable& t : in.tables) {
    o.features += t.num_features;
    o.width += t.num_features * t.config.dim;
  }
  return o;
}

}  // namespace tessera::planner
