// ShardedEmbeddingCollection under 4 ranks, exact replica sync: for every sharding type, world
// shapes 4x1, 2x2 and 1x4 (groups x group size) in both layouts, SGD and row-wise AdaGrad,
// several steps of Forward + BackwardUpdate give the same pooled outputs, final table rows and
// optimizer state as one EmbeddingCollection trained on the concatenated global batch.
// Tolerance: rtol 2e-5, atol 1e-6 (the runs differ only in float summation order: partial sums
// per shard, gradients summed per sender and then over replicas).
#include "sharding/sharded_embedding.h"

#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

constexpr double kRtol = 2e-5;
constexpr double kAtol = 1e-6;
constexpr int kSteps = 4;

using Param = std::tuple<int /*group size N*/, GridLayout, ShardingType, RowOptimizerType>;

class ExactTest : public ::testing::TestWithParam<Param> {};

TEST_P(ExactTest, MatchesOneRankOnTheGlobalBatch) {
  const auto [n, layout, type, opt] = GetParam();
  auto grid = ProcessGrid::Create(World(), {.group_size = n, .layout = layout});
  ASSERT_TRUE(grid.ok()) << grid.status();
  const int me = World()->rank(), world = World()->size();
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(opt);
  so.plan = tt::PlanOfType(type, so.collection.tables, n);
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  auto ref = EmbeddingCollection::Create(so.collection, DeviceContext::Cpu());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int64_t od = (*ref)->output_dim();
  ASSERT_EQ((*sharded)->output_dim(), od);
  for (int f = 0; f < 4; ++f) EXPECT_EQ((*sharded)->feature_column(f), (*ref)->feature_column(f));

  for (int step = 1; step <= kSteps; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, world, step, /*weighted=*/step % 2);
    const KeyedJagged& mine = gb.per_rank[me];
    std::vector<float> out(mine.batch_size * od, -1), ref_out(gb.global.batch_size * od);
    ASSERT_TRUE((*sharded)->Forward(mine, out.data()).ok());
    ASSERT_TRUE((*ref)->Forward(gb.global, ref_out.data()).ok());
    const int64_t first = tt::RowsBefore(gb, me);
    tt::ExpectClose(out.data(), ref_out.data() + first * od, out.size(), kRtol, kAtol,
                    "step " + std::to_string(step) + " pooled");
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    const float lr = 0.5f;
    ASSERT_TRUE((*sharded)->BackwardUpdate(grad.data() + first * od, lr, step).ok());
    ASSERT_TRUE((*ref)->BackwardUpdate(grad.data(), lr, step).ok());
  }
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = so.collection.tables[t];
    const int64_t sd = RowStateDim(opt, c.dim);
    std::vector<float> w(c.num_rows * c.dim), s(c.num_rows * sd + 1);
    std::vector<float> rw(w.size()), rs(s.size());
    ASSERT_TRUE((*sharded)->ReadTable(t, 0, c.num_rows, w.data(), s.data()).ok());
    ASSERT_TRUE((*ref)->store(t).ReadRows(0, c.num_rows, rw.data(), rs.data()).ok());
    tt::ExpectClose(w.data(), rw.data(), w.size(), kRtol, kAtol, c.name + " weights");
    tt::ExpectClose(s.data(), rs.data(), c.num_rows * sd, kRtol, kAtol, c.name + " state");
    // A part of the table, starting mid-shard.
    std::vector<float> part(5 * c.dim);
    ASSERT_TRUE((*sharded)->ReadTable(t, 7, 5, part.data()).ok());
    tt::ExpectClose(part.data(), w.data() + 7 * c.dim, part.size(), 0, 0, c.name + " rows 7..11");
  }
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [n, layout, type, opt] = info.param;
  return std::to_string(4 / n) + "x" + std::to_string(n) + "_" +
         (layout == GridLayout::kReplicasAdjacent ? "adjacent" : "contiguous") + "_" +
         ShardingTypeName(type) + "_" + (opt == RowOptimizerType::kSgd ? "sgd" : "rowwise_adagrad");
}

INSTANTIATE_TEST_SUITE_P(
    AllShapesTypesOptimizers, ExactTest,
    ::testing::Combine(::testing::Values(1, 2, 4),
                       ::testing::Values(GridLayout::kReplicasAdjacent,
                                         GridLayout::kGroupsContiguous),
                       tt::EveryShardingType(), tt::BothRowOptimizers()),
    Name);

