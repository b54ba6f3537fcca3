// ReplicaSyncPhase: keeps the M replicas of each shard (one per sharding group, met in the replica
// group) in step, as options.replica_sync says.
//   kExact    ReduceGradients sums each local shard's row gradients over the replica group (the
//             union of the replicas' rows, an all-reduce in rank order) before the update, so
//             every replica stays bit-identical and T ranks train what one rank trains on the
//             global batch. Tiered shards: the next batch's hinted rows ride along in the same
//             exchange, and PrefetchReplicaRows hands the union to the stores after the update.
//             Dynamic shards instead all-gather the bag-level gradients their owners received
//             and sum them per key in the global batch's order (ExactSumDynamic), which makes
//             them bit-identical to one rank, not only to each other.
//   kAverage  ReduceGradients scales the local gradients by M (row-wise AdaGrad divides by c:
//             layout.update_opt); AfterUpdate records the rows touched since the last sync and,
//             every `sync_every` updates, averages the weights of those rows (the union over the
//             replica group; sync_rows kAll: every row of the shard) and applies the optimizer
//             state average of the previous sync (one sync behind, keeping the local increments
//             since its snapshot). With tiered shards that read ahead, the Forward of a syncing
//             step exchanges the sync's rows early (StartAhead / AdvanceAhead / FinishAhead, two
//             nonblocking all-to-alls under the output dist) so the stores read the misses
//             during the dense work.
//
// Owns: the sync clock (BackwardUpdate count), average mode's per-shard between-sync state
// (ShardSyncState, what checkpoints save), the read-ahead exchange's buffers and the exact
// mode's next-batch unions. Reads the layout and the InputDist (owners' rows, hinted rows);
// writes the RowGrads it is given and the local shards' stores (average mode's weights and
// state). Row payloads go through shard_kernels.h (ScatterToUnion, GatherRows, ScatterRows,
// ApplyDelayedAverage). Collective calls are over the replica group; every member owns the same
// shards in the same order. Thread-safety: none.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "sharding/communicator.h"
#include "sharding/internal/ctx_array.h"
#include "sharding/internal/input_dist.h"
#include "sharding/internal/shard_layout.h"

namespace tessera::internal {

// Average mode's state of one local shard between syncs: the rows updated since the last sync
// (increasing local rows), and the delayed optimizer-state average (rows, their averaged state
// and this replica's snapshot at that sync, state_dim floats per row). Empty in exact mode.
struct ShardSyncState {
  std::vector<int64_t> touched;
  std::vector<int64_t> pending_rows;
  std::vector<float> pending_avg, pending_snapshot;
};

class ReplicaSyncPhase {
 public:
  // REQUIRES: `layout` is complete and outlives this.
  explicit ReplicaSyncPhase(const ShardLayout& layout);
  ReplicaSyncPhase(const ReplicaSyncPhase&) = delete;
  ReplicaSyncPhase& operator=(const ReplicaSyncPhase&) = delete;

  // Backward, after the aggregation: kExact sums `grads` over the replica group (collective over
  // it; a no-op for M = 1); kAverage multiplies them by M. `in` for the next batch's rows.
  absl::Status ReduceGradients(const InputDist& in, std::vector<RowGrads>* grads);
  // Exact mode, tiered shards: after the update resolved this step's rows, hands each store the
  // union over the replica group of the next batch's rows (ReduceGradients'); clears them.
  void PrefetchReplicaRows();
  // After the step's update and EndStep: advances the clock; average mode adds the updated rows
  // (`grads`) to the touched set and syncs when the clock reaches a multiple of sync_every
  // (collective over the replica group).
  absl::Status AfterUpdate(const InputDist& in, const std::vector<RowGrads>& grads);

