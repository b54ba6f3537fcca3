// Evaluation metrics for click-through-rate models, computed exactly and in double precision:
//   AUC    the area under the ROC curve, exact: io/auc.h's ExactAuc (the Mann-Whitney U
//          statistic over all (positive, negative) pairs, ties counting one half).
//   logloss  mean binary cross-entropy, probabilities clamped to [1e-7, 1 - 1e-7].
//   NE     normalized entropy: logloss divided by the entropy of the empirical CTR
//          (the logloss of always predicting the base rate), as in He et al. 2014 (Facebook ads).
// A label counts as positive when it is > 0.5; logloss uses the label value itself, so soft
// labels in [0, 1] are allowed. Undefined metrics are NaN: AUC when the set has only one class,
// NE when the CTR is 0 or 1, all of them on an empty set.
//
// Distributed use: each rank collects its (prediction, label) pairs in an EvalAccumulator, the
// trainer gathers the arrays to rank 0 (all_gather_v) and calls ComputeEvalMetrics there. The
// log-loss part also reduces without a gather: LogLossSums add up across ranks.
// Thread-safety: the functions are pure; EvalAccumulator is not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tessera {

// Probabilities passed to the log loss are clamped to [kLogLossEps, 1 - kLogLossEps].
inline constexpr double kLogLossEps = 1e-7;

struct EvalMetrics {
  double auc = 0.0;        // NaN without both classes
  double logloss = 0.0;    // NaN on an empty set
  double ne = 0.0;         // NaN when the CTR is 0 or 1 (or empty)
  int64_t count = 0;       // samples
  int64_t positives = 0;   // samples with label > 0.5
};

// Partial sums of the log loss; add them across ranks or batches, then Finish.
struct LogLossSums {
  double loss_sum = 0.0;   // sum of -[y log p + (1 - y) log(1 - p)], p clamped
  double label_sum = 0.0;  // sum of y (the empirical CTR's numerator)
  int64_t count = 0;
  int64_t positives = 0;   // labels > 0.5

  LogLossSums& operator+=(const LogLossSums& o);
};

// Sums over one batch. REQUIRES: probs.size() == labels.size().
LogLossSums ComputeLogLossSums(absl::Span<const float> probs, absl::Span<const float> labels);

// Fills logloss, ne, count and positives of `out` from `sums` (auc untouched).
void FinishLogLoss(const LogLossSums& sums, EvalMetrics* out);

// All metrics of a full evaluation set of probabilities `probs` in [0, 1] and `labels`.
// REQUIRES: probs.size() == labels.size().
EvalMetrics ComputeEvalMetrics(absl::Span<const float> probs, absl::Span<const float> labels);

// Collects predictions batch by batch for one evaluation.
class EvalAccumulator {
 public:
  // Appends a batch (copies). REQUIRES: probs.size() == labels.size().
  void Add(absl::Span<const float> probs, absl::Span<const float> labels);
  void Clear();
  // The gathered arrays (what a rank sends to rank 0).
  const std::vector<float>& probs() const { return probs_; }
  const std::vector<float>& labels() const { return labels_; }
  int64_t count() const { return static_cast<int64_t>(probs_.size()); }
  // ComputeEvalMetrics over everything added since the last Clear.
  EvalMetrics Compute() const;

 private:
  std::vector<float> probs_;
  std::vector<float> labels_;
};

}  // namespace tessera
