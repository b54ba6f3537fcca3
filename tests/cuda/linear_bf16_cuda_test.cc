// dense_dtype bf16 on CUDA (cuBLAS, bf16 inputs, fp32 accumulation) against its CPU twin
// (oneDNN, the same contract): Linear forward and backward on the same inputs and weights.
// Skips without a device, and without oneDNN (no CPU twin to compare with).
//
// Tolerance, derived per element. Both twins round x, W and dz to bf16 to nearest even (the same
// bits; at K = 13, the bottom MLP's first layer, the bound below is far under one bf16 rounding
// step, so a GPU rounding other than the CPU's fails there). The product of two bf16
// values is exact in fp32 (8 + 8 significand bits), so both sides sum the SAME K exact terms
// t_k, in fp32, in orders of their own (cuBLAS' tensor-core tiles, oneDNN's blocks). Any order of
// K additions with relative error at most d per addition is within gamma_K sum |t_k| of the
// exact sum, gamma_K = K d / (1 - K d). We take d = 2^-23 rather than fp32's unit roundoff 2^-24,
// which also covers an accumulator that truncates instead of rounding. So two sides differ by at
// most
//   GEMM outputs (dW: K = batch, dx: K = out):  2 gamma_K S,   S = sum_k |t_k| (from the
//                                                host-rounded operands, in double)
//   y = act(s + b), one more rounding each:     2 (gamma_K S + d (|s + b| + gamma_K S))
// (ReLU is 1-Lipschitz). db is a column sum of dz in double on both sides, rounded once: within
// 2^-23 |db| + 2 batch 2^-53 sum |dz|. The ReLU masks agree when no pre-activation lies within
// one side's bound of zero; the test asserts that for its data (else dz could differ by a whole
// dy entry and the backward bounds would not hold). An indexing or operand mistake moves an
// output by O(2^-8 S) or more; and the GPU's y must lie at least 10 times closer to the CPU's
// bf16 y than to the float64 product of the UNROUNDED inputs, which catches a GEMM left in fp32
// (it would sit next to the unrounded product, a bf16 rounding error away from the CPU's).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dense/dense_arch.h"
#include "dense/internal/dnnl_gemm.h"
#include "dense/mlp.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_testing::CudaTest;
using cuda_testing::RandomFloats;
using cuda_testing::ToDevice;
using cuda_testing::ToHost;

constexpr double kD = 1.0 / (1 << 23);  // per-addition relative error allowed (2^-23)

double Gamma(int64_t k) {
  const double kd = static_cast<double>(k) * kD;
  return kd / (1.0 - kd);
}

std::vector<double> RoundedBf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  dense_internal::FloatToBf16(v.data(), static_cast<int64_t>(v.size()), r.data());
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = dense_internal::Bf16ToFloat(r[i]);
  return out;
}

