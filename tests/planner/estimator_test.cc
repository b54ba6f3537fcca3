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
  // Lookup: the owner gathers N B = 200 ids at 1e6 rows/s; update: its distinct rows among
  // them (the flat profile has no per-bag or per-id cost).
  EXPECT_NEAR(e.step.s[kLookup], 200 / 1e6, 1e-12);
  EXPECT_NEAR(e.step.s[kEmbeddingUpdate], ExpectedDistinct(200, 1000, 1.05) / 1e6, 1e-12);
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

TEST(EstimatorTest, OutputUnpackAndGradientPackByHand) {
  // Table-wise t0 on rank 0, row-wise t1 over both ranks (two row pieces): every rank writes
  // into its [B, 32] output one 100 x 16 block for t0 and t1's first partial sums (read, write)
  // and adds t1's second (read, read-modify-write), and packs one gradient block per shard, at
  // pack_bytes_per_s 1e8.
  MachineProfile prof = FlatProfile();
  prof.devices[0].pack_bytes_per_s = 1e8;
  PlanInputs in = SmallInputs({1000, 1000}, 16, 2, 100);
  in.step.row_state_fixed = 0;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok()) << est.status();
  TableOption rw;
  rw.type = ShardingType::kRowWise;
  rw.row_pieces = 2;
  StepEstimate e = est->Evaluate(
      {TableWise(0, in.tables[0].config), MakePlacement(rw, {0, 1}, in.tables[1].config)});
  const double block = 100 * 16 * 4;  // bytes of one shard's bags x cols
  // The exchange: rank 0 sends t0's block and its t1 partial sums (2 blocks) at 1e6 B/s.
  const double exchange = 2 * block / 1e6;
  EXPECT_NEAR(e.step.s[kOutputDist], exchange + (2 * 2 + 3) * block / 1e8, 1e-12);
  EXPECT_NEAR(e.step.s[kBackwardDist], exchange + 2 * 3 * block / 1e8, 1e-12);
  // Without the field the copy rate (1e9) prices them.
  prof.devices[0].pack_bytes_per_s = 0;
  absl::StatusOr<Estimator> est0 = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est0.ok());
  StepEstimate e0 = est0->Evaluate(
      {TableWise(0, in.tables[0].config), MakePlacement(rw, {0, 1}, in.tables[1].config)});
  EXPECT_NEAR(e0.step.s[kBackwardDist], exchange + 2 * 3 * block / 1e9, 1e-12);
  // One rank: the plain collection, nothing packed.
  PlanInputs one = SmallInputs({1000, 1000}, 16, 1, 100);
  absl::StatusOr<Estimator> est1 = Estimator::Create(one, prof, 1);
  ASSERT_TRUE(est1.ok());
  StepEstimate e1 =
      est1->Evaluate({TableWise(0, one.tables[0].config), TableWise(0, one.tables[1].config)});
  EXPECT_EQ(e1.step.s[kOutputDist], 0);
  EXPECT_EQ(e1.step.s[kBackwardDist], 0);
}

TEST(EstimatorTest, ColumnSplitAdagradSearchesTheSiblingsRows) {
  // One table column-wise over both ranks (2 column pieces), row-wise AdaGrad: every updated
  // row of each piece finds its row among both pieces' updated rows (U of them) by binary
  // search, log2 U steps each at search_step_s 1e-6; the update is otherwise U / 1e6.
  MachineProfile prof = FlatProfile();
  prof.devices[0].search_step_s = 1e-6;
  PlanInputs in = SmallInputs({1000}, 16, 2, 100);
  in.step.row_state_fixed = 1;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok()) << est.status();
  TableOption cw;
  cw.type = ShardingType::kColumnWise;
  cw.col_pieces = 2;
  StepEstimate e = est->Evaluate({MakePlacement(cw, {0, 1}, in.tables[0].config)});
  const double u = ExpectedDistinct(200, 1000, 1.05);
  EXPECT_NEAR(e.step.s[kEmbeddingUpdate], u / 1e6 + u * 2 * std::log2(u) * 1e-6, 1e-12);
  // SGD keeps no row state: no sum to gather, no search.
  in.step.row_state_fixed = 0;
  absl::StatusOr<Estimator> sgd = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(sgd.ok());
  StepEstimate es = sgd->Evaluate({MakePlacement(cw, {0, 1}, in.tables[0].config)});
  EXPECT_NEAR(es.step.s[kEmbeddingUpdate], u / 1e6, 1e-12);
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
  // All-gather of the touched ids 8 u (M - 1), all-reduce 2 (M-1)/M x U x d x 4, and the
  // union's buffer zeroed and its gradients copied in and out (3 x U x d x 4 at 1e9 B/s).
  EXPECT_NEAR(e.step.s[kReplicaSync],
              (8 * u_group + u_global * 16 * 4) / 1e6 + 3 * u_global * 16 * 4 / 1e9, 1e-9);
  // No peers in a group of one: no exchange, only the unpack into the output (free here).
  EXPECT_NEAR(e.step.s[kOutputDist], 0, 1e-12);
  // Every replica updates the union's rows.
  EXPECT_NEAR(e.step.s[kEmbeddingUpdate], u_global / 1e6, 1e-12);
}

