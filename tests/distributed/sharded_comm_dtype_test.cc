// 16-bit pooled-embedding all-to-alls (ShardedEmbeddingOptions::comm_dtype) under 4 ranks (1x4,
// row-wise so every output is a sum of partials from other ranks): the forward output and the
// updated weights stay within the 16-bit rounding of the fp32 run, and the group's all-to-all
// bytes shrink by exactly half of the float payloads (forward partial sums and backward
// gradients), the id traffic being unchanged.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

namespace tt = ::tessera::testing;
using ::tessera::testing::World;

struct DTypeRun {
  std::vector<std::vector<float>> outs;
  std::vector<float> weights;
  int64_t a2a_bytes = 0;
};

DTypeRun Train(PayloadDType dtype) {
  DTypeRun run;
  auto grid = ProcessGrid::Create(World(), {.group_size = 4});
  EXPECT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kSgd);
  so.plan = tt::PlanOfType(ShardingType::kGrid, so.collection.tables, 4);
  so.comm_dtype = dtype;
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  EXPECT_TRUE(sharded.ok()) << sharded.status();
  const int me = World()->rank();
  const int64_t od = (*sharded)->output_dim();
  grid->sharding_group().ResetStats();
  for (int step = 1; step <= 3; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, 4, step, step == 2);
    const KeyedJagged& mine = gb.per_rank[me];
    run.outs.emplace_back(mine.batch_size * od);
    EXPECT_TRUE((*sharded)->Forward(mine, run.outs.back().data()).ok());
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    EXPECT_TRUE(
        (*sharded)->BackwardUpdate(grad.data() + tt::RowsBefore(gb, me) * od, 0.5f, step).ok());
  }
  run.a2a_bytes = grid->sharding_group().stats().bytes_of(CollectiveKind::kAllToAll);
  const TableConfig& c = so.collection.tables[0];
  run.weights.resize(c.num_rows * c.dim);
  EXPECT_TRUE((*sharded)->ReadTable(0, 0, c.num_rows, run.weights.data()).ok());
  return run;
}

TEST(CommDTypeTest, SixteenBitPayloadsHalveTheFloatBytesAndStayClose) {
  DTypeRun f32 = Train(PayloadDType::kF32), f16 = Train(PayloadDType::kF16),
      bf16 = Train(PayloadDType::kBF16);
  // Per-element error: each partial sum (magnitude up to ~1) is rounded once (fp16: 2^-11
  // relative, bf16: 2^-8) before partials are added, so the bound is absolute in the partials'
  // scale, not relative to a sum that may cancel.
  for (size_t s = 0; s < f32.outs.size(); ++s) {
    tt::ExpectClose(f16.outs[s].data(), f32.outs[s].data(), f32.outs[s].size(), 2e-3, 5e-4,
                    "fp16 out");
    tt::ExpectClose(bf16.outs[s].data(), f32.outs[s].data(), f32.outs[s].size(), 1.6e-2, 4e-3,
                    "bf16 out");
  }
  tt::ExpectClose(f16.weights.data(), f32.weights.data(), f32.weights.size(), 2e-3, 5e-4,
                  "fp16 weights");
  tt::ExpectClose(bf16.weights.data(), f32.weights.data(), f32.weights.size(), 1.6e-2, 4e-3,
                  "bf16 weights");
  // Something was actually rounded.
  double diff = 0;
  for (size_t i = 0; i < f32.outs[0].size(); ++i) diff += std::fabs(bf16.outs[0][i] - f32.outs[0][i]);
  EXPECT_GT(diff, 0);
  // The same ids travel; the float payloads shrink 4 -> 2 bytes.
  EXPECT_EQ(f16.a2a_bytes, bf16.a2a_bytes);
  EXPECT_LT(f16.a2a_bytes, f32.a2a_bytes);
  // Runs of fp32 and fp16 differ only in the float payloads F: f32 = I + 4F, f16 = I + 2F.
  const int64_t float_bytes_f32 = 2 * (f32.a2a_bytes - f16.a2a_bytes);
  EXPECT_GT(f32.a2a_bytes - float_bytes_f32, 0);  // id traffic I is positive
  EXPECT_EQ(float_bytes_f32 % 4, 0);
}

}  // namespace
}  // namespace tessera
