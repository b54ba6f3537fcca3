// The warp split of the row update (embedding/internal/row_update_lanes.h, used by
// UpdateRowsKernel in embedding/pooled_lookup_cuda.cu) against ApplyRowUpdate, on the CPU: the
// 16 partials combined in the kernel's shuffle tree give RowSumOfSquares' bits, and the update
// assembled column by column, in the order 32 lanes would run it, gives ApplyRowUpdate's bits
// for every rule and for widths around the lane counts (1, 15, 16, 17, 31, 32, 33, 64, 100, 128).
// The GPU run of the same split is checked against the CPU twin by tests/cuda/.
#include "embedding/internal/row_update_lanes.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"

namespace tessera::embedding_internal {
namespace {

constexpr int64_t kDims[] = {1, 2, 15, 16, 17, 31, 32, 33, 64, 100, 128, 129};

std::vector<float> Random(int64_t n, CounterRng& rng, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * rng.NextUniform();
  return v;
}

// What the kernel's shuffles compute: lane l < width takes lane l + width's value each round
// (__shfl_down_sync); lanes 16..31 hold 0 and lanes past 31 return their own value.
float WarpTree(const float* partial16) {
  float lanes[32];
  for (int l = 0; l < 32; ++l) lanes[l] = l < kSumLanes ? partial16[l] : 0.0f;
  for (int width = kSumLanes / 2; width > 0; width /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) {
      next[l] = lanes[l] + (l + width < 32 ? lanes[l + width] : lanes[l]);
    }
    std::memcpy(lanes, next, sizeof(lanes));
  }
  return lanes[0];
}

TEST(RowUpdateLanesTest, PartialsInTheWarpTreeGiveRowSumOfSquaresBits) {
  CounterRng rng(7, 1);
  for (int64_t dim : kDims) {
    const std::vector<float> g = Random(dim, rng, -3.0f, 3.0f);
    float part[kSumLanes];
    for (int l = 0; l < kSumLanes; ++l) part[l] = RowSumOfSquaresPartial(g.data(), dim, l);
    const float tree = WarpTree(part);
    const float combined = CombineSumLanes(part);
    const float ref = RowSumOfSquares(g.data(), dim);
    EXPECT_EQ(0, std::memcmp(&tree, &ref, sizeof(float))) << "dim " << dim << ": " << tree
                                                           << " vs " << ref;
    EXPECT_EQ(0, std::memcmp(&combined, &ref, sizeof(float))) << "dim " << dim;
  }
}

TEST(RowUpdateLanesTest, ColumnSplitGivesApplyRowUpdateBits) {
  CounterRng rng(9, 2);
  for (RowOptimizerType type :
       {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad, RowOptimizerType::kAdam}) {
    for (int64_t dim : kDims) {
      RowOptimizerOptions o;
      o.type = type;
      o.adagrad_divisor = 2.0f;
      const float lr = 0.03f;
      const int64_t step = 4, sd = RowStateDim(type, dim);
      const std::vector<float> g = Random(dim, rng, -2.0f, 2.0f);
      std::vector<float> w_ref = Random(dim, rng, -1.0f, 1.0f);
      std::vector<float> s_ref = Random(std::max<int64_t>(sd, 1), rng, 0.0f, 0.5f);
      std::vector<float> w = w_ref, s = s_ref;
      ApplyRowUpdate(o, lr, step, dim, g.data(), w_ref.data(), sd > 0 ? s_ref.data() : nullptr);
      // The kernel's order: lanes 0..31 each walk columns lane, lane + 32, ...
      float scale = 0.0f, bc1 = 0.0f, bc2 = 0.0f;
      if (type == RowOptimizerType::kRowWiseAdagrad) {
        float part[kSumLanes];
        for (int l = 0; l < kSumLanes; ++l) part[l] = RowSumOfSquaresPartial(g.data(), dim, l);
        const AdagradScale as = RowWiseAdagradScale(o, lr, s[0], WarpTree(part), dim);
        s[0] = as.v;
        scale = as.scale;
      }
      if (type == RowOptimizerType::kAdam) {
        bc1 = 1.0f - powf(o.beta1, static_cast<float>(step));
        bc2 = 1.0f - powf(o.beta2, static_cast<float>(step));
      }
      for (int lane = 0; lane < 32; ++lane) {
        for (int64_t k = lane; k < dim; k += 32) {
          if (type == RowOptimizerType::kSgd) SgdColumn(lr, g.data(), w.data(), k);
          if (type == RowOptimizerType::kRowWiseAdagrad) {
            AdagradColumn(scale, g.data(), w.data(), k);
          }
          if (type == RowOptimizerType::kAdam) {
            AdamColumn(o, lr, bc1, bc2, dim, g.data(), w.data(), s.data(), k);
          }
        }
      }
      EXPECT_EQ(0, std::memcmp(w.data(), w_ref.data(), sizeof(float) * dim))
          << "type " << static_cast<int>(type) << " dim " << dim;
      if (sd > 0) {
        EXPECT_EQ(0, std::memcmp(s.data(), s_ref.data(), sizeof(float) * sd))
            << "type " << static_cast<int>(type) << " dim " << dim;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::embedding_internal
