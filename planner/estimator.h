// Estimator: predicted step time per rank and per phase, and memory per rank in bytes, of a
// placement (the tables' options and shard owners), from the machine profile alone.
//
// The step as the trainer runs it (docs/SHARDING.md "One step"), per rank of a sharding group of
// N ranks, M = T / N replica groups, local batch B, payload e bytes (comm dtype):
//   input dist     header all-to-all (latency) + id payload all-to-all: per sender and shard
//                  8 x distinct ids + 4 x ids (positions) + 4 x bags (lengths); with
//                  sharding.pipeline it travels during the previous step's other collectives
//                  (MPI progresses only inside MPI calls) or its whole step (NCCL); the packing
//                  (PackInput: ids bucketed per destination, deduplicated) is on the critical
//                  path whenever T > 1, priced per id at the profile's pack_id_s (scatter_update
//                  id_s when absent)
//   lookup         per shard: N B bags x gather bag_s + the owner's ids (N B ids-per-sample x
//                  share of rows) / gather rate at the shard's row bytes, hot/cold blended by
//                  the id skew (a table within the profile's llc_bytes is all hot)
//   output dist    each shard sends B bags x cols x e to every other rank (row and grid shards
//                  return partial sums of every bag); the all-to-all ends with its slowest rank;
//                  then every rank (T > 1) zeroes its [B, output dim] output and adds each
//                  received block into it: B x od x 4 bytes written, and per (shard, feature)
//                  B x cols x 4 read and 2 x that read-modify-written, at the profile's
//                  pack_bytes_per_s (copy_bytes_per_s when absent)
//   dense fwd/bwd  GEMMs of the bottom MLP, the interaction (dot: batched (F+1)^2 d; DCNv2:
//                  cross layers) and the top MLP, each at the profile's rate for its shape
//                  (forward, input gradient and weight gradient shapes separately); the
//                  bias + ReLU passes at the copy rate unless the rates were timed through
//                  the Linear layer (gemm_fused_passes), DCNv2's cross products at it always
//   backward dist  the output dist's bytes in reverse, after every rank (T > 1) packs the
//                  output gradient per owner: per (shard, feature) B x cols x 4 read + written
//                  at pack_bytes_per_s
//   update         the owner's ids x scatter_update id_s (sort, gradient sums) + its distinct
//                  rows (with exact replica sync: the union over the replicas) / the update
//                  rate, the share of their bytes (weights + state) that fits in the LLC the
//                  dense work leaves (llc_bytes - activations - dense weights and gradients) at
//                  the warm rate (still cached from the forward's gather); column-split row-wise
//                  AdaGrad adds a group all-gather of per-row sums and, per updated row, one binary
//                  search per column piece over the sibling's updated rows (log2 rows steps at the
//                  profile's search_step_s); data-parallel tables: their own ids, the world's
//                  distinct rows, three passes over the rows x (dim + 1) gradient table and its
//                  world all-reduce (blocking)
//   dense all-red  2 (T-1)/T x 4 P bytes over the world, bucketed: overlapped with the backward
//                  dist and update (MPI) or the whole backward (NCCL), the last bucket exposed
//   replica sync   exact: 2 all-gathers (counts, ids 8 u (M-1)) and one all-reduce of the
//                  union's gradients 2 (M-1)/M U d 4 per step, plus the union's sort (M u ids x
//                  id_s) and two copies of its gradients; average: weights and state of the
//                  rows touched in k steps (or all rows), / k
//   tier misses    rows of the step outside the cache (the cache holding the hottest rows),
//                  read from the memtable (the run's written rows within one write buffer),
//                  the page cache or the disk (profile tier table) by the tier's threads during
//                  the previous step and written back by its writer thread during the next one:
//                  only what outlasts the rest of the step is exposed, the rest is background
//                  (the CPU clock's); the training thread's prefetch probes every id (hit_s)
// The ranks' compute is multiplied by the profile's slowdowns at the node's rank count (ranks
// computing side by side share the LLC and the memory bus): compute_slowdown for the row work
// (lookup, update, packing), gemm_slowdown for the dense phases. Every collective also pays its
// latency (profile alpha at that communicator size). Each collective is priced at the profile's points of its scope: a group whose ranks
// share one node (R ranks per node, world ranks filling nodes in order, the layout deciding
// which groups are neighbours: Topology) at the same-node points, a group across nodes at the
// cross-node points (same_node: false, from calibrate across hosts) when the profile has them;
// a world across nodes also takes compute_slowdown from the cross-node all-reduce at T. Ranks x
// threads beyond the node's cores (the profile fingerprint's; across nodes, the cross-node
// points' node_cores) share them: compute x cores_share(). The step time is the critical path
// (step_model.cc): between two blocking collectives each rank computes; the collective starts
// when the last rank arrives, so every other rank waits in it for the gap between the slowest
// rank's compute and its own (the plan's own imbalance, StepEstimate::wait), and it ends with
// its slowest transfer.
//
// Memory per rank (bytes): weights and optimizer state of owned shards (device memory when the
// ranks compute on cuda, host otherwise), tier caches (slots + 48 bytes bookkeeping; RocksDB as
// allocated: the hash memtable's buckets, one entry per row written back in the run's
// StepSettings::steps (at most the 128 MiB write buffer), and past that the block cache as
// misses fill it, at most 64 MiB) and the database on disk, all-to-all buffers (send + receive,
// doubled when pipelined), gradient aggregation workspace, dense parameters + gradients +
// optimizer state + the all-reduce buffer, activations of B samples, and the profile's base
// process memory (+ its comm_memory_bytes when T > 1).
// Thread-safety: const methods may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/enumerator.h"
#include "planner/inputs.h"
#include "planner/profile.h"

