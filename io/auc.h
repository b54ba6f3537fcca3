// ExactAuc: the area under the ROC curve of `scores` against 0/1 `labels`, computed exactly as
// the Mann-Whitney statistic (ties count one half), in O(n log n). This is io/'s own minimal
// helper, used to report the planted model's AUC on synthetic data; the trainer's metrics module
// has the streaming versions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// InvalidArgument when the sizes differ, a label is not 0 or 1, a score is NaN, or one class is
// empty (the AUC is undefined then).
absl::StatusOr<double> ExactAuc(const std::vector<double>& scores,
                                const std::vector<float>& labels);

}  // namespace tessera