// A profile with per-bag, per-id and collective latency costs, for the gaps the flat one hides.
MachineProfile CostedProfile(double latency_s) {
  MachineProfile p = FlatProfile(latency_s);
  for (RowRatePoint& r : p.devices[0].gather) r.bag_s = 1e-6;
  for (RowRatePoint& r : p.devices[0].scatter_update) r.id_s = 5e-7;
  return p;
}

TEST(EstimatorTest, MultiHotLookupAndUpdateByHand) {
  // T = 1, one table of 1000 rows, 40 ids per bag, 100 bags: lookup = bags x bag_s + ids /
  // rate, update = ids x id_s + distinct rows / rate.
  MachineProfile prof = CostedProfile(0);
  PlanInputs in = SmallInputs({1000}, 16, /*world=*/1, /*batch=*/100, /*ids=*/40);
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok()) << est.status();
  StepEstimate e = est->Evaluate({TableWise(0, in.tables[0].config)});
  EXPECT_NEAR(e.step.s[kLookup], 100 * 1e-6 + 4000 / 1e6, 1e-12);
  const double u = ExpectedDistinct(4000, 1000, 1.05);
  EXPECT_LT(u, 1000);
  EXPECT_NEAR(e.step.s[kEmbeddingUpdate], 4000 * 5e-7 + u / 1e6, 1e-12);
  EXPECT_EQ(e.step.s[kInputDist], 0);  // T = 1: no packing
  // Row-wise over 2 ranks (T = 2): each half pools every bag of both ranks (200 bags) and
  // gathers half of the 8000 ids.
  PlanInputs in2 = SmallInputs({1000}, 16, 2, 100, 40);
  absl::StatusOr<Estimator> est2 = Estimator::Create(in2, prof, 2);
  ASSERT_TRUE(est2.ok());
  TableOption rw;
  rw.type = ShardingType::kRowWise;
  rw.row_pieces = 2;
  StepEstimate e2 = est2->Evaluate({MakePlacement(rw, {0, 1}, in2.tables[0].config)});
  EXPECT_NEAR(e2.per_rank[0].s[kLookup], 200 * 1e-6 + 4000 / 1e6, 1e-12);
  EXPECT_NEAR(e2.step.s[kEmbeddingUpdate],
              4000 * 5e-7 + 0.5 * ExpectedDistinct(8000, 1000, 1.05) / 1e6, 1e-12);
}

TEST(EstimatorTest, InputPackingIsOnTheCriticalPath) {
  // Pipelined: the payload hides behind the other collectives, the packing does not: every
  // rank buckets its 100 ids per table (2 tables) at id_s = 5e-7.
  MachineProfile prof = CostedProfile(0);
  PlanInputs in = SmallInputs({1000, 1000}, 16, 2, 100);
  in.step.pipeline = true;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok());
  StepEstimate e =
      est->Evaluate({TableWise(0, in.tables[0].config), TableWise(1, in.tables[1].config)});
  EXPECT_NEAR(e.step.s[kInputDist], 2 * 100 * 5e-7, 1e-12);
  // With the profile's pack_id_s (the hash-map deduplication measured), that rate instead.
  prof.devices[0].pack_id_s = 2e-6;
  absl::StatusOr<Estimator> est2 = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est2.ok());
  StepEstimate e2 =
      est2->Evaluate({TableWise(0, in.tables[0].config), TableWise(1, in.tables[1].config)});
  EXPECT_NEAR(e2.step.s[kInputDist], 2 * 100 * 2e-6, 1e-12);
}

