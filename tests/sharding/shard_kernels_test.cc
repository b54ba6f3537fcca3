// The device seam's CPU twins (sharding/internal/shard_kernels.h) against values worked out by
// hand, and the dispatch's answer for a CUDA context in a build without the CUDA path
// (Unimplemented, naming the op). shard_kernels_cuda_test.cc compares the twins on a device.
#include "sharding/internal/shard_kernels.h"

#include <cstring>
#include <vector>

#include "core/cuda_runtime.h"
#include "embedding/row_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const DeviceContext kCpu = DeviceContext::Cpu();

TEST(ShardKernelsTest, PackSegmentsConcatenatesAndSkipsEmpty) {
  const std::vector<int64_t> ids = {7, 9};
  const std::vector<int32_t> lens = {1, 2};
  const std::vector<float> none;
  const ByteSegment segs[] = {{ids.data(), 16}, {none.data(), 0}, {lens.data(), 8}};
  std::vector<char> out(24, 0);
  ASSERT_TRUE(PackSegments(kCpu, segs, 3, out.data()).ok());
  int64_t got_ids[2];
  int32_t got_lens[2];
  std::memcpy(got_ids, out.data(), 16);
  std::memcpy(got_lens, out.data() + 16, 8);
  EXPECT_EQ(got_ids[0], 7);
  EXPECT_EQ(got_ids[1], 9);
  EXPECT_EQ(got_lens[0], 1);
  EXPECT_EQ(got_lens[1], 2);
}

TEST(ShardKernelsTest, UnpackIdsBagsAndSlots) {
  const std::vector<int64_t> ids = {105, 100, 131};
  std::vector<int64_t> rows(3);
  ASSERT_TRUE(UnpackIds(kCpu, ids.data(), 3, 100, rows.data()).ok());
  EXPECT_THAT(rows, ElementsAre(5, 0, 31));

  // Three bags (lengths 2, 0, 1) of one sender whose unique ids start at index 4 of the owner's
  // unique rows; its positions start at 10 in the owner's position list.
  const std::vector<int32_t> lengths = {2, 0, 1}, positions = {0, 1, 0};
  std::vector<int64_t> offsets(4), indices(3);
  ASSERT_TRUE(UnpackBags(kCpu, lengths.data(), 3, positions.data(), 3, /*offset_base=*/10,
                         /*unique_base=*/4, offsets.data(), indices.data())
                  .ok());
  EXPECT_THAT(offsets, ElementsAre(10, 12, 12, 13));
  EXPECT_THAT(indices, ElementsAre(4, 5, 4));

  const std::vector<int64_t> uslots = {0, 0, 0, 0, 70, 71};
  ASSERT_TRUE(MapIndices(kCpu, uslots.data(), 3, indices.data()).ok());
  EXPECT_THAT(indices, ElementsAre(70, 71, 70));

  std::vector<float> w(4, 0.0f);
  ASSERT_TRUE(FillFloats(kCpu, 1.0f, 3, w.data() + 1).ok());
  EXPECT_THAT(w, ElementsAre(0.0f, 1.0f, 1.0f, 1.0f));
}

TEST(ShardKernelsTest, AddPartialsAndMeanScale) {
  // Two bags, a shard of width 2 landing at column 1 of a 4-wide output.
  std::vector<float> out = {1, 1, 1, 1, 2, 2, 2, 2};
  const std::vector<float> partial = {10, 20, 30, 40};
  ASSERT_TRUE(AddPartials(kCpu, partial.data(), 2, 2, out.data() + 1, 4).ok());
  EXPECT_THAT(out, ElementsAre(1, 11, 21, 1, 2, 32, 42, 2));
  const std::vector<int64_t> offsets = {0, 4, 4};  // lengths 4 and 0 (left as is)
  ASSERT_TRUE(ScaleBagsByLength(kCpu, offsets.data(), 2, 3, out.data(), 4).ok());
  EXPECT_THAT(out, ElementsAre(0.25f, 2.75f, 5.25f, 1, 2, 32, 42, 2));
  // `first`: the columns' first partial is written, whatever they held.
  ASSERT_TRUE(AddPartials(kCpu, partial.data(), 2, 2, out.data() + 2, 4, /*first=*/true).ok());
  EXPECT_THAT(out, ElementsAre(0.25f, 2.75f, 10, 20, 2, 32, 30, 40));
}

