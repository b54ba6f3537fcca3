// OutputDist: the pooled embeddings' way back and their gradients' way out, inside the sharding
// group. Forward: each owner pools every (sender, feature) of its local shards (sum pooling,
// PooledLookupForward), the partial sums go back to their requesters in one all-to-all, and each
// requester adds them in shard order (columns, then rows), so row-wise and grid partials are
// reduced in a fixed order and column shards land side by side; kMean divides by the full bag
// length after the sum. Backward: the output-gradient slices (times 1 / length for kMean) travel
// the same routes back to the owners, which sum the row gradients of each local shard over the
// senders in shard rank order (AggregateRowGradients).
//
// Dynamic tables (ShardLayout::IsDynamic) take the one-process order instead, so that with one
// sharding group (M = 1) they train bit-identically to one EmbeddingCollection on the global
// batch (the global batch being the group's local batches in shard rank order):
//   - a table split into row blocks (TableRoute::rows_back) gets its looked-up rows back, not
//     pooled ([positions routed to the shard, width] floats per (request, feature)), and the
//     requester pools every bag in bag order with the one-process kernel (PooledLookupForward,
//     kMean and per-id weights included); a table in one row block (table_wise, column_wise)
//     already pools whole bags on the owner, which its requester adds to zero (exact);
//   - the row gradients are summed over (feature, sender, bag, position), the global batch's
//     order, not (sender, feature, ...);
//   - a mean table's slices travel unscaled with the bag's 1 / length beside them
//     (ShardLayout::GradStride), and the owner weighs each id by (per-id weight) * (1 / length)
//     before the gradient, as FusedBackwardUpdate does on one process.
//
// Memory: the payloads, `out` and `d_out` are in the shards' memory (layout.ctx: device memory
// for CUDA shards), travelling over layout.payload; the received ids are OwnerIds' ctx_*
// pointers. The aggregated RowGrads are host vectors (the replica sync sums them over MPI).
//
// Payload per (owner, requester) pair, both directions: per request of the owner, per feature of
// its table, [requester's batch, shard width] floats; as fp32, or rounded to fp16 / bf16 on the
// way out and widened on the way in (options.comm_dtype; the part a rank keeps is rounded too).
//
// Owns: the float send and receive buffers (reused across steps and between forward and
// backward), their 16-bit twins, the counts and displacements of both directions, and the
// aggregation workspace. Reads the layout and the InputDist's OwnerIds; writes `out`, the
// RowGrads it is given and nothing else. The element work goes through shard_kernels.h
// (AddPartials, ScaleBagsByLength, PackGradSlice, FloatsTo16 / FloatsFrom16); the lookup and the
// aggregation are embedding/pooled_lookup.h's entry points, which dispatch on ctx themselves.
// Collective calls: ExchangeForward, ExchangeBackward (the group's all-to-all). Thread-safety:
// none.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/keyed_jagged.h"
#include "embedding/pooled_lookup.h"
#include "sharding/internal/input_dist.h"
#include "sharding/internal/shard_layout.h"

namespace tessera::internal {

class OutputDist {
 public:
  // REQUIRES: `layout` is complete and outlives this.
  explicit OutputDist(const ShardLayout& layout);
  OutputDist(const OutputDist&) = delete;
  OutputDist& operator=(const OutputDist&) = delete;

  // Owner, forward: pools each (sender, feature) of every local shard from `owners` (Unpack's)
  // into the reply buffer, for senders of `src_batch` samples, this rank asking for `batch`.
  // `local` is this rank's batch (its dynamic rows_back tables' keys are routed again here).
  absl::Status PoolLocal(const std::vector<OwnerIds>& owners, const std::vector<int64_t>& src_batch,
                         const KeyedJagged& local, int64_t batch);
  // Collective over the group: the replies of PoolLocal out, this rank's partial sums in.
  absl::Status ExchangeForward();
  // Requester: out [batch, output_dim] = the partial sums of every sharded table added in shard
  // order (kMean scaled by 1 / bag length, from `batch_offsets`: the local batch's offsets in
  // ctx's memory); the columns of data-parallel tables are zeroed.
  // REQUIRES: ExchangeForward done for this batch.
  // rows_back tables are pooled here from their returned rows (`local` as for PoolLocal).
  absl::Status Reduce(const KeyedJagged& local, const int64_t* batch_offsets, float* out);

  // Requester, backward: packs d_out's slices of every request (per owner, request, feature,
  // bag) and sends them to the owners; receives the slices of this rank's shards. Collective
  // over the group. `src_batch` as for PoolLocal; `step` the local batch of the Forward.
  absl::Status ExchangeBackward(const LocalStep& step, const std::vector<int64_t>& src_batch,
                                const float* d_out);
  // Owner: sums the received gradients per local shard into grads[q] (distinct local rows,
  // increasing, [rows, width] gradients; empty when no sender had a sample).
  absl::Status Aggregate(const std::vector<OwnerIds>& owners, const std::vector<int64_t>& src_batch,
                         std::vector<RowGrads>* grads);

 private:
  // Both directions' counts and displacements (floats): per owner what this rank asks for
  // (ask_*, `batch` samples), per sender what this rank's shards answer (reply_*).
  // `owners` given: the forward's sizes (rows_back requests count routed positions, from
  // RouteRowsBack and the owners' offsets); null: the backward's (GradStride floats per bag).
  void SizeRoutes(const std::vector<int64_t>& src_batch, int64_t batch,
                  const std::vector<OwnerIds>* owners);
  // Requester: the row block of every position of the rows_back tables in `local`
  // (block_of_), and per request and feature how many positions go there (rb_count_).
  void RouteRowsBack(const KeyedJagged& local);
  // Requester: pools feature `fi` of rows_back table t into `out` from the returned rows;
  // cur[ri] is where request ri's next returned row is (advanced past the rows used).
  absl::Status PoolRowsBack(const KeyedJagged& local, int t, size_t fi,
                            std::vector<const float*>* cur, float* out);
  // The group all-to-all of float payloads as options.comm_dtype says.
  absl::Status ExchangeFloats(const float* send, const std::vector<int64_t>& sc,
                              const std::vector<int64_t>& sd, float* recv,
                              const std::vector<int64_t>& rc, const std::vector<int64_t>& rd);

  const ShardLayout& l_;
  int64_t batch_ = 0;
  std::vector<int64_t> ask_counts_, ask_displs_, reply_counts_, reply_displs_;
  // Payloads in ctx's memory (device memory for CUDA shards), over layout.payload.
  CtxArray<float> send_f_, recv_f_;
  CtxArray<uint16_t> send_h_, recv_h_;  // 16-bit payloads
  EmbeddingWorkspace ws_;
  // rows_back routing of the local batch: per position its row block (-1 elsewhere), per
  // request per feature its positions; Reduce's staging of one (feature, columns) and its bags.
  std::vector<int32_t> block_of_;
  std::vector<std::vector<int64_t>> rb_count_;
  std::vector<float> stage_;
  std::vector<int64_t> stage_offsets_, stage_index_;
  // Reduce: per request, whether it is the first of its table's (shard order) over its columns
  // (written, not added); zero_out_: some table's shards' columns overlap only in part, so the
  // output is zeroed and every partial added. Fixed by the layout.
  std::vector<char> first_;
  bool zero_out_ = false;
  std::vector<int64_t> unit_offsets_;  // 0, 1, 2, ...: PoolLocal's bags of one id
  // Per local shard of a dynamic mean table: each received position's per-id weight times its
  // bag's 1 / length (Aggregate).
  std::vector<std::vector<float>> id_scales_;
};

}  // namespace tessera::internal