TEST(EstimatorTest, ExactSyncPaysThreeReplicaCollectivesPerStep) {
  // N = 1, M = 2, three tables: one ids-count all-gather, one ids all-gather and one gradient
  // all-reduce per step whatever the number of tables (ReplicaSyncPhase, kExact), at 1e-3 s each.
  MachineProfile prof = FlatProfile(1e-3);
  PlanInputs in = SmallInputs({1000, 1000, 1000}, 16, 2, 100);
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  std::vector<TablePlacement> p;
  for (int t = 0; t < 3; ++t) p.push_back(TableWise(0, in.tables[t].config));
  StepEstimate e = est->Evaluate(p);
  const double u_group = ExpectedDistinct(100, 1000, 1.05);
  const double u_global = ExpectedDistinct(200, 1000, 1.05);
  const double per_table = (8 * u_group + u_global * 16 * 4) / 1e6 + 3 * u_global * 64 / 1e9;
  EXPECT_NEAR(e.step.s[kReplicaSync], 3e-3 + 3 * per_table, 1e-9);
}

// Average sync, sync_rows all, k = 4: every 4th step each row's weights and state (16 x 4 + 4
// bytes) gathered into the buffer, the weights scattered back, the state snapshot taken and the
// delayed state average applied (4 row visits at 1e6 rows/s), and one all-reduce of all the
// rank's shards' buffers: beyond the 1 MiB LLC at the beyond-cache rate.
TEST(EstimatorTest, AverageSyncByHand) {
  MachineProfile prof = FlatProfile();
  for (CollectivePoint& c : prof.collectives) c.beyond_llc_bytes_per_s = 5e5;
  PlanInputs in = SmallInputs({50000, 50000}, 16, /*world=*/2, 100);
  in.step.replica_sync = ReplicaSync::kAverage;
  in.step.sync_every = 4;
  in.step.sync_all_rows = true;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  StepEstimate e =
      est->Evaluate({TableWise(0, in.tables[0].config), TableWise(0, in.tables[1].config)});
  const double rows = 100000, call = rows * 68, in_cache = 1 << 20;
  const double visits = 4 * rows / 1e6;
  const double all_reduce = in_cache / 1e6 + (call - in_cache) / 5e5;
  EXPECT_NEAR(e.step.s[kReplicaSync], (visits + all_reduce) / 4, 1e-9);
  // The buffer and the delayed state average and its snapshot stay allocated: 68 + 2 x 4 bytes
  // per row, where exact mode keeps the union's gradients.
  in.step.replica_sync = ReplicaSync::kExact;
  absl::StatusOr<Estimator> exact = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(exact.ok());
  StepEstimate x =
      exact->Evaluate({TableWise(0, in.tables[0].config), TableWise(0, in.tables[1].config)});
  EXPECT_NEAR(e.memory_detail[0].comm_buffers - x.memory_detail[0].comm_buffers,
              rows * (68 + 8) - ExpectedDistinct(200, 50000, 1.05) * 2 * 64, 1e-3);
  // Ranks computing side by side at twice the time (compute_slowdown 2 at world 2): the row
  // visits are compute and take twice as long; the all-reduce keeps its measured rate.
  for (CollectivePoint& c : prof.collectives) c.compute_slowdown = 2;
  in.step.replica_sync = ReplicaSync::kAverage;
  absl::StatusOr<Estimator> slow = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(slow.ok());
  StepEstimate sl =
      slow->Evaluate({TableWise(0, in.tables[0].config), TableWise(0, in.tables[1].config)});
  EXPECT_NEAR(sl.step.s[kReplicaSync], (2 * visits + all_reduce) / 4, 1e-9);
}

TEST(EstimatorTest, DataParallelTableUpdatedAndAllReducedInTheUpdate) {
  // T = 2, one data-parallel table of 1000 x 16 (SGD): every rank gathers its 100 ids, sorts
  // them (id_s), updates the world's distinct rows, writes the touched rows of the kept
  // 1000 x 17 x 4 gradient table, scans it whole and clears the touched rows (1e9 B/s), and
  // all-reduces it (2 (T-1)/T x bytes at 1e6 B/s + latency) inside the update, not in the
  // dense all-reduce.
  MachineProfile prof = CostedProfile(1e-3);
  PlanInputs in = SmallInputs({1000}, 16, 2, 100);
  in.step.row_state_fixed = 0;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(est.ok());
  TablePlacement dp;
  dp.option.type = ShardingType::kDataParallel;
  StepEstimate e = est->Evaluate({dp});
  const double grad = 1000 * 17 * 4.0;
  const double u_global = ExpectedDistinct(200, 1000, 1.05);
  EXPECT_NEAR(e.step.s[kLookup], 100 * 1e-6 + 100 / 1e6, 1e-12);
  EXPECT_NEAR(
      e.step.s[kEmbeddingUpdate],
      100 * 5e-7 + u_global / 1e6 + (grad + 2 * u_global * 17 * 4) / 1e9 + 1e-3 + grad / 1e6, 1e-9);
  // The dense all-reduce: the (empty) dense model's last bucket + the loss all-reduce only.
  EXPECT_LT(e.step.s[kDenseAllReduce], 3e-3);
}