// |got - want| <= tol[i] everywhere; reports the first 5 misses.
void ExpectWithin(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol[i]) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu " << want[i] << " (err "
                    << err << ", bound " << tol[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " entries off";
}

struct Shape {
  int64_t batch, in, out;
  Activation act;
};

class LinearBf16Cuda : public CudaTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(LinearBf16Cuda, MatchesTheCpuTwinWithinTheAccumulationBound) {
  if (!dense_internal::DnnlGemmAvailable()) GTEST_SKIP() << "built without oneDNN: no CPU twin";
  const Shape s = GetParam();
  const int64_t B = s.batch, I = s.in, O = s.out;
  Linear lc("l", I, O, s.act, cpu(), DenseDtype::kBf16);
  Linear lg("l", I, O, s.act, gpu(), DenseDtype::kBf16);
  ASSERT_EQ(lc.dtype(), DenseDtype::kBf16);
  ASSERT_EQ(lg.dtype(), DenseDtype::kBf16);
  lc.Init(5);
  lg.Init(5);
  const std::vector<float> x = RandomFloats(B * I, 1), dy = RandomFloats(B * O, 2);
  const std::vector<float> w(lc.weight().value.data<float>(),
                             lc.weight().value.data<float>() + O * I);
  const std::vector<float> bias(lc.bias().value.data<float>(), lc.bias().value.data<float>() + O);
  ASSERT_EQ(ToHost<float>(lg.weight().value, O * I), w) << "same init on both devices";

  // CPU twin.
  const float* yc_ptr = nullptr;
  ASSERT_TRUE(lc.Forward(x.data(), B, &yc_ptr).ok());
  const std::vector<float> yc(yc_ptr, yc_ptr + B * O);
  std::vector<float> dz = dy, dxc(B * I);
  ASSERT_TRUE(lc.Backward(dz.data(), dxc.data()).ok());  // dz: dy with the mask applied
  const std::vector<float> dwc(lc.weight().grad.data<float>(),
                               lc.weight().grad.data<float>() + O * I);
  const std::vector<float> dbc(lc.bias().grad.data<float>(), lc.bias().grad.data<float>() + O);

  // CUDA twin.
  Buffer gx = ToDevice(x), gdy = ToDevice(dy), gdx = cuda_testing::Poisoned<float>(B * I);
  const float* yg_ptr = nullptr;
  ASSERT_TRUE(lg.Forward(gx.data<float>(), B, &yg_ptr).ok());
  ASSERT_TRUE(lg.Backward(gdy.data<float>(), gdx.data<float>()).ok());
  ASSERT_TRUE(CudaSynchronize(gpu()).ok());
  const std::vector<float> yg = ToHost(yg_ptr, B * O);
  const std::vector<float> dwg = ToHost<float>(lg.weight().grad, O * I);
  const std::vector<float> dbg = ToHost<float>(lg.bias().grad, O);
  const std::vector<float> dxg = ToHost<float>(gdx, B * I);

  // Bounds from the host-rounded operands.
  const std::vector<double> xr = RoundedBf16(x), wr = RoundedBf16(w), zr = RoundedBf16(dz);
  std::vector<double> tol_y(B * O);
  int ambiguous = 0;
  // Largest |yg - float64 product of the unrounded inputs| and |yg - yc|.
  double off_unrounded = 0, off_cpu = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t o = 0; o < O; ++o) {
      double sum = 0, abs_sum = 0, exact32 = 0;
      for (int64_t i = 0; i < I; ++i) {
        const double t = xr[b * I + i] * wr[o * I + i];
        sum += t;
        abs_sum += std::fabs(t);
        exact32 += static_cast<double>(x[b * I + i]) * w[o * I + i];
      }
      const double pre = sum + bias[o];
      const double one = Gamma(I) * abs_sum + kD * (std::fabs(pre) + Gamma(I) * abs_sum);
      tol_y[b * O + o] = 2 * one;
      if (s.act == Activation::kRelu && std::fabs(pre) <= one) ++ambiguous;
      double want32 = exact32 + bias[o];
      if (s.act == Activation::kRelu) want32 = std::max(want32, 0.0);
      off_unrounded = std::max(off_unrounded, std::fabs(yg[b * O + o] - want32));
      off_cpu = std::max(off_cpu, std::fabs(static_cast<double>(yg[b * O + o]) - yc[b * O + o]));
    }
  }
  ASSERT_EQ(ambiguous, 0) << "a pre-activation lies within the bound of 0: the masks may differ";
  ExpectWithin(yg, yc, tol_y, "y");
  EXPECT_GT(off_unrounded, 10 * off_cpu)
      << "the GPU's y is not clearly nearer the CPU's bf16 y than the unrounded product: was "
         "its GEMM bf16?";

  std::vector<double> tol_dw(O * I), tol_dx(B * I), tol_db(O);
  for (int64_t o = 0; o < O; ++o) {
    double abs_dz = 0;
    for (int64_t b = 0; b < B; ++b) abs_dz += std::fabs(dz[b * O + o]);
    tol_db[o] = kD * std::fabs(dbc[o]) + 2.0 * B * std::ldexp(1.0, -53) * abs_dz;
    for (int64_t i = 0; i < I; ++i) {
      double abs_sum = 0;
      for (int64_t b = 0; b < B; ++b) abs_sum += std::fabs(zr[b * O + o] * xr[b * I + i]);
      tol_dw[o * I + i] = 2 * Gamma(B) * abs_sum;
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < I; ++i) {
      double abs_sum = 0;
      for (int64_t o = 0; o < O; ++o) abs_sum += std::fabs(zr[b * O + o] * wr[o * I + i]);
      tol_dx[b * I + i] = 2 * Gamma(O) * abs_sum;
    }
  }
  ExpectWithin(dwg, dwc, tol_dw, "dW");
  ExpectWithin(dxg, dxc, tol_dx, "dx");
  ExpectWithin(dbg, dbc, tol_db, "db");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearBf16Cuda,
                         ::testing::Values(Shape{256, 512, 64, Activation::kRelu},
                                           Shape{128, 13, 512, Activation::kRelu},  // bottom
                                           Shape{64, 479, 256, Activation::kNone},
                                           Shape{33, 100, 8, Activation::kRelu}));

TEST_F(CudaTest, DenseArchTakesBf16OnCuda) {
  DenseArchOptions o;
  o.num_embeddings = 2;
  o.embedding_dim = 8;
  o.bottom_mlp = {16, 8};
  o.top_mlp = {16, 1};
  o.dense_dtype = DenseDtype::kBf16;
  auto arch = DenseArch::Create(o, gpu());
  ASSERT_TRUE(arch.ok()) << arch.status();
}

}  // namespace
}  // namespace tessera
