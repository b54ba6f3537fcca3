// BCE with logits against the double formula (including |logits| where a naive formula
// overflows), its gradient, thread-count independence and errors.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "dense/loss.h"
#include "gtest/gtest.h"
#include "tests/dense/reference.h"

namespace tessera {
namespace {

const DeviceContext kCpu = DeviceContext::Cpu();

// The definition -[y log s + (1 - y) log(1 - s)], s = sigmoid(z), in long double with the log
// of the sigmoid's tails written out (log s = -log(1 + e^-z)), so it stays exact for huge |z|.
long double DefinitionLoss(long double z, long double y) {
  const long double log_s = z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
  const long double log_1ms = z >= 0 ? -z - std::log1p(std::exp(-z)) : -std::log1p(std::exp(z));
  return -(y * log_s + (1 - y) * log_1ms);
}
long double Sigmoid(long double z) { return 1.0L / (1.0L + std::exp(-z)); }

TEST(BceWithLogitsTest, MatchesTheDefinitionIncludingLargeLogits) {
  const std::vector<float> logits = {0.0f,  0.5f,   -0.5f, 3.0f,    -3.0f,  20.0f, -20.0f,
                                     100.0f, -100.0f, 1e4f,  -1e4f,   88.7f, -88.7f, 1e-7f};
  const std::vector<float> labels = {0.0f, 1.0f, 0.0f, 1.0f, 0.3f, 0.0f, 1.0f,
                                     1.0f, 0.0f, 0.0f, 1.0f, 0.5f, 0.5f, 1.0f};
  const int64_t n = logits.size();
  std::vector<float> grad(n, 99.0f);
  auto loss = BceWithLogits(kCpu, logits.data(), labels.data(), n, grad.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  long double want = 0;
  for (int64_t i = 0; i < n; ++i) want += DefinitionLoss(logits[i], labels[i]);
  want /= n;
  // Accumulated in double: relative error ~1e-15; 1e-12 is tight and robust.
  EXPECT_NEAR(*loss, static_cast<double>(want), 1e-12 * static_cast<double>(want));
  EXPECT_TRUE(std::isfinite(*loss));
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>((Sigmoid(logits[i]) - labels[i]) / n);
    // Written as float: relative error <= 2^-24, plus a tiny absolute floor for g ~ 0.
    EXPECT_NEAR(grad[i], g, 1e-7 * std::fabs(g) + 1e-30) << "logit " << logits[i];
  }
  // Sample 9 (z = 1e4, y = 0) costs 1e4 / n; sample 10 (z = -1e4, y = 1) too.
  EXPECT_GT(*loss, 2e4 / n);
}

TEST(BceWithLogitsTest, LossWithoutGradientAndLargeBatchBitsIndependentOfThreads) {
  const int64_t n = 5000;  // several 1024-sample blocks
  const std::vector<float> z = testing::ToFloat(testing::RandomVec(n, 1, 8.0));
  std::vector<float> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (i * 7919) % 3 == 0 ? 1.0f : 0.0f;
  long double want = 0;
  for (int64_t i = 0; i < n; ++i) want += DefinitionLoss(z[i], y[i]);
  want /= n;
  double got[2];
  std::vector<float> grad[2];
  const int saved = NumThreads();
  for (int t = 0; t < 2; ++t) {
    SetNumThreads(t + 1);
    grad[t].resize(n);
    auto loss = BceWithLogits(kCpu, z.data(), y.data(), n, grad[t].data());
    ASSERT_TRUE(loss.ok());
    got[t] = *loss;
  }
  SetNumThreads(saved);
  EXPECT_NEAR(got[0], static_cast<double>(want), 1e-12 * static_cast<double>(want));
  EXPECT_EQ(std::memcmp(&got[0], &got[1], sizeof(double)), 0);
  EXPECT_EQ(grad[0], grad[1]);
  auto no_grad = BceWithLogits(kCpu, z.data(), y.data(), n, nullptr);
  ASSERT_TRUE(no_grad.ok());
  EXPECT_EQ(*no_grad, got[0]);
}

TEST(BceWithLogitsTest, ErrorsNameTheProblem) {
  std::vector<float> z = {0.1f, 0.2f, 0.3f}, y = {0.0f, 1.5f, 1.0f};
  auto st = BceWithLogits(kCpu, z.data(), y.data(), 3, nullptr).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("labels[1] = 1.5"), std::string::npos) << st;
  y[1] = std::nanf("");
  st = BceWithLogits(kCpu, z.data(), y.data(), 3, nullptr).status();
  EXPECT_NE(st.message().find("labels[1]"), std::string::npos) << st;
  st = BceWithLogits(kCpu, z.data(), y.data(), 0, nullptr).status();
  EXPECT_NE(st.message().find("batch = 0"), std::string::npos) << st;
  st = BceWithLogits(kCpu, nullptr, y.data(), 3, nullptr).status();
  EXPECT_NE(st.message().find("logits is null"), std::string::npos) << st;
  DeviceContext cuda;
  cuda.device = Device::kCuda;
  // A hand-made kCuda context: FailedPrecondition with the CUDA path, Unimplemented without.
  const absl::StatusCode kHandMadeCuda = TESSERA_HAVE_CUDA ? absl::StatusCode::kFailedPrecondition
                                                           : absl::StatusCode::kUnimplemented;
  EXPECT_EQ(BceWithLogits(cuda, z.data(), y.data(), 3, nullptr).status().code(), kHandMadeCuda);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(ScaleGradientTest, MultipliesInPlaceAndChecksItsArguments) {
  std::vector<float> d = {1.0f, -2.5f, 0.1f};
  ASSERT_TRUE(ScaleGradient(DeviceContext::Cpu(), d.data(), 3, 0.5f).ok());
  EXPECT_EQ(d, (std::vector<float>{0.5f, -1.25f, 0.1f * 0.5f}));
  EXPECT_TRUE(ScaleGradient(DeviceContext::Cpu(), nullptr, 0, 2.0f).ok());
  EXPECT_EQ(ScaleGradient(DeviceContext::Cpu(), nullptr, 3, 2.0f).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScaleGradient(DeviceContext::Cpu(), d.data(), -1, 2.0f).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
