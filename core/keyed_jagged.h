// KeyedJagged: the sparse half of a batch. For each of F features and each of B samples, a
// variable-length list of ids (multi-hot), stored feature-major in CSR form:
//   bag (f, b) has index f * B + b; its ids are values[offsets[bag] .. offsets[bag + 1]).
// offsets has F * B + 1 entries, starts at 0 and never decreases. `weights` is empty or holds one
// weight per id (weighted pooling). Ids are row ids of the feature's table, already reduced to
// [0, rows). Plain host data; the CUDA path copies it into device buffers.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

struct KeyedJagged {
  int num_features = 0;
  int64_t batch_size = 0;
  std::vector<int64_t> offsets;  // [num_features * batch_size + 1]
  std::vector<int64_t> values;   // ids, [offsets.back()]
  std::vector<float> weights;    // empty, or [offsets.back()]

  int64_t num_bags() const { return static_cast<int64_t>(num_features) * batch_size; }
  // First entry of feature f's offsets (its B + 1 offsets are contiguous).
  const int64_t* feature_offsets(int f) const { return offsets.data() + f * batch_size; }
  int64_t feature_begin(int f) const { return offsets[f * batch_size]; }
  int64_t feature_end(int f) const { return offsets[(f + 1) * batch_size]; }
  void Clear() {
    offsets.assign(1, 0);
    values.clear();
    weights.clear();
  }
};

}  // namespace tessera