namespace tessera::planner {

enum Phase {
  kInputDist,
  kLookup,
  kOutputDist,
  kDenseForward,
  kDenseBackward,
  kBackwardDist,
  kEmbeddingUpdate,
  kDenseAllReduce,
  kReplicaSync,
  kTierMisses,
  kNumPhases
};
const char* PhaseName(Phase p);

enum MemKind { kDevice, kHost, kDisk, kNumMemKinds };
const char* MemKindName(MemKind k);

// Per-rank accumulators the search balances. Times in seconds (bytes already divided by the
// bandwidth of the link they travel), memory in bytes.
enum Metric {
  kInSend,   // input dist payload sent
  kInRecv,   // input dist payload received
  kOutSend,  // output dist sent (= backward dist received)
  kOutRecv,  // output dist received (= backward dist sent)
  kLookupS,
  kUpdateS,
  kTierS,       // tier reads (prefetchable)
  kTierWriteS,  // tier write-back (the writer thread, during the next step)
  kTierProbeS,  // tier prefetch on the training thread: every id probed in the row cache
  kSyncS,       // replica sync + column-split AdaGrad all-gathers (not the all-reduce below)
  // The replica all-reduce's buffer bytes per step (exact: the union's gradients; average: the
  // synced rows' weights and state / sync_every), all of a rank's shards in one call: priced
  // once per call in StepParts (beyond llc_bytes at the beyond-cache rate).
  kSyncBytes,
  kPackS,       // input dist packing (PackInput), on the critical path
  kUnpackS,     // output dist: received partial sums added into the output (requester side)
  kGradPackS,   // backward dist: the output gradient packed per owner (requester side)
  kMemDevice,
  kMemHost,
  kMemDisk,
  kNumMetrics
};
using MetricVec = std::array<double, kNumMetrics>;

// Memory of one rank split by what it holds (for the explain table).
struct MemoryBreakdown {
  double weights = 0, optimizer_state = 0, caches = 0, comm_buffers = 0, activations = 0, dense = 0,
         base = 0, disk = 0;
};

// What placing one table adds: `uniform` to every rank of the group, `per_rank` on top of it.
struct Contribution {
  MetricVec uniform{};
  std::vector<std::pair<int, MetricVec>> per_rank;
  double world_allreduce_bytes = 0;  // data-parallel gradient tables (world all-reduce)
  // Memory detail of the shards (for explain; not needed by the search).
  std::vector<std::pair<int, MemoryBreakdown>> memory;
  MemoryBreakdown uniform_memory;
};

struct PhaseTimes {
  std::array<double, kNumPhases> s{};
  // Seconds of work off the critical path: the tier's prefetch reads the step hides (run by the
  // tier's threads during the previous step). Not in total() (the wall step), but on the process
  // CPU clock, which counts every thread: total() + background_s is the step's CPU time.
  double background_s = 0;
  double total() const;
};

// The step as the critical path over the ranks, with the per-rank detail.
struct StepEstimate {
  // The critical path: per segment between blocking collectives (the trainer's order), the
  // compute of the rank that arrives last, then each collective at its slowest rank. What the
  // search minimises (StepFromMaxima gives the same total when each segment's compute differs
  // between ranks in one metric only, as the step's do: lookup, update).
  PhaseTimes step;
  std::vector<PhaseTimes> per_rank;  // each rank's own phase costs (explain)
  // Per rank, the seconds it waits in each phase's collectives for the others: for the rank
  // that arrives last and the slowest transfer, nothing; for every other rank the gap between
  // the slowest rank's compute since the previous collective and its own, plus the slowest
  // rank's part of the call beyond its own. per_rank[r].total() + wait[r].total() is
  // step.total() for every rank.
  std::vector<PhaseTimes> wait;
  std::vector<std::array<double, kNumMemKinds>> memory;  // bytes per rank by kind
  std::vector<MemoryBreakdown> memory_detail;
  double imbalance = 1;  // max / mean of per-rank embedding time
};

// One table's placement: its option (type, storage) and its shards (owner = group rank).
struct TablePlacement {
  TableOption option;
  std::vector<Shard> shards;
};
// The shards of `option` over `table` with piece (i, j) (row piece i, column piece j, sizes by
// PieceRange) owned by ranks[i x C + j]; empty for data_parallel.
TablePlacement MakePlacement(const TableOption& option, const std::vector<int>& ranks,
                             const TableConfig& table);
// The placement a plan file (or DefaultShardingPlan) gives table `t`: its type and shards, the
// storage as configured.
TablePlacement PlacementFromPlan(const TablePlan& plan, const PlanTable& table);

// `inputs` and `profile` must outlive the Estimator.
class Estimator {
 public:
  // InvalidArgument when the profile lacks the device the inputs compute on or a collective the
  // topology needs (naming both).
  static absl::StatusOr<Estimator> Create(const PlanInputs& inputs, const MachineProfile& profile,
                                          int group_size);

