// ShardedEmbeddingCollection: the distributed twin of embedding/EmbeddingCollection. The same
// tables, features and optimizer, the same Forward / BackwardUpdate / output_dim /
// feature_column, but every table is split over the ranks of a sharding group by a
// ShardingPlan, and the M sharding groups of the ProcessGrid hold replicas of each shard.
//
// One step on rank (group g, shard rank s), all collectives inside g unless noted:
//   Forward(local_batch):
//     input dist   each table's ids are deduplicated per destination shard and sent to the
//                  shards owning their rows (all-to-all of fixed-size headers: batch size and
//                  counts; then all-to-all of unique ids, bag lengths and positions (int32)
//                  into the unique ids, and per-id weights)
//     lookup       owners resolve the ids in their local RowStores and pool each (bag, shard)
//                  with PooledLookupForward (sum pooling)
//     output dist  partial sums come back (all-to-all); the requester adds them in shard order
//                  (columns, then rows), so row-wise and grid partials are reduced in a fixed
//                  order, column shards land side by side; kMean divides by the full bag length.
//     data-parallel tables are looked up locally.
//   BackwardUpdate(d_out):
//     the output gradient slices go back along the same routes (all-to-all), owners sum row
//     gradients (AggregateRowGradients over the senders in rank order), then replica sync:
//       kExact    row gradients summed over the replica group (union of the replicas' rows,
//                 all-reduce in rank order) before the fused update, so all replicas stay
//                 bit-identical and T ranks train what one rank trains on the global batch;
//       kAverage  each replica updates with its own gradient (scaled by M, so that averaging
//                 after one SGD step equals the exact step) and row-wise AdaGrad uses v / c;
//                 every `sync_every` steps the weights of rows touched since the last sync
//                 (`sync_rows` kTouched; kAll: every row of the shard) are averaged over the
//                 replica group, and the optimizer state one sync behind (the
//                 average of the state snapshots taken at sync j is applied at sync j+1, keeping
//                 each replica's increments since the snapshot).
//     Row-wise AdaGrad on column-split shards (column_wise, grid) uses the full row's mean
//     squared gradient (partial sums exchanged in the group), as one rank would.
//     Data-parallel tables: the full gradient table is all-reduced over the world.
//
// Batches: the global batch of a step is the concatenation of the ranks' local batches in world
// rank order. d_out given to BackwardUpdate must be the gradient of the loss over the GLOBAL
// batch with respect to this rank's outputs (for a mean loss, 1 / global batch size per sample);
// the sum over ranks is then the single-process gradient.
//
// Every method except output_dim/feature_column/num_tables/table is collective over the world:
// all ranks call it in the same order (with their own batches). An error returned by Forward or
// BackwardUpdate on one rank may leave other ranks in a later collective: the caller should treat
// it as fatal for the run (MpiAbort). Bad input detected before the first all-to-all (an id out
// of range, a malformed batch) is shared through the header exchange, so every rank of the
// sharding group returns the same error.
// Pipelining: the caller may hint the next batch (Prefetch); its input dist then overlaps the
// current step (see Prefetch).
// Devices: with a CPU DeviceContext everything is host memory and MPI. With a CUDA context
// (device: cuda on several ranks) the shards and data-parallel replicas are in device memory
// (embedding/device_row_store.h), Forward's `out` and BackwardUpdate's `d_out` are device memory,
// the owners pool and update with the CUDA kernels, and the pooled partial sums and their
// gradients travel in device memory over `transport` (NCCL, or MPI staged through pinned host
// memory). One orchestration drives both: the routing of ids (input dist) is host work over MPI,
// and its results are copied to the device once per step; the row gradients of a shard that is
// not updated fused (replicas M > 1, column-split row-wise AdaGrad) and of data-parallel tables
// are summed on the device, copied to the host for the replica / world sums over MPI (rank
// order, as on the CPU) and copied back for the update; average mode's sync gathers its rows
// on the device and averages them over MPI on the host. Not yet on CUDA (Unimplemented, naming
// the key): RocksDB-tier tables without a device cache (with storage.device_cache_rows each
// shard is an HBM cache over its tier); 16-bit tables are InvalidArgument. Results equal the
// CPU collection's up to the CUDA kernels' contracted multiply-adds
// (embedding/pooled_lookup_cuda.h).
// Thread-safety: none; the training loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/enum_names.h"
#include "core/keyed_jagged.h"
#include "core/timer.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/embedding_collection.h"
#include "sharding/plan.h"
#include "sharding/process_grid.h"

