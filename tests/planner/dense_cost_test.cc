// The dense arch timed whole (profile dense_arch, planner/dense_cost.h): the profile keys round
// trip and are calibrate's measured keys; a shape timed is priced by its own whole times,
// another by the timed points' whole-over-layer-model ratio interpolated in MACs per sample; a
// profile without times takes the scales (a shape's own, else its interaction kind's median),
// a profile without points the layer model.
#include "planner/dense_cost.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/estimator.h"
#include "planner/profile.h"
#include "planner/profile_quality.h"
#include "tests/planner/test_inputs.h"

namespace tessera::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

DenseShape Dlrm(std::vector<int64_t> top) {
  DenseShape ds;
  ds.num_dense = 13;
  ds.bottom_mlp = {64, 16};
  ds.top_mlp = std::move(top);
  ds.interaction = Interaction::kDot;
  ds.embedding_dim = 16;
  return ds;
}

TEST(DenseCostTest, ShapeKeyNamesWhatTheArchRuns) {
  EXPECT_EQ(DenseShapeKey(Dlrm({64, 1}), 8, 128), "dot bottom 13-64-16 f8 d16 e128 top 64-1");
  DenseShape dcn = Dlrm({64, 1});
  dcn.interaction = Interaction::kDcn;
  dcn.dcn_num_layers = 3;
  dcn.dcn_low_rank = 32;
  EXPECT_EQ(DenseShapeKey(dcn, 8, 128), "dcn bottom 13-64-16 f8 d16 e128 cross 3r32 top 64-1");
  EXPECT_NE(DenseShapeKey(Dlrm({64, 1}), 8, 128), DenseShapeKey(Dlrm({32, 1}), 8, 128));
}

TEST(DenseCostTest, ShapeKeyReadsBack) {
  DenseShape dcn = Dlrm({64, 1});
  dcn.interaction = Interaction::kDcn;
  dcn.dcn_num_layers = 3;
  dcn.dcn_low_rank = 32;
  for (const DenseShape& ds : {Dlrm({64, 1}), dcn}) {
    const std::optional<KeyedDenseShape> k = ParseDenseShapeKey(DenseShapeKey(ds, 8, 128));
    ASSERT_TRUE(k.has_value()) << DenseShapeKey(ds, 8, 128);
    EXPECT_EQ(DenseShapeKey(k->shape, k->features, k->emb_out_dim), DenseShapeKey(ds, 8, 128));
    EXPECT_EQ(k->shape.bottom_mlp, ds.bottom_mlp);
    EXPECT_EQ(k->shape.top_mlp, ds.top_mlp);
    EXPECT_EQ(k->shape.dcn_low_rank, ds.dcn_low_rank);
  }
  for (const char* bad :
       {"", "dot", "dot bottom 13-64 f8 d16 e128 top", "mlp bottom 13 f1 d1 e1 top 1",
        "dot bottom 13-x f8 d16 e128 top 64-1", "dcn bottom 13 f8 d16 e128 top 1",
        "dot bottom 13-64 f0 d16 e128 top 64-1"}) {
    EXPECT_FALSE(ParseDenseShapeKey(bad).has_value()) << bad;
  }
  // MACs per sample: 13x64 + 64x16 bottom, 9 x 9 x 16 pairs, (16 + 36) x 64 + 64 x 1 top.
  EXPECT_DOUBLE_EQ(DenseMacsPerSample(Dlrm({64, 1}), 8, 128),
                   13 * 64 + 64 * 16 + 9 * 9 * 16 + 52 * 64 + 64);
}

