// The fused row update of this rank's shards, the last phase of BackwardUpdate before the
// replica sync's averaging: every local shard applies layout.update_opt to the rows and summed
// gradients of its RowGrads (embedding/pooled_lookup.h's ApplyRowUpdates, 16-bit tables
// included), or pools and applies its bags in one pass (FusedBackwardUpdate, same bits). Row-wise AdaGrad on column-split shards (column_wise, grid) needs the whole row's
// mean squared gradient: the shards of a row exchange their per-row partial sums (RowSquaredSums
// of shard_kernels.h, one all-gather in the sharding group) and all apply the same total, as one
// rank would. A dynamic table's shards exchange their gradient columns instead (width floats a
// row, not one), so each rebuilds the whole row's gradient and sums its squares in one
// process's order (RowSumOfSquares): the same bits as one process.
// Reads the layout and `grads`; writes the local shards' stores. Collective over the sharding
// group when some shard of the plan is column-split and the optimizer is row-wise AdaGrad (every
// rank calls it every step). Thread-safety: none.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sharding/internal/shard_layout.h"

namespace tessera::internal {

// The update's scratch: the host workspace of the fused update, and (CUDA shards) the device
// copies of the host-side slots, row gradients and squared-gradient totals.
struct UpdateScratch {
  EmbeddingWorkspace ws;
  CtxArray<int64_t> slots;
  CtxArray<float> grads, total_sq;
};

// Applies the update with `lr` and 1-based `step`; (*grads)[q] belongs to layout.local[q]. A
// shard handed as bags (RowGrads::bags) is updated by FusedBackwardUpdate with scratch->ws as
// its scratch, and its `rows` are set to the distinct rows it updated (CUDA shards: Aggregate
// set them). RowGrads are host memory; on a CUDA context they are copied to the device first.
absl::Status ApplyShardUpdates(const ShardLayout& layout, std::vector<RowGrads>* grads, float lr,
                               int64_t step, UpdateScratch* scratch);

}  // namespace tessera::internal
