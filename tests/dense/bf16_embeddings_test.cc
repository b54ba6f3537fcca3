// The dense side's bf16 hand-off (DotInteraction*Bf16, DenseArch::ForwardBf16 / BackwardBf16):
// bf16 embeddings give the bits of the fp32 path fed the widened values, and the bf16 d_emb is
// the fp32 path's d_emb rounded to nearest even (core/bf16.h FloatToBf16), for the
// dot interaction and the DCNv2 concat / split, at 1-3 threads; mismatched calls are refused.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "dense/dense_arch.h"
#include "dense/interaction.h"
#include "dense/internal/bf16_rows.h"
#include "dense/internal/dnnl_gemm.h"
#include "embedding/row_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomFloats(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<uint16_t> Round(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = row_dtype::FloatToBf16(v[i]);
  return r;
}

std::vector<float> Widen(const std::vector<uint16_t>& v) {
  std::vector<float> w(v.size());
  for (size_t i = 0; i < v.size(); ++i) w[i] = row_dtype::Bf16ToFloat(v[i]);
  return w;
}

// Bitwise equality (NaNs included).
void ExpectSameBits(const float* a, const float* b, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The dense side's rounding is the tables' (row_dtype::FloatToBf16) on every class of value:
// ties both ways, denormals (which AVX512_BF16's conversion would flush), the largest finite
// values (which round to infinity), infinities and NaNs.
TEST(Bf16Rows, RoundingIsTheTablesRounding) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159f, 1e-40f, -1e-40f, 1e-45f,
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), FromBits(0x7f800001u),
                          FromBits(0x3f808000u), FromBits(0x3f818000u), FromBits(0x3f808001u),
                          FromBits(0x00008000u), FromBits(0x00018000u)};
  std::mt19937 rng(1);
  for (int i = 0; i < 100000; ++i) v.push_back(FromBits(static_cast<uint32_t>(rng())));
  std::vector<uint16_t> got(v.size());
  dense_internal::RoundBf16Row(v.data(), static_cast<int64_t>(v.size()), got.data());
  std::vector<float> wide(v.size());
  dense_internal::WidenBf16Row(got.data(), static_cast<int64_t>(got.size()), wide.data());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(got[i], row_dtype::FloatToBf16(v[i])) << "bits " << std::hex << Bits(v[i]);
    ASSERT_EQ(Bits(wide[i]), Bits(row_dtype::Bf16ToFloat(got[i])));
  }
}

struct Shape {
  int64_t batch, nf, d;
};

// nf 1 and 26 (mlperf), 3 (skewed), 5; d 16 and 128 (whole vectors), 24 and 7 (scalar tails).
const Shape kShapes[] = {{37, 1, 16}, {64, 3, 64}, {50, 5, 24}, {33, 26, 128}, {19, 4, 7}};

TEST(DotInteractionBf16, HasTheBitsOfTheFp32PathFedTheWidenedValues) {
  const DeviceContext cpu = DeviceContext::Cpu();
  for (const Shape& s : kShapes) {
    const int64_t out_dim = DotInteractionOutputDim(s.nf, s.d);
    const std::vector<float> bottom = RandomFloats(s.batch * s.d, 1.0f, 1);
    const std::vector<uint16_t> emb16 = Round(RandomFloats(s.batch * s.nf * s.d, 1.0f, 2));
    const std::vector<float> emb = Widen(emb16);
    const std::vector<float> d_out = RandomFloats(s.batch * out_dim, 1e-3f, 3);
    std::vector<float> out(s.batch * out_dim), d_bottom(s.batch * s.d),
        d_emb(s.batch * s.nf * s.d);
    ASSERT_TRUE(
        DotInteractionForward(cpu, bottom.data(), emb.data(), s.batch, s.nf, s.d, out.data())
            .ok());
    ASSERT_TRUE(DotInteractionBackward(cpu, bottom.data(), emb.data(), d_out.data(), s.batch,
                                       s.nf, s.d, d_bottom.data(), d_emb.data())
                    .ok());
    const std::vector<uint16_t> want_d_emb = Round(d_emb);
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      SCOPED_TRACE(::testing::Message() << "batch " << s.batch << " nf " << s.nf << " d " << s.d
                                        << " threads " << threads);
      std::vector<float> out16(out.size(), -7.0f), d_bottom16(d_bottom.size(), -7.0f);
      std::vector<uint16_t> d_emb16(d_emb.size(), 0xabcd);
      ASSERT_TRUE(DotInteractionForwardBf16(cpu, bottom.data(), emb16.data(), s.batch, s.nf, s.d,
                                            out16.data())
                      .ok());
      ASSERT_TRUE(DotInteractionBackwardBf16(cpu, bottom.data(), emb16.data(), d_out.data(),
                                             s.batch, s.nf, s.d, d_bottom16.data(),
                                             d_emb16.data())
                      .ok());
      ExpectSameBits(out.data(), out16.data(), static_cast<int64_t>(out.size()), "out");
      ExpectSameBits(d_bottom.data(), d_bottom16.data(), static_cast<int64_t>(d_bottom.size()),
                     "d_bottom");
      ASSERT_EQ(d_emb16, want_d_emb);
    }
  }
  SetNumThreads(1);
}

