// Linear and Mlp against the float64 twin (tests/dense/reference.h), the twin against finite
// differences, buffer growth, init statistics and error paths.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "dense/internal/dnnl_gemm.h"
#include "dense/mlp.h"
#include "gtest/gtest.h"
#include "tests/dense/reference.h"

namespace tessera {
namespace {

using testing::ExpectClose;
using testing::RandomVec;
using testing::RoundToFloat;
using testing::ToDouble;
using testing::ToFloat;
using testing::Vec;

// float32 results against the double twin: sums of up to 512 products of O(1) values; the
// observed error is ~1e-6 relative, 1e-4 leaves room for OpenBLAS's blocking while still failing
// on any wrong term (which is O(1)).
constexpr double kTol = 1e-4;

void LoadParam(Parameter& p, const Vec& v) {
  ASSERT_EQ(p.value.numel(), static_cast<int64_t>(v.size())) << p.name;
  for (size_t i = 0; i < v.size(); ++i) p.value.data<float>()[i] = static_cast<float>(v[i]);
}

struct Shape {
  int64_t batch, in, out;
  Activation act;
};

class LinearVsTwin : public ::testing::TestWithParam<Shape> {};

TEST_P(LinearVsTwin, ForwardAndBackwardMatchFloat64Twin) {
  const Shape s = GetParam();
  Linear layer("layer", s.in, s.out, s.act, DeviceContext::Cpu());
  testing::RefLinear ref;
  ref.in = s.in;
  ref.out = s.out;
  ref.relu = s.act == Activation::kRelu;
  ref.w = RoundToFloat(RandomVec(s.out * s.in, 1, 0.5));
  ref.b = RoundToFloat(RandomVec(s.out, 2, 0.5));
  LoadParam(layer.weight(), ref.w);
  LoadParam(layer.bias(), ref.b);
  const Vec x = RoundToFloat(RandomVec(s.batch * s.in, 3));
  const std::vector<float> xf = ToFloat(x);

  const float* y = nullptr;
  ASSERT_TRUE(layer.Forward(xf.data(), s.batch, &y).ok());
  const Vec y_ref = ref.Forward(x, s.batch);
  ExpectClose(y, y_ref, kTol, "y");
  if (ref.relu) {
    int zeros = 0;
    for (double v : y_ref) zeros += v == 0.0;
    EXPECT_GT(zeros, 0) << "the shape should exercise the ReLU mask";
  }

  const Vec dy = RoundToFloat(RandomVec(s.batch * s.out, 4));
  std::vector<float> dyf = ToFloat(dy), dx(s.batch * s.in, -1.0f);
  ASSERT_TRUE(layer.Backward(dyf.data(), dx.data()).ok());
  const Vec dx_ref = ref.Backward(dy);
  ExpectClose(dx, dx_ref, kTol, "dx");
  ExpectClose(layer.weight().grad.data<float>(), ref.dw, kTol, "dW");
  ExpectClose(layer.bias().grad.data<float>(), ref.db, kTol, "db");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearVsTwin,
    ::testing::Values(Shape{37, 13, 64, Activation::kRelu}, Shape{64, 100, 1, Activation::kNone},
                      Shape{5, 512, 256, Activation::kRelu}, Shape{300, 33, 70, Activation::kNone},
                      Shape{1, 7, 3, Activation::kRelu}));

TEST(LinearTest, TwinBackwardMatchesFiniteDifferences) {
  // L = sum(y * r) for a fixed random r; the twin's dx, dW, db against central differences in
  // double (h = 1e-6: error ~1e-9, tolerance 1e-6).
  const int64_t nb = 4, in = 5, out = 6;
  testing::RefLinear ref;
  ref.in = in;
  ref.out = out;
  ref.relu = true;
  ref.w = RandomVec(out * in, 11);
  ref.b = RandomVec(out, 12);
  const Vec x = RandomVec(nb * in, 13), r = RandomVec(nb * out, 14);
  ref.Forward(x, nb);
  const Vec dx = ref.Backward(r);
  auto loss_x = [&](const Vec& xv) {
    testing::RefLinear l = ref;
    return testing::Dot(l.Forward(xv, nb), r);
  };
  auto loss_w = [&](const Vec& wv) {
    testing::RefLinear l = ref;
    l.w = wv;
    return testing::Dot(l.Forward(x, nb), r);
  };
  auto loss_b = [&](const Vec& bv) {
    testing::RefLinear l = ref;
    l.b = bv;
    return testing::Dot(l.Forward(x, nb), r);
  };
  testing::ExpectGradientsAgree(dx, testing::NumericGradient(loss_x, x), 1e-6, "dx");
  testing::ExpectGradientsAgree(ref.dw, testing::NumericGradient(loss_w, ref.w), 1e-6, "dW");
  testing::ExpectGradientsAgree(ref.db, testing::NumericGradient(loss_b, ref.b), 1e-6, "db");
}

TEST(LinearTest, BuffersFollowTheBatchUpAndDown) {
  const int64_t in = 9, out = 11;
  Linear layer("l", in, out, Activation::kRelu, DeviceContext::Cpu());
  layer.Init(5);
  testing::RefLinear ref;
  ref.in = in;
  ref.out = out;
  ref.relu = true;
  ref.w = ToDouble(layer.weight().value.data<float>(), out * in);
  ref.b = ToDouble(layer.bias().value.data<float>(), out);
  for (int64_t nb : {8, 64, 3, 64}) {
    const Vec x = RoundToFloat(RandomVec(nb * in, 100 + nb));
    const std::vector<float> xf = ToFloat(x);
    const float* y = nullptr;
    ASSERT_TRUE(layer.Forward(xf.data(), nb, &y).ok());
    ExpectClose(y, ref.Forward(x, nb), kTol, "y");
    std::vector<float> dy(nb * out, 1.0f);
    ASSERT_TRUE(layer.Backward(dy.data(), nullptr).ok());
    ref.Backward(Vec(nb * out, 1.0));
    ExpectClose(layer.bias().grad.data<float>(), ref.db, kTol, "db");
  }
}

TEST(LinearTest, BiasGradAndMaskDoNotDependOnThreadCount) {
  // The column sums are split by columns, so 1 and 2 threads must give the same bits.
  const int64_t nb = 1000, in = 16, out = 300;
  const std::vector<float> x = ToFloat(RandomVec(nb * in, 21));
  const std::vector<float> dy0 = ToFloat(RandomVec(nb * out, 22));
  std::vector<std::vector<float>> db(2), dz(2);
  const int saved = NumThreads();
  for (int t = 1; t <= 2; ++t) {
    SetNumThreads(t);
    Linear layer("l", in, out, Activation::kRelu, DeviceContext::Cpu());
    layer.Init(1);
    const float* y = nullptr;
    ASSERT_TRUE(layer.Forward(x.data(), nb, &y).ok());
    std::vector<float> dy = dy0;
    ASSERT_TRUE(layer.Backward(dy.data(), nullptr).ok());
    db[t - 1].assign(layer.bias().grad.data<float>(), layer.bias().grad.data<float>() + out);
    dz[t - 1] = dy;
  }
  SetNumThreads(saved);
  EXPECT_EQ(0, std::memcmp(db[0].data(), db[1].data(), out * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dz[0].data(), dz[1].data(), nb * out * sizeof(float)));
}

// On a 2-thread pool a layer's backward runs its weight- and input-gradient products at once,
// each on one thread (RunPair): the gradients have the bits of the 1-thread backward, fp32 and
// bf16 (whose input gradient between bf16 layers is stored as bf16 by the product).
TEST(LinearTest, BackwardProductsAtOnceHaveTheBitsOfOneThread) {
  const int64_t nb = 1024, in = 192, out = 160;  // 31M multiply-adds per product: a pair
  const std::vector<float> x = ToFloat(RandomVec(nb * in, 31));
  const std::vector<float> dy0 = ToFloat(RandomVec(nb * out, 32));
  for (DenseDtype dtype : {DenseDtype::kFp32, DenseDtype::kBf16}) {
    if (dtype == DenseDtype::kBf16 && !dense_internal::DnnlGemmAvailable()) continue;
    std::vector<std::vector<float>> dw(2), dx(2);
    const int saved = NumThreads();
    for (int t = 1; t <= 2; ++t) {
      Linear layer("l", in, out, Activation::kRelu, DeviceContext::Cpu(), dtype);
      layer.Init(4);
      SetNumThreads(1);  // the same forward for both
      const float* y = nullptr;
      ASSERT_TRUE(layer.Forward(x.data(), nb, &y).ok());
      SetNumThreads(t);
      std::vector<float> dy = dy0;
      dx[t - 1].assign(nb * in, 0.0f);
      ASSERT_TRUE(layer.Backward(dy.data(), dx[t - 1].data()).ok());
      dw[t - 1].assign(layer.weight().grad.data<float>(),
                       layer.weight().grad.data<float>() + out * in);
    }
    SetNumThreads(saved);
    const char* name = dtype == DenseDtype::kFp32 ? "fp32" : "bf16";
    EXPECT_EQ(0, std::memcmp(dw[0].data(), dw[1].data(), out * in * sizeof(float))) << name;
    EXPECT_EQ(0, std::memcmp(dx[0].data(), dx[1].data(), nb * in * sizeof(float))) << name;
    double norm = 0;
    for (float v : dx[1]) norm += std::fabs(v);
    EXPECT_GT(norm, 0.0) << name << ": the input gradient was written";
  }
}

// ReLU keeps NaN visible (as torch.relu does; oneDNN's ReLU post-op would map it to 0 and hide a
// non-finite loss), in fp32 and bf16 layers, and in an Mlp whose bf16 activations stay bf16:
// the NaN row comes out NaN, the other rows are untouched.
TEST(LinearTest, ReluKeepsNanVisible) {
  for (DenseDtype dtype : {DenseDtype::kFp32, DenseDtype::kBf16}) {
    const int64_t nb = 64, in = 32, out = 256;
    Mlp mlp("m", in, {out, out}, /*relu_last=*/true, DeviceContext::Cpu(), dtype);
    mlp.Init(5);
    std::vector<float> x = ToFloat(RandomVec(nb * in, 31));
    x[3 * in + 7] = std::nanf("");
    const float* y = nullptr;
    const absl::Status st = mlp.Forward(x.data(), nb, &y);
    if (dtype == DenseDtype::kBf16 && absl::IsUnimplemented(st)) continue;  // no oneDNN
    ASSERT_TRUE(st.ok()) << st;
    int nan_row = 0, nan_other = 0;
    for (int64_t r = 0; r < nb; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        const bool nan = std::isnan(y[r * out + o]);
        if (r == 3) {
          nan_row += nan ? 1 : 0;
        } else {
          nan_other += nan ? 1 : 0;
        }
      }
    }
    EXPECT_EQ(nan_row, out) << DenseDtypeName(dtype);
    EXPECT_EQ(nan_other, 0) << DenseDtypeName(dtype);
  }
}

TEST(MlpTest, MatchesFloat64TwinAndNamesParameters) {
  const int64_t nb = 19, in = 13;
  const std::vector<int64_t> sizes = {32, 16, 1};
  Mlp mlp("top_mlp", in, sizes, /*relu_last=*/false, DeviceContext::Cpu());
  mlp.Init(3);
  testing::RefMlp ref(in, sizes, false);
  auto params = mlp.parameters();
  ASSERT_EQ(params.size(), 6u);
  const char* names[] = {"top_mlp.0.weight", "top_mlp.0.bias", "top_mlp.1.weight",
                         "top_mlp.1.bias",   "top_mlp.2.weight", "top_mlp.2.bias"};
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(params[i]->name, names[i]);
  EXPECT_EQ(params[2]->value.shape(), (std::vector<int64_t>{16, 32}));
  for (size_t l = 0; l < sizes.size(); ++l) {
    ref.layers[l].w = ToDouble(params[2 * l]->value.data<float>(), params[2 * l]->value.numel());
    ref.layers[l].b =
        ToDouble(params[2 * l + 1]->value.data<float>(), params[2 * l + 1]->value.numel());
  }
  const Vec x = RoundToFloat(RandomVec(nb * in, 31));
  const std::vector<float> xf = ToFloat(x);
  const float* y = nullptr;
  ASSERT_TRUE(mlp.Forward(xf.data(), nb, &y).ok());
  ExpectClose(y, ref.Forward(x, nb), kTol, "y");
  const Vec dy = RoundToFloat(RandomVec(nb, 32));
  std::vector<float> dyf = ToFloat(dy), dx(nb * in);
  ASSERT_TRUE(mlp.Backward(dyf.data(), dx.data()).ok());
  ExpectClose(dx, ref.Backward(dy), kTol, "dx");
  for (size_t l = 0; l < sizes.size(); ++l) {
    ExpectClose(params[2 * l]->grad.data<float>(), ref.layers[l].dw, kTol, params[2 * l]->name);
    ExpectClose(params[2 * l + 1]->grad.data<float>(), ref.layers[l].db, kTol,
                params[2 * l + 1]->name);
  }
}

TEST(LinearTest, InitIsSeededAndScaledAsDlrm) {
  Linear a("bottom_mlp.0", 512, 256, Activation::kRelu, DeviceContext::Cpu());
  Linear b("bottom_mlp.0", 512, 256, Activation::kRelu, DeviceContext::Cpu());
  Linear c("bottom_mlp.0", 512, 256, Activation::kRelu, DeviceContext::Cpu());
  a.Init(42);
  b.Init(42);
  c.Init(43);
  const size_t wbytes = a.weight().value.bytes();
  EXPECT_EQ(0, std::memcmp(a.weight().value.raw(), b.weight().value.raw(), wbytes));
  EXPECT_NE(0, std::memcmp(a.weight().value.raw(), c.weight().value.raw(), wbytes));
  auto stddev = [](const Parameter& p) {
    double s = 0, s2 = 0;
    const int64_t n = p.value.numel();
    for (int64_t i = 0; i < n; ++i) {
      s += p.value.data<float>()[i];
      s2 += double(p.value.data<float>()[i]) * p.value.data<float>()[i];
    }
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  // 131072 weight draws: the sample std is within 1% of sqrt(2 / (in + out)); 256 bias draws
  // within 15% of sqrt(1 / out).
  EXPECT_NEAR(stddev(a.weight()), std::sqrt(2.0 / 768), 0.01 * std::sqrt(2.0 / 768));
  EXPECT_NEAR(stddev(a.bias()), std::sqrt(1.0 / 256), 0.15 * std::sqrt(1.0 / 256));
}

TEST(LinearTest, ErrorsNameTheProblem) {
  Linear layer("bottom_mlp.1", 4, 3, Activation::kRelu, DeviceContext::Cpu());
  std::vector<float> x(8), dy(6);
  const float* y = nullptr;
  absl::Status st = layer.Backward(dy.data(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("bottom_mlp.1"), std::string::npos) << st;
  st = layer.Forward(x.data(), 0, &y);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch = 0"), std::string::npos) << st;
  st = layer.Forward(nullptr, 2, &y);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x is null"), std::string::npos) << st;

  DeviceContext cuda;
  cuda.device = Device::kCuda;
  // A hand-made kCuda context: FailedPrecondition with the CUDA path, Unimplemented without.
  const absl::StatusCode kHandMadeCuda = TESSERA_HAVE_CUDA ? absl::StatusCode::kFailedPrecondition
                                                           : absl::StatusCode::kUnimplemented;
  std::vector<float> w(12), b(3), out(6);
  st = LinearForward(cuda, x.data(), w.data(), b.data(), 2, 4, 3, Activation::kNone, out.data());
  EXPECT_EQ(st.code(), kHandMadeCuda);
  // With the CUDA path the message names the twin's file; without it, the one NoCudaPath text.
  EXPECT_NE(st.message().find(TESSERA_HAVE_CUDA ? "dense/linear_cuda.cu" : "has no CUDA path"),
            std::string::npos) << st;
  st = LinearBackward(cuda, x.data(), w.data(), out.data(), dy.data(), 2, 4, 3,
                      Activation::kNone, w.data(), b.data(), nullptr);
  EXPECT_EQ(st.code(), kHandMadeCuda);
}

}  // namespace
}  // namespace tessera
