// Dense optimizers against PyTorch's formulas (dense/optimizer.h) evaluated here in double over
// several steps with changing gradients and learning rates; state names; errors.
#include <cmath>
#include <vector>

#include "dense/optimizer.h"
#include "gtest/gtest.h"
#include "tests/dense/reference.h"

namespace tessera {
namespace {

using testing::RandomVec;
using testing::Vec;

const DeviceContext kCpu = DeviceContext::Cpu();

struct ParamSet {
  std::vector<Parameter> params;
  std::vector<Parameter*> ptrs;
  std::vector<Vec> w;  // double copies of the initial values
};

ParamSet MakeParams() {
  ParamSet s;
  s.params.push_back(*MakeParameter("a.weight", {3, 50}, Device::kCpu));
  s.params.push_back(*MakeParameter("a.bias", {3}, Device::kCpu));
  for (size_t i = 0; i < s.params.size(); ++i) {
    Parameter& p = s.params[i];
    const Vec v = testing::RoundToFloat(RandomVec(p.value.numel(), 10 + i));
    for (int64_t k = 0; k < p.value.numel(); ++k) p.value.data<float>()[k] = v[k];
    s.w.push_back(v);
  }
  for (auto& p : s.params) s.ptrs.push_back(&p);
  return s;
}

// Writes step `t`'s gradient into the parameters and returns it (as float-rounded doubles).
std::vector<Vec> SetGrads(ParamSet& s, int t) {
  std::vector<Vec> g;
  for (size_t i = 0; i < s.params.size(); ++i) {
    Parameter& p = s.params[i];
    Vec v = testing::RoundToFloat(RandomVec(p.grad.numel(), 100 * t + i, 2.0));
    if (i == 1) v[0] = 0.0;  // a zero gradient: with zero Adam moments, 0 / (0 + eps) = 0
    for (int64_t k = 0; k < p.grad.numel(); ++k) p.grad.data<float>()[k] = v[k];
    g.push_back(v);
  }
  return g;
}

// Float32 updates against the double formulas over 4 steps: each step rounds a handful of
// operations, so ~1e-6 relative; tolerance 1e-5 of the value plus 1e-6 absolute.
void ExpectParamsNear(const ParamSet& s, const std::vector<Vec>& want) {
  for (size_t i = 0; i < s.params.size(); ++i) {
    for (int64_t k = 0; k < s.params[i].value.numel(); ++k) {
      EXPECT_NEAR(s.params[i].value.data<float>()[k], want[i][k], 1e-5 * std::fabs(want[i][k]) + 1e-6)
          << s.params[i].name << "[" << k << "]";
    }
  }
}

const float kLrs[] = {0.1f, 0.05f, 0.2f, 0.01f};

TEST(DenseOptimizerTest, SgdWithWeightDecay) {
  ParamSet s = MakeParams();
  DenseOptimizerOptions o;
  o.type = DenseOptimizerType::kSgd;
  o.weight_decay = 0.01f;
  auto opt = CreateDenseOptimizer(o, s.ptrs, kCpu);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_TRUE((*opt)->state().empty());
  std::vector<Vec> w = s.w;
  for (int t = 0; t < 4; ++t) {
    const auto g = SetGrads(s, t);
    ASSERT_TRUE((*opt)->Step(kLrs[t]).ok());
    for (size_t i = 0; i < w.size(); ++i)
      for (size_t k = 0; k < w[i].size(); ++k) {
        w[i][k] -= double(kLrs[t]) * (g[i][k] + double(o.weight_decay) * w[i][k]);
      }
  }
  ExpectParamsNear(s, w);
  EXPECT_EQ((*opt)->steps_taken(), 4);
}

TEST(DenseOptimizerTest, AdagradWithInitialAccumulatorAndWeightDecay) {
  ParamSet s = MakeParams();
  DenseOptimizerOptions o;
  o.type = DenseOptimizerType::kAdagrad;
  o.eps = 1e-10f;
  o.weight_decay = 0.001f;
  o.adagrad_initial = 0.1f;
  auto opt = CreateDenseOptimizer(o, s.ptrs, kCpu);
  ASSERT_TRUE(opt.ok()) << opt.status();
  auto state = (*opt)->state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0]->name, "a.weight.sum");
  EXPECT_EQ(state[1]->name, "a.bias.sum");
  EXPECT_EQ(state[0]->value.data<float>()[7], 0.1f);
  std::vector<Vec> w = s.w, sum;
  for (auto& v : w) sum.push_back(Vec(v.size(), double(o.adagrad_initial)));
  for (int t = 0; t < 4; ++t) {
    const auto g = SetGrads(s, t);
    ASSERT_TRUE((*opt)->Step(kLrs[t]).ok());
    for (size_t i = 0; i < w.size(); ++i)
      for (size_t k = 0; k < w[i].size(); ++k) {
        const double gd = g[i][k] + double(o.weight_decay) * w[i][k];
        sum[i][k] += gd * gd;
        w[i][k] -= double(kLrs[t]) * gd / (std::sqrt(sum[i][k]) + double(o.eps));
      }
  }
  ExpectParamsNear(s, w);
  for (size_t i = 0; i < sum.size(); ++i)
    for (size_t k = 0; k < sum[i].size(); ++k)
      EXPECT_NEAR(state[i]->value.data<float>()[k], sum[i][k], 1e-5 * sum[i][k]);
}