TEST(EstimatorTest, DataParallelAllReduceBeyondTheLlcAtItsOwnRate) {
  // The data-parallel table of 100k x 16 (SGD): its gradient table (100k x 17 x 4 = 6.8 MB)
  // is one all-reduce call; with beyond_llc_bytes_per_s 2.5e5 the first 1 MiB (the LLC) moves
  // at 1e6 B/s and the rest at 2.5e5 B/s, so the update grows by exactly that difference.
  MachineProfile flat = FlatProfile(1e-3);
  MachineProfile slow = flat;
  for (CollectivePoint& c : slow.collectives) c.beyond_llc_bytes_per_s = 2.5e5;
  PlanInputs in = SmallInputs({100000}, 16, 2, 100);
  in.step.row_state_fixed = 0;
  absl::StatusOr<Estimator> a = Estimator::Create(in, flat, 2);
  absl::StatusOr<Estimator> b = Estimator::Create(in, slow, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  TablePlacement dp;
  dp.option.type = ShardingType::kDataParallel;
  const double grad = 100000 * 17 * 4.0, llc = 1 << 20;
  const double extra = (grad - llc) / 2.5e5 - (grad - llc) / 1e6;
  EXPECT_NEAR(
      b->Evaluate({dp}).step.s[kEmbeddingUpdate] - a->Evaluate({dp}).step.s[kEmbeddingUpdate],
      extra, 1e-9);
  // A gradient table within the LLC: no change.
  PlanInputs small = SmallInputs({1000}, 16, 2, 100);
  small.step.row_state_fixed = 0;
  absl::StatusOr<Estimator> c = Estimator::Create(small, flat, 2);
  absl::StatusOr<Estimator> d = Estimator::Create(small, slow, 2);
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(c->Evaluate({dp}).step.s[kEmbeddingUpdate], d->Evaluate({dp}).step.s[kEmbeddingUpdate]);
  // An LLC of 64 MiB: the beyond rate is calibrate's slope from its 4 MiB call
  // (kInCacheCallBytes), so it still starts at 4 MiB, not at the LLC.
  MachineProfile big_llc = slow;
  big_llc.devices[0].llc_bytes = int64_t{64} << 20;
  MachineProfile big_flat = flat;
  big_flat.devices[0].llc_bytes = int64_t{64} << 20;
  absl::StatusOr<Estimator> e = Estimator::Create(in, big_llc, 2);
  absl::StatusOr<Estimator> f = Estimator::Create(in, big_flat, 2);
  ASSERT_TRUE(e.ok() && f.ok());
  const double base = static_cast<double>(kInCacheCallBytes);
  EXPECT_NEAR(
      e->Evaluate({dp}).step.s[kEmbeddingUpdate] - f->Evaluate({dp}).step.s[kEmbeddingUpdate],
      (grad - base) / 2.5e5 - (grad - base) / 1e6, 1e-9);
}

TEST(EstimatorTest, TierMemoryIsWhatTheRunAllocates) {
  // One tiered table of 100k rows x 16 (SGD: value 64 bytes), cache 1000 rows, T = 1, B = 100:
  // caches = the row cache's slots (64 + 48 bytes) + the memtable's bucket array (2 MiB) + one
  // entry (64 + 290 bytes, measured) per row written back: the distinct rows outside the 1000
  // hottest among S steps' ids; no block cache while the memtable holds the writes.
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({100000}, 16, 1, 100);
  in.step.row_state_fixed = 0;
  in.topology.memory.disk = int64_t{1} << 34;
  in.step.steps = 20;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  TablePlacement p = TableWise(0, in.tables[0].config);
  p.option.tiered = true;
  p.option.cache_rows_fixed = 1000;
  StepEstimate e = est->Evaluate({p});
  const double written = ExpectedDistinct(20 * 100, 100000, 1.05, 1000);
  const double expect = 1000 * (64 + 48) + (128.0 * (1 << 20)) / 512 * 8 + written * (64 + 290);
  EXPECT_NEAR(e.memory_detail[0].caches, expect, 1e-6 * expect);
  // An unbounded run (steps 0): every row written once, still within one write buffer.
  in.step.steps = 0;
  absl::StatusOr<Estimator> est0 = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est0.ok());
  const double all = 1000 * (64 + 48) + (128.0 * (1 << 20)) / 512 * 8 + 100000 * (64 + 290);
  EXPECT_NEAR(est0->Evaluate({p}).memory_detail[0].caches, all, 1e-6 * all);
}

