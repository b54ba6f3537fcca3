#include "io/synthetic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"
#include "io/zipf.h"
#include "io_test_util.h"

namespace tessera {
namespace {

using testing_io::AppendFlat;
using testing_io::FlatSample;

// The quickstart-like setup the defaults are tuned for (docs/DATA.md).
SyntheticDataOptions Quickstart(uint64_t seed = 0) {
  SyntheticDataOptions d;
  d.rows_per_feature = {10000, 20000, 50000, 100000, 10000, 30000, 100000, 50000};
  d.pooling = {1, 2, 3, 4, 1, 2, 3, 4};
  d.num_dense = 13;
  d.seed = seed;
  return d;
}

std::vector<FlatSample> ReadStream(std::shared_ptr<const SyntheticGenerator> gen,
                                   SyntheticStreamOptions s) {
  auto r = SyntheticReader::Open(gen, s);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<FlatSample> out;
  Batch b;
  while (*(*r)->Next(&b)) AppendFlat(b, &out);
  EXPECT_EQ((*r)->stats().records, static_cast<int64_t>(out.size()));
  return out;
}

// Exact Zipf pmf over n ranks (n small enough to sum).
std::vector<double> ZipfPmf(int64_t n, double s) {
  std::vector<double> p(n);
  double h = 0;
  for (int64_t k = 0; k < n; ++k) h += p[k] = std::pow(static_cast<double>(k + 1), -s);
  for (double& x : p) x /= h;
  return p;
}

TEST(ZipfSamplerTest, FrequenciesMatchThePmf) {
  for (double s : {0.0, 0.5, 1.0, 1.05, 2.5}) {  // 0: uniform
    SCOPED_TRACE(s);
    const int64_t n = 1000, draws = 1000000;
    ZipfSampler zipf(n, s);
    CounterRng rng(42, static_cast<uint64_t>(s * 100));
    std::vector<int64_t> count(n, 0);
    for (int64_t i = 0; i < draws; ++i) {
      int64_t k = zipf.Sample(rng);
      ASSERT_GE(k, 0);
      ASSERT_LT(k, n);
      ++count[k];
    }
    std::vector<double> p = ZipfPmf(n, s);
    // Pearson chi-square over 50 bins of equal expected mass; df = 49, so 5 sigma ~ 49 + 5 * 9.9.
    double chi2 = 0, mass = 0, observed = 0;
    int bins = 0;
    for (int64_t k = 0; k < n; ++k) {
      mass += p[k];
      observed += static_cast<double>(count[k]);
      if (mass >= 1.0 / 50 || k == n - 1) {
        const double expected = mass * draws;
        chi2 += (observed - expected) * (observed - expected) / expected;
        mass = observed = 0;
        ++bins;
      }
    }
    EXPECT_LT(chi2, bins + 5 * std::sqrt(2.0 * bins)) << bins << " bins";
    // The head, rank by rank, within 5 standard deviations.
    for (int k = 0; k < 5; ++k) {
      const double expected = p[k] * draws, sd = std::sqrt(expected * (1 - p[k]));
      EXPECT_NEAR(static_cast<double>(count[k]), expected, 5 * sd) << "rank " << k;
    }
  }
}

TEST(ZipfSamplerTest, HugeSupport) {
  const int64_t n = int64_t{1} << 31;
  const double s = 1.05;
  ZipfSampler zipf(n, s);
  CounterRng rng(7, 0);
  const int64_t draws = 400000;
  int64_t zeros = 0, max_k = 0;
  for (int64_t i = 0; i < draws; ++i) {
    int64_t k = zipf.Sample(rng);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, n);
    zeros += k == 0;
    max_k = std::max(max_k, k);
  }
  // H(n) = sum_{k<=m} k^-s + integral of x^-s over [m + 1/2, n + 1/2] (midpoint rule).
  double h = 0;
  const int64_t m = 1 << 20;
  for (int64_t k = 1; k <= m; ++k) h += std::pow(static_cast<double>(k), -s);
  h += (std::pow(m + 0.5, 1 - s) - std::pow(n + 0.5, 1 - s)) / (s - 1);
  const double p0 = 1 / h, expected = p0 * draws;
  EXPECT_NEAR(static_cast<double>(zeros), expected, 5 * std::sqrt(expected));
  EXPECT_GT(max_k, int64_t{1} << 28);  // the tail is reached
}

TEST(SyntheticTest, ScrambleIsABijection) {
  SyntheticDataOptions d;
  d.rows_per_feature = {1, 2, 7, 1000, 65537, int64_t{1} << 31, (int64_t{1} << 40) - 3};
  auto gen = SyntheticGenerator::Create(d);
  ASSERT_TRUE(gen.ok()) << gen.status();
  for (int f = 0; f < 5; ++f) {
    const int64_t rows = d.rows_per_feature[f];
    std::vector<bool> hit(rows, false);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t id = (*gen)->Scramble(f, r);
      ASSERT_GE(id, 0);
      ASSERT_LT(id, rows);
      ASSERT_FALSE(hit[id]) << "feature " << f << " rank " << r;
      hit[id] = true;
      ASSERT_EQ((*gen)->Unscramble(f, id), r);
    }
  }
  for (int f = 5; f < 7; ++f) {
    CounterRng rng(1, f);
    std::set<int64_t> ids;
    for (int i = 0; i < 10000; ++i) {
      int64_t r = static_cast<int64_t>(rng.NextBelow(d.rows_per_feature[f]));
      int64_t id = (*gen)->Scramble(f, r);
      ASSERT_LT(id, d.rows_per_feature[f]);
      ASSERT_EQ((*gen)->Unscramble(f, id), r);
    }
    // Hot ranks are spread over the table, not clustered at its start.
    int64_t high = 0;
    for (int64_t r = 0; r < 100; ++r) high += (*gen)->Scramble(f, r) >= d.rows_per_feature[f] / 2;
    EXPECT_GT(high, 25);
    EXPECT_LT(high, 75);
  }
}

