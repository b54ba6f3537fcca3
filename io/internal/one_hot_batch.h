// Helpers shared by the one-hot readers (Criteo text, binary records): they stage a batch row by
// row (ids row-major, as records arrive) and then lay the ids out feature-major as KeyedJagged
// wants, one id per bag. Batch vectors are resized, never shrunk, so a reused Batch does not
// allocate after its first fill.
#pragma once

#include <cstdint>
#include <vector>

#include "io/batch.h"

namespace tessera::io_internal {

// Sizes `batch` for up to `capacity` samples of `num_dense` floats (labels and dense are written
// by the caller at row b; call FinishOneHotBatch when done).
void BeginOneHotBatch(int64_t capacity, int64_t num_dense, Batch* batch);

// Sets the batch to `rows` samples and builds batch->sparse from `ids_row_major`
// ([rows * num_sparse], sample-major) as num_sparse features with one id per bag.
void FinishOneHotBatch(int64_t rows, int num_sparse, const uint32_t* ids_row_major, Batch* batch);

}  // namespace tessera::io_internal