TEST(EstimatorTest, HiddenTierReadsCountOnTheCpuClock) {
  // One tiered table (cache 1000 of 100k rows), T = 1, B = 100: the step's misses (distinct
  // rows outside the 1000 hottest among 100 ids) read from the page cache at 1e-5 s each by the
  // tier's threads during the step, and written back at 1e-6 s each during the next one. Each
  // is hidden behind the rest of the step (`rest`) and exposed only by what outlasts it; what
  // is hidden is background_s, which the process CPU clock counts. The training thread's own
  // part, the prefetch's probe of every id in the row cache (hit_s), is on the critical path.
  MachineProfile prof = FlatProfile();
  for (TierPoint& t : prof.tier) t.hit_s = 1e-7;
  PlanInputs in = SmallInputs({100000}, 16, 1, 100);
  in.step.row_state_fixed = 0;
  in.topology.memory.disk = int64_t{1} << 34;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  TablePlacement p = TableWise(0, in.tables[0].config);
  p.option.tiered = true;
  p.option.cache_rows_fixed = 1000;
  const double misses = ExpectedDistinct(100, 100000, 1.05, 1000);
  const double probes = 100 * 1e-7;
  StepEstimate e = est->Evaluate({p});
  const double reads = misses * 1e-5, writes = misses * 1e-6;
  const double rest = e.step.total() - e.step.s[kTierMisses] + probes;
  ASSERT_LT(rest, reads);   // longer than the step: only `rest` is hidden
  ASSERT_GT(rest, writes);  // the write-back is hidden whole
  EXPECT_NEAR(e.step.s[kTierMisses], probes + reads - rest, 1e-12);
  EXPECT_NEAR(e.step.background_s, rest + writes, 1e-12);
  // The write-back is not in the update (the writer thread runs it): the update is the
  // in-memory table's.
  EXPECT_NEAR(e.step.s[kEmbeddingUpdate],
              est->Evaluate({TableWise(0, in.tables[0].config)}).step.s[kEmbeddingUpdate], 1e-15);
  // Reads 100x cheaper: hidden whole; the tier phase is the probes alone.
  for (TierPoint& t : prof.tier) t.read_cached_s = 1e-7;
  absl::StatusOr<Estimator> cheap = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(cheap.ok());
  StepEstimate ec = cheap->Evaluate({p});
  EXPECT_NEAR(ec.step.s[kTierMisses], probes, 1e-13);
  EXPECT_NEAR(ec.step.background_s, misses * 1e-7 + writes, 1e-13);
  // In memory: nothing in the background.
  EXPECT_EQ(est->Evaluate({TableWise(0, in.tables[0].config)}).step.background_s, 0);
}

