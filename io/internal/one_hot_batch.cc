#include "io/internal/one_hot_batch.h"

#include <cstddef>

namespace tessera::io_internal {

void BeginOneHotBatch(int64_t capacity, int64_t num_dense, Batch* batch) {
  batch->num_dense = num_dense;
  batch->dense.resize(static_cast<size_t>(capacity * num_dense));
  batch->labels.resize(static_cast<size_t>(capacity));
}

void FinishOneHotBatch(int64_t rows, int num_sparse, const uint32_t* ids_row_major, Batch* batch) {
  batch->batch_size = rows;
  batch->dense.resize(static_cast<size_t>(rows * batch->num_dense));
  batch->labels.resize(static_cast<size_t>(rows));
  KeyedJagged& kj = batch->sparse;
  kj.num_features = num_sparse;
  kj.batch_size = rows;
  const int64_t n = rows * num_sparse;
  kj.offsets.resize(static_cast<size_t>(n + 1));
  kj.values.resize(static_cast<size_t>(n));
  kj.weights.clear();
  for (int64_t i = 0; i <= n; ++i) kj.offsets[i] = i;
  // Transpose sample-major -> feature-major; rows * num_sparse is small (a batch), so a plain
  // loop over features reading with stride num_sparse stays in cache.
  int64_t* out = kj.values.data();
  for (int f = 0; f < num_sparse; ++f) {
    const uint32_t* in = ids_row_major + f;
    for (int64_t b = 0; b < rows; ++b) out[b] = in[b * num_sparse];
    out += rows;
  }
}

}  // namespace tessera::io_internal
