#include "trainer/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/status.h"
#include "io/auc.h"

namespace tessera {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

LogLossSums& LogLossSums::operator+=(const LogLossSums& o) {
  loss_sum += o.loss_sum;
  label_sum += o.label_sum;
  count += o.count;
  positives += o.positives;
  return *this;
}

LogLossSums ComputeLogLossSums(absl::Span<const float> probs, absl::Span<const float> labels) {
  TESSERA_CHECK(probs.size() == labels.size())
      << probs.size() << " predictions vs " << labels.size() << " labels";
  LogLossSums s;
  for (size_t i = 0; i < probs.size(); ++i) {
    // Clamping keeps one confident mistake from making the whole set's loss infinite.
    double p = std::clamp(static_cast<double>(probs[i]), kLogLossEps, 1.0 - kLogLossEps);
    double y = labels[i];
    s.loss_sum -= y * std::log(p) + (1.0 - y) * std::log1p(-p);
    s.label_sum += y;
    s.positives += labels[i] > 0.5f ? 1 : 0;
  }
  s.count = static_cast<int64_t>(probs.size());
  return s;
}

void FinishLogLoss(const LogLossSums& sums, EvalMetrics* out) {
  out->count = sums.count;
  out->positives = sums.positives;
  if (sums.count == 0) {
    out->logloss = out->ne = kNaN;
    return;
  }
  out->logloss = sums.loss_sum / static_cast<double>(sums.count);
  double ctr = sums.label_sum / static_cast<double>(sums.count);
  if (ctr <= 0.0 || ctr >= 1.0) {
    out->ne = kNaN;  // the base rate predicts perfectly; nothing to normalize by
    return;
  }
  double entropy = -(ctr * std::log(ctr) + (1.0 - ctr) * std::log1p(-ctr));
  out->ne = out->logloss / entropy;
}

EvalMetrics ComputeEvalMetrics(absl::Span<const float> probs, absl::Span<const float> labels) {
  EvalMetrics m;
  FinishLogLoss(ComputeLogLossSums(probs, labels), &m);
  m.auc = ExactAuc(probs, labels);
  return m;
}

void EvalAccumulator::Add(absl::Span<const float> probs, absl::Span<const float> labels) {
  TESSERA_CHECK(probs.size() == labels.size())
      << probs.size() << " predictions vs " << labels.size() << " labels";
  probs_.insert(probs_.end(), probs.begin(), probs.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
}

void EvalAccumulator::Clear() {
  probs_.clear();
  labels_.clear();
}

EvalMetrics EvalAccumulator::Compute() const { return ComputeEvalMetrics(probs_, labels_); }

}  // namespace tessera