TEST(EstimatorTest, UpdateFindsTheForwardsRowsInTheLlc) {
  // One table of 10k x 16 (SGD; 640 KB, within the 1 MiB LLC: it stays there), T = 1, B = 1000,
  // no dense model: its ~u distinct rows x 64 bytes are still in the LLC at the update, so they
  // update at the warm rate (4e6 rows/s) instead of 1e6.
  MachineProfile prof = FlatProfile();
  for (RowRatePoint& r : prof.devices[0].scatter_update) r.warm_rows_per_s = 4e6;
  PlanInputs in = SmallInputs({10000}, 16, 1, 1000);
  in.step.row_state_fixed = 0;
  const double u = ExpectedDistinct(1000, 10000, 1.05);
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  TablePlacement p = TableWise(0, in.tables[0].config);
  EXPECT_NEAR(est->Evaluate({p}).step.s[kEmbeddingUpdate], u / 4e6, 1e-12);
  // A table that does not stay in the LLC (100k x 16, 6.4 MB): the dense work between its
  // lookup and its update evicts the forward's rows, so every row at the evicted rate.
  {
    PlanInputs big = SmallInputs({100000}, 16, 1, 1000);
    big.step.row_state_fixed = 0;
    const double ub = ExpectedDistinct(1000, 100000, 1.05);
    absl::StatusOr<Estimator> eb = Estimator::Create(big, prof, 1);
    ASSERT_TRUE(eb.ok());
    EXPECT_NEAR(eb->Evaluate({TableWise(0, big.tables[0].config)}).step.s[kEmbeddingUpdate],
                ub / 1e6, 1e-12);
  }
  // A bottom layer of 256 (2 MB of activations and gradients) and an LLC of what the dense work
  // keeps there + 0.5 x the rows' bytes (the table still within it): half of the rows warm.
  in.dense.bottom_mlp = {256};
  absl::StatusOr<Estimator> sized = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(sized.ok());
  // What the dense work keeps in the LLC: the activations (and gradients) and the dense weights
  // and their gradients (8 bytes per parameter; FixedMemory's dense is 4 x (3 + state floats)).
  const double act = sized->FixedMemory().activations +
                     8 * sized->FixedMemory().dense / (4.0 * (3 + in.dense.optimizer_state_floats));
  ASSERT_GT(act, 10000 * 64);
  prof.devices[0].llc_bytes = static_cast<int64_t>(act + 0.5 * u * 64);
  absl::StatusOr<Estimator> half = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(half.ok());
  const double w = (static_cast<double>(prof.devices[0].llc_bytes) - act) / (u * 64);
  EXPECT_NEAR(w, 0.5, 1e-4);
  // Against the same model without warm rates (the dense layer's own update work cancels).
  auto evicted = [](MachineProfile q, const PlanInputs& i, int t) {
    for (RowRatePoint& r : q.devices[0].scatter_update) r.warm_rows_per_s = 0;
    absl::StatusOr<Estimator> e = Estimator::Create(i, q, t);
    EXPECT_TRUE(e.ok());
    return e.ok() ? e->Evaluate({TableWise(0, i.tables[0].config)}).step.s[kEmbeddingUpdate] : 0;
  };
  EXPECT_NEAR(half->Evaluate({p}).step.s[kEmbeddingUpdate] - evicted(prof, in, 1),
              w * u / 4e6 - w * u / 1e6, 1e-12);
  // Two ranks on the node share the LLC: at T = 2 the owner's rows (the group's 2000 samples')
  // get half of it.
  {
    PlanInputs in2 = SmallInputs({10000}, 16, 2, 1000);
    in2.step.row_state_fixed = 0;
    in2.dense.bottom_mlp = {256};
    const double u2 = ExpectedDistinct(2000, 10000, 1.05);
    MachineProfile p2 = prof;
    p2.devices[0].llc_bytes = static_cast<int64_t>(2 * (act + 0.5 * u2 * 64));
    absl::StatusOr<Estimator> two = Estimator::Create(in2, p2, 2);
    ASSERT_TRUE(two.ok());
    const double w2 = (p2.devices[0].llc_bytes / 2.0 - act) / (u2 * 64);
    EXPECT_GT(w2, 0.4);
    EXPECT_LT(w2, 0.6);
    EXPECT_NEAR(two->Evaluate({TableWise(0, in2.tables[0].config)}).step.s[kEmbeddingUpdate] -
                    evicted(p2, in2, 2),
                w2 * u2 / 4e6 - w2 * u2 / 1e6, 1e-12);
  }
  // Dense activations that fill the LLC: every row at the evicted rate.
  prof.devices[0].llc_bytes = 1 << 20;
  in.dense.bottom_mlp = {1024};
  absl::StatusOr<Estimator> busy = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(busy.ok());
  ASSERT_GT(busy->dense_forward_s(), 0);
  EXPECT_NEAR(busy->Evaluate({p}).step.s[kEmbeddingUpdate], u / 1e6, 1e-12);
  // A profile without warm rates: the evicted rate.
  for (RowRatePoint& r : prof.devices[0].scatter_update) r.warm_rows_per_s = 0;
  in.dense.bottom_mlp = {};
  absl::StatusOr<Estimator> none = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_NEAR(none->Evaluate({p}).step.s[kEmbeddingUpdate], u / 1e6, 1e-12);
}

