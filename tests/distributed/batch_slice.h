// SliceBatch: samples [begin, end) of a global batch as a batch of their own, so a test can
// give rank r of W its part (r * B / W .. (r + 1) * B / W) of the global batch one process
// trains on (the trainer's own split: the global batch is the ranks' local batches in rank
// order).
#pragma once

#include <cstdint>

#include "io/batch.h"

namespace tessera::testing {

inline Batch SliceBatch(const Batch& b, int64_t begin, int64_t end) {
  Batch s;
  s.batch_size = end - begin;
  s.num_dense = b.num_dense;
  s.dense.assign(b.dense.begin() + begin * b.num_dense, b.dense.begin() + end * b.num_dense);
  s.labels.assign(b.labels.begin() + begin, b.labels.begin() + end);
  s.sparse.num_features = b.sparse.num_features;
  s.sparse.batch_size = s.batch_size;
  s.sparse.offsets = {0};
  for (int f = 0; f < b.sparse.num_features; ++f) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t bag = f * b.batch_size + i;
      for (int64_t j = b.sparse.offsets[bag]; j < b.sparse.offsets[bag + 1]; ++j) {
        s.sparse.values.push_back(b.sparse.values[j]);
      }
      s.sparse.offsets.push_back(static_cast<int64_t>(s.sparse.values.size()));
    }
  }
  return s;
}

}  // namespace tessera::testing