// The default plan (row-wise split of the big table, the rest table-wise) and Adam (per-column
// state, so column shards need no exchange) on 2x2.
TEST(ShardedEmbeddingTest, DefaultPlanWithAdamMatchesOneRank) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kAdam);
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ((*sharded)->plan().tables[0].type, ShardingType::kRowWise);
  auto ref = EmbeddingCollection::Create(so.collection, DeviceContext::Cpu());
  ASSERT_TRUE(ref.ok());
  const int64_t od = (*ref)->output_dim();
  const int me = World()->rank();
  for (int step = 1; step <= 3; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, 4, step, false);
    std::vector<float> out(gb.per_rank[me].batch_size * od), ref_out(gb.global.batch_size * od);
    ASSERT_TRUE((*sharded)->Forward(gb.per_rank[me], out.data()).ok());
    ASSERT_TRUE((*ref)->Forward(gb.global, ref_out.data()).ok());
    const int64_t first = tt::RowsBefore(gb, me);
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    ASSERT_TRUE((*sharded)->BackwardUpdate(grad.data() + first * od, 0.01f, step).ok());
    ASSERT_TRUE((*ref)->BackwardUpdate(grad.data(), 0.01f, step).ok());
  }
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = so.collection.tables[t];
    std::vector<float> w(c.num_rows * c.dim), rw(w.size());
    std::vector<float> s(c.num_rows * 2 * c.dim), rs(s.size());
    ASSERT_TRUE((*sharded)->ReadTable(t, 0, c.num_rows, w.data(), s.data()).ok());
    ASSERT_TRUE((*ref)->store(t).ReadRows(0, c.num_rows, rw.data(), rs.data()).ok());
    tt::ExpectClose(w.data(), rw.data(), w.size(), 1e-4, 1e-6, c.name + " weights");
    tt::ExpectClose(s.data(), rs.data(), s.size(), 1e-4, 1e-8, c.name + " adam state");
  }
}

// WriteTable then ReadTable round-trips on a grid-sharded table, on every rank.
TEST(ShardedEmbeddingTest, WriteThenReadTable) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 4});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kRowWiseAdagrad);
  so.plan = tt::PlanOfType(ShardingType::kGrid, so.collection.tables, 4);
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(sharded.ok());
  const TableConfig& c = so.collection.tables[0];
  std::vector<float> w(c.num_rows * c.dim), s(c.num_rows);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * i;
  for (size_t i = 0; i < s.size(); ++i) s[i] = 3.0f + i;
  ASSERT_TRUE((*sharded)->WriteTable(0, 0, c.num_rows, w.data(), s.data()).ok());
  std::vector<float> w2(w.size()), s2(s.size());
  ASSERT_TRUE((*sharded)->ReadTable(0, 0, c.num_rows, w2.data(), s2.data()).ok());
  EXPECT_EQ(w2, w);
  EXPECT_EQ(s2, s);
  EXPECT_EQ((*sharded)->ReadTable(0, 40, 2, w2.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*sharded)->ReadTable(3, 0, 1, w2.data()).code(), absl::StatusCode::kInvalidArgument);
}

// A bad id on one rank: every rank of its sharding group gets an error from the same Forward,
// nobody hangs, and the next step works.
TEST(ShardedEmbeddingTest, BadBatchOnOneRankFailsTheGroupTogether) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 4});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kSgd);
  so.plan = tt::PlanOfType(ShardingType::kRowWise, so.collection.tables, 4);
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(sharded.ok());
  const int me = World()->rank();
  tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, 4, 1, false);
  KeyedJagged mine = gb.per_rank[me];
  if (me == 1) {
    const int64_t at = mine.feature_begin(1);
    mine.values.insert(mine.values.begin() + at, 29);
    for (int64_t i = mine.batch_size + 1; i < static_cast<int64_t>(mine.offsets.size()); ++i) {
      mine.offsets[i] += 1;
    }
  }
  std::vector<float> out(mine.batch_size * (*sharded)->output_dim());
  absl::Status st = (*sharded)->Forward(mine, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  if (me == 1) {
    EXPECT_THAT(st.message(), ::testing::HasSubstr("table 'ads': feature 1 sample 0 has id 29"));
  } else {
    EXPECT_THAT(st.message(), ::testing::HasSubstr("rank 1 of this sharding group"));
  }
  EXPECT_FALSE((*sharded)->BackwardUpdate(out.data(), 0.1f, 1).ok());
  ASSERT_TRUE((*sharded)->Forward(gb.per_rank[me], out.data()).ok());
  ASSERT_TRUE((*sharded)->BackwardUpdate(out.data(), 0.1f, 1).ok());
}

TEST(ShardedEmbeddingTest, BadPlanFailsOnEveryRankBeforeTraining) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kSgd);
  so.plan = tt::PlanOfType(ShardingType::kTableWise, so.collection.tables, 2);
  so.plan.tables[1].shards[0].rank = 2;
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(sharded.ok());
  EXPECT_EQ(sharded.status().message(),
            "sharding plan: table 'ads' shard 0: rank 2 is outside the sharding group [0, 2)");
}

}  // namespace
}  // namespace tessera