  int group_size() const { return n_; }
  int replicas() const { return m_; }
  const PlanInputs& inputs() const { return *in_; }
  const MachineProfile& profile() const { return *profile_; }
  // Seconds per byte of the replica all-reduce's buffer (the search's per-rank score; 0 for
  // M = 1).
  double sync_seconds_per_byte() const {
    return m_ > 1 && ar_replica_.bytes_per_s > 0 ? 1.0 / ar_replica_.bytes_per_s : 0;
  }
  MemKind table_kind() const { return table_kind_; }
  int node_ranks() const { return node_ranks_; }
  // The node of group rank `r` (by the topology's ranks per node and layout).
  int node_of(int r) const { return node_of_[r]; }
  // Whether a sharding group's ranks (its all-to-alls) and a replica group's ranks (replica
  // sync) all sit on one node; a group that does not is priced at the profile's cross-node
  // collectives when it has them (profile same_node: false).
  bool group_same_node() const { return group_same_node_; }
  bool replica_same_node() const { return replica_same_node_; }

  // What table t adds under `p`.
  Contribution Contribute(int t, const TablePlacement& p) const;
  // Costs every rank pays whatever the placement (dense model, base memory, activations).
  MetricVec FixedPerRank() const;
  MemoryBreakdown FixedMemory() const;
  // The step time from the slowest rank's value of every metric and the data-parallel bytes.
  // The compute metrics and the dense phases are scaled by the profile's compute_slowdown and
  // gemm_slowdown of the ranks computing side by side on a node and by the node's cores_share().
  PhaseTimes StepFromMaxima(const MetricVec& max, double world_allreduce_bytes) const;
  // How much slower each rank computes because the node's ranks x threads outnumber its cores
  // (the profile fingerprint's): ranks x threads / cores, at least 1; 1 when the profile has
  // no fingerprint.
  double cores_share() const { return cores_share_; }
  // Full evaluation of a complete placement (one entry per table).
  StepEstimate Evaluate(const std::vector<TablePlacement>& placement) const;