TEST(ShardKernelsTest, PackGradSliceSumAndMean) {
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6, 7, 8};  // 2 bags x 4 columns
  std::vector<float> out(4);
  ASSERT_TRUE(PackGradSlice(kCpu, grad.data() + 2, 4, nullptr, 2, 2, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(3, 4, 7, 8));
  const std::vector<int64_t> offsets = {0, 2, 2};  // lengths 2 and 0 (copied unscaled)
  ASSERT_TRUE(PackGradSlice(kCpu, grad.data(), 4, offsets.data(), 2, 2, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(0.5f, 1.0f, 5, 6));
}

TEST(ShardKernelsTest, SixteenBitPayloadsRoundTrip) {
  const std::vector<float> x = {1.0f, -2.5f, 1.0f / 3.0f, 65504.0f};
  std::vector<uint16_t> h(4);
  std::vector<float> back(4);
  ASSERT_TRUE(FloatsTo16(kCpu, PayloadDType::kF16, x.data(), 4, h.data()).ok());
  ASSERT_TRUE(FloatsFrom16(kCpu, PayloadDType::kF16, h.data(), 4, back.data()).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h[i], row_dtype::FloatToHalf(x[i]));
    EXPECT_EQ(back[i], row_dtype::HalfToFloat(h[i]));
  }
  ASSERT_TRUE(FloatsTo16(kCpu, PayloadDType::kBF16, x.data(), 4, h.data()).ok());
  ASSERT_TRUE(FloatsFrom16(kCpu, PayloadDType::kBF16, h.data(), 4, back.data()).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h[i], row_dtype::FloatToBf16(x[i]));
    EXPECT_EQ(back[i], row_dtype::Bf16ToFloat(h[i]));
  }
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
}

TEST(ShardKernelsTest, RowPayloads) {
  const std::vector<float> store = {0, 0, 1, 1, 2, 2, 3, 3};  // 4 rows x 2
  const std::vector<int64_t> slots = {3, 1};
  std::vector<float> rows(4);
  ASSERT_TRUE(GatherRows(kCpu, store.data(), slots.data(), 2, 2, rows.data()).ok());
  EXPECT_THAT(rows, ElementsAre(3, 3, 1, 1));
  std::vector<float> back(8, -1.0f);
  ASSERT_TRUE(ScatterRows(kCpu, rows.data(), slots.data(), 2, 2, back.data()).ok());
  EXPECT_THAT(back, ElementsAre(-1, -1, 1, 1, -1, -1, 3, 3));

  // Rows 4 and 9 of a union {2, 4, 7, 9}.
  const std::vector<int64_t> mine = {4, 9}, uni = {2, 4, 7, 9};
  const std::vector<float> g = {1, 2, 3, 4};
  std::vector<float> buf(8, 0.0f);
  ASSERT_TRUE(ScatterToUnion(kCpu, mine.data(), 2, uni.data(), 4, g.data(), 2, buf.data()).ok());
  EXPECT_THAT(buf, ElementsAre(0, 0, 1, 2, 0, 0, 3, 4));
  // Rows out of order (searched, not walked) land at the same places.
  const std::vector<int64_t> back_order = {9, 4};
  const std::vector<float> g_back = {3, 4, 1, 2};
  std::vector<float> buf2(8, 0.0f);
  ASSERT_TRUE(
      ScatterToUnion(kCpu, back_order.data(), 2, uni.data(), 4, g_back.data(), 2, buf2.data()).ok());
  EXPECT_EQ(buf2, buf);
  // Increasing rows at the union's first and last entries, and every entry.
  const std::vector<int64_t> ends = {2, 9}, all = {2, 4, 7, 9};
  const std::vector<float> g4 = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> buf3(8, 0.0f);
  ASSERT_TRUE(ScatterToUnion(kCpu, ends.data(), 2, uni.data(), 4, g.data(), 2, buf3.data()).ok());
  EXPECT_THAT(buf3, ElementsAre(1, 2, 0, 0, 0, 0, 3, 4));
  ASSERT_TRUE(ScatterToUnion(kCpu, all.data(), 4, uni.data(), 4, g4.data(), 2, buf3.data()).ok());
  EXPECT_EQ(buf3, g4);

  // state = avg + (state - snapshot) on slots 2 and 0, state_dim 1.
  std::vector<float> state = {5, 0, 8};
  const std::vector<float> avg = {10, 20}, snap = {7, 4};
  const std::vector<int64_t> s2 = {2, 0};
  ASSERT_TRUE(
      ApplyDelayedAverage(kCpu, avg.data(), snap.data(), s2.data(), 2, 1, state.data()).ok());
  EXPECT_THAT(state, ElementsAre(21, 0, 11));

  std::vector<float> sq(2);
  ASSERT_TRUE(RowSquaredSums(kCpu, g.data(), 2, 2, sq.data()).ok());
  EXPECT_THAT(sq, ElementsAre(5, 25));
}

