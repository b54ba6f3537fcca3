#include "io/auc.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<double> ExactAuc(const std::vector<double>& scores,
                                const std::vector<float>& labels) {
  const size_t n = scores.size();
  if (labels.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExactAuc: ", n, " scores but ", labels.size(), " labels"));
  }
  int64_t positives = 0;
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("ExactAuc: label ", i, " is ", labels[i], ", expected 0 or 1"));
    }
    if (std::isnan(scores[i])) {
      return absl::InvalidArgumentError(absl::StrCat("ExactAuc: score ", i, " is NaN"));
    }
    positives += labels[i] == 1.0f;
  }
  const int64_t negatives = static_cast<int64_t>(n) - positives;
  if (positives == 0 || negatives == 0) {
    return absl::InvalidArgumentError(absl::StrCat("ExactAuc: undefined with ", positives,
                                                   " positives and ", negatives, " negatives"));
  }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
  // Sum of the (1-based, tie-averaged) ranks of the positives.
  double rank_sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    int64_t pos_in_group = 0;
    while (j < n && scores[order[j]] == scores[order[i]])
      pos_in_group += labels[order[j++]] == 1.0f;
    const double mean_rank = 0.5 * (static_cast<double>(i + 1) + static_cast<double>(j));
    rank_sum += mean_rank * static_cast<double>(pos_in_group);
    i = j;
  }
  const double p = static_cast<double>(positives), q = static_cast<double>(negatives);
  return (rank_sum - p * (p + 1) / 2) / (p * q);
}

}  // namespace tessera
