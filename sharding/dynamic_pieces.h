// A sharded dynamic table's pieces and the whole table (sharding/key_routing.h says which keys a
// shard holds): MergeDynamicPieces joins the states of its shards (DynamicRowStore::SaveState of
// each row range's column shards) into the whole table's state, and SliceDynamicState cuts the
// part one shard of another plan holds. Export (ShardedEmbeddingCollection::GatherDynamicTable)
// and resharding a checkpoint (trainer/internal/checkpoint_reshard.h) use them.
//
// What moves with a key: its row (columns joined / cut), optimizer state (row-wise AdaGrad: one
// value per row, the column-0 shard's; Adam: m and u per column), its lookup count and last step.
// The table's counters (admissions, evictions, ...) are summed over the row ranges and go to the
// slice of rows from 0 and columns from 0 (so sums over shards stay the table's); the step count
// is every piece's. The admission counters (count-min sketch) are per shard and hashed: they are
// kept only when the table is one row range before and after (else the slices start with zero
// counters: keys on their way to min_count count again).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/row_optimizer.h"
#include "sharding/plan.h"

namespace tessera {

struct DynamicPiece {
  Shard rect;                                // rows (pseudo-rows) and columns of the table
  const DynamicTableState* state = nullptr;  // its SaveState (state_dim 0 or the shard's)
};

// The whole table (dim columns; state when every piece has it) from pieces that cover each row
// range once per column range. InvalidArgument naming the table when column siblings hold
// different keys or the pieces do not tile the columns.
absl::StatusOr<DynamicTableState> MergeDynamicPieces(const std::vector<DynamicPiece>& pieces,
                                                     const std::string& table, int64_t dim,
                                                     RowOptimizerType type);

// The keys of `full` (MergeDynamicPieces) a shard of rows x columns `rect` of a table of
// `capacity` rows holds, its columns and state columns.
DynamicTableState SliceDynamicState(const DynamicTableState& full, const Shard& rect,
                                    int64_t capacity, RowOptimizerType type);

}  // namespace tessera