TEST(DenseOptimizerTest, AdamWithBiasCorrectionAndResumedStepCount) {
  for (int64_t resumed : {0, 10}) {
    ParamSet s = MakeParams();
    DenseOptimizerOptions o;
    o.type = DenseOptimizerType::kAdam;
    o.beta1 = 0.8f;
    o.beta2 = 0.95f;
    o.eps = 1e-8f;
    o.weight_decay = 0.002f;
    auto opt = CreateDenseOptimizer(o, s.ptrs, kCpu);
    ASSERT_TRUE(opt.ok()) << opt.status();
    auto state = (*opt)->state();
    ASSERT_EQ(state.size(), 4u);
    EXPECT_EQ(state[0]->name, "a.weight.exp_avg");
    EXPECT_EQ(state[1]->name, "a.weight.exp_avg_sq");
    EXPECT_EQ(state[3]->name, "a.bias.exp_avg_sq");
    (*opt)->set_steps_taken(resumed);  // as after loading a checkpoint (with zero moments)
    std::vector<Vec> w = s.w, m, v;
    for (auto& x : w) m.push_back(Vec(x.size(), 0.0)), v.push_back(Vec(x.size(), 0.0));
    const double b1 = o.beta1, b2 = o.beta2, eps = o.eps;
    for (int t = 0; t < 4; ++t) {
      const auto g = SetGrads(s, t);
      ASSERT_TRUE((*opt)->Step(kLrs[t]).ok());
      const int64_t step = resumed + t + 1;
      for (size_t i = 0; i < w.size(); ++i)
        for (size_t k = 0; k < w[i].size(); ++k) {
          const double gd = g[i][k] + double(o.weight_decay) * w[i][k];
          m[i][k] = b1 * m[i][k] + (1 - b1) * gd;
          v[i][k] = b2 * v[i][k] + (1 - b2) * gd * gd;
          const double mhat = m[i][k] / (1 - std::pow(b1, step));
          const double vhat = v[i][k] / (1 - std::pow(b2, step));
          w[i][k] -= double(kLrs[t]) * mhat / (std::sqrt(vhat) + eps);
        }
    }
    ExpectParamsNear(s, w);
    EXPECT_EQ((*opt)->steps_taken(), resumed + 4);
  }
}

TEST(DenseOptimizerTest, ErrorsNameTheProblem) {
  ParamSet s = MakeParams();
  DenseOptimizerOptions o;
  std::vector<Parameter*> twice = {s.ptrs[0], s.ptrs[0]};
  auto st = CreateDenseOptimizer(o, twice, kCpu).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'a.weight' is listed twice"), std::string::npos) << st;
  st = CreateDenseOptimizer(o, {s.ptrs[0], nullptr}, kCpu).status();
  EXPECT_NE(st.message().find("params[1] is null"), std::string::npos) << st;
  Parameter no_grad;
  no_grad.name = "x";
  no_grad.value = Buffer::Host(DType::kF32, {4});
  st = CreateDenseOptimizer(o, {&no_grad}, kCpu).status();
  EXPECT_NE(st.message().find("'x'"), std::string::npos) << st;
  o.type = DenseOptimizerType::kAdam;
  o.beta1 = 1.0f;
  st = CreateDenseOptimizer(o, s.ptrs, kCpu).status();
  EXPECT_NE(st.message().find("beta1 = 1"), std::string::npos) << st;
  o.beta1 = 0.9f;
  o.eps = 0.0f;
  EXPECT_NE(CreateDenseOptimizer(o, s.ptrs, kCpu).status().message().find("eps"),
            std::string::npos);
  o.eps = 1e-8f;
  auto opt = CreateDenseOptimizer(o, s.ptrs, kCpu);
  ASSERT_TRUE(opt.ok());
  st = (*opt)->Step(std::nanf(""));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lr = nan"), std::string::npos) << st;
  EXPECT_EQ((*opt)->steps_taken(), 0);
}

}  // namespace
}  // namespace tessera
