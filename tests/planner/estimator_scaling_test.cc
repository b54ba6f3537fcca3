// The estimator across ranks, cores and nodes against hand-computed costs
// (tests/planner/test_inputs.h's flat profile, with a second, cross-node scope for the nodes):
// each rank waits for the slowest at every collective, ranks sharing cores compute slower,
// groups, replica syncs and the dense all-reduce that cross the link pay its measured rate, the
// world across nodes its compute slowdown.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/estimator.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

TEST(EstimatorTest, CollectivesWaitInProportionToTheComputeBeforeThem) {
  // T = 2, two tables table-wise, wait_per_compute 0.5 on every collective: each collective
  // waits 0.5 x the compute since the previous one, in the trainer's order: input dist after
  // the packing (0: id_s = 0), output dist after the lookup (200 ids at 1e6/s), backward dist
  // after the dense model (none here: 0), the dense all-reduce after the update (the distinct
  // rows of 200 ids at 1e6/s). Every other phase as without the wait.
  MachineProfile flat = FlatProfile();
  MachineProfile waiting = FlatProfile();
  for (CollectivePoint& c : waiting.collectives) c.wait_per_compute = 0.5;
  PlanInputs in = SmallInputs({1000, 1000}, 16, /*world=*/2, /*batch=*/100);
  in.step.row_state_fixed = 0;
  absl::StatusOr<Estimator> a = Estimator::Create(in, flat, 2);
  absl::StatusOr<Estimator> b = Estimator::Create(in, waiting, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                   TableWise(1, in.tables[1].config)};
  StepEstimate ea = a->Evaluate(p), eb = b->Evaluate(p);
  const double lookup = 200 / 1e6, update = ExpectedDistinct(200, 1000, 1.05) / 1e6;
  EXPECT_NEAR(eb.step.s[kInputDist] - ea.step.s[kInputDist], 0, 1e-15);
  EXPECT_NEAR(eb.step.s[kOutputDist] - ea.step.s[kOutputDist], 0.5 * lookup, 1e-12);
  // (The unpack and the gradient pack before it are free in the flat profile.)
  EXPECT_NEAR(eb.step.s[kBackwardDist] - ea.step.s[kBackwardDist], 0, 1e-12);
  EXPECT_NEAR(eb.step.s[kDenseAllReduce] - ea.step.s[kDenseAllReduce], 0.5 * update, 1e-12);
  EXPECT_NEAR(eb.step.total() - ea.step.total(), 0.5 * (lookup + update), 1e-12);
  // T = 1: no collectives, no wait.
  PlanInputs one = SmallInputs({1000}, 16, /*world=*/1, /*batch=*/100);
  absl::StatusOr<Estimator> c = Estimator::Create(one, flat, 1);
  absl::StatusOr<Estimator> d = Estimator::Create(one, waiting, 1);
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(c->Evaluate({TableWise(0, one.tables[0].config)}).step.total(),
            d->Evaluate({TableWise(0, one.tables[0].config)}).step.total());
}