TEST(DenseCostTest, DenseArchPointsRoundTripAndAreMeasuredKeys) {
  MachineProfile p = FlatProfile();
  EXPECT_THAT(MachineProfileToYaml(p), Not(HasSubstr("dense_arch:")));
  p.devices[0].dense_arch = {{"dot bottom 13-64-16 f8 d16 e128 top 64-1", 2048, 1.25, 1.1}};
  const std::string yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "a.yaml");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  ASSERT_EQ(q->devices[0].dense_arch.size(), 1u);
  EXPECT_EQ(q->devices[0].dense_arch[0].backward_scale, 1.1);
  EXPECT_EQ(q->devices[0].dense_arch[0].forward_s, 0);  // optional: absent, not written
  EXPECT_THAT(yaml, Not(HasSubstr("forward_s:")));
  p.devices[0].dense_arch[0].forward_s = 0.004;
  p.devices[0].dense_arch[0].backward_s = 0.009;
  const std::string timed_yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> timed = ParseMachineProfile(timed_yaml, "a.yaml");
  ASSERT_TRUE(timed.ok()) << timed.status();
  EXPECT_EQ(MachineProfileToYaml(*timed), timed_yaml);
  EXPECT_EQ(timed->devices[0].dense_arch[0].backward_s, 0.009);
  std::vector<std::string> timed_names;
  for (const MeasuredKey& k : MeasuredKeys(&*timed)) timed_names.push_back(k.name);
  EXPECT_THAT(timed_names,
              ::testing::Contains("cpu.dense_arch[dot bottom 13-64-16 f8 d16 e128 top 64-1 b2048]."
                                  "backward_s"));
  absl::StatusOr<MachineProfile> negative = ParseMachineProfile(
      absl::StrReplaceAll(timed_yaml, {{"backward_s: 0.009", "backward_s: -1"}}), "a.yaml");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("backward_s"));
  std::vector<std::string> names;
  for (const MeasuredKey& k : MeasuredKeys(&*q)) names.push_back(k.name);
  EXPECT_THAT(names,
              ::testing::Contains("cpu.dense_arch[dot bottom 13-64-16 f8 d16 e128 top 64-1 b2048]."
                                  "forward_scale"));
  // A scale must be positive; the error names the point.
  absl::StatusOr<MachineProfile> bad = ParseMachineProfile(
      absl::StrReplaceAll(yaml, {{"forward_scale: 1.25", "forward_scale: 0"}}), "a.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("dense_arch[0]"));
  // A scale far from 1 is flagged as implausible.
  q->devices[0].dense_arch[0].forward_scale = 4;
  bool flagged = false;
  for (const KeyQuality& k : ImplausibleKeys(*q)) {
    flagged |= absl::StrContains(k.key, "dense_arch");
  }
  EXPECT_TRUE(flagged);
}

TEST(DenseCostTest, ExactShapeItsOwnScaleOtherShapesTheirKindsMedian) {
  MachineProfile prof = FlatProfile();
  DeviceProfile& d = prof.devices[0];
  d.gemm = {{2048, 64, 13, 1e11}};
  d.gemm_peak_flops_per_s = 1e11;
  d.gemm_fused_passes = true;
  const DenseShape a = Dlrm({64, 1}), b = Dlrm({32, 1});
  const DenseCost plain = ComputeDenseCost(d, a, 2048, 8, 128);
  // The dense optimizer's pass (SGD: weights, gradients read, weights written), never scaled.
  const double optimizer = plain.params * 4.0 * 3 / d.copy_bytes_per_s;
  ASSERT_GT(plain.backward_s, optimizer);
  d.dense_arch = {{DenseShapeKey(a, 8, 128), 2048, 1.5, 1.2},
                  {"dot bottom 13-512 f26 d16 e416 top 1", 2048, 1.1, 1.0},
                  {"dot bottom 13-256 f26 d16 e416 top 1", 2048, 1.3, 1.4},
                  {"dcn bottom 13-16 f8 d16 e128 cross 3r0 top 1", 2048, 0.5, 0.5}};
  const DenseCost scaled = ComputeDenseCost(d, a, 2048, 8, 128);
  EXPECT_DOUBLE_EQ(scaled.forward_s, 1.5 * plain.forward_s);
  EXPECT_NEAR(scaled.backward_s, 1.2 * (plain.backward_s - optimizer) + optimizer,
              1e-12 * plain.backward_s);
  // Another DLRM shape: the median of the three dot points (1.3 forward, 1.2 backward), not the
  // DCNv2 one.
  double f = 0, bw = 0;
  DenseArchScale(d, DenseShapeKey(b, 8, 128), &f, &bw);
  EXPECT_DOUBLE_EQ(f, 1.3);
  EXPECT_DOUBLE_EQ(bw, 1.2);
  // A DCNv2 shape: its own kind's point.
  DenseShape dcn = b;
  dcn.interaction = Interaction::kDcn;
  DenseArchScale(d, DenseShapeKey(dcn, 8, 128), &f, &bw);
  EXPECT_DOUBLE_EQ(f, 0.5);
  // A kind with no point of its own: the median of all (here the three dot points).
  d.dense_arch.pop_back();
  DenseArchScale(d, DenseShapeKey(dcn, 8, 128), &f, &bw);
  EXPECT_DOUBLE_EQ(f, 1.3);
  EXPECT_DOUBLE_EQ(bw, 1.2);
  // The estimator's dense phases carry the scale.
  PlanInputs in = SmallInputs({1000}, 16, 1, 2048);
  in.dense = a;
  const PooledOutput pooled = PooledOutputOf(in);
  d.dense_arch = {{DenseShapeKey(a, pooled.features, pooled.width), 2048, 2.0, 1.0}};
  absl::StatusOr<Estimator> twice = Estimator::Create(in, prof, 1);
  d.dense_arch.clear();
  absl::StatusOr<Estimator> once = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(twice.ok() && once.ok());
  EXPECT_NEAR(twice->dense_forward_s(), 2.0 * once->dense_forward_s(), 1e-12);
  EXPECT_NEAR(twice->dense_backward_s(), once->dense_backward_s(), 1e-12);
}