namespace tessera {

enum class ReplicaSync { kExact, kAverage };
inline constexpr EnumName<ReplicaSync> kReplicaSyncNames[] = {{ReplicaSync::kExact, "exact"},
                                                              {ReplicaSync::kAverage, "average"}};
// "exact" / "average"; InvalidArgument naming the value otherwise.
inline absl::StatusOr<ReplicaSync> ParseReplicaSync(const std::string& name) {
  return ParseIn(kReplicaSyncNames, name, "sharding.replica_sync");
}
inline const char* ReplicaSyncName(ReplicaSync s) { return NameIn(kReplicaSyncNames, s); }

// Which rows average mode's sync sends: those touched (by any replica) since the last sync, or
// the whole local shard (fixed bytes: shard bytes / k per step, as in the 2D sparse parallelism
// paper).
enum class SyncRows { kTouched, kAll };
inline constexpr EnumName<SyncRows> kSyncRowsNames[] = {{SyncRows::kTouched, "touched"},
                                                        {SyncRows::kAll, "all"}};
// "touched" / "all"; InvalidArgument naming the value otherwise.
inline absl::StatusOr<SyncRows> ParseSyncRows(const std::string& name) {
  return ParseIn(kSyncRowsNames, name, "sharding.sync_rows");
}
inline const char* SyncRowsName(SyncRows s) { return NameIn(kSyncRowsNames, s); }

// Element type of the pooled-embedding all-to-alls (forward partial sums, backward gradients).
enum class PayloadDType { kF32, kF16, kBF16 };
inline constexpr EnumName<PayloadDType> kPayloadDTypeNames[] = {
    {PayloadDType::kF32, "fp32"}, {PayloadDType::kF16, "fp16"}, {PayloadDType::kBF16, "bf16"}};
// "fp32" / "fp16" / "bf16"; InvalidArgument naming the value otherwise.
inline absl::StatusOr<PayloadDType> ParsePayloadDType(const std::string& name) {
  return ParseIn(kPayloadDTypeNames, name, "sharding.comm_dtype");
}
inline const char* PayloadDTypeName(PayloadDType t) { return NameIn(kPayloadDTypeNames, t); }

// How payloads in device memory travel between ranks when the shards are on a CUDA device (a
// CPU collection always uses the grid's host communicators). kMpi: the grid's MPI communicators
// with every buffer staged through pinned host memory (StagedCommunicator): works for several
// ranks on one GPU and without NCCL-capable links. kNccl: an NCCL communicator per group over
// the rank's GPU (NCCL refuses two ranks on one device). kAuto: kNccl when NCCL is built in and
// no two ranks of the node share a GPU (local ranks <= visible devices), else kMpi.
enum class PayloadTransport { kAuto, kMpi, kNccl };
inline constexpr EnumName<PayloadTransport> kPayloadTransportNames[] = {
    {PayloadTransport::kAuto, "auto"}, {PayloadTransport::kMpi, "mpi"},
    {PayloadTransport::kNccl, "nccl"}};
// "auto" / "mpi" / "nccl"; InvalidArgument naming the value otherwise.
inline absl::StatusOr<PayloadTransport> ParsePayloadTransport(const std::string& name) {
  return ParseIn(kPayloadTransportNames, name, "sharding.transport");
}
inline const char* PayloadTransportName(PayloadTransport t) {
  return NameIn(kPayloadTransportNames, t);
}

struct ShardedEmbeddingOptions {
  // Tables, features, row optimizer and seed, exactly as for EmbeddingCollection.
  EmbeddingCollectionOptions collection;
  // Validated against the tables and the grid's group size in Create. Default: empty = the
  // default plan (DefaultShardingPlan).
  ShardingPlan plan;
  // Default: kExact.
  ReplicaSync replica_sync = ReplicaSync::kExact;
  // k: average mode syncs every k steps. Default: 1.
  int64_t sync_every = 1;
  // Average mode: the rows each sync averages (weights and optimizer state). kTouched sends the
  // union over the replica group of the rows updated since the last sync (plus an all-gather of
  // those row ids); kAll sends every row of every local shard, with no id exchange.
  // Default: kTouched.
  SyncRows sync_rows = SyncRows::kTouched;
  // c: average mode's row-wise AdaGrad divisor. Default: 0 = M (the number of sharding groups).
  float adagrad_divisor = 0.0f;
  // The pooled-embedding all-to-alls' payload: fp16/bf16 halve their bytes; each value is
  // rounded to nearest even before it travels (also the part a rank keeps), so results are no
  // longer exactly one rank's. Default: kF32 (exact).
  PayloadDType comm_dtype = PayloadDType::kF32;
  // Lets Prefetch(next) start the next batch's input dist early (see Prefetch). Default: true.
  bool pipeline_input_dist = true;
  // The transport of device payloads (CUDA shards only; see PayloadTransport). Default: kAuto.
  PayloadTransport transport = PayloadTransport::kAuto;
};

class ShardedEmbeddingCollection {
 public:
  ~ShardedEmbeddingCollection();

