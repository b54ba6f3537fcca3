// Estimator against hand-computed costs (tests/planner/test_inputs.h's flat profile: every rate
// 1e6 per second, collectives 1e6 bytes/s and no latency), the Zipf formula against a direct
// sum, and the id-bytes model against the one validated on the communicator's counters.
#include "planner/estimator.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

TablePlacement TableWise(int rank, const TableConfig& t) {
  TableOption o;
  o.type = ShardingType::kTableWise;
  return MakePlacement(o, {rank}, t);
}

TEST(ZipfTest, ExpectedDistinctMatchesDirectSum) {
  // Below 4096 rows the formula is the exact sum over ranks.
  const int64_t rows = 1000;
  const double s = 1.05, n = 300;
  double norm = 0;
  for (int64_t r = 1; r <= rows; ++r) norm += std::pow(static_cast<double>(r), -s);
  double expect = 0;
  for (int64_t r = 1; r <= rows; ++r) {
    expect += 1 - std::pow(1 - std::pow(static_cast<double>(r), -s) / norm, n);
  }
  EXPECT_NEAR(ExpectedDistinct(n, rows, s), expect, 1e-9 * expect);
  // Rows beyond a cache of the 100 hottest.
  double tail = 0;
  for (int64_t r = 101; r <= rows; ++r) {
    tail += 1 - std::pow(1 - std::pow(static_cast<double>(r), -s) / norm, n);
  }
  EXPECT_NEAR(ExpectedDistinct(n, rows, s, 101), tail, 1e-9 * tail);
  double hot = 0;
  for (int64_t r = 1; r <= 100; ++r) hot += std::pow(static_cast<double>(r), -s) / norm;
  EXPECT_NEAR(ZipfCoverage(100, rows, s), hot, 1e-12);
  // Large tables: grouped ranks, close to the exact sum (checked at 100k rows).
  const int64_t big = 100000;
  double bnorm = 0, bexp = 0;
  for (int64_t r = 1; r <= big; ++r) bnorm += std::pow(static_cast<double>(r), -s);
  for (int64_t r = 1; r <= big; ++r) {
    bexp += -std::expm1(20000 * std::log1p(-std::pow(static_cast<double>(r), -s) / bnorm));
  }
  EXPECT_NEAR(ExpectedDistinct(20000, big, s), bexp, 2e-3 * bexp);
}

TEST(EstimatorTest, TableWiseByHand) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({1000, 1000}, 16, /*world=*/2, /*batch=*/100);
  in.step.row_state_fixed = 0;  // SGD
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok()) << est.status();
  StepEstimate e =
      est->Evaluate({TableWise(0, in.tables[0].config), TableWise(1, in.tables[1].config)});
  const double u = ExpectedDistinct(100, 1000, 1.05);
  // Input dist: each rank sends the other's table its 8 u unique ids, 100 positions and 100
  // lengths (4 bytes each), at 1e6 B/s.
  const double in_bytes = 8 * u + 4 * 100 + 4 * 100;
  EXPECT_NEAR(e.step.s[kInputDist], in_bytes / 1e6, 1e-12);
  // Lookup and update: the owner gathers N B = 200 ids at 1e6 rows/s.
  EXPECT_NEAR(e.step.s[kLookup], 200 / 1e6, 1e-12);
  EXPECT_NEAR(e.step.s[kEmbeddingUpdate], 200 / 1e6, 1e-12);
  // Output and backward dist: 100 bags x 16 floats x 4 bytes to the other rank.
  EXPECT_NEAR(e.step.s[kOutputDist], 6400 / 1e6, 1e-12);
  EXPECT_NEAR(e.step.s[kBackwardDist], 6400 / 1e6, 1e-12);
  EXPECT_EQ(e.step.s[kReplicaSync], 0);
  EXPECT_EQ(e.step.s[kTierMisses], 0);
  // Memory: the owner holds its table's weights, no optimizer state (SGD).
  EXPECT_DOUBLE_EQ(e.memory_detail[0].weights, 1000 * 16 * 4);
  EXPECT_DOUBLE_EQ(e.memory_detail[1].weights, 1000 * 16 * 4);
  EXPECT_DOUBLE_EQ(e.memory_detail[0].optimizer_state, 0);
  EXPECT_NEAR(e.imbalance, 1.0, 1e-12);
}