// A shape not timed: the timed points' whole times over their own layer models, linear in
// log(MACs per sample) between the two around it, held beyond; a point of the other
// interaction kind does not count; without timed points, the scales.
TEST(DenseCostTest, UntimedShapeTakesTheTimedPointsRatioByItsSize) {
  MachineProfile prof = FlatProfile();
  DeviceProfile& d = prof.devices[0];
  d.gemm = {{2048, 64, 13, 1e11}};
  d.gemm_peak_flops_per_s = 1e11;
  d.gemm_fused_passes = true;
  const DenseShape small = Dlrm({16, 1}), large = Dlrm({1024, 1}), mid = Dlrm({128, 1});
  auto bare = [&](const DenseShape& ds) {
    DeviceProfile p = d;
    p.dense_arch.clear();
    return ComputeDenseCost(p, ds, 2048, 8, 128);
  };
  const DenseCost s0 = bare(small), l0 = bare(large), m0 = bare(mid);
  const double opt_s = s0.params * 12.0 / d.copy_bytes_per_s;
  const double opt_l = l0.params * 12.0 / d.copy_bytes_per_s;
  const double opt_m = m0.params * 12.0 / d.copy_bytes_per_s;
  // small ran 1.5x its layer model whole, large 1.0x (the backward 1.2x and 1.0x).
  DenseArchPoint ps{DenseShapeKey(small, 8, 128), 2048, 1, 1};
  ps.forward_s = 1.5 * s0.forward_s;
  ps.backward_s = 1.2 * (s0.backward_s - opt_s);
  DenseArchPoint pl{DenseShapeKey(large, 8, 128), 2048, 1, 1};
  pl.forward_s = l0.forward_s;
  pl.backward_s = l0.backward_s - opt_l;
  DenseArchPoint other{"dcn bottom 13-64-16 f8 d16 e128 cross 3r0 top 64-1", 2048, 1, 1};
  other.forward_s = other.backward_s = 1;  // a DCNv2's: not read for a DLRM
  d.dense_arch = {ps, pl, other};
  const double xs = std::log(DenseMacsPerSample(small, 8, 128));
  const double xl = std::log(DenseMacsPerSample(large, 8, 128));
  const double t = (std::log(DenseMacsPerSample(mid, 8, 128)) - xs) / (xl - xs);
  ASSERT_GT(t, 0);
  ASSERT_LT(t, 1);
  double f = 0, b = 0;
  ASSERT_TRUE(TimedDenseArchRatio(d, mid, 8, 128, &f, &b));
  EXPECT_NEAR(f, 1.5 + t * (1.0 - 1.5), 1e-9);
  EXPECT_NEAR(b, 1.2 + t * (1.0 - 1.2), 1e-9);
  const DenseCost m = ComputeDenseCost(d, mid, 2048, 8, 128);
  EXPECT_NEAR(m.forward_s, f * m0.forward_s, 1e-12);
  EXPECT_NEAR(m.backward_s - opt_m, b * (m0.backward_s - opt_m), 1e-12);
  // Beyond the ends: held.
  ASSERT_TRUE(TimedDenseArchRatio(d, Dlrm({4, 1}), 8, 128, &f, &b));
  EXPECT_NEAR(f, 1.5, 1e-9);
  ASSERT_TRUE(TimedDenseArchRatio(d, Dlrm({4096, 1}), 8, 128, &f, &b));
  EXPECT_NEAR(f, 1.0, 1e-9);
  // No timed point of its kind: false, and the scales price it.
  DenseShape dcn = mid;
  dcn.interaction = Interaction::kDcn;
  d.dense_arch = {ps, pl};
  EXPECT_FALSE(TimedDenseArchRatio(d, dcn, 8, 128, &f, &b));
}