  // Collective over the world. Builds the local shards, each holding exactly the slice of the
  // full table's InitRow(seed, table, global row) values one rank would hold. Per the table's
  // `storage`: tier memory, an in-memory RowStore initialised eagerly; tier rocksdb, a
  // TieredRowStore per local shard at "<storage.path>/rank<world rank>-shard<k>" (k: the
  // plan's shard index; a data_parallel table is refused: InvalidArgument), emptied on open,
  // rows lazily initialised to the same values, its cache the table's cache_rows (cache_bytes)
  // times the shard's share of the table's rows (cells). Returns InvalidArgument for bad tables or an invalid plan (the
  // same message on every rank), for a CUDA context what it does not support yet (see the header's
  // "Devices") and ResourceExhausted naming the table and the bytes when device memory cannot
  // hold a shard; when a shard store cannot be
  // opened, every rank returns an error (that rank its own).
  static absl::StatusOr<std::unique_ptr<ShardedEmbeddingCollection>> Create(
      const ShardedEmbeddingOptions& options, const ProcessGrid& grid, const DeviceContext& ctx);

  // As EmbeddingCollection: the sum of all features' dims, and feature f's column.
  int64_t output_dim() const;
  int64_t feature_column(int f) const;
  int num_tables() const;
  const TableConfig& table(int t) const;
  const ShardingPlan& plan() const;
  // The backend of the pooled payloads: the group's ("mpi", "single") on the CPU; "mpi+staged"
  // or "nccl" for CUDA shards.
  std::string payload_backend() const;
  // True when the shards are in device memory (created with a CUDA context).
  bool on_device() const;

  // Pooled lookup of this rank's `local_batch` into out [local batch size, output_dim()].
  // Average mode with tiered shards (storage.prefetch on) and M > 1: when this Forward's
  // BackwardUpdate will sync, it also exchanges over the replica group the rows each replica
  // touched since the last sync, this batch's included (two nonblocking all-to-alls under the
  // output dist), and hands each shard store the union and the rows of the delayed
  // state average (TieredRowStore::Prefetch), so the sync's misses are read during the dense
  // work; the sync then uses that union. An evaluation Forward's exchange is simply dropped.
  absl::Status Forward(const KeyedJagged& local_batch, float* out);
  // Not collective: packs `next` (this rank's next local batch) for the input dist. At the next
  // Forward, when every rank of the sharding group has a batch packed, its id payload all-to-all
  // starts (nonblocking, on the group's own channel) and runs while the caller does that step's
  // dense work; the Forward after it, given the same batch on every rank, only waits for it.
  // The ranks agree through Forward's header all-to-all, so a rank that prefetches nothing, or
  // a Forward of another batch (eval), just falls back to the blocking input dist; results are
  // the same bits either way. A later Prefetch replaces an earlier one not yet started.
  // Tiered shards: once that payload has landed on an owner (tested at the end of Forward,
  // waited for after BackwardUpdate's gradient all-to-all at the latest), the owner hands the
  // rows it will resolve next to the shard's TieredRowStore::Prefetch, so the next Forward's
  // misses are read in the background (storage.prefetch false: nothing is read ahead).
  void Prefetch(const KeyedJagged& next);
  // Forward calls whose input dist was prefetched (waited for only), since Create.
  int64_t prefetched_forwards() const;
  // Fused backward + update for the batch of the last Forward; d_out as out (see above for its
  // scale). `lr` and 1-based `step` for the optimizer.
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step);