TEST(EstimatorTest, RowWiseAndImbalanceByHand) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({1000, 10}, 16, 2, 100);
  in.step.row_state_fixed = 1;  // row-wise AdaGrad: one float per row
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok());
  TableOption rw;
  rw.type = ShardingType::kRowWise;
  rw.row_pieces = 2;
  // Table 0 row-wise over both ranks, table 1 (tiny) on rank 0.
  StepEstimate e = est->Evaluate(
      {MakePlacement(rw, {0, 1}, in.tables[0].config), TableWise(0, in.tables[1].config)});
  // Each half of table 0 gets half the ids of both ranks (100), table 1 all 200 ids on rank 0.
  EXPECT_NEAR(e.per_rank[0].s[kLookup], (100 + 200) / 1e6, 1e-12);
  EXPECT_NEAR(e.per_rank[1].s[kLookup], 100 / 1e6, 1e-12);
  EXPECT_NEAR(e.step.s[kLookup], 300 / 1e6, 1e-12);
  // Output: every row shard returns a partial sum of every bag: rank 0 sends 6400 bytes for its
  // half of table 0 and 6400 for table 1; rank 1 sends 6400.
  EXPECT_NEAR(e.step.s[kOutputDist], 12800 / 1e6, 1e-12);
  // Weights and state: 500 rows x 16 floats + 500 accumulators per half.
  EXPECT_DOUBLE_EQ(e.memory_detail[1].weights, 500 * 16 * 4);
  EXPECT_DOUBLE_EQ(e.memory_detail[1].optimizer_state, 500 * 4);
  EXPECT_DOUBLE_EQ(e.memory_detail[0].weights, (500 + 10) * 16 * 4);
}

TEST(EstimatorTest, LatencyPerCollective) {
  MachineProfile prof = FlatProfile(/*latency_s=*/1e-3);
  PlanInputs in = SmallInputs({1000, 1000}, 16, 2, 100);
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok());
  StepEstimate e =
      est->Evaluate({TableWise(0, in.tables[0].config), TableWise(1, in.tables[1].config)});
  EXPECT_NEAR(e.step.s[kOutputDist], 1e-3 + 6400 / 1e6, 1e-12);
  // Input dist: the header all-to-all and the payload all-to-all.
  const double in_bytes = 8 * ExpectedDistinct(100, 1000, 1.05) + 800;
  EXPECT_NEAR(e.step.s[kInputDist], 2e-3 + in_bytes / 1e6, 1e-12);
}

TEST(EstimatorTest, PipelinedInputDistHidesBehindOtherCollectives) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({1000, 1000}, 16, 2, 100);
  in.step.pipeline = true;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok());
  StepEstimate e =
      est->Evaluate({TableWise(0, in.tables[0].config), TableWise(1, in.tables[1].config)});
  // The id payload (~3.5 KB) travels during the output and backward dists (12.8 KB).
  EXPECT_EQ(e.step.s[kInputDist], 0);
}

TEST(EstimatorTest, ReplicaSyncExactByHand) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({1000}, 16, /*world=*/2, 100);
  // N = 1: two replicas of the whole table, exact sync.
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  StepEstimate e = est->Evaluate({TableWise(0, in.tables[0].config)});
  const double u_group = ExpectedDistinct(100, 1000, 1.05);
  const double u_global = ExpectedDistinct(200, 1000, 1.05);
  // All-gather of the touched ids 8 u (M - 1), all-reduce 2 (M-1)/M x U x d x 4.
  EXPECT_NEAR(e.step.s[kReplicaSync], (8 * u_group + u_global * 16 * 4) / 1e6, 1e-9);
  EXPECT_EQ(e.step.s[kOutputDist], 0);  // no peers in a group of one
}

TEST(EstimatorTest, IdBytesMatchTheValidatedModel) {
  // bench/cost_model.py's table-wise input-dist bytes (validated against the communicator's
  // counters at ratio 0.998-1.003, docs/PERFORMANCE.md): per rank, over the N - 1 peers, the
  // tables of each peer: 8 U(B L) + 4 B + 4 B L. configs/bench/small.yaml: 8 tables x 100k rows,
  // d 64, L 1, B 2048 per rank, N = 4: every rank owns 2 tables.
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs(std::vector<int64_t>(8, 100000), 64, 4, 2048);
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 4);
  ASSERT_TRUE(est.ok());
  std::vector<TablePlacement> p;
  for (int t = 0; t < 8; ++t) p.push_back(TableWise(t / 2, in.tables[t].config));
  StepEstimate e = est->Evaluate(p);
  const double u = ExpectedDistinct(2048, 100000, 1.05);
  const double per_peer = 2 * (8 * u + 4 * 2048 + 4 * 2048);
  EXPECT_NEAR(e.step.s[kInputDist] * 1e6, 3 * per_peer, 1e-6 * per_peer);
  // Output + backward: 2 B F d e (N - 1) / N bytes.
  EXPECT_NEAR((e.step.s[kOutputDist] + e.step.s[kBackwardDist]) * 1e6,
              2.0 * 2048 * 8 * 64 * 4 * 3 / 4, 1e-3);
}

}  // namespace
}  // namespace tessera::planner