TEST(DotInteractionBf16, RefusesBadArguments) {
  const DeviceContext cpu = DeviceContext::Cpu();
  std::vector<float> bottom(16), out(DotInteractionOutputDim(2, 16)), d_bottom(16);
  std::vector<uint16_t> emb(32), d_emb(32);
  absl::Status st = DotInteractionForwardBf16(cpu, bottom.data(), nullptr, 1, 2, 16, out.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("emb"));
  st = DotInteractionBackwardBf16(cpu, bottom.data(), emb.data(), out.data(), 1, 2, 16,
                                  d_bottom.data(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("d_emb"));
  st = DotInteractionForwardBf16(cpu, bottom.data(), emb.data(), 0, 2, 16, out.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

struct ArchCase {
  InteractionType type;
  int64_t low_rank;
  DenseDtype dtype;
};

// The arch's logits, every parameter grad and d_emb: ForwardBf16 / BackwardBf16 against
// Forward / Backward fed the widened embeddings (d_emb rounded), two steps in a row (buffers
// reused), at 1-3 threads.
TEST(DenseArchBf16, HasTheBitsOfTheFp32ArchFedTheWidenedValues) {
  std::vector<ArchCase> cases = {{InteractionType::kDot, 0, DenseDtype::kFp32},
                                 {InteractionType::kDcn, 0, DenseDtype::kFp32},
                                 {InteractionType::kDcn, 8, DenseDtype::kFp32}};
  if (dense_internal::DnnlGemmAvailable()) {
    cases.push_back({InteractionType::kDot, 0, DenseDtype::kBf16});
    cases.push_back({InteractionType::kDcn, 4, DenseDtype::kBf16});
  }
  const int64_t batch = 45, nf = 5, d = 16, num_dense = 7;
  for (const ArchCase& c : cases) {
    DenseArchOptions o;
    o.num_dense = num_dense;
    o.num_embeddings = nf;
    o.embedding_dim = d;
    o.bottom_mlp = {24, d};
    o.top_mlp = {32, 1};
    o.interaction = c.type;
    o.dcn_num_layers = 2;
    o.dcn_low_rank = c.low_rank;
    o.dense_dtype = c.dtype;
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      SCOPED_TRACE(::testing::Message()
                   << InteractionTypeName(c.type) << " low_rank " << c.low_rank << " dtype "
                   << (c.dtype == DenseDtype::kBf16 ? "bf16" : "fp32") << " threads " << threads);
      auto a32 = DenseArch::Create(o, DeviceContext::Cpu());
      auto a16 = DenseArch::Create(o, DeviceContext::Cpu());
      ASSERT_TRUE(a32.ok() && a16.ok()) << a32.status() << a16.status();
      (*a32)->Init(11);
      (*a16)->Init(11);
      for (int step = 0; step < 2; ++step) {
        const std::vector<float> dense = RandomFloats(batch * num_dense, 1.0f, 20 + step);
        const std::vector<uint16_t> emb16 = Round(RandomFloats(batch * nf * d, 0.5f, 30 + step));
        const std::vector<float> emb = Widen(emb16);
        const std::vector<float> d_logits = RandomFloats(batch, 0.1f, 40 + step);
        const float *l32 = nullptr, *l16 = nullptr;
        ASSERT_TRUE((*a32)->Forward(dense.data(), emb.data(), batch, &l32).ok());
        ASSERT_TRUE((*a16)->ForwardBf16(dense.data(), emb16.data(), batch, &l16).ok());
        ExpectSameBits(l32, l16, batch, "logits");
        std::vector<float> d_emb(batch * nf * d);
        std::vector<uint16_t> d_emb16(d_emb.size(), 0xabcd);
        ASSERT_TRUE((*a32)->Backward(d_logits.data(), d_emb.data()).ok());
        ASSERT_TRUE((*a16)->BackwardBf16(d_logits.data(), d_emb16.data()).ok());
        ASSERT_EQ(d_emb16, Round(d_emb));
        std::vector<Parameter*> p32 = (*a32)->parameters(), p16 = (*a16)->parameters();
        ASSERT_EQ(p32.size(), p16.size());
        for (size_t i = 0; i < p32.size(); ++i) {
          ExpectSameBits(p32[i]->grad.data<float>(), p16[i]->grad.data<float>(),
                         p32[i]->grad.numel(), p32[i]->name.c_str());
        }
      }
    }
  }
  SetNumThreads(1);
}

TEST(DenseArchBf16, BackwardTakesTheForwardsDtype) {
  DenseArchOptions o;
  o.num_dense = 3;
  o.num_embeddings = 2;
  o.embedding_dim = 4;
  o.bottom_mlp = {4};
  o.top_mlp = {1};
  auto arch = DenseArch::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(arch.ok());
  (*arch)->Init(1);
  std::vector<float> dense(3, 0.5f), emb(8, 0.25f), d_logits(1, 1.0f), d_emb(8);
  std::vector<uint16_t> emb16(8, 0x3e80), d_emb16(8);
  const float* logits = nullptr;
  ASSERT_TRUE((*arch)->Forward(dense.data(), emb.data(), 1, &logits).ok());
  absl::Status st = (*arch)->BackwardBf16(d_logits.data(), d_emb16.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("fp32 embeddings"));
  ASSERT_TRUE((*arch)->ForwardBf16(dense.data(), emb16.data(), 1, &logits).ok());
  st = (*arch)->Backward(d_logits.data(), d_emb.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("call BackwardBf16"));
  EXPECT_TRUE((*arch)->BackwardBf16(d_logits.data(), d_emb16.data()).ok());
  st = (*arch)->ForwardBf16(dense.data(), nullptr, 1, &logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("emb"));
}

}  // namespace
}  // namespace tessera
