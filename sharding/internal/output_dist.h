// OutputDist: the pooled embeddings' way back and their gradients' way out, inside the sharding
// group. Forward: each owner pools every (sender, feature) of its local shards (sum pooling,
// PooledLookupForward), the partial sums go back to their requesters in one all-to-all, and each
// requester adds them in shard order (columns, then rows), so row-wise and grid partials are
// reduced in a fixed order and column shards land side by side; kMean divides by the full bag
// length after the sum. Backward: the output-gradient slices (times 1 / length for kMean) travel
// the same routes back to the owners, which sum the row gradients of each local shard over the
// senders in shard rank order (AggregateRowGradients).
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
  explicit OutputDist(const ShardLayout& layout) : l_(layout) {}
  OutputDist(const OutputDist&) = delete;
  OutputDist& operator=(const OutputDist&) = delete;

  // Owner, forward: pools each (sender, feature) of every local shard from `owners` (Unpack's)
  // into the reply buffer, for senders of `src_batch` samples, this rank asking for `batch`.
  absl::Status PoolLocal(const std::vector<OwnerIds>& owners, const std::vector<int64_t>& src_batch,
                         int64_t batch);
  // Collective over the group: the replies of PoolLocal out, this rank's partial sums in.
  absl::Status ExchangeForward();
  // Requester: out [batch, output_dim] = the partial sums of every sharded table added in shard
  // order (kMean scaled by 1 / bag length, from `batch_offsets`: the local batch's offsets in
  // ctx's memory); the columns of data-parallel tables are zeroed.
  // REQUIRES: ExchangeForward done for this batch.
  absl::Status Reduce(const int64_t* batch_offsets, float* out);

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
  void SizeRoutes(const std::vector<int64_t>& src_batch, int64_t batch);
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
};

}  // namespace tessera::internal
