// Batch: one mini-batch as readers produce it and the trainer consumes it (host memory).
//   dense  [batch_size, num_dense] floats, already preprocessed (Criteo: log(1 + max(x, 0)))
//   labels [batch_size] floats in {0, 1}
//   sparse KeyedJagged with one feature per categorical column, ids reduced to [0, rows)
//   origin where its first sample came from, for messages (e.g. a non-finite step's report)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/keyed_jagged.h"

namespace tessera {

struct Batch {
  int64_t batch_size = 0;
  int64_t num_dense = 0;
  std::vector<float> dense;
  std::vector<float> labels;
  KeyedJagged sparse;
  // The first sample's place in the data, as its reader names it: "<file>:<line>" (Criteo
  // text), "<file>: record <i>" (binary records, i counted from 0 in that file), "synthetic
  // sample <i>" (the generator's global sample index). "" when the reader does not say.
  std::string origin;
};

}  // namespace tessera
