// The CUDA twins of sharding/internal/shard_kernels.h against the CPU twins: the same inputs
// through both, outputs compared bit for bit (the twins promise the same bits). Skips without
// the CUDA path or a device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "gtest/gtest.h"
#include "sharding/internal/shard_kernels.h"

namespace tessera::internal {
namespace {

const DeviceContext kCpu = DeviceContext::Cpu();

class ShardKernelsCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaCompiled() || CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto c = CudaContext::Create({});
    ASSERT_TRUE(c.ok()) << c.status();
    cuda_ = std::move(c).value();
  }
  void TearDown() override {
    for (void* p : allocs_) CudaFree(p);
  }
  const DeviceContext& ctx() const { return cuda_->context(); }

  // A device copy of `v` (freed at TearDown).
  template <typename T>
  T* Up(const std::vector<T>& v) {
    auto p = CudaMallocZeroed(std::max<size_t>(1, v.size() * sizeof(T)));
    if (!p.ok()) {
      ADD_FAILURE() << p.status();
      return nullptr;
    }
    allocs_.push_back(*p);
    if (!v.empty()) {
      EXPECT_TRUE(CudaCopyToDevice(ctx(), *p, v.data(), v.size() * sizeof(T)).ok());
    }
    return static_cast<T*>(*p);
  }
  // `n` elements of device memory back on the host (waits for the stream).
  template <typename T>
  std::vector<T> Down(const T* d, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(CudaSynchronize(ctx()).ok());
    if (n > 0) {
      EXPECT_TRUE(CudaCopyToHost(ctx(), v.data(), d, n * sizeof(T)).ok());
    }
    return v;
  }
  template <typename T>
  static void ExpectSameBits(const std::vector<T>& cpu, const std::vector<T>& gpu,
                             const char* what) {
    ASSERT_EQ(cpu.size(), gpu.size()) << what;
    EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(T)), 0) << what;
  }

  std::unique_ptr<CudaContext> cuda_;
  std::vector<void*> allocs_;
};

std::vector<float> Floats(int64_t n, uint64_t seed) {
  CounterRng rng(seed, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng.NextUniform() - 0.5f) * 7.0f;
  return v;
}

TEST_F(ShardKernelsCudaTest, InputDistOps) {
  // Three segments packed back to back.
  const std::vector<int64_t> ids = {1000, 1007, 1003, 1000};
  const std::vector<int32_t> lens = {2, 0, 3, 1, 1}, pos = {0, 1, 2, 3, 0, 1, 2};
  std::vector<char> packed_cpu(32 + 20 + 28);
  const ByteSegment cs[] = {{ids.data(), 32}, {lens.data(), 20}, {pos.data(), 28}};
  ASSERT_TRUE(PackSegments(kCpu, cs, 3, packed_cpu.data()).ok());
  const int64_t* d_ids = Up(ids);
  const int32_t* d_lens = Up(lens);
  const int32_t* d_pos = Up(pos);
  char* d_packed = Up(std::vector<char>(packed_cpu.size()));
  const ByteSegment gs[] = {{d_ids, 32}, {nullptr, 0}, {d_lens, 20}, {d_pos, 28}};
  ASSERT_TRUE(PackSegments(ctx(), gs, 4, d_packed).ok());
  ExpectSameBits(packed_cpu, Down(d_packed, packed_cpu.size()), "PackSegments");

  std::vector<int64_t> rows(4);
  ASSERT_TRUE(UnpackIds(kCpu, ids.data(), 4, 1000, rows.data()).ok());
  int64_t* d_rows = Up(std::vector<int64_t>(4));
  ASSERT_TRUE(UnpackIds(ctx(), d_ids, 4, 1000, d_rows).ok());
  ExpectSameBits(rows, Down(d_rows, 4), "UnpackIds");

  // Many bags, so the scan's chunks matter (more bags than the scan's threads).
  const int64_t bags = 5000;
  std::vector<int32_t> many(bags);
  for (int64_t i = 0; i < bags; ++i) many[i] = static_cast<int32_t>(i % 7);
  std::vector<int64_t> off(bags + 1), idx(7);
  ASSERT_TRUE(
      UnpackBags(kCpu, many.data(), bags, pos.data(), 7, 11, 5, off.data(), idx.data()).ok());
  int64_t* d_off = Up(std::vector<int64_t>(bags + 1));
  int64_t* d_idx = Up(std::vector<int64_t>(7));
  ASSERT_TRUE(UnpackBags(ctx(), Up(many), bags, d_pos, 7, 11, 5, d_off, d_idx).ok());
  ExpectSameBits(off, Down(d_off, bags + 1), "UnpackBags offsets");
  ExpectSameBits(idx, Down(d_idx, 7), "UnpackBags indices");

  const std::vector<int64_t> table = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  ASSERT_TRUE(MapIndices(kCpu, table.data(), 7, idx.data()).ok());
  ASSERT_TRUE(MapIndices(ctx(), Up(table), 7, d_idx).ok());
  ExpectSameBits(idx, Down(d_idx, 7), "MapIndices");

  std::vector<float> w(9, 2.0f);
  ASSERT_TRUE(FillFloats(kCpu, 1.0f, 5, w.data() + 2).ok());
  float* d_w = Up(std::vector<float>(9, 2.0f));
  ASSERT_TRUE(FillFloats(ctx(), 1.0f, 5, d_w + 2).ok());
  ExpectSameBits(w, Down(d_w, 9), "FillFloats");
}