// Calibrate times its gemm points through the Linear layer (bias + ReLU inside): a profile
// that says so (gemm_fused_passes) adds no elementwise passes; bare GEMM rates get 3 passes
// over [b, out] per layer at the copy rate.
TEST(EstimatorTest, FusedLinearPassesAreNotPricedTwice) {
  PlanInputs in = SmallInputs({1000}, 16, 1, 1000);
  in.dense.num_dense = 13;
  in.dense.bottom_mlp = {512, 64};
  in.dense.top_mlp = {};
  in.dense.interaction = Interaction::kDcn;
  in.dense.dcn_num_layers = 0;
  MachineProfile prof = FlatProfile();
  DeviceProfile& d = prof.devices[0];
  d.gemm = {{1000, 512, 13, 1e11}};
  d.gemm_peak_flops_per_s = 1e11;
  d.launch_overhead_s = 0;
  absl::StatusOr<Estimator> bare = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(bare.ok());
  d.gemm_fused_passes = true;
  absl::StatusOr<Estimator> fused = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(fused.ok());
  const double flops = 2.0 * 1000 * (13 * 512 + 512 * 64);
  EXPECT_NEAR(fused->dense_forward_s(), flops / 1e11, 1e-12);
  EXPECT_NEAR(bare->dense_forward_s() - fused->dense_forward_s(),
              3.0 * 1000 * (512 + 64) * 4 / d.copy_bytes_per_s, 1e-12);
  EXPECT_NEAR(bare->dense_backward_s() - fused->dense_backward_s(),
              3.0 * 1000 * (512 + 64) * 4 / d.copy_bytes_per_s, 1e-12);
}

// A profile with cross points prices each cross layer whole at the nearest point's rates (its
// GEMM flops: 2 b d^2 forward, twice that backward); without them as a Linear d -> d plus the
// combine passes.
TEST(EstimatorTest, CrossLayersAtTheirTimedRates) {
  PlanInputs in = SmallInputs({1000}, 16, 1, 1000);
  in.dense.num_dense = 13;
  in.dense.bottom_mlp = {16};
  in.dense.top_mlp = {};
  in.dense.interaction = Interaction::kDcn;
  MachineProfile prof = FlatProfile();
  DeviceProfile& d = prof.devices[0];
  d.gemm = {{1000, 16, 13, 1e11}};
  d.gemm_peak_flops_per_s = 1e11;
  d.gemm_fused_passes = true;
  d.launch_overhead_s = 0;
  in.dense.dcn_num_layers = 0;
  absl::StatusOr<Estimator> none = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(none.ok());
  in.dense.dcn_num_layers = 3;
  absl::StatusOr<Estimator> linear = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(linear.ok());
  const double dim = 16 + 16, flops = 2.0 * 1000 * dim * dim;
  EXPECT_NEAR(linear->dense_forward_s() - none->dense_forward_s(),
              3 * (flops / 1e11 + 3.0 * 1000 * dim * 4 / d.copy_bytes_per_s), 1e-12);
  d.cross = {{2048, 32, 0, 5e10, 4e10}, {2048, 256, 64, 1e12, 1e12}};
  absl::StatusOr<Estimator> timed = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(timed.ok());
  EXPECT_NEAR(timed->dense_forward_s() - none->dense_forward_s(), 3 * flops / 5e10, 1e-12);
  // The same parameters (the same optimizer pass): only the layers' own time differs.
  EXPECT_NEAR(timed->dense_backward_s() - linear->dense_backward_s(),
              3 * (2 * flops / 4e10 - 2 * flops / 1e11 - 3.0 * 1000 * dim * 4 / d.copy_bytes_per_s),
              1e-12);
}

// Tables that stay in the LLC (smallest first, while their running total fits) gather at the
// profile's cached rates; the rest at bag_s and the hot/cold rates.
TEST(EstimatorTest, TablesWithinTheLlcGatherAtTheCachedRates) {
  MachineProfile prof = FlatProfile();  // llc 1 MiB; gather 1e6 rows/s, bag_s 0
  for (RowRatePoint& g : prof.devices[0].gather) {
    g.cached_bag_s = 1e-7;
    g.cached_rows_per_s = 1e7;
  }
  // 16-dim rows: 64 B; 10000 rows = 640 KB each: the first fits, both (1.28 MB) do not. A
  // 2048-wide layer's activations (1.6 MB) leave no room for rows kept between steps
  // (ResidentShareGathersAtTheCachedRate).
  PlanInputs in = SmallInputs({10000, 10000, 100000}, 16, 1, 100);
  in.dense.bottom_mlp = {2048};
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  std::vector<TablePlacement> p;
  for (int t = 0; t < 3; ++t) p.push_back(TableWise(0, in.tables[t].config));
  StepEstimate e = est->Evaluate(p);
  // 100 bags of one id each: cached 100 x (100 ns + 100 ns); otherwise 100 x 1 us.
  EXPECT_NEAR(e.step.s[kLookup], 100 * 2e-7 + 2 * 100 * 1e-6, 1e-12);
}