TEST(EstimatorTest, TheFastRankWaitsForTheSlowestAtEachCollective) {
  // T = 2, both tables table-wise on rank 0 (a deliberately imbalanced plan): rank 0 gathers
  // and updates the ids of both tables, rank 1 nothing. Rank 1 arrives at the output dist
  // after its (empty) lookup and waits there for rank 0's, and at the update's collectives
  // for rank 0's update; rank 0 waits for nobody. Every rank's own time plus its wait is the
  // step, and the step is the sum of the slowest rank's segments (StepFromMaxima's total).
  PlanInputs in = SmallInputs({1000, 1000}, 16, /*world=*/2, /*batch=*/100);
  in.step.row_state_fixed = 0;
  const MachineProfile flat = FlatProfile();
  absl::StatusOr<Estimator> est = Estimator::Create(in, flat, 2);
  ASSERT_TRUE(est.ok()) << est.status();
  StepEstimate e =
      est->Evaluate({TableWise(0, in.tables[0].config), TableWise(0, in.tables[1].config)});
  ASSERT_EQ(e.wait.size(), 2u);
  const double lookup0 = 2 * 200 / 1e6;  // the group's 200 ids of each table at 1e6/s
  EXPECT_NEAR(e.per_rank[0].s[kLookup], lookup0, 1e-12);
  EXPECT_NEAR(e.per_rank[1].s[kLookup], 0, 1e-15);
  const double update0 = e.per_rank[0].s[kEmbeddingUpdate] - e.per_rank[1].s[kEmbeddingUpdate];
  EXPECT_GT(update0, 0);
  // The output dist's own transfer is the same on both ranks (the all-to-all ends with its
  // slowest side): rank 1's wait there is rank 0's lookup.
  EXPECT_NEAR(
      e.wait[1].s[kOutputDist] - (e.per_rank[0].s[kOutputDist] - e.per_rank[1].s[kOutputDist]),
      lookup0, 1e-12);
  EXPECT_NEAR(e.wait[1].s[kEmbeddingUpdate], update0, 1e-12);
  EXPECT_NEAR(e.wait[0].total(), 0, 1e-15);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(e.per_rank[r].total() + e.wait[r].total(), e.step.total(), 1e-12) << r;
  }
  MetricVec mx{};
  {
    // The search's objective over the ranks' maxima gives the same step.
    std::vector<MetricVec> rank(2, est->FixedPerRank());
    for (int t = 0; t < 2; ++t) {
      Contribution c = est->Contribute(t, TableWise(0, in.tables[t].config));
      for (int r = 0; r < 2; ++r) {
        for (int k = 0; k < kNumMetrics; ++k) rank[r][k] += c.uniform[k];
      }
      for (const auto& [r, d] : c.per_rank) {
        for (int k = 0; k < kNumMetrics; ++k) rank[r][k] += d[k];
      }
    }
    for (int k = 0; k < kNumMetrics; ++k) mx[k] = std::max(rank[0][k], rank[1][k]);
  }
  EXPECT_NEAR(est->StepFromMaxima(mx, 0).total(), e.step.total(), 1e-12);
  EXPECT_NEAR(e.step.s[kLookup], lookup0, 1e-12);
}

TEST(EstimatorTest, RanksSharingCoresComputeSlower) {
  // T = 4 on one node of a profile whose fingerprint says 2 cores, 1 thread per rank: the ranks
  // share the cores two to one, so every compute phase takes twice its time on own cores.
  PlanInputs in = SmallInputs({1000, 1000, 1000, 1000}, 16, /*world=*/4, /*batch=*/100);
  in.topology.ranks_per_node = 4;
  in.step.threads = 1;
  MachineProfile own = FlatProfile();
  own.fingerprint.present = true;
  own.fingerprint.cores = 4;
  MachineProfile shared = own;
  shared.fingerprint.cores = 2;
  absl::StatusOr<Estimator> a = Estimator::Create(in, own, 4);
  absl::StatusOr<Estimator> b = Estimator::Create(in, shared, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->cores_share(), 1);
  EXPECT_EQ(b->cores_share(), 2);
  std::vector<TablePlacement> p;
  for (int t = 0; t < 4; ++t) p.push_back(TableWise(t, in.tables[t].config));
  StepEstimate ea = a->Evaluate(p), eb = b->Evaluate(p);
  EXPECT_GT(ea.step.s[kLookup], 0);
  EXPECT_NEAR(eb.step.s[kLookup], 2 * ea.step.s[kLookup], 1e-12);
  EXPECT_NEAR(eb.step.s[kEmbeddingUpdate], 2 * ea.step.s[kEmbeddingUpdate], 1e-12);
}

// Two tables table-wise on the 2 ranks of one node, a bottom MLP: the step from `prof` and from
// FlatProfile() (no slowdowns) in *slow and *flat.
void StepsAtTwoRanks(const MachineProfile& prof, StepEstimate* slow, StepEstimate* flat) {
  PlanInputs in = SmallInputs({1000, 1000}, 16, 2, 100);
  in.topology.ranks_per_node = 2;
  in.dense.bottom_mlp = {64};
  absl::StatusOr<Estimator> s = Estimator::Create(in, prof, 2);
  const MachineProfile flat_prof = FlatProfile();
  absl::StatusOr<Estimator> f = Estimator::Create(in, flat_prof, 2);
  ASSERT_TRUE(s.ok() && f.ok());
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                   TableWise(1, in.tables[1].config)};
  *slow = s->Evaluate(p);
  *flat = f->Evaluate(p);
}