TEST(SyntheticTest, DeterministicByIndexBatchSizeAndSeed) {
  auto gen = *SyntheticGenerator::Create(Quickstart());
  SyntheticStreamOptions s;
  s.num_samples = 1000;
  s.batch_size = 128;
  std::vector<FlatSample> a = ReadStream(gen, s);
  ASSERT_EQ(a.size(), 1000u);
  // A second generator from the same options, another batch size: same samples.
  auto gen2 = *SyntheticGenerator::Create(Quickstart());
  s.batch_size = 77;
  EXPECT_EQ(ReadStream(gen2, s), a);
  // A sub-range is the same samples: sample i depends only on (seed, i).
  SyntheticStreamOptions sub;
  sub.begin = 300;
  sub.num_samples = 200;
  sub.batch_size = 64;
  std::vector<FlatSample> b = ReadStream(gen, sub);
  EXPECT_EQ(b, std::vector<FlatSample>(a.begin() + 300, a.begin() + 500));
  // Another seed: other samples.
  auto other = *SyntheticGenerator::Create(Quickstart(1));
  s.num_samples = 50;
  std::vector<FlatSample> c = ReadStream(other, s);
  int same = 0;
  for (int i = 0; i < 50; ++i) same += c[i] == a[i];
  EXPECT_EQ(same, 0);
}

TEST(SyntheticTest, ShardsConcatenateToTheWhole) {
  auto gen = *SyntheticGenerator::Create(Quickstart());
  SyntheticStreamOptions s;
  s.begin = 5000;
  s.num_samples = 1001;
  s.batch_size = 100;
  std::vector<FlatSample> whole = ReadStream(gen, s);
  for (int shards : {2, 3, 8}) {
    std::vector<FlatSample> joined;
    for (int i = 0; i < shards; ++i) {
      SyntheticStreamOptions si = s;
      si.shard_index = i;
      si.num_shards = shards;
      std::vector<FlatSample> part = ReadStream(gen, si);
      EXPECT_NEAR(static_cast<double>(part.size()), 1001.0 / shards, 1.0);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole) << shards;
  }
}

TEST(SyntheticTest, BatchLayoutAndValueRanges) {
  SyntheticDataOptions d = Quickstart();
  auto gen = *SyntheticGenerator::Create(d);
  SyntheticStreamOptions s;
  s.num_samples = 300;
  s.batch_size = 256;
  auto r = *SyntheticReader::Open(gen, s);
  Batch b;
  ASSERT_TRUE(*r->Next(&b));
  EXPECT_EQ(b.batch_size, 256);
  EXPECT_EQ(b.sparse.num_features, 8);
  for (int f = 0; f < 8; ++f) {
    for (int64_t i = 0; i < 256; ++i) {
      const int64_t bag = f * 256 + i;
      EXPECT_EQ(b.sparse.offsets[bag + 1] - b.sparse.offsets[bag], d.pooling[f]);
      for (int64_t j = b.sparse.offsets[bag]; j < b.sparse.offsets[bag + 1]; ++j) {
        EXPECT_GE(b.sparse.values[j], 0);
        EXPECT_LT(b.sparse.values[j], d.rows_per_feature[f]);
      }
    }
  }
  for (float x : b.dense) EXPECT_GE(x, 0.0f);
  for (float y : b.labels) EXPECT_TRUE(y == 0.0f || y == 1.0f);
  ASSERT_TRUE(*r->Next(&b));
  EXPECT_EQ(b.batch_size, 44);
  EXPECT_FALSE(*r->Next(&b));
  ASSERT_TRUE(r->Rewind().ok());
  ASSERT_TRUE(*r->Next(&b));
  EXPECT_EQ(b.batch_size, 256);
  // No dense features, one feature: still a valid stream.
  SyntheticDataOptions tiny;
  tiny.rows_per_feature = {1};
  tiny.num_dense = 0;
  auto t = SyntheticReader::Open(tiny, s);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(*(*t)->Next(&b));
  EXPECT_TRUE(b.dense.empty());
  for (int64_t v : b.sparse.values) EXPECT_EQ(v, 0);
}