TEST_F(ShardKernelsCudaTest, OutputDistOps) {
  const int64_t bags = 37, width = 5, stride = 13, col = 4;
  const std::vector<float> partial = Floats(bags * width, 1);
  std::vector<float> out = Floats(bags * stride, 2);
  float* d_out = Up(out);
  ASSERT_TRUE(AddPartials(kCpu, partial.data(), bags, width, out.data() + col, stride).ok());
  ASSERT_TRUE(AddPartials(ctx(), Up(partial), bags, width, d_out + col, stride).ok());
  ExpectSameBits(out, Down(d_out, out.size()), "AddPartials");
  ASSERT_TRUE(AddPartials(kCpu, partial.data(), bags, 3, out.data() + 1, stride, true).ok());
  ASSERT_TRUE(AddPartials(ctx(), Up(partial), bags, 3, d_out + 1, stride, true).ok());
  ExpectSameBits(out, Down(d_out, out.size()), "AddPartials first");

  std::vector<int64_t> offsets(bags + 1, 0);
  for (int64_t i = 0; i < bags; ++i) offsets[i + 1] = offsets[i] + (i * 5) % 4;  // some empty
  const int64_t* d_offsets = Up(offsets);
  ASSERT_TRUE(ScaleBagsByLength(kCpu, offsets.data(), bags, 9, out.data() + 2, stride).ok());
  ASSERT_TRUE(ScaleBagsByLength(ctx(), d_offsets, bags, 9, d_out + 2, stride).ok());
  ExpectSameBits(out, Down(d_out, out.size()), "ScaleBagsByLength");

  const int64_t* const mean_offsets[] = {nullptr, offsets.data()};
  for (const int64_t* offs : mean_offsets) {
    std::vector<float> slice(bags * width);
    float* d_slice = Up(slice);
    ASSERT_TRUE(
        PackGradSlice(kCpu, out.data() + col, stride, offs, bags, width, slice.data()).ok());
    ASSERT_TRUE(
        PackGradSlice(ctx(), d_out + col, stride, offs ? d_offsets : nullptr, bags, width, d_slice)
            .ok());
    ExpectSameBits(slice, Down(d_slice, slice.size()), "PackGradSlice");
  }

  // 16-bit: ordinary values, subnormals, overflow, infinities and a NaN.
  std::vector<float> x = Floats(200, 3);
  for (float v : {1e-6f, -3e-8f, 6e-5f, 65504.0f, 65520.0f, 1e9f, 3.4e38f}) x.push_back(v);
  uint32_t inf = 0x7f800000u, nan = 0x7fc01234u;
  float finf, fnan;
  std::memcpy(&finf, &inf, 4);
  std::memcpy(&fnan, &nan, 4);
  x.push_back(finf);
  x.push_back(-finf);
  x.push_back(fnan);
  const int64_t n = static_cast<int64_t>(x.size());
  const float* d_x = Up(x);
  for (PayloadDType dt : {PayloadDType::kF16, PayloadDType::kBF16}) {
    std::vector<uint16_t> h(n);
    std::vector<float> back(n);
    ASSERT_TRUE(FloatsTo16(kCpu, dt, x.data(), n, h.data()).ok());
    ASSERT_TRUE(FloatsFrom16(kCpu, dt, h.data(), n, back.data()).ok());
    uint16_t* d_h = Up(std::vector<uint16_t>(n));
    float* d_back = Up(std::vector<float>(n));
    ASSERT_TRUE(FloatsTo16(ctx(), dt, d_x, n, d_h).ok());
    ASSERT_TRUE(FloatsFrom16(ctx(), dt, d_h, n, d_back).ok());
    ExpectSameBits(h, Down(d_h, n), "FloatsTo16");
    ExpectSameBits(back, Down(d_back, n), "FloatsFrom16");
  }
}