TEST(EstimatorTest, ComputeSlowsDownWhenTheNodesRanksComputeAtOnce) {
  // compute_slowdown 1.5 at world size 2: at T = 2 on one node every compute phase (lookup,
  // update, dense) takes 1.5x; the exchanges do not; at T = 1 nothing changes.
  MachineProfile prof = FlatProfile();
  for (CollectivePoint& c : prof.collectives) c.compute_slowdown = c.world_size == 2 ? 1.5 : 0;
  StepEstimate a, b;
  ASSERT_NO_FATAL_FAILURE(StepsAtTwoRanks(prof, &a, &b));
  for (Phase ph : {kLookup, kEmbeddingUpdate, kDenseForward, kDenseBackward}) {
    ASSERT_GT(b.step.s[ph], 0) << PhaseName(ph);
    EXPECT_NEAR(a.step.s[ph], 1.5 * b.step.s[ph], 1e-12) << PhaseName(ph);
  }
  EXPECT_NEAR(a.step.s[kOutputDist], b.step.s[kOutputDist], 1e-12);
  const MachineProfile flat_prof = FlatProfile();
  PlanInputs one = SmallInputs({1000, 1000}, 16, 1, 100);
  absl::StatusOr<Estimator> s1 = Estimator::Create(one, prof, 1);
  absl::StatusOr<Estimator> f1 = Estimator::Create(one, flat_prof, 1);
  ASSERT_TRUE(s1.ok() && f1.ok());
  std::vector<TablePlacement> q = {TableWise(0, one.tables[0].config),
                                   TableWise(0, one.tables[1].config)};
  EXPECT_EQ(s1->Evaluate(q).step.total(), f1->Evaluate(q).step.total());
}

TEST(EstimatorTest, DensePhasesTakeTheGemmSlowdownAndRowWorkTheRowsOne) {
  // compute_slowdown 1.5 and gemm_slowdown 1.1 at world size 2: at T = 2 the lookup and the
  // update take 1.5x, the dense forward and backward 1.1x.
  MachineProfile prof = FlatProfile();
  for (CollectivePoint& c : prof.collectives) {
    c.compute_slowdown = c.world_size == 2 ? 1.5 : 0;
    c.gemm_slowdown = c.world_size == 2 ? 1.1 : 0;
  }
  StepEstimate a, b;
  ASSERT_NO_FATAL_FAILURE(StepsAtTwoRanks(prof, &a, &b));
  for (Phase ph : {kLookup, kEmbeddingUpdate}) {
    ASSERT_GT(b.step.s[ph], 0) << PhaseName(ph);
    EXPECT_NEAR(a.step.s[ph], 1.5 * b.step.s[ph], 1e-12) << PhaseName(ph);
  }
  for (Phase ph : {kDenseForward, kDenseBackward}) {
    ASSERT_GT(b.step.s[ph], 0) << PhaseName(ph);
    EXPECT_NEAR(a.step.s[ph], 1.1 * b.step.s[ph], 1e-12) << PhaseName(ph);
  }
}

// FlatProfile with cross-node points at 1e5 bytes/s, no latency.
MachineProfile TwoScopeProfile(double cross_slowdown = 0) {
  return WithCrossNodePoints(FlatProfile(), 1e5, 0, cross_slowdown);
}

