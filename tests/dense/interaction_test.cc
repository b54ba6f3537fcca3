// The DLRM dot interaction: the exact output layout on a hand-computed example, forward and
// backward against the float64 twin (tests/dense/reference.h), the twin against finite
// differences, thread-count independence and errors.
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "dense/interaction.h"
#include "gtest/gtest.h"
#include "tests/dense/reference.h"

namespace tessera {
namespace {

using testing::ExpectClose;
using testing::RandomVec;
using testing::RoundToFloat;
using testing::ToFloat;
using testing::Vec;

const DeviceContext kCpu = DeviceContext::Cpu();

TEST(DotInteractionTest, LayoutOnHandComputedExample) {
  // F = 3, d = 2. Sample 0: Z0 = bottom = (1, 2), Z1 = (3, 4), Z2 = (5, 6), Z3 = (-1, 0.5).
  // Sample 1 is sample 0 times 2: the bottom copy doubles and every dot product quadruples.
  // Output: bottom, then for i = 1..3: for j < i: Z_i . Z_j
  //   Z1.Z0 = 3 + 8 = 11, Z2.Z0 = 5 + 12 = 17, Z2.Z1 = 15 + 24 = 39,
  //   Z3.Z0 = -1 + 1 = 0, Z3.Z1 = -3 + 2 = -1, Z3.Z2 = -5 + 3 = -2.
  const std::vector<float> bottom = {1, 2, 2, 4};
  const std::vector<float> emb = {3, 4, 5, 6, -1, 0.5f, 6, 8, 10, 12, -2, 1};
  ASSERT_EQ(DotInteractionOutputDim(3, 2), 8);
  std::vector<float> out(16, 99.0f);
  ASSERT_TRUE(DotInteractionForward(kCpu, bottom.data(), emb.data(), 2, 3, 2, out.data()).ok());
  const std::vector<float> want = {1, 2, 11, 17, 39, 0, -1, -2,
                                   2, 4, 44, 68, 156, 0, -4, -8};
  EXPECT_EQ(out, want);
}

TEST(DotInteractionTest, BackwardOnHandComputedExample) {
  // Same sample 0. d_out is 1 on the bottom copy's first entry and 1 on pair (2, 1), 0 elsewhere:
  //   d_bottom = (1, 0) (copy), d Z2 = Z1 = (3, 4), d Z1 = Z2 = (5, 6), d Z3 = (0, 0).
  const std::vector<float> bottom = {1, 2};
  const std::vector<float> emb = {3, 4, 5, 6, -1, 0.5f};
  std::vector<float> d_out(8, 0.0f);
  d_out[0] = 1.0f;
  d_out[2 + 2] = 1.0f;  // pairs: (1,0) (2,0) (2,1) ...
  std::vector<float> d_bottom(2, 99.0f), d_emb(6, 99.0f);
  ASSERT_TRUE(DotInteractionBackward(kCpu, bottom.data(), emb.data(), d_out.data(), 1, 3, 2,
                                     d_bottom.data(), d_emb.data())
                  .ok());
  EXPECT_EQ(d_bottom, (std::vector<float>{1, 0}));
  EXPECT_EQ(d_emb, (std::vector<float>{5, 6, 3, 4, 0, 0}));
}

struct Case {
  int64_t batch, nf, d;
};
class DotVsTwin : public ::testing::TestWithParam<Case> {};

TEST_P(DotVsTwin, ForwardAndBackwardMatchFloat64Twin) {
  const Case c = GetParam();
  const Vec bottom = RoundToFloat(RandomVec(c.batch * c.d, 1));
  const Vec emb = RoundToFloat(RandomVec(c.batch * c.nf * c.d, 2));
  const int64_t w = DotInteractionOutputDim(c.nf, c.d);
  std::vector<float> out(c.batch * w);
  const std::vector<float> bf = ToFloat(bottom), ef = ToFloat(emb);
  ASSERT_TRUE(
      DotInteractionForward(kCpu, bf.data(), ef.data(), c.batch, c.nf, c.d, out.data()).ok());
  // Dot products of d <= 128 floats of O(1): float error ~1e-6 relative; tolerance 1e-5.
  ExpectClose(out, testing::RefDotForward(bottom, emb, c.batch, c.nf, c.d), 1e-5, "out");

  const Vec d_out = RoundToFloat(RandomVec(c.batch * w, 3));
  const std::vector<float> gf = ToFloat(d_out);
  std::vector<float> d_bottom(c.batch * c.d), d_emb(c.batch * c.nf * c.d);
  ASSERT_TRUE(DotInteractionBackward(kCpu, bf.data(), ef.data(), gf.data(), c.batch, c.nf, c.d,
                                     d_bottom.data(), d_emb.data())
                  .ok());
  Vec db_ref, de_ref;
  testing::RefDotBackward(bottom, emb, d_out, c.batch, c.nf, c.d, &db_ref, &de_ref);
  ExpectClose(d_bottom, db_ref, 1e-5, "d_bottom");
  ExpectClose(d_emb, de_ref, 1e-5, "d_emb");
}

INSTANTIATE_TEST_SUITE_P(Shapes, DotVsTwin,
                         ::testing::Values(Case{33, 26, 16}, Case{9, 26, 128}, Case{10, 5, 7},
                                           Case{4, 1, 3}, Case{7, 40, 20}, Case{3, 16, 32}));

TEST(DotInteractionTest, TwinBackwardMatchesFiniteDifferences) {
  const int64_t nb = 2, nf = 3, d = 4;
  const Vec bottom = RandomVec(nb * d, 5), emb = RandomVec(nb * nf * d, 6);
  const Vec r = RandomVec(nb * testing::RefDotWidth(nf, d), 7);
  Vec db, de;
  testing::RefDotBackward(bottom, emb, r, nb, nf, d, &db, &de);
  auto loss_b = [&](const Vec& b) {
    return testing::Dot(testing::RefDotForward(b, emb, nb, nf, d), r);
  };
  auto loss_e = [&](const Vec& e) {
    return testing::Dot(testing::RefDotForward(bottom, e, nb, nf, d), r);
  };
  testing::ExpectGradientsAgree(db, testing::NumericGradient(loss_b, bottom), 1e-6, "d_bottom");
  testing::ExpectGradientsAgree(de, testing::NumericGradient(loss_e, emb), 1e-6, "d_emb");
}

// 26 features of dim 16 (kaggle), and 3 of dim 64 (skewed) with the thresholds of a spinning
// pool, where 2048 samples split though their pairs are few (the transpose is counted).
struct BitsCase {
  int64_t nb, nf, d;
  bool cheap_fork;
};
class DotInteractionBitsTest : public ::testing::TestWithParam<BitsCase> {};

TEST_P(DotInteractionBitsTest, SameBitsForOneAndTwoThreads) {
  const BitsCase c = GetParam();
  SetParallelForkCheap(c.cheap_fork);
  const int64_t nb = c.nb, nf = c.nf, d = c.d, w = DotInteractionOutputDim(nf, d);
  const std::vector<float> bottom = ToFloat(RandomVec(nb * d, 8));
  const std::vector<float> emb = ToFloat(RandomVec(nb * nf * d, 9));
  const std::vector<float> d_out = ToFloat(RandomVec(nb * w, 10));
  std::vector<float> out[2], de[2], db[2];
  const int saved = NumThreads();
  for (int t = 0; t < 2; ++t) {
    SetNumThreads(t + 1);
    out[t].resize(nb * w);
    de[t].resize(nb * nf * d);
    db[t].resize(nb * d);
    ASSERT_TRUE(
        DotInteractionForward(kCpu, bottom.data(), emb.data(), nb, nf, d, out[t].data()).ok());
    ASSERT_TRUE(DotInteractionBackward(kCpu, bottom.data(), emb.data(), d_out.data(), nb, nf, d,
                                       db[t].data(), de[t].data())
                    .ok());
  }
  SetNumThreads(saved);
  SetParallelForkCheap(false);
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(de[0].data(), de[1].data(), de[0].size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(db[0].data(), db[1].data(), db[0].size() * sizeof(float)));
}
INSTANTIATE_TEST_SUITE_P(Shapes, DotInteractionBitsTest,
                         ::testing::Values(BitsCase{257, 26, 16, false},
                                           BitsCase{2048, 3, 64, true}));

TEST(DotInteractionTest, ErrorsNameTheArgument) {
  std::vector<float> buf(64);
  absl::Status st = DotInteractionForward(kCpu, nullptr, buf.data(), 1, 2, 2, buf.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bottom is null"), std::string::npos) << st;
  st = DotInteractionForward(kCpu, buf.data(), buf.data(), 1, 0, 2, buf.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_embeddings = 0"), std::string::npos) << st;
  st = DotInteractionBackward(kCpu, buf.data(), buf.data(), buf.data(), -3, 2, 2, buf.data(),
                              buf.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch = -3"), std::string::npos) << st;
  DeviceContext cuda;
  cuda.device = Device::kCuda;
  // A hand-made kCuda context: FailedPrecondition with the CUDA path, Unimplemented without.
  const absl::StatusCode kHandMadeCuda = TESSERA_HAVE_CUDA ? absl::StatusCode::kFailedPrecondition
                                                           : absl::StatusCode::kUnimplemented;
  st = DotInteractionForward(cuda, buf.data(), buf.data(), 1, 2, 2, buf.data());
  EXPECT_EQ(st.code(), kHandMadeCuda);
  // With the CUDA path the message names the twin's file; without it, the one NoCudaPath text.
  EXPECT_NE(st.message().find(TESSERA_HAVE_CUDA ? "dense/interaction_cuda.cu" : "has no CUDA path"),
            std::string::npos) << st;
}

}  // namespace
}  // namespace tessera