  // Average mode with tiered shards that read ahead, M > 1: called by Forward once Unpack filled
  // `in`'s owners. When this Forward's update will sync (the next AfterUpdate reaches a multiple
  // of sync_every), sync_rows kTouched starts the exchange of the rows touched through this
  // step (collective over the replica group, nonblocking); otherwise, and for kAll, nothing. Any
  // earlier exchange (an evaluation Forward's) is dropped first.
  absl::Status StartAhead(const InputDist& in);
  // Moves the exchange on: waits for the counts and starts the ids (a no-op in other phases).
  absl::Status AdvanceAhead();
  // At the end of that Forward (before the input dist's HintNextRows, so that the next batch's
  // hint is the later of a store's two staged batches): waits for the ids, forms the unions and,
  // with `hint`, hands each tiered shard its union and its delayed-state rows (RowStore::
  // Prefetch; kAll the whole shard). Forward passes false when it kept a batch in flight that it
  // did not use, whose staged rows another hint would drop. The sync then uses these unions.
  absl::Status FinishAhead(bool hint);

  // BackwardUpdate calls since Create (or set_clock).
  int64_t clock() const { return updates_; }
  void set_clock(int64_t updates) { updates_ = updates; }
  // Local shard q's between-sync state (local_shards() order).
  const ShardSyncState& state(size_t q) const { return state_[q]; }
  ShardSyncState& mutable_state(size_t q) { return state_[q]; }

 private:
  // A dynamic shard's keys (and, when given, their state_dim-float rows of the delayed average
  // and snapshot) without those that hold no row now (evicted since).
  static void DropEvictedKeys(const LocalShard& ls, std::vector<int64_t>* keys,
                              std::vector<float>* avg, std::vector<float>* snap);
  // The next sync's rows, read ahead (StartAhead .. FinishAhead).
  struct Ahead {
    // Per local shard: what this replica sent (touched since the last sync plus the rows of
    // this step's batch, increasing) and, once finished, the union over the replica group.
    std::vector<std::vector<int64_t>> sent, unions;
    std::vector<int64_t> send_counts, recv_counts;  // [m][local shards], replicated per peer
    std::vector<int64_t> send_ids, recv_ids;
    std::unique_ptr<PendingCollective> pending;
    int phase = 0;            // 0 none, 1 counts in flight, 2 ids in flight, 3 unions ready
    int64_t for_update = -1;  // the clock when started: the update whose sync it serves
  };

  absl::Status ExactSum(const InputDist& in, std::vector<RowGrads>* grads);
  // Exact mode, the dynamic shards (replica_sync_dynamic.cc): every replica all-gathers the
  // others' received gradients (RowGrads::sources: per bag its ids' keys and scales and its
  // gradient) and sums them per key in the global batch's order, (feature, world rank, bag,
  // position), as one process does; sets those shards' rows and grads. Collective over the
  // replica group (M > 1).
  absl::Status ExactSumDynamic(const InputDist& in, std::vector<RowGrads>* grads);
  absl::Status AverageSync(const InputDist& in);

  const ShardLayout& l_;
  int64_t updates_ = 0;
  std::vector<ShardSyncState> state_;
  // Exact mode, tiered shards: per local shard, the union over the replica group of the next
  // batch's rows, handed to the stores by PrefetchReplicaRows.
  std::vector<std::vector<int64_t>> replica_next_;
  Ahead ahead_;
  // Average mode on CUDA shards: the sync's slots, gathered / averaged rows, the delayed state
  // average and its snapshot in device memory (unused on the CPU).
  CtxArray<int64_t> sync_slots_;
  CtxArray<float> sync_rows_, sync_avg_, sync_snap_;
  // The replica all-reduce's host buffers: average mode's synced rows (weights then state), and
  // per local shard exact mode's union gradients (swapped with the shard's gradients each step).
  std::vector<float> sync_buf_;
  std::vector<std::vector<float>> exact_bufs_;
  // ExactSumDynamic's scratch: the aggregation's workspace, and per local shard its slots' keys
  // (slot -> key, written for the step's slots only) and per (feature, sender) the slots of
  // the ids it sent.
  EmbeddingWorkspace dyn_ws_;
  std::vector<char> dyn_block_, dyn_all_;  // this replica's block, every replica's
  std::vector<std::vector<int64_t>> dyn_key_at_;
  std::vector<std::vector<std::vector<int64_t>>> dyn_own_slots_;
};

}  // namespace tessera::internal