TEST(EstimatorTest, GroupsAcrossNodesPayTheCrossNodeRate) {
  // T = 4 on 2 nodes of 2 ranks. Two 1000 x 16 tables, table-wise on group ranks 0 and 1; the
  // output + backward dists move the same bytes in every case, at 1e6 B/s within a node and
  // 1e5 across. replicas_adjacent, N = 2: sharding group {0, 2} spans the nodes, replica
  // group {0, 1} on one; groups_contiguous, N = 2: sharding group {0, 1} on one node, replica
  // group {0, 2} across; N = 4: the group spans the nodes; R = 4: everything on one node.
  const MachineProfile prof = TwoScopeProfile();
  PlanInputs in = SmallInputs({1000, 1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  auto dists = [&](const PlanInputs& inputs, int n, bool* group_same, bool* replica_same) {
    absl::StatusOr<Estimator> est = Estimator::Create(inputs, prof, n);
    EXPECT_TRUE(est.ok()) << est.status();
    *group_same = est->group_same_node();
    *replica_same = est->replica_same_node();
    const StepEstimate e = est->Evaluate(
        {TableWise(0, inputs.tables[0].config), TableWise(1, inputs.tables[1].config)});
    return e.step.s[kOutputDist] + e.step.s[kBackwardDist];
  };
  bool g = false, r = false;
  // The bytes of N = 2: each rank receives B x 16 x 4 from the one peer owning the table it
  // does not, and sends as much; out + back. Across the nodes the two sharding groups (one
  // rank per node each) share each node's link: half the point's rate (measured with one rank
  // per host).
  const double bytes2 = 2.0 * 100 * 16 * 4;
  EXPECT_NEAR(dists(in, 2, &g, &r), bytes2 / 0.5e5, 1e-9);
  EXPECT_FALSE(g);
  EXPECT_TRUE(r);
  in.topology.groups_contiguous = true;
  EXPECT_NEAR(dists(in, 2, &g, &r), bytes2 / 1e6, 1e-9);
  EXPECT_TRUE(g);
  EXPECT_FALSE(r);
  const double across4 = dists(in, 4, &g, &r);
  EXPECT_FALSE(g);
  in.topology.ranks_per_node = 4;
  const double within4 = dists(in, 4, &g, &r);
  EXPECT_TRUE(g);
  EXPECT_TRUE(r);
  EXPECT_NEAR(across4, 10 * within4, 1e-9);
  // A profile measured on one node only prices every group at its same-node points.
  const MachineProfile one = FlatProfile();
  in.topology.ranks_per_node = 2;
  in.topology.groups_contiguous = false;
  absl::StatusOr<Estimator> est = Estimator::Create(in, one, 2);
  ASSERT_TRUE(est.ok());
  EXPECT_NEAR(est->Evaluate({TableWise(0, in.tables[0].config), TableWise(1, in.tables[1].config)})
                  .step.s[kOutputDist],
              bytes2 / 2 / 1e6, 1e-9);
}

TEST(EstimatorTest, ReplicaSyncAcrossNodesPaysTheCrossNodeRate) {
  // Exact replica sync of N = 2, M = 2 on 2 nodes of 2: its all-gathers and all-reduce run in
  // the replica groups, within a node under replicas_adjacent and across under
  // groups_contiguous (10x slower here, and shared by both replica groups); the sharding
  // group's dists the other way round.
  const MachineProfile prof = TwoScopeProfile();
  PlanInputs in = SmallInputs({1000, 1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  in.step.replica_sync = ReplicaSync::kExact;
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                   TableWise(1, in.tables[1].config)};
  absl::StatusOr<Estimator> adjacent = Estimator::Create(in, prof, 2);
  in.topology.groups_contiguous = true;
  absl::StatusOr<Estimator> contiguous = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(adjacent.ok() && contiguous.ok());
  // The sync's own compute (the union's sort and copies): the same with free collectives.
  MachineProfile free_comm = FlatProfile();
  for (CollectivePoint& x : free_comm.collectives) x.bytes_per_s = 1e18;
  absl::StatusOr<Estimator> compute = Estimator::Create(in, free_comm, 2);
  ASSERT_TRUE(compute.ok());
  const double k = compute->Evaluate(p).step.s[kReplicaSync];
  const double a = adjacent->Evaluate(p).step.s[kReplicaSync] - k;
  const double c = contiguous->Evaluate(p).step.s[kReplicaSync] - k;
  ASSERT_GT(a, 0);
  // 10x the rate, and the two replica groups (one rank per node each) share the link: 20x.
  EXPECT_NEAR(c, 20 * a, 1e-9 * c);
  EXPECT_TRUE(adjacent->replica_same_node());
  EXPECT_FALSE(contiguous->replica_same_node());
}

TEST(EstimatorTest, PointsOfGroupsAtOnceAreReadForRunsOfAsManyGroups) {
  // Calibrate across 2 hosts x 2 measures the size-2 collectives as 2 groups at once: strided
  // (each across the hosts; the link shared as in the run) and contiguous (each on one host
  // while the other host runs its own). T = 4 on 2 nodes of 2, N = 2 replicas_adjacent: the
  // sharding groups {0, 2} and {1, 3} cross the link, the replica groups {0, 1} and {2, 3} stay
  // on a node, and both kinds run 2 groups at once.
  MachineProfile prof = TwoScopeProfile();
  std::vector<CollectivePoint> extra;
  for (const CollectivePoint& c : prof.collectives) {
    if (c.world_size != 2) continue;
    CollectivePoint g = c;
    g.groups = 2;
    g.bytes_per_s = c.same_node ? 0.25e6 : 0.4e5;  // the slowest group's, both running
    extra.push_back(g);
  }
  for (const CollectivePoint& g : extra) prof.collectives.push_back(g);
  std::sort(prof.collectives.begin(), prof.collectives.end(), CollectivePointLess);
  ASSERT_TRUE(ParseMachineProfile(MachineProfileToYaml(prof), "groups").ok());
  PlanInputs in = SmallInputs({1000, 1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  in.step.replica_sync = ReplicaSync::kExact;
  const std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                         TableWise(1, in.tables[1].config)};
  auto step = [&](const MachineProfile& m, const PlanInputs& inputs) {
    absl::StatusOr<Estimator> est = Estimator::Create(inputs, m, 2);
    EXPECT_TRUE(est.ok()) << est.status();
    return est->Evaluate(p).step;
  };
  const PhaseTimes alone = step(TwoScopeProfile(), in), grouped = step(prof, in);
  // The dists: the grouped point's rate as measured (its 2 groups are the run's 2 on each
  // node), where the lone point's is halved for the second group: 0.4e5 against 0.5e5.
  const double bytes2 = 2.0 * 100 * 16 * 4;
  EXPECT_NEAR(grouped.s[kOutputDist] + grouped.s[kBackwardDist], bytes2 / 0.4e5, 1e-9);
  EXPECT_NEAR(alone.s[kOutputDist] + alone.s[kBackwardDist], bytes2 / 0.5e5, 1e-9);
  // The replica sync's all-gather and all-reduce on a node: 4x slower with the other host busy.
  MachineProfile free_comm = FlatProfile();
  for (CollectivePoint& x : free_comm.collectives) x.bytes_per_s = 1e18;
  const double k = step(free_comm, in).s[kReplicaSync];
  ASSERT_GT(alone.s[kReplicaSync] - k, 0);
  EXPECT_NEAR(grouped.s[kReplicaSync] - k, 4 * (alone.s[kReplicaSync] - k), 1e-9);
  // One node of 4 (no world across nodes): the same-node groups point, measured while another
  // host ran, is not this run's; nor is a group point for a run of one group (N = T = 4).
  in.topology.ranks_per_node = 4;
  EXPECT_NEAR(step(prof, in).s[kReplicaSync], step(TwoScopeProfile(), in).s[kReplicaSync], 1e-12);
  absl::StatusOr<CollectiveCost> one =
      CollectiveAtScope(prof, CollectiveOp::kAllToAll, "mpi", 2, false, 1);
  absl::StatusOr<CollectiveCost> two =
      CollectiveAtScope(prof, CollectiveOp::kAllToAll, "mpi", 2, false, 2);
  absl::StatusOr<CollectiveCost> many =
      CollectiveAtScope(prof, CollectiveOp::kAllToAll, "mpi", 2, false, 8);
  ASSERT_TRUE(one.ok() && two.ok() && many.ok());
  EXPECT_EQ(one->groups, 1);
  EXPECT_DOUBLE_EQ(one->bytes_per_s, 1e5);
  EXPECT_EQ(two->groups, 2);
  EXPECT_DOUBLE_EQ(two->bytes_per_s, 0.4e5);
  EXPECT_EQ(many->groups, 2);  // the most groups measured
}

TEST(EstimatorTest, WorldAcrossNodesTakesTheCrossNodeComputeSlowdown) {
  // compute_slowdown 1.5 on the same-node points at 2 and 2.0 on the cross-node ones: a world
  // of 4 on 2 nodes takes 2.0 (the world measured at once, spread as the run is), a world of 2
  // on one node 1.5.
  MachineProfile prof = TwoScopeProfile(/*cross_slowdown=*/2.0);
  for (CollectivePoint& c : prof.collectives) {
    if (c.same_node) c.compute_slowdown = c.world_size == 2 ? 1.5 : 0;
  }
  const MachineProfile flat = FlatProfile();
  PlanInputs in = SmallInputs({1000, 1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  in.dense.bottom_mlp = {64};
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                   TableWise(1, in.tables[1].config)};
  absl::StatusOr<Estimator> slow = Estimator::Create(in, prof, 2);
  absl::StatusOr<Estimator> base = Estimator::Create(in, flat, 2);
  ASSERT_TRUE(slow.ok() && base.ok());
  EXPECT_NEAR(slow->Evaluate(p).step.s[kDenseForward],
              2.0 * base->Evaluate(p).step.s[kDenseForward], 1e-12);
  in.topology.ranks_per_node = 4;
  absl::StatusOr<Estimator> one_node = Estimator::Create(in, prof, 2);
  ASSERT_TRUE(one_node.ok());
  EXPECT_NEAR(one_node->Evaluate(p).step.s[kDenseForward], base->Evaluate(p).step.s[kDenseForward],
              1e-12);  // 4 on a node: no point has it
}

TEST(EstimatorTest, RanksBeyondTheHostsCpusShareThem) {
  // Cross-node points whose hosts gave their ranks 1 CPU each (node_cores 1, emulated hosts
  // pinned to a CPU each): 2 ranks per node share it, so every compute phase takes 2x (and the
  // measured slowdown 1.5 on top: the contention of one rank per CPU); with 2 CPUs per host, or
  // no count, the slowdown alone. The collectives are not the compute's: unchanged.
  PlanInputs in = SmallInputs({1000, 1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  in.step.threads = 1;
  in.dense.bottom_mlp = {64};
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                   TableWise(1, in.tables[1].config)};
  auto step = [&](int node_cores, double* share) {
    MachineProfile prof = TwoScopeProfile(/*cross_slowdown=*/1.5);
    for (CollectivePoint& c : prof.collectives) {
      if (!c.same_node) c.node_cores = node_cores;
    }
    absl::StatusOr<Estimator> e = Estimator::Create(in, prof, 2);
    EXPECT_TRUE(e.ok()) << e.status();
    *share = e->cores_share();
    return e->Evaluate(p).step;
  };
  double s0 = 0, s1 = 0, s2 = 0;
  const PhaseTimes unknown = step(0, &s0), one = step(1, &s1), two = step(2, &s2);
  EXPECT_EQ(s0, 1);
  EXPECT_EQ(s1, 2);
  EXPECT_EQ(s2, 1);
  for (Phase ph : {kLookup, kDenseForward, kDenseBackward}) {
    ASSERT_GT(unknown.s[ph], 0) << PhaseName(ph);
    EXPECT_NEAR(one.s[ph], 2 * unknown.s[ph], 1e-12) << PhaseName(ph);
    EXPECT_NEAR(two.s[ph], unknown.s[ph], 1e-12) << PhaseName(ph);
  }
  EXPECT_NEAR(one.s[kOutputDist], unknown.s[kOutputDist], 1e-12);
}

TEST(EstimatorTest, TableRowWiseAcrossNodesPaysTheLinkForTheFarRanks) {
  // table_row_wise routes as row_wise: with N = 4 over 2 nodes of 2, a table split over group
  // ranks 0 and 1 (node 0) is requested by ranks 2 and 3 across the link. The owner sends its
  // partial sums to its node's peer at the intra-node rate (1e6 B/s) and to the two far ranks
  // at the cross-node rate (1e5 B/s); every requester receives at the group's (cross) rate.
  const MachineProfile prof = TwoScopeProfile();
  PlanInputs in = SmallInputs({1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 4);
  ASSERT_TRUE(est.ok());
  EXPECT_FALSE(est->group_same_node());
  TableOption o;
  o.type = ShardingType::kTableRowWise;
  o.row_pieces = 2;
  const StepEstimate e = est->Evaluate({MakePlacement(o, {0, 1}, in.tables[0].config)});
  const double block = 100.0 * 16 * 4;  // one rank's bags x cols x 4 from one row piece
  // The owner (rank 0): 1 near + 2 far peers, less its own block at the group rate.
  const double owner = block / 1e6 + 2 * block / 1e5;
  // A far requester (rank 2): two pieces received at the cross rate.
  const double far = 2 * block / 1e5;
  EXPECT_NEAR(e.step.s[kOutputDist], std::max(owner, far), 1e-9);
}

TEST(EstimatorTest, PipelinedInputDistIsNotHiddenOnTheLink) {
  // sharding.pipeline hides the input dist's payload behind the step's other collectives on
  // one node; a sharding group across nodes shares the link with them: exposed in full.
  const MachineProfile prof = TwoScopeProfile();
  PlanInputs in = SmallInputs({1000, 1000, 1000, 1000}, 16, 4, 100);
  in.topology.ranks_per_node = 2;
  in.step.pipeline = true;
  std::vector<TablePlacement> p;
  for (int t = 0; t < 4; ++t) p.push_back(TableWise(t, in.tables[t].config));
  absl::StatusOr<Estimator> across = Estimator::Create(in, prof, 4);
  in.step.pipeline = false;
  absl::StatusOr<Estimator> unpipelined = Estimator::Create(in, prof, 4);
  ASSERT_TRUE(across.ok() && unpipelined.ok());
  const double a = across->Evaluate(p).step.s[kInputDist];
  EXPECT_GT(a, 0);
  EXPECT_NEAR(a, unpipelined->Evaluate(p).step.s[kInputDist], 1e-12);
  in.topology.ranks_per_node = 4;  // one node: hidden behind the dists
  in.step.pipeline = true;
  absl::StatusOr<Estimator> within = Estimator::Create(in, prof, 4);
  ASSERT_TRUE(within.ok());
  EXPECT_LT(within->Evaluate(p).step.s[kInputDist], 0.1 * a);
}

TEST(EstimatorTest, DenseAllReduceAcrossNodesMovesTheBufferAtTheMeasuredRate) {
  // A cross-node all-reduce point is buffer bytes per second as calibrate measured it over the
  // link: the dense gradients' 4 P bytes at that rate, not the ring's 2 (T-1)/T share on top;
  // and with the group's dists on the same link nothing hides the buckets. On one node the
  // ring's share stays (1.5 x 4 P at T = 4).
  const MachineProfile prof = TwoScopeProfile();
  PlanInputs in = SmallInputs({1000}, 16, 4, 100);
  in.dense.bottom_mlp = {64};
  in.topology.ranks_per_node = 2;
  absl::StatusOr<Estimator> across = Estimator::Create(in, prof, 4);
  ASSERT_TRUE(across.ok());
  const double bytes = 4.0 * across->dense_params();
  ASSERT_GT(bytes, 0);
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config)};
  EXPECT_NEAR(across->Evaluate(p).step.s[kDenseAllReduce], bytes / 1e5, 1e-9);
  in.topology.ranks_per_node = 4;
  absl::StatusOr<Estimator> within = Estimator::Create(in, prof, 4);
  ASSERT_TRUE(within.ok());
  // One bucket: the last bucket (all of it) is exposed whatever the window.
  EXPECT_NEAR(within->Evaluate(p).step.s[kDenseAllReduce], 1.5 * bytes / 1e6, 1e-9);
}

}  // namespace
}  // namespace tessera::planner
