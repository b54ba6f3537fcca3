// 16-bit tables (storage.dtype fp16 / bf16) sharded over 4 ranks, exact replica sync: world
// shapes 1x4, 2x2 and 4x1, table-wise / row-wise / data-parallel sharding, train as one
// EmbeddingCollection on the global batch. Stochastic rounding keys on (seed, step, the fp32
// value), not on the rank or slot, so the runs differ only where the fp32 update itself differs
// in its last bits (summation order across senders) and flips a rounding: every weight within
// one 16-bit step (at the table's largest magnitude) per training step of the one-rank value, most of them bit-identical, and a
// 16-bit table really stored in 16 bits on every rank.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"
#include "sharding/sharded_embedding.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

constexpr int kSteps = 4;

using Param = std::tuple<int /*group size*/, ShardingType, RowDtype>;

class Sharded16Test : public ::testing::TestWithParam<Param> {};

TEST_P(Sharded16Test, MatchesOneRank) {
  const auto [n, type, dtype] = GetParam();
  auto grid = ProcessGrid::Create(World(), {.group_size = n});
  ASSERT_TRUE(grid.ok()) << grid.status();
  const int me = World()->rank(), world = World()->size();
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kRowWiseAdagrad);
  for (TableConfig& t : so.collection.tables) t.storage.dtype = dtype;
  so.plan = tt::PlanOfType(type, so.collection.tables, n);
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  auto ref = EmbeddingCollection::Create(so.collection, DeviceContext::Cpu());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int64_t od = (*ref)->output_dim();
  for (int step = 1; step <= kSteps; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, world, step, step % 2);
    const KeyedJagged& mine = gb.per_rank[me];
    std::vector<float> out(mine.batch_size * od), ref_out(gb.global.batch_size * od);
    ASSERT_TRUE((*sharded)->Forward(mine, out.data()).ok());
    ASSERT_TRUE((*ref)->Forward(gb.global, ref_out.data()).ok());
    const int64_t first = tt::RowsBefore(gb, me);
    // Pooled outputs of the same stored rows before any update agree to fp32 summation order.
    if (step == 1) {
      tt::ExpectClose(out.data(), ref_out.data() + first * od, out.size(), 2e-5, 1e-6, "pooled");
    }
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    ASSERT_TRUE((*sharded)->BackwardUpdate(grad.data() + first * od, 0.05f, step).ok());
    ASSERT_TRUE((*ref)->BackwardUpdate(grad.data(), 0.05f, step).ok());
  }
  // A 16-bit step at |x|: 2^-7 (bf16) or 2^-10 (fp16) relative, at least fp16's subnormal step.
  const double rel = dtype == RowDtype::kBf16 ? 1.0 / 128 : 1.0 / 1024;
  int64_t total = 0, same = 0;
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = so.collection.tables[t];
    EXPECT_EQ((*ref)->store(t).weight_dtype(), dtype);
    std::vector<float> w(c.num_rows * c.dim), s(c.num_rows), rw(w.size()), rs(s.size());
    ASSERT_TRUE((*sharded)->ReadTable(t, 0, c.num_rows, w.data(), s.data()).ok());
    ASSERT_TRUE((*ref)->store(t).ReadRows(0, c.num_rows, rw.data(), rs.data()).ok());
    // A flipped rounding costs one 16-bit step at the magnitude the value had then: bounded by
    // the table's largest magnitude.
    double max_abs = 0;
    for (float x : rw) max_abs = std::max(max_abs, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < w.size(); ++i) {
      ++total;
      same += w[i] == rw[i];
      EXPECT_LE(std::abs(w[i] - rw[i]), kSteps * rel * max_abs)
          << c.name << " element " << i;
      // Every value read back is a 16-bit value.
      EXPECT_EQ(w[i], row_dtype::ToFloat(dtype, row_dtype::FromFloat(dtype, RowRounding::kNearest,
                                                                    0, w[i])));
    }
    tt::ExpectClose(s.data(), rs.data(), s.size(), 1e-4, 1e-7, c.name + " state");
  }
  EXPECT_GE(same, total * 8 / 10) << same << " of " << total << " weights bit-identical";
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [n, type, dtype] = info.param;
  return std::to_string(4 / n) + "x" + std::to_string(n) + "_" + ShardingTypeName(type) + "_" +
         RowDtypeName(dtype);
}

INSTANTIATE_TEST_SUITE_P(
    ShapesTypes, Sharded16Test,
    ::testing::Combine(::testing::Values(1, 2, 4),
                       ::testing::Values(ShardingType::kDataParallel, ShardingType::kTableWise,
                                         ShardingType::kRowWise),
                       ::testing::Values(RowDtype::kF16, RowDtype::kBf16)),
    Name);

// Column splits under row-wise AdaGrad and average replica sync are refused for 16-bit tables
// (on every rank, before training).
TEST(Sharded16Test, UnsupportedCombinationsAreErrors) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kRowWiseAdagrad);
  for (TableConfig& t : so.collection.tables) t.storage.dtype = RowDtype::kBf16;
  so.plan = tt::PlanOfType(ShardingType::kColumnWise, so.collection.tables, 2);
  auto cw = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(cw.ok());
  EXPECT_THAT(cw.status().message(), ::testing::HasSubstr("column split"));
  so.plan = tt::PlanOfType(ShardingType::kTableWise, so.collection.tables, 2);
  so.replica_sync = ReplicaSync::kAverage;
  auto avg = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(avg.ok());
  EXPECT_THAT(avg.status().message(), ::testing::HasSubstr("replica_sync average"));
}

}  // namespace
}  // namespace tessera
