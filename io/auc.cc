#include "io/auc.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/status.h"

namespace tessera {
namespace {

template <typename Score>
double ExactAucImpl(absl::Span<const Score> scores, absl::Span<const float> labels) {
  TESSERA_CHECK(scores.size() == labels.size())
      << scores.size() << " scores vs " << labels.size() << " labels";
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  struct Pair {
    Score score;
    bool positive;
  };
  std::vector<Pair> pairs(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) return kNaN;  // NaN has no place in the order
    pairs[i] = {scores[i], labels[i] > 0.5f};
  }
  std::sort(pairs.begin(), pairs.end(),
            [](const Pair& a, const Pair& b) { return a.score < b.score; });
  // Walk tie groups in ascending score. Each positive beats every negative in earlier groups and
  // ties (half a win) with the negatives of its own group: the Mann-Whitney U with average ranks.
  int64_t negatives_below = 0, positives = 0;
  double wins2 = 0.0;  // twice U, an integer held in a double (exact below 2^53)
  for (size_t i = 0; i < pairs.size();) {
    size_t j = i;
    int64_t p = 0, n = 0;
    for (; j < pairs.size() && pairs[j].score == pairs[i].score; ++j) {
      if (pairs[j].positive) {
        ++p;
      } else {
        ++n;
      }
    }
    wins2 += static_cast<double>(p) * static_cast<double>(2 * negatives_below + n);
    negatives_below += n;
    positives += p;
    i = j;
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  return wins2 / (2.0 * static_cast<double>(positives) * static_cast<double>(negatives_below));
}

}  // namespace

double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  return ExactAucImpl(scores, labels);
}
double ExactAuc(absl::Span<const double> scores, absl::Span<const float> labels) {
  return ExactAucImpl(scores, labels);
}

}  // namespace tessera