// A shape timed whole is priced by its own times (the scale is for shapes not timed): at the
// batch timed as they are, at another batch carried by the layer model's ratio; the dense
// optimizer's pass added as before; a point without times falls back to the scale.
TEST(DenseCostTest, TimedShapeIsPricedByItsWholeTimes) {
  MachineProfile prof = FlatProfile();
  DeviceProfile& d = prof.devices[0];
  d.gemm = {{2048, 64, 13, 1e11}};
  d.gemm_peak_flops_per_s = 1e11;
  d.gemm_fused_passes = true;
  const DenseShape a = Dlrm({64, 1});
  const std::string key = DenseShapeKey(a, 8, 128);
  const DenseCost plain = ComputeDenseCost(d, a, 2048, 8, 128);
  const double optimizer = plain.params * 4.0 * 3 / d.copy_bytes_per_s;
  DenseArchPoint timed{key, 2048, 1.5, 1.2};
  timed.forward_s = 0.004;
  timed.backward_s = 0.009;
  d.dense_arch = {timed};
  EXPECT_EQ(TimedDenseArch(d, key, 2048), &d.dense_arch[0]);
  EXPECT_EQ(TimedDenseArch(d, DenseShapeKey(Dlrm({32, 1}), 8, 128), 2048), nullptr);
  const DenseCost at = ComputeDenseCost(d, a, 2048, 8, 128);
  EXPECT_DOUBLE_EQ(at.forward_s, 0.004);
  EXPECT_NEAR(at.backward_s, 0.009 + optimizer, 1e-15);
  // Half the batch: the layer model's own ratio between the two batches.
  const DenseCost half_plain = [&] {
    DeviceProfile bare = d;
    bare.dense_arch.clear();
    return ComputeDenseCost(bare, a, 1024, 8, 128);
  }();
  const DenseCost half = ComputeDenseCost(d, a, 1024, 8, 128);
  EXPECT_NEAR(half.forward_s, 0.004 * half_plain.forward_s / plain.forward_s, 1e-15);
  EXPECT_NEAR(half.backward_s - optimizer,
              0.009 * (half_plain.backward_s - optimizer) / (plain.backward_s - optimizer), 1e-12);
  // Two batches timed: the nearer one's times.
  DenseArchPoint small = timed;
  small.batch = 1024;
  small.forward_s = 0.0025;
  d.dense_arch.push_back(small);
  EXPECT_EQ(TimedDenseArch(d, key, 1000), &d.dense_arch[1]);
  EXPECT_DOUBLE_EQ(ComputeDenseCost(d, a, 1024, 8, 128).forward_s, 0.0025);
  // Without times: the scale.
  d.dense_arch = {{key, 2048, 1.5, 1.2}};
  EXPECT_DOUBLE_EQ(ComputeDenseCost(d, a, 2048, 8, 128).forward_s, 1.5 * plain.forward_s);
}

}  // namespace
}  // namespace tessera::planner