TEST_F(ShardKernelsCudaTest, ReplicaSyncOps) {
  const int64_t slots_n = 20, width = 6, sd = 3;
  const std::vector<float> store = Floats(slots_n * width, 4);
  const std::vector<int64_t> slots = {17, 3, 9, 0, 12};
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t* d_slots = Up(slots);
  std::vector<float> rows(n * width);
  float* d_rows = Up(rows);
  ASSERT_TRUE(GatherRows(kCpu, store.data(), slots.data(), n, width, rows.data()).ok());
  ASSERT_TRUE(GatherRows(ctx(), Up(store), d_slots, n, width, d_rows).ok());
  ExpectSameBits(rows, Down(d_rows, rows.size()), "GatherRows");

  std::vector<float> dst = Floats(slots_n * width, 5);
  float* d_dst = Up(dst);
  const std::vector<float> src = Floats(n * width, 6);
  ASSERT_TRUE(ScatterRows(kCpu, src.data(), slots.data(), n, width, dst.data()).ok());
  ASSERT_TRUE(ScatterRows(ctx(), Up(src), d_slots, n, width, d_dst).ok());
  ExpectSameBits(dst, Down(d_dst, dst.size()), "ScatterRows");

  const std::vector<int64_t> mine = {4, 11, 30}, uni = {1, 4, 6, 11, 19, 30, 31};
  std::vector<float> buf(uni.size() * width, 0.0f);
  float* d_buf = Up(buf);
  const std::vector<float> g = Floats(3 * width, 7);
  ASSERT_TRUE(
      ScatterToUnion(kCpu, mine.data(), 3, uni.data(), 7, g.data(), width, buf.data()).ok());
  ASSERT_TRUE(ScatterToUnion(ctx(), Up(mine), 3, Up(uni), 7, Up(g), width, d_buf).ok());
  ExpectSameBits(buf, Down(d_buf, buf.size()), "ScatterToUnion");

  std::vector<float> state = Floats(slots_n * sd, 8);
  float* d_state = Up(state);
  const std::vector<float> avg = Floats(n * sd, 9), snap = Floats(n * sd, 10);
  ASSERT_TRUE(
      ApplyDelayedAverage(kCpu, avg.data(), snap.data(), slots.data(), n, sd, state.data()).ok());
  ASSERT_TRUE(ApplyDelayedAverage(ctx(), Up(avg), Up(snap), d_slots, n, sd, d_state).ok());
  ExpectSameBits(state, Down(d_state, state.size()), "ApplyDelayedAverage");

  const std::vector<float> grads = Floats(n * 33, 11);
  std::vector<float> sq(n);
  float* d_sq = Up(sq);
  ASSERT_TRUE(RowSquaredSums(kCpu, grads.data(), n, 33, sq.data()).ok());
  ASSERT_TRUE(RowSquaredSums(ctx(), Up(grads), n, 33, d_sq).ok());
  ExpectSameBits(sq, Down(d_sq, n), "RowSquaredSums");

  std::vector<float> scaled = grads;
  float* d_scaled = Up(scaled);
  ASSERT_TRUE(ScaleFloats(kCpu, 3.0f, n * 33, scaled.data()).ok());
  ASSERT_TRUE(ScaleFloats(ctx(), 3.0f, n * 33, d_scaled).ok());
  ExpectSameBits(scaled, Down(d_scaled, scaled.size()), "ScaleFloats");

  // The shared RowWiseAdagradStep: state bit for bit, weights within an ulp (nvcc may fuse the
  // weight update's multiply and subtract).
  RowOptimizerOptions opt;
  opt.adagrad_divisor = 2.0f;
  std::vector<float> wt = Floats(slots_n * width, 12), v(slots_n, 0.25f);
  float* d_wt = Up(wt);
  float* d_v = Up(v);
  const std::vector<float> g6 = Floats(n * width, 13);
  ASSERT_TRUE(ColumnSplitAdagrad(kCpu, opt, 0.05f, sq.data(), 40.0f, slots.data(), n, width,
                                 g6.data(), wt.data(), v.data())
                  .ok());
  ASSERT_TRUE(
      ColumnSplitAdagrad(ctx(), opt, 0.05f, d_sq, 40.0f, d_slots, n, width, Up(g6), d_wt, d_v)
          .ok());
  ExpectSameBits(v, Down(d_v, v.size()), "ColumnSplitAdagrad state");
  const std::vector<float> got_wt = Down(d_wt, wt.size());
  for (size_t i = 0; i < wt.size(); ++i) {
    EXPECT_NEAR(got_wt[i], wt[i], 1e-6f * std::fabs(wt[i]) + 1e-7f) << "weight " << i;
  }
}

}  // namespace
}  // namespace tessera::internal
