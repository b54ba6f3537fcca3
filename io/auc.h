// ExactAuc: the one exact AUC of the project (the trainer's eval metrics, trainer/metrics.h, and
// the planted model's AUC on synthetic data both call it): the area under the ROC curve of
// `scores` against `labels`, computed exactly as the Mann-Whitney U statistic over all
// (positive, negative) pairs, ties in score counting one half (average ranks), in O(n log n)
// time and one copy of the pairs (scores and a label bit).
//
// Contract: a label counts as positive when it is > 0.5 (so 0/1 labels and soft labels in
// [0, 1] both work); only the order of the scores matters (probabilities or logits). Undefined
// cases give NaN instead of an error, so a metric line can carry them: a set without both
// classes (including the empty set), or any NaN score. Counts stay integers until one final
// division, so the result is exact up to that rounding (below 2^53 pairs).
// REQUIRES: scores.size() == labels.size() (checked). Thread-safety: pure functions.
#pragma once

#include "absl/types/span.h"

namespace tessera {

double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels);
double ExactAuc(absl::Span<const double> scores, absl::Span<const float> labels);

}  // namespace tessera
