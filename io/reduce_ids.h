// ReduceIdsReader: a BatchReader that reduces each feature's ids mod a table size, for sources
// whose ids come from a larger space than the table (modulo hashing, as Criteo's readers do
// with the 32-bit hex). The synthetic generator draws every feature from one id space
// (data.synthetic.id_space) so that a static table of C rows (ids mod C) and a dynamic table of
// capacity C (raw ids) see the same samples. Thread-safety: that of the wrapped reader.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/reader.h"

namespace tessera {

// Wraps `inner`: feature f's ids become id mod rows[f] when rows[f] > 0 and stay as they are
// when rows[f] == 0 (ids are non-negative). `rows` has one entry per feature of the batches
// (a batch with another feature count is InvalidArgument).
std::unique_ptr<BatchReader> ReduceIdsReader(std::unique_ptr<BatchReader> inner,
                                             std::vector<int64_t> rows);

}  // namespace tessera