// A table larger than the LLC: the share of its ids that hit the rows the LLC keeps between
// steps gathers at the cached rate, the rest at the (evicted) hot/cold rate; more skew keeps
// more of the ids resident, no room (the dense work fills the LLC) none; of two tables the one
// read more per byte holds more of the room.
TEST(EstimatorTest, ResidentShareGathersAtTheCachedRate) {
  MachineProfile prof = FlatProfile();  // llc 1 MiB; gather 1e6 rows/s, bag_s 0
  for (RowRatePoint& g : prof.devices[0].gather) {
    g.cached_bag_s = 1e-7;
    g.cached_rows_per_s = 1e7;
  }
  auto lookup = [&](const PlanInputs& in) {
    absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
    EXPECT_TRUE(est.ok());
    std::vector<TablePlacement> p;
    for (size_t t = 0; t < in.tables.size(); ++t) {
      p.push_back(TableWise(0, in.tables[t].config));
    }
    return est->Evaluate(p).step.s[kLookup];
  };
  // 100000 rows x 64 B = 6.4 MB; 1000 ids per step (100 bags of 10).
  PlanInputs in = SmallInputs({100000}, 16, 1, 100, 10);
  const double evicted = 1000 * 1e-6, cached = 1000 * 1e-7;
  const double zipf = lookup(in);
  EXPECT_LT(zipf, evicted);
  EXPECT_GT(zipf, cached);
  in.tables[0].zipf_exponent = 1.3;
  const double skewed = lookup(in);
  EXPECT_LT(skewed, zipf);
  in.dense.bottom_mlp = {4096};  // 3.3 MB of activations
  EXPECT_NEAR(lookup(in), evicted, 1e-12);
  // Two tables of the same size, one read 10x more: it takes the most of the room.
  PlanInputs two = SmallInputs({100000, 100000}, 16, 1, 100);
  two.tables[0].ids_per_bag = 10;
  absl::StatusOr<Estimator> est = Estimator::Create(two, prof, 1);
  ASSERT_TRUE(est.ok());
  StepEstimate e = est->Evaluate({TableWise(0, two.tables[0].config)});
  const double hot_per_id = e.step.s[kLookup] / 1000;
  e = est->Evaluate({TableWise(0, two.tables[1].config)});
  const double cold_per_id = e.step.s[kLookup] / 100;
  EXPECT_LT(hot_per_id, cold_per_id);
}

TEST(EstimatorTest, CommunicatorMemoryOnlyWithPeers) {
  MachineProfile prof = FlatProfile();
  prof.devices[0].comm_memory_bytes = 20 << 20;
  for (int world : {1, 2}) {
    PlanInputs in = SmallInputs({1000}, 16, world, 100);
    absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
    ASSERT_TRUE(est.ok());
    EXPECT_EQ(est->FixedMemory().base, (1 << 20) + (world > 1 ? 20 << 20 : 0)) << world;
  }
}

TEST(EstimatorTest, HotShareFromTheProfilesLlc) {
  // Hot 2e6 rows/s, cold 1e6: a 1000 x 16 table (64 KB) is within a 1 MiB LLC (all hot); with
  // a 32 KiB LLC and Zipf 0.525 it is half hot (the blend is by time per row).
  MachineProfile prof = FlatProfile();
  prof.devices[0].gather = {{64, 2e6, 1e6}};
  PlanInputs in = SmallInputs({1000}, 16, 1, 100);
  in.tables[0].zipf_exponent = 0.525;
  for (int64_t llc : {int64_t{1} << 20, int64_t{32} << 10}) {
    prof.devices[0].llc_bytes = llc;
    absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
    ASSERT_TRUE(est.ok());
    const double rate = llc > 64000 ? 2e6 : 1 / (0.5 / 2e6 + 0.5 / 1e6);
    EXPECT_NEAR(est->Evaluate({TableWise(0, in.tables[0].config)}).step.s[kLookup], 100 / rate,
                1e-12)
        << llc;
  }
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

// FlatProfile with cross-node points 10x slower (1e5 bytes/s) at world sizes 2 and 4, each
// with compute_slowdown `cross_slowdown`.
}  // namespace
}  // namespace tessera::planner