TEST(ShardKernelsTest, ScaleAndColumnSplitAdagrad) {
  std::vector<float> g = {1.0f, -2.0f, 0.5f};
  ASSERT_TRUE(ScaleFloats(kCpu, 2.0f, 3, g.data()).ok());
  EXPECT_THAT(g, ElementsAre(2.0f, -4.0f, 1.0f));

  // Two rows of a 2-wide column shard of a 4-wide table, at slots 1 and 0; the step must be
  // RowWiseAdagradStep with the full row's mean squared gradient (total / 4).
  RowOptimizerOptions opt;
  opt.adagrad_divisor = 2.0f;
  const std::vector<float> total = {8.0f, 2.0f}, grads = {1, 2, 3, 4};
  const std::vector<int64_t> slots = {1, 0};
  std::vector<float> w = {10, 11, 12, 13}, v = {0.5f, 1.0f};
  std::vector<float> want_w = w, want_v = v;
  RowWiseAdagradStep(opt, 0.1f, 2.0f, 2, grads.data(), want_w.data() + 2, want_v.data() + 1);
  RowWiseAdagradStep(opt, 0.1f, 0.5f, 2, grads.data() + 2, want_w.data(), want_v.data());
  ASSERT_TRUE(ColumnSplitAdagrad(kCpu, opt, 0.1f, total.data(), 4.0f, slots.data(), 2, 2,
                                 grads.data(), w.data(), v.data())
                  .ok());
  EXPECT_EQ(w, want_w);
  EXPECT_EQ(v, want_v);
  EXPECT_EQ(v[1], 3.0f);  // 1 + 8 / 4
}

TEST(ShardKernelsTest, CudaContextWithoutTheCudaPathIsUnimplemented) {
  if (CudaCompiled()) GTEST_SKIP() << "this build has the CUDA path";
  DeviceContext cuda = kCpu;
  cuda.device = Device::kCuda;
  float x = 0.0f;
  const absl::Status st = FillFloats(cuda, 1.0f, 1, &x);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(st.message(), HasSubstr("FillFloats"));
  EXPECT_EQ(x, 0.0f);
}

// A hand-made kCuda context (no compute stream) is refused before anything is launched, as the
// dense and embedding twins refuse it: no device needed.
TEST(ShardKernelsTest, HandMadeCudaContextWithoutAStreamIsRefused) {
  if (!CudaCompiled()) GTEST_SKIP() << "this build has no CUDA path (the test above covers it)";
  DeviceContext cuda = kCpu;
  cuda.device = Device::kCuda;
  float x = 0.0f;
  const absl::Status st = FillFloats(cuda, 1.0f, 1, &x);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("FillFloats"));
  EXPECT_THAT(st.message(), HasSubstr("compute stream"));
  EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace tessera::internal