  double dense_forward_s() const { return dense_fwd_s_; }
  double dense_backward_s() const { return dense_bwd_s_; }
  int64_t dense_params() const { return dense_params_; }

 private:
  Estimator() = default;
  struct TableStats {
    double ids_local = 0;        // ids of one rank's batch (B x ids per sample)
    double distinct_local = 0;   // distinct rows of the whole table among them
    double distinct_group = 0;   // among the group's N B samples
    double distinct_global = 0;  // among the world's T B samples
    double distinct_sync = 0;    // among k steps of the world (average, touched)
    double hot = 1;              // hot/cold blend of the gather and update rates
    double exponent = 1.05;
    bool in_llc = false;         // the table stays in the LLC (smallest tables first)
    // Share of the table's ids that hit rows the LLC keeps from step to step (ResidentCoverage
    // in estimator.cc): read at the profile's cached gather rate, the rest at the blended one.
    double resident = 0;
  };
  // The pooled lookup of `bags` bags holding `ids` ids of a table at row_bytes: a table within
  // the LLC at the profile's cached gather rates when it has them, else bags x bag_s + ids, the
  // resident share at the cached rate and the rest at the hot/cold blended rate.
  double LookupSeconds(const TableStats& s, int64_t row_bytes, double bags, double ids) const;
  double A2aSeconds(double bytes, bool intra) const;
  double PackSeconds(double bytes) const;
  // The update of `rows` distinct rows of `row_bytes` (+ state: `bytes_per_row` in all): for a
  // table that stays in the LLC (`in_llc`), the share the LLC still holds from the forward
  // (warm_room_bytes_ over their bytes) at the profile's warm rate; the rest, and every row of
  // a table that does not stay, at the (hot/cold blended) update rate.
  double UpdateRowsSeconds(int64_t row_bytes, double hot, double rows, double bytes_per_row,
                           bool in_llc) const;
  // Host bytes of a tiered shard's RocksDB (memtable + block cache) as the run allocates them.
  // `in_memtable`: the rows written stay within one write buffer (never flushed).
  double TierDbMemoryBytes(const PlanTable& tab, double frac, double rows, double value_bytes,
                           double table_hot, double misses, bool* in_memtable) const;
  double stats_exponent(const PlanTable& tab) const;
  // StepFromMaxima, and when `collective` is not null the part of each phase spent in its
  // collectives (transfer, latency, the scheduler's wait), the rest being compute.
  PhaseTimes StepParts(const MetricVec& raw, double world_allreduce_bytes,
                       PhaseTimes* collective) const;
  // est->step, per_rank and wait of the group's ranks with metrics `rank` (step_model.cc).
  void CriticalPath(const std::vector<MetricVec>& rank, double world_allreduce_bytes,
                    StepEstimate* est) const;

  const PlanInputs* in_ = nullptr;
  const MachineProfile* profile_ = nullptr;
  const DeviceProfile* dev_ = nullptr;
  int n_ = 1, m_ = 1, t_ = 1;
  int node_ranks_ = 1;
  std::vector<int> node_of_;
  bool group_same_node_ = true, replica_same_node_ = true;
  // The sharding group's all-to-alls / the world's all-reduce priced at cross-node points: on
  // the links, where overlapping transfers share the bytes (no pipelining gain).
  bool group_link_ = false, world_link_ = false, replica_link_ = false;
  MemKind table_kind_ = kHost;
  bool nccl_ = false;
  CollectiveCost a2a_group_, a2a_intra_, ar_world_, ag_replica_, ar_replica_, ag_group_;
  std::vector<TableStats> stats_;
  double dense_fwd_s_ = 0, dense_bwd_s_ = 0;
  int64_t dense_params_ = 0;
  double activation_bytes_ = 0;
  double warm_room_bytes_ = 0;   // llc_bytes less what the dense work touches per step
  double compute_slowdown_ = 1;  // the node's ranks computing at once, each on its core (profile)
  double gemm_slowdown_ = 1;     // the same for the dense phases' GEMMs
  double cores_share_ = 1;       // node ranks x threads / cores, at least 1
  int64_t emb_out_dim_ = 0;
};

}  // namespace tessera::planner
