// Synthetic click data with power-law ids and a planted model, so that AUC means something.
//
// Sample i of a data set is a pure function of (seed, i): any rank can generate its own slice
// and an eval set is just a disjoint index range (kSyntheticEvalBegin is a convenient start).
//
// Per sparse feature f (table of rows_f rows, pooling p_f ids per bag):
//   rank  ~ Zipf(zipf_exponent) over [0, rows_f)          (ZipfSampler, O(1), rows up to 2^40)
//   id    = Scramble_f(rank)                               (a fixed bijection of [0, rows_f), so
//                                                           hot rows spread over the table)
// Dense feature j (num_dense of them): 0 with probability z_j, else log(1 + exp(N(mu_j, sd_j)))
//   (normal clipped at about +-3.5 sd, drawn from a tabulated quantile function), i.e. log1p of a
//   log-normal count, like Criteo's integers after the reader's log1p.
// Label: the planted model (docs/DATA.md has the derivation of the scales)
//   logit = bias + scale * ( sum_f mean_{id in bag f} e_f(id)        (sparse term)
//                          + sum_j w_j (dense_j - E dense_j)          (dense term)
//                          + c * mean v_0(id) * mean v_1(id) )        (pairwise term, F >= 2)
//   e_f(id) = a_f * g(rank(id)) * N(0,1) drawn from CounterRng(seed, f) at the id, with
//   g(rank) = 1 for the `signal_ids` hottest ids and signal_ids / (rank + 1) beyond: the signal
//   sits on ids frequent enough to be learned. a_f, w and c are set so that the three terms have
//   standard deviations sparse_logit_std, dense_logit_std and pairwise_logit_std.
//   label ~ Bernoulli(sigmoid(logit)).
// The planted probability sigmoid(logit) is the best any model can predict; PlantedModelStats
// reports its exact AUC and log loss on an index range.
//
// Thread-safety: SyntheticGenerator is immutable after Create (share it across threads);
// SyntheticReader has one consumer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "io/reader.h"
#include "io/zipf.h"

namespace tessera {

// A start index for eval streams far from any training range.
inline constexpr int64_t kSyntheticEvalBegin = int64_t{1} << 40;

struct PlantedModelOptions {
  // Logit offset; sets the positive rate (about 25-30% with the other defaults). Default: -1.5.
  double bias = -1.5;
  // Multiplies the sparse, dense and pairwise terms (the config's planted_scale). Default: 1.
  double scale = 1.0;
  // Standard deviation of the sparse term (all features together). Default: 1.5.
  double sparse_logit_std = 1.5;
  // Standard deviation of the dense term. Default: 1.0.
  double dense_logit_std = 1.0;
  // Standard deviation of the feature 0 x feature 1 interaction; 0 = none. Default: 0.4.
  double pairwise_logit_std = 0.4;
  // Per feature, the ids of rank < signal_ids carry full-strength effects; effects of rarer ids
  // shrink as signal_ids / (rank + 1). Default: 1000.
  int64_t signal_ids = 1000;
};

// Everything that defines sample i (given its index): the data distribution and the model.
struct SyntheticDataOptions {
  // Rows of each sparse feature's table, each in [1, 2^40]. Required (at least one feature).
  std::vector<int64_t> rows_per_feature;
  // Ids per bag: one value for all features or one per feature, each >= 1. Default: {1}.
  std::vector<int64_t> pooling = {1};
  // Zipf exponent of the id distribution (>= 0; 0 = uniform ids). Default: 1.05.
  double zipf_exponent = 1.05;
  // Dense features per sample (>= 0). Default: 13.
  int64_t num_dense = 13;
  // Seed of everything. Default: 0.
  uint64_t seed = 0;
  PlantedModelOptions model;
};

// Which samples a reader produces.
struct SyntheticStreamOptions {
  // The stream is samples [begin, begin + num_samples). Defaults: 0, 2^20.
  int64_t begin = 0;
  int64_t num_samples = int64_t{1} << 20;
  // Samples per batch (the last may be smaller). Default: 2048.
  int64_t batch_size = 2048;
  // Contiguous slice [n*s/S, n*(s+1)/S) of the stream for shard s of S. Default: 0 of 1.
  int shard_index = 0;
  int num_shards = 1;
};

struct PlantedModelStats {
  int64_t samples = 0;
  double positive_rate = 0;
  double auc = 0;       // exact AUC of the planted probabilities against the drawn labels
  double log_loss = 0;  // mean binary cross-entropy of the planted probabilities
};

class SyntheticGenerator {
 public:
  // Validates the options (InvalidArgument naming the bad field) and precomputes the model
  // (normalisers and per-rank tables for the hottest ranks).
  static absl::StatusOr<std::shared_ptr<const SyntheticGenerator>> Create(
      SyntheticDataOptions options);
  ~SyntheticGenerator();

  // Sample `index`: writes dense[num_dense], ids[total_pooling] (feature 0's bag, then feature
  // 1's, ...), the label and the planted probability (either of the last two may be null).
  void GenerateSample(int64_t index, float* dense, int64_t* ids, float* label,
                      double* probability) const;

  // The bijection rank -> id of feature f, and its inverse. REQUIRES: 0 <= x < rows_f.
  int64_t Scramble(int f, int64_t rank) const;
  int64_t Unscramble(int f, int64_t id) const;

  // Generates samples [begin, begin + count) and scores the planted probabilities (exact AUC).
  absl::StatusOr<PlantedModelStats> PlantedStats(int64_t begin, int64_t count) const;

  const SyntheticDataOptions& options() const { return options_; }
  int num_features() const { return static_cast<int>(options_.rows_per_feature.size()); }
  int64_t pooling(int f) const { return pooling_[f]; }
  int64_t total_pooling() const { return total_pooling_; }

 private:
  struct Feature;
  explicit SyntheticGenerator(SyntheticDataOptions options);
  absl::Status Init();
  double Effect(int f, int64_t rank, int64_t id, bool pairwise) const;

  SyntheticDataOptions options_;
  std::vector<int64_t> pooling_;
  int64_t total_pooling_ = 0;
  std::vector<Feature> features_;
  std::vector<double> dense_zero_, dense_mean_, dense_w_;
  std::vector<float> dense_quantiles_;  // [num_dense, segments + 1]
  double pair_coef_ = 0;
  uint64_t sample_seed_ = 0, effect_seed_ = 0, pair_seed_ = 0;
};

// Batches of synthetic samples: dense [B, num_dense], labels, and one KeyedJagged feature per
// table with exactly pooling(f) ids per bag.
class SyntheticReader : public BatchReader {
 public:
  static absl::StatusOr<std::unique_ptr<SyntheticReader>> Open(
      std::shared_ptr<const SyntheticGenerator> generator, SyntheticStreamOptions stream);
  // Convenience: builds its own generator.
  static absl::StatusOr<std::unique_ptr<SyntheticReader>> Open(SyntheticDataOptions data,
                                                               SyntheticStreamOptions stream);

  absl::StatusOr<bool> Next(Batch* batch) override;
  absl::Status Rewind() override;
  ReaderStats stats() const override { return stats_; }

  // Samples in this shard; the first one's global index.
  int64_t num_records() const { return end_ - first_; }
  int64_t first_index() const { return first_; }
  const SyntheticGenerator& generator() const { return *generator_; }

 private:
  SyntheticReader() = default;
  std::shared_ptr<const SyntheticGenerator> generator_;
  SyntheticStreamOptions stream_;
  int64_t first_ = 0, end_ = 0, next_ = 0;
  ReaderStats stats_;
  std::vector<int64_t> ids_;  // one sample's ids
};

}  // namespace tessera