  // Rows [row_begin, row_begin + count) of logical table t, full width, on EVERY rank:
  // weights_out gets count * dim floats and, when non-null, state_out count * state_dim floats
  // in EmbeddingCollection's layout (row-wise AdaGrad: 1 per row; Adam: m then u, dim each).
  // Collective over the world (same arguments everywhere); each sharding group gathers its own
  // copy. For export and checkpoints; chunk large tables.
  absl::Status ReadTable(int t, int64_t row_begin, int64_t count, float* weights_out,
                         float* state_out = nullptr);
  // Overwrites rows [row_begin, row_begin + count) of table t from full rows given on every
  // rank; each rank keeps the parts it owns. `state` may be null (state unchanged). Not a
  // collective, but every rank must call it with the same data (init_from, checkpoint resume).
  absl::Status WriteTable(int t, int64_t row_begin, int64_t count, const float* weights,
                          const float* state = nullptr);

  // Dynamic tables (model.tables[].dynamic; sharding/key_routing.h: a key is routed by a hash
  // to the shard of its pseudo-row, each shard a DynamicRowStore of its share of the capacity,
  // with storage.tier rocksdb over its own working database "<storage.path>/rank<r>-shard<k>"
  // with its share of the cache, read ahead by key as static tiered shards read rows; with
  // replicas (M > 1) every replica resolves the replica group's lookups, so all hold the same
  // keys). ReadTable / WriteTable refuse them (their rows are keys).
  // Training (true, the default) or evaluation (false: no key is admitted; unseen keys pool the
  // zero row). Not collective.
  void SetTraining(bool training);
  // Table t whole, by key (MergeDynamicPieces of group 0's shards), on every rank: keys, weights
  // as stored and, with `with_state`, the optimizer state. Collective over the world (same
  // arguments everywhere). InvalidArgument when t is not dynamic.
  absl::StatusOr<DynamicTableState> GatherDynamicTable(int t, bool with_state);
  // Table t's counters summed over its shards (group 0, one column shard per row range; the
  // step count is a shard's), on every rank. Collective over the world.
  absl::StatusOr<DynamicTableStats> DynamicStats(int t);

  // Checkpoint support (trainer/checkpoint.cc; sharding/sharded_embedding_checkpoint.cc). None
  // of these is collective: each rank saves and restores its own part.
  //
  // One shard this rank owns: rows [rect.row_begin, rect.row_end) x columns [rect.col_begin,
  // rect.col_end) of `table`, as local rows [0, rect.num_rows()) of `store`, rect.num_cols()
  // wide (a TieredRowStore for a RocksDB-tier table).
  struct LocalShardRef {
    int table = 0;
    int shard = 0;  // index in plan().tables[table].shards (the k of rank<r>-shard<k>)
    Shard rect;
    RowStore* store = nullptr;
  };
  // This rank's shards, in (table, shard) order.
  std::vector<LocalShardRef> local_shards();
  // The replica of data-parallel table t on this rank (full table), or nullptr when t is sharded.
  RowStore* data_parallel_store(int t);
  // Average mode's state between syncs of local shard i (local_shards() order): the rows updated
  // since the last sync (increasing local rows), and the delayed optimizer-state average (rows,
  // their averaged state and this replica's snapshot at that sync, state_dim floats per row).
  // Empty in exact mode.
  struct ReplicaSyncState {
    std::vector<int64_t> touched, pending_rows;
    std::vector<float> pending_avg, pending_snapshot;
  };
  ReplicaSyncState replica_sync_state(int i) const;
  // InvalidArgument when the sizes do not fit the shard (rows outside it, state arrays not
  // pending_rows.size() * state_dim).
  absl::Status set_replica_sync_state(int i, ReplicaSyncState state);
  // BackwardUpdate calls since Create: average mode syncs when it reaches a multiple of
  // sync_every.
  int64_t sync_clock() const;
  void set_sync_clock(int64_t updates);
  const ShardedEmbeddingOptions& options() const;
  // The world (every rank), and this rank's place in the grid: sharding group index (0 .. M-1),
  // shard rank (0 .. N-1), M and N.
  Communicator& world();
  int group_index() const;
  int shard_rank() const;
  int num_groups() const;
  int group_size() const;

  // Optional: accumulate per-phase seconds (input_dist, lookup, output_dist, backward_dist,
  // aggregate, replica_sync, update) into `times`; nullptr turns it off. Not owned.
  void set_phase_times(PhaseTimes* times);

  // The state, defined in sharding/internal/sharded_impl.h (private to sharding/).
  struct Impl;

 private:
  ShardedEmbeddingCollection() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