TEST(SyntheticTest, IdFrequenciesFollowZipfThroughTheScramble) {
  SyntheticDataOptions d;
  d.rows_per_feature = {500};
  d.pooling = {3};
  d.zipf_exponent = 1.2;
  auto gen = *SyntheticGenerator::Create(d);
  SyntheticStreamOptions s;
  s.num_samples = 100000;
  s.batch_size = 4096;
  auto r = *SyntheticReader::Open(gen, s);
  std::vector<int64_t> count(500, 0);
  Batch b;
  while (*r->Next(&b)) {
    for (int64_t v : b.sparse.values) ++count[v];
  }
  const std::vector<double> p = ZipfPmf(500, 1.2);
  const double draws = 300000;
  for (int64_t rank : {0, 1, 2, 10, 100}) {
    const int64_t id = gen->Scramble(0, rank);
    const double expected = p[rank] * draws, sd = std::sqrt(expected * (1 - p[rank]));
    EXPECT_NEAR(static_cast<double>(count[id]), expected, 5 * sd) << "rank " << rank;
  }
}

TEST(SyntheticTest, LabelsAreCalibratedDrawsOfThePlantedProbability) {
  auto gen = *SyntheticGenerator::Create(Quickstart(3));
  std::vector<float> dense(13);
  std::vector<int64_t> ids(gen->total_pooling());
  // Bucket by planted probability; the positive rate in a bucket must match its mean p.
  const int kBuckets = 5;
  std::vector<double> sum_p(kBuckets, 0), sum_y(kBuckets, 0), n(kBuckets, 0);
  for (int64_t i = 0; i < 40000; ++i) {
    float y;
    double p;
    gen->GenerateSample(i, dense.data(), ids.data(), &y, &p);
    ASSERT_GT(p, 0.0);
    ASSERT_LT(p, 1.0);
    const int k = std::min(kBuckets - 1, static_cast<int>(p * kBuckets));
    sum_p[k] += p;
    sum_y[k] += y;
    n[k] += 1;
  }
  for (int k = 0; k < kBuckets; ++k) {
    if (n[k] < 500) continue;
    const double mean_p = sum_p[k] / n[k];
    EXPECT_NEAR(sum_y[k] / n[k], mean_p, 5 * std::sqrt(mean_p * (1 - mean_p) / n[k])) << k;
  }
}

TEST(SyntheticTest, PlantedModelAucOfTheDefaultSetup) {
  for (uint64_t seed : {0, 1}) {
    auto gen = *SyntheticGenerator::Create(Quickstart(seed));
    auto stats = gen->PlantedStats(kSyntheticEvalBegin, 32768);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_GE(stats->auc, 0.75) << "seed " << seed;
    EXPECT_LE(stats->auc, 0.95) << "seed " << seed;  // not trivially separable
    EXPECT_GT(stats->positive_rate, 0.15);
    EXPECT_LT(stats->positive_rate, 0.40);
    EXPECT_GT(stats->log_loss, 0.0);
    // The planted model beats the constant predictor's log loss (the entropy of the base rate).
    const double q = stats->positive_rate;
    EXPECT_LT(stats->log_loss, -(q * std::log(q) + (1 - q) * std::log(1 - q)));
  }
  // A model with no signal has AUC near 1/2.
  SyntheticDataOptions flat = Quickstart();
  flat.model.sparse_logit_std = flat.model.dense_logit_std = flat.model.pairwise_logit_std = 0;
  auto gen = *SyntheticGenerator::Create(flat);
  auto stats = *gen->PlantedStats(0, 20000);
  EXPECT_NEAR(stats.auc, 0.5, 0.03);
}

TEST(SyntheticTest, OptionErrors) {
  SyntheticDataOptions d;
  EXPECT_EQ(SyntheticGenerator::Create(d).status().message(), "rows_per_feature is empty");
  d.rows_per_feature = {10, 0};
  EXPECT_EQ(SyntheticGenerator::Create(d).status().message(),
            "rows_per_feature[1] = 0, expected 1..2^40");
  d.rows_per_feature = {10, 10, 10};
  d.pooling = {1, 2};
  EXPECT_EQ(SyntheticGenerator::Create(d).status().message(),
            "pooling has 2 values, expected 1 or 3");
  d.pooling = {0};
  EXPECT_EQ(SyntheticGenerator::Create(d).status().code(), absl::StatusCode::kInvalidArgument);
  d.pooling = {1};
  d.zipf_exponent = -0.5;
  EXPECT_EQ(SyntheticGenerator::Create(d).status().code(), absl::StatusCode::kInvalidArgument);
  d.zipf_exponent = 0;  // uniform ids
  EXPECT_TRUE(SyntheticGenerator::Create(d).ok());
  d.zipf_exponent = 1.05;
  auto gen = *SyntheticGenerator::Create(d);
  SyntheticStreamOptions s;
  s.batch_size = 0;
  EXPECT_EQ(SyntheticReader::Open(gen, s).status().code(), absl::StatusCode::kInvalidArgument);
  s.batch_size = 8;
  s.shard_index = 3;
  s.num_shards = 3;
  EXPECT_EQ(SyntheticReader::Open(gen, s).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
