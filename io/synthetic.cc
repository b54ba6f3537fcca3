#include "io/synthetic.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rng.h"
#include "core/status.h"
#include "io/auc.h"

namespace tessera {
namespace {

// Hottest ranks whose id and effects are tabulated per feature (Zipf puts most lookups there).
constexpr int64_t kCachedRanks = int64_t{1} << 16;
constexpr int64_t kMaxRows = int64_t{1} << 40;
// Segments of the tabulated quantile function of each dense feature.
constexpr int kDenseSegments = 1024;
// Ranks summed exactly when normalising effects; the rest of the table is an integral.
constexpr int64_t kExactNormaliserTerms = int64_t{1} << 16;

// Stream tags keeping the model's random draws apart from each other and from the samples'.
enum Stream : uint64_t {
  kSampleStream = 0x53414d50,   // per-sample draws
  kEffectStream = 0x45464654,   // e_f(id)
  kPairStream = 0x50414952,     // v_f(id)
  kDenseStream = 0x44454e53,    // dense feature parameters
  kWeightStream = 0x57454947,   // dense weights
  kScrambleStream = 0x5343524d  // scramble keys
};

double Uniform(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// Standard normal from two counter values (Box-Muller in double precision).
double NormalFromBits(uint64_t b1, uint64_t b2) {
  const double u1 = (static_cast<double>(b1 >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  const double u2 = Uniform(b2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

double NextNormal(CounterRng& rng) {
  const uint64_t b1 = rng.NextBits();
  return NormalFromBits(b1, rng.NextBits());
}

// The normal draw of a per-id table `stream` of feature f at `id`.
double NormalAt(uint64_t seed, int f, int64_t id) {
  CounterRng rng(seed, static_cast<uint64_t>(f));
  const uint64_t i = 2 * static_cast<uint64_t>(id);
  return NormalFromBits(rng.Bits(i), rng.Bits(i + 1));
}

// integral of x^-t over [a, b].
double PowerIntegral(double a, double b, double t) {
  if (b <= a) return 0.0;
  if (std::abs(t - 1.0) < 1e-12) return std::log(b / a);
  return (std::pow(b, 1.0 - t) - std::pow(a, 1.0 - t)) / (1.0 - t);
}

// E[g(rank)^2] under Zipf(s) over n ranks, g = 1 for rank < signal, signal / (rank + 1) beyond.
double MeanSquaredShape(int64_t n, double s, int64_t signal) {
  double norm = 0, acc = 0;
  const int64_t exact = std::min(n, kExactNormaliserTerms);
  for (int64_t k = 1; k <= exact; ++k) {  // k = rank + 1
    const double p = std::pow(static_cast<double>(k), -s);
    const double g = k <= signal ? 1.0 : static_cast<double>(signal) / static_cast<double>(k);
    norm += p;
    acc += p * g * g;
  }
  if (n > exact) {  // midpoint-rule tail: sum_{k=a}^{b} f(k) ~ integral over [a - 1/2, b + 1/2]
    const double lo = static_cast<double>(exact) + 0.5, hi = static_cast<double>(n) + 0.5;
    const double cut = std::clamp(static_cast<double>(signal) + 0.5, lo, hi);
    norm += PowerIntegral(lo, hi, s);
    acc += PowerIntegral(lo, cut, s);
    acc +=
        static_cast<double>(signal) * static_cast<double>(signal) * PowerIntegral(cut, hi, s + 2);
  }
  return acc / norm;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

struct SyntheticGenerator::Feature {
  int64_t rows = 0;
  ZipfSampler zipf{1, 1.0};
  // Scramble: a keyed permutation of [0, 2^bits) made of invertible steps (xor, odd multiply,
  // xor-shift), restricted to [0, rows) by cycle walking.
  uint64_t mask = 0, k0 = 0, k1 = 0, m1 = 0, m2 = 0, m1_inv = 0, m2_inv = 0;
  int shift = 1;
  double effect_coef = 0;  // a_f
  double pair_std = 0;     // std of the bag mean of v_f
  std::vector<int64_t> id_by_rank;
  std::vector<float> effect_by_rank, pair_by_rank;

  uint64_t Permute(uint64_t x) const {
    x = (x ^ k0) & mask;
    x = (x * m1) & mask;
    x ^= x >> shift;
    x = (x * m2) & mask;
    x ^= x >> shift;
    return (x + k1) & mask;
  }
  // shift >= bits / 2, so one xor undoes x ^= x >> shift.
  uint64_t Unpermute(uint64_t y) const {
    y = (y - k1) & mask;
    y ^= y >> shift;
    y = (y * m2_inv) & mask;
    y ^= y >> shift;
    y = (y * m1_inv) & mask;
    return (y ^ k0) & mask;
  }
};

namespace {
uint64_t OddInverse(uint64_t m) {  // m * inv = 1 mod 2^64, Newton's iteration
  uint64_t inv = m;
  for (int i = 0; i < 6; ++i) inv *= 2 - m * inv;
  return inv;
}
}  // namespace

SyntheticGenerator::SyntheticGenerator(SyntheticDataOptions options)
    : options_(std::move(options)) {}
SyntheticGenerator::~SyntheticGenerator() = default;

absl::StatusOr<std::shared_ptr<const SyntheticGenerator>> SyntheticGenerator::Create(
    SyntheticDataOptions options) {
  std::shared_ptr<SyntheticGenerator> gen(new SyntheticGenerator(std::move(options)));
  TESSERA_RETURN_IF_ERROR(gen->Init());
  return std::shared_ptr<const SyntheticGenerator>(std::move(gen));
}

absl::Status SyntheticGenerator::Init() {
  const SyntheticDataOptions& o = options_;
  const PlantedModelOptions& m = o.model;
  const int num_features = static_cast<int>(o.rows_per_feature.size());
  if (num_features == 0) return absl::InvalidArgumentError("rows_per_feature is empty");
  for (int f = 0; f < num_features; ++f) {
    if (o.rows_per_feature[f] < 1 || o.rows_per_feature[f] > kMaxRows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rows_per_feature[", f, "] = ", o.rows_per_feature[f], ", expected 1..2^40"));
    }
  }
  if (o.pooling.size() != 1 && o.pooling.size() != o.rows_per_feature.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pooling has ", o.pooling.size(), " values, expected 1 or ", num_features));
  }
  for (size_t f = 0; f < o.pooling.size(); ++f) {
    if (o.pooling[f] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("pooling[", f, "] = ", o.pooling[f], ", expected >= 1"));
    }
  }
  if (!(o.zipf_exponent >= 0)) {  // also refuses NaN
    return absl::InvalidArgumentError(
        absl::StrCat("zipf_exponent = ", o.zipf_exponent, ", expected >= 0 (0 = uniform ids)"));
  }
  if (o.num_dense < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_dense = ", o.num_dense, ", expected >= 0"));
  }
  if (m.sparse_logit_std < 0 || m.dense_logit_std < 0 || m.pairwise_logit_std < 0 ||
      m.signal_ids < 1) {
    return absl::InvalidArgumentError("planted model: logit stds must be >= 0 and signal_ids >= 1");
  }

  sample_seed_ = HashCombine(o.seed, kSampleStream);
  effect_seed_ = HashCombine(o.seed, kEffectStream);
  pair_seed_ = HashCombine(o.seed, kPairStream);
  const bool pairwise = num_features >= 2 && m.pairwise_logit_std > 0;

  pooling_.resize(num_features);
  features_.resize(num_features);
  total_pooling_ = 0;
  for (int f = 0; f < num_features; ++f) {
    pooling_[f] = o.pooling.size() == 1 ? o.pooling[0] : o.pooling[f];
    total_pooling_ += pooling_[f];
    Feature& ft = features_[f];
    ft.rows = o.rows_per_feature[f];
    ft.zipf = ZipfSampler(ft.rows, o.zipf_exponent);
    const int bits =
        std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(ft.rows - 1))));
    ft.mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    ft.shift = (bits + 1) / 2;
    CounterRng keys(HashCombine(o.seed, kScrambleStream), static_cast<uint64_t>(f));
    ft.k0 = keys.NextBits();
    ft.k1 = keys.NextBits();
    ft.m1 = keys.NextBits() | 1;
    ft.m2 = keys.NextBits() | 1;
    ft.m1_inv = OddInverse(ft.m1);
    ft.m2_inv = OddInverse(ft.m2);

    // Var(bag mean of e_f) = a_f^2 E[g^2] / pooling; split the sparse variance evenly.
    const double shape2 = MeanSquaredShape(ft.rows, o.zipf_exponent, m.signal_ids);
    const double target = m.sparse_logit_std / std::sqrt(static_cast<double>(num_features));
    ft.effect_coef = target * std::sqrt(static_cast<double>(pooling_[f]) / shape2);
    ft.pair_std = std::sqrt(shape2 / static_cast<double>(pooling_[f]));

    const int64_t cached = std::min(ft.rows, kCachedRanks);
    ft.id_by_rank.resize(cached);
    ft.effect_by_rank.resize(cached);
    if (pairwise && f < 2) ft.pair_by_rank.resize(cached);
    for (int64_t r = 0; r < cached; ++r) {
      const int64_t id = Scramble(f, r);
      ft.id_by_rank[r] = id;
      ft.effect_by_rank[r] = static_cast<float>(Effect(f, r, id, false));
      if (!ft.pair_by_rank.empty()) ft.pair_by_rank[r] = static_cast<float>(Effect(f, r, id, true));
    }
  }
  pair_coef_ =
      pairwise ? m.pairwise_logit_std / (features_[0].pair_std * features_[1].pair_std) : 0.0;

  // Dense features: value = 0 with probability zero_j, else log1p(exp(N(mu_j, sd_j))), drawn by
  // inverting a tabulated quantile function (piecewise linear in u over kDenseSegments, normal
  // quantiles clipped at about +-3.5 sd). One uniform and one lerp per value instead of Box-Muller
  // and two transcendentals, which dominated generation; the moments below are those of the
  // piecewise-linear law itself, so the centring is exact.
  const int64_t nd = o.num_dense;
  std::vector<double> z_grid(kDenseSegments + 1);
  for (int i = 0; i <= kDenseSegments; ++i) {
    const double p = std::clamp(static_cast<double>(i) / kDenseSegments, 0.25 / kDenseSegments,
                                1.0 - 0.25 / kDenseSegments);
    double lo = -10, hi = 10;  // bisection on the normal cdf
    for (int it = 0; it < 80; ++it) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    z_grid[i] = 0.5 * (lo + hi);
  }
  dense_zero_.resize(nd);
  dense_mean_.resize(nd);
  dense_w_.resize(nd);
  dense_quantiles_.resize(nd * (kDenseSegments + 1));
  double var_sum = 0;
  for (int64_t j = 0; j < nd; ++j) {
    CounterRng r(HashCombine(o.seed, kDenseStream), static_cast<uint64_t>(j));
    const double mu = 0.5 + 2.5 * r.NextUniformDouble();
    const double sd = 0.5 + 1.0 * r.NextUniformDouble();
    dense_zero_[j] = 0.3 * r.NextUniformDouble();
    float* q = &dense_quantiles_[j * (kDenseSegments + 1)];
    for (int i = 0; i <= kDenseSegments; ++i) {
      q[i] = static_cast<float>(std::log1p(std::exp(mu + sd * z_grid[i])));
    }
    double e1 = 0, e2 = 0;  // moments of the continuous part, segment by segment
    for (int i = 0; i < kDenseSegments; ++i) {
      const double a = q[i], b = q[i + 1];
      e1 += (a + b) / 2;
      e2 += (a * a + a * b + b * b) / 3;
    }
    e1 /= kDenseSegments;
    e2 /= kDenseSegments;
    const double keep = 1.0 - dense_zero_[j];
    dense_mean_[j] = keep * e1;
    const double var = keep * e2 - dense_mean_[j] * dense_mean_[j];
    CounterRng w(HashCombine(o.seed, kWeightStream), static_cast<uint64_t>(j));
    dense_w_[j] = NextNormal(w);
    var_sum += dense_w_[j] * dense_w_[j] * var;
  }
  const double wscale = var_sum > 0 ? m.dense_logit_std / std::sqrt(var_sum) : 0.0;
  for (double& w : dense_w_) w *= wscale;
  return absl::OkStatus();
}

int64_t SyntheticGenerator::Scramble(int f, int64_t rank) const {
  const Feature& ft = features_[f];
  uint64_t y = ft.Permute(static_cast<uint64_t>(rank));
  while (y >= static_cast<uint64_t>(ft.rows)) y = ft.Permute(y);
  return static_cast<int64_t>(y);
}

int64_t SyntheticGenerator::Unscramble(int f, int64_t id) const {
  const Feature& ft = features_[f];
  uint64_t x = ft.Unpermute(static_cast<uint64_t>(id));
  while (x >= static_cast<uint64_t>(ft.rows)) x = ft.Unpermute(x);
  return static_cast<int64_t>(x);
}

double SyntheticGenerator::Effect(int f, int64_t rank, int64_t id, bool pairwise) const {
  const int64_t signal = options_.model.signal_ids;
  const double g =
      rank < signal ? 1.0 : static_cast<double>(signal) / static_cast<double>(rank + 1);
  if (pairwise) return g * NormalAt(pair_seed_, f, id);
  return features_[f].effect_coef * g * NormalAt(effect_seed_, f, id);
}

void SyntheticGenerator::GenerateSample(int64_t index, float* dense, int64_t* ids, float* label,
                                        double* probability) const {
  CounterRng rng(sample_seed_, static_cast<uint64_t>(index));
  const double u_label = rng.NextUniformDouble();
  double dense_term = 0;
  for (size_t j = 0; j < dense_w_.size(); ++j) {
    const double u = rng.NextUniformDouble();
    float x = 0.0f;
    if (u >= dense_zero_[j]) {
      const double v = (u - dense_zero_[j]) / (1.0 - dense_zero_[j]) * kDenseSegments;
      const int i = std::min(static_cast<int>(v), kDenseSegments - 1);
      const float* q = &dense_quantiles_[j * (kDenseSegments + 1) + i];
      x = q[0] + static_cast<float>(v - i) * (q[1] - q[0]);
    }
    dense[j] = x;
    dense_term += dense_w_[j] * (static_cast<double>(x) - dense_mean_[j]);
  }
  double sparse_term = 0, pair_mean[2] = {0, 0};
  int64_t* out = ids;
  for (size_t f = 0; f < features_.size(); ++f) {
    const Feature& ft = features_[f];
    const bool pair = f < 2 && pair_coef_ != 0;
    double sum = 0, pair_sum = 0;
    for (int64_t k = 0; k < pooling_[f]; ++k) {
      const int64_t rank = ft.zipf.Sample(rng);
      int64_t id;
      if (rank < static_cast<int64_t>(ft.id_by_rank.size())) {
        id = ft.id_by_rank[rank];
        sum += ft.effect_by_rank[rank];
        if (pair) pair_sum += ft.pair_by_rank[rank];
      } else {
        id = Scramble(static_cast<int>(f), rank);
        sum += static_cast<float>(Effect(static_cast<int>(f), rank, id, false));
        if (pair) pair_sum += static_cast<float>(Effect(static_cast<int>(f), rank, id, true));
      }
      *out++ = id;
    }
    sparse_term += sum / static_cast<double>(pooling_[f]);
    if (pair) pair_mean[f] = pair_sum / static_cast<double>(pooling_[f]);
  }
  const PlantedModelOptions& m = options_.model;
  const double logit =
      m.bias + m.scale * (sparse_term + dense_term + pair_coef_ * pair_mean[0] * pair_mean[1]);
  const double p = Sigmoid(logit);
  if (label != nullptr) *label = u_label < p ? 1.0f : 0.0f;
  if (probability != nullptr) *probability = p;
}

absl::StatusOr<PlantedModelStats> SyntheticGenerator::PlantedStats(int64_t begin,
                                                                   int64_t count) const {
  if (count < 1 || begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PlantedStats: begin = ", begin, ", count = ", count));
  }
  std::vector<double> probs(count);
  std::vector<float> labels(count);
  std::vector<float> dense(options_.num_dense);
  std::vector<int64_t> ids(total_pooling_);
  PlantedModelStats stats;
  stats.samples = count;
  double loss = 0, positives = 0;
  for (int64_t i = 0; i < count; ++i) {
    GenerateSample(begin + i, dense.data(), ids.data(), &labels[i], &probs[i]);
    const double p = std::clamp(probs[i], 1e-12, 1 - 1e-12);
    loss -= labels[i] == 1.0f ? std::log(p) : std::log1p(-p);
    positives += labels[i];
  }
  stats.positive_rate = positives / static_cast<double>(count);
  stats.log_loss = loss / static_cast<double>(count);
  stats.auc = ExactAuc(absl::MakeConstSpan(probs), labels);  // NaN without both classes
  return stats;
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<SyntheticReader>> SyntheticReader::Open(
    SyntheticDataOptions data, SyntheticStreamOptions stream) {
  TESSERA_ASSIGN_OR_RETURN(auto gen, SyntheticGenerator::Create(std::move(data)));
  return Open(std::move(gen), stream);
}

absl::StatusOr<std::unique_ptr<SyntheticReader>> SyntheticReader::Open(
    std::shared_ptr<const SyntheticGenerator> generator, SyntheticStreamOptions stream) {
  if (generator == nullptr) return absl::InvalidArgumentError("no generator");
  if (stream.begin < 0 || stream.num_samples < 0 || stream.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic stream: begin = ", stream.begin, ", num_samples = ", stream.num_samples,
        ", batch_size = ", stream.batch_size, "; expected begin, num_samples >= 0, batch >= 1"));
  }
  if (stream.num_shards < 1 || stream.shard_index < 0 || stream.shard_index >= stream.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index = ", stream.shard_index, " of num_shards = ", stream.num_shards));
  }
  std::unique_ptr<SyntheticReader> r(new SyntheticReader());
  r->generator_ = std::move(generator);
  r->stream_ = stream;
  const int64_t n = stream.num_samples;
  r->first_ = stream.begin + n * stream.shard_index / stream.num_shards;
  r->end_ = stream.begin + n * (stream.shard_index + 1) / stream.num_shards;
  r->next_ = r->first_;
  r->ids_.resize(r->generator_->total_pooling());
  return r;
}

absl::StatusOr<bool> SyntheticReader::Next(Batch* batch) {
  if (next_ >= end_) return false;
  const SyntheticGenerator& gen = *generator_;
  const int64_t n = std::min(stream_.batch_size, end_ - next_);
  const int64_t nd = gen.options().num_dense;
  const int nf = gen.num_features();
  batch->batch_size = n;
  batch->num_dense = nd;
  batch->dense.resize(n * nd);
  batch->labels.resize(n);
  KeyedJagged& kj = batch->sparse;
  kj.num_features = nf;
  kj.batch_size = n;
  kj.offsets.resize(nf * n + 1);
  kj.values.resize(n * gen.total_pooling());
  kj.weights.clear();
  // Fixed pooling: feature f's block starts at n * (pooling of features before f).
  int64_t block = 0;
  for (int f = 0; f < nf; ++f) {
    for (int64_t b = 0; b < n; ++b) kj.offsets[f * n + b] = block + b * gen.pooling(f);
    block += n * gen.pooling(f);
  }
  kj.offsets[nf * n] = block;
  for (int64_t b = 0; b < n; ++b) {
    gen.GenerateSample(next_ + b, &batch->dense[b * nd], ids_.data(), &batch->labels[b], nullptr);
    const int64_t* id = ids_.data();
    for (int f = 0; f < nf; ++f) {
      const int64_t p = gen.pooling(f);
      std::copy_n(id, p, &kj.values[kj.offsets[f * n + b]]);
      id += p;
    }
  }
  batch->origin = absl::StrCat("synthetic sample ", next_);
  next_ += n;
  stats_.records += n;
  return true;
}

absl::Status SyntheticReader::Rewind() {
  next_ = first_;
  return absl::OkStatus();
}

}  // namespace tessera
