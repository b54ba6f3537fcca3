// What makes a calibrated profile trustworthy (planner/profile_quality.h, profile_meta.h): the
// median of runs per key with each key's spread, the plausibility checks, the fingerprint and
// calibration blocks' round trip and their strictness, the differences between fingerprints,
// and the estimator's bound on wait_per_compute where the node's ranks own their cores.
#include "planner/profile_quality.h"

#include <cmath>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/estimator.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

using ::testing::HasSubstr;

MachineProfile WithWait(double wait) {
  MachineProfile p = FlatProfile();
  for (CollectivePoint& c : p.collectives) c.wait_per_compute = wait;
  return p;
}

TEST(ProfileQualityTest, MedianPerKeyAndSpread) {
  // Three runs: gather's first hot rate 1, 2, 10 (median 2; deviations 1, 0, 8: spread 1 / 2,
  // wide at 0.25); every other key equal in all runs (spread 0).
  std::vector<MachineProfile> runs(3, FlatProfile());
  const double hot[3] = {10, 1, 2};
  for (int i = 0; i < 3; ++i) runs[i].devices[0].gather[0].hot_rows_per_s = hot[i];
  std::vector<KeyQuality> q;
  absl::StatusOr<MachineProfile> m = MedianOfRuns(runs, 0.25, &q);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->devices[0].gather[0].hot_rows_per_s, 2);
  int wide = 0;
  for (const KeyQuality& k : q) {
    EXPECT_EQ(k.runs, 3);
    if (k.wide) {
      ++wide;
      EXPECT_THAT(k.key, HasSubstr("gather["));
      EXPECT_THAT(k.key, HasSubstr("hot_rows_per_s"));
      EXPECT_NEAR(k.spread, 0.5, 1e-12);
    } else {
      EXPECT_EQ(k.spread, 0) << k.key;
    }
  }
  EXPECT_EQ(wide, 1);
  // Runs of another shape are refused.
  runs[1].devices[0].gather.pop_back();
  EXPECT_FALSE(MedianOfRuns(runs, 0.25, nullptr).ok());
}

TEST(ProfileQualityTest, CollectivesKeepTheirBestRun) {
  // A collective's latency and rates are each the fastest call of a run; over runs the best is
  // kept (a run whose every call waited for a descheduled rank is the load, not the link).
  std::vector<MachineProfile> runs(3, FlatProfile());
  const double lat[3] = {2e-6, 5e-3, 1e-6}, bw[3] = {3e9, 1e8, 2e9};
  for (int i = 0; i < 3; ++i) {
    for (CollectivePoint& c : runs[i].collectives) {
      c.latency_s = lat[i];
      c.bytes_per_s = bw[i];
    }
  }
  absl::StatusOr<MachineProfile> m = MedianOfRuns(runs, 0.25, nullptr);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const CollectivePoint& c : m->collectives) {
    EXPECT_EQ(c.latency_s, 1e-6);
    EXPECT_EQ(c.bytes_per_s, 3e9);
  }
  // 5 ms for a small call on one node is refused.
  runs[0].collectives[0].latency_s = 5e-3;
  bool named = false;
  for (const KeyQuality& k : ImplausibleKeys(runs[0]))
    named |= absl::StrContains(k.key, "latency_s");
  EXPECT_TRUE(named);
}

TEST(ProfileQualityTest, AQuietWaitIsNotWideForTinyDifferences) {
  // 0.006 .. 0.013 (the quiet machine's three runs): deviations under the 0.02 floor.
  std::vector<MachineProfile> runs = {WithWait(0.006), WithWait(0.013), WithWait(0.01)};
  std::vector<KeyQuality> q;
  ASSERT_TRUE(MedianOfRuns(runs, 0.25, &q).ok());
  for (const KeyQuality& k : q) EXPECT_FALSE(k.wide) << k.key << " " << k.spread;
  // Two runs of three under load (1.07, 0.8) are wide; one is not (the median ignores it).
  runs[1] = WithWait(1.07);
  q.clear();
  ASSERT_TRUE(MedianOfRuns(runs, 0.25, &q).ok());
  for (const KeyQuality& k : q) EXPECT_FALSE(k.wide) << k.key << " " << k.spread;
  runs[0] = WithWait(0.8);
  q.clear();
  ASSERT_TRUE(MedianOfRuns(runs, 0.25, &q).ok());
  bool wide = false;
  for (const KeyQuality& k : q) wide |= k.wide && absl::StrContains(k.key, "wait_per_compute");
  EXPECT_TRUE(wide);
}

TEST(ProfileQualityTest, ImplausibleValuesAreNamed) {
  MachineProfile p = FlatProfile();
  EXPECT_TRUE(ImplausibleKeys(p).empty());
  // Cold rows faster than the copy bandwidth.
  p.devices[0].gather[0].cold_rows_per_s =
      2 * p.devices[0].copy_bytes_per_s / static_cast<double>(p.devices[0].gather[0].row_bytes);
  // A wait that falls as ranks are added: 1.07 at 2 ranks, 0.003 at 4.
  CollectivePoint two = p.collectives[0], four = p.collectives[0];
  std::vector<CollectivePoint> cols;
  two.world_size = 2;
  two.wait_per_compute = 1.07;
  four.world_size = 4;
  four.wait_per_compute = 0.003;
  p.collectives = {two, four};
  std::vector<KeyQuality> bad = ImplausibleKeys(p);
  std::string all;
  for (const KeyQuality& k : bad) all += k.key + ": " + k.implausible + "\n";
  EXPECT_THAT(all, HasSubstr("cold_rows_per_s"));
  EXPECT_THAT(all, HasSubstr("above the copy bandwidth"));
  EXPECT_THAT(all, HasSubstr(".2.wait_per_compute"));
  EXPECT_THAT(all, HasSubstr("falls as ranks are added"));
}

TEST(ProfileQualityTest, BeyondCacheAllReduceUnderAFifthIsRefusedAndReplacedFromTheCopyRate) {
  // The Zen 4 VM's all-reduce: 7.8 GB/s in the cache; 3.5 GB/s beyond it is plausible, 1.0 GB/s
  // (under 1/5) is not. A refused rate is replaced by the copy rate / 8 (27 GB/s: 3.4 GB/s),
  // at most the in-cache rate, at least the share bound.
  MachineProfile p = FlatProfile();
  CollectivePoint ar;
  ar.op = CollectiveOp::kAllReduce;
  ar.transport = "mpi";
  ar.world_size = 2;
  ar.bytes_per_s = 7.8e9;
  ar.beyond_llc_bytes_per_s = 3.5e9;
  p.devices[0].copy_bytes_per_s = 27.2e9;
  p.collectives = {ar};
  auto flagged = [&] {
    for (const KeyQuality& k : ImplausibleKeys(p)) {
      if (absl::StrContains(k.key, "all_reduce.mpi.2.beyond_llc_bytes_per_s")) return true;
    }
    return false;
  };
  EXPECT_FALSE(flagged());
  p.collectives[0].beyond_llc_bytes_per_s = 1.0e9;
  EXPECT_TRUE(flagged());
  EXPECT_NEAR(BeyondLlcFallback(p.collectives[0], 27.2e9), 3.4e9, 1e3);
  EXPECT_NEAR(BeyondLlcFallback(p.collectives[0], 0), 7.8e9 / 5, 1e3);
  EXPECT_NEAR(BeyondLlcFallback(p.collectives[0], 1e12), 7.8e9, 1e3);
  EXPECT_NEAR(BeyondLlcFallback(p.collectives[0], 1e9), 7.8e9 / 5, 1e3);
}

TEST(ProfileQualityTest, FingerprintAndCalibrationRoundTripAndAreStrict) {
  MachineProfile p = FlatProfile();
  p.fingerprint.present = true;
  p.fingerprint.cpu_model = "AMD EPYC 9R14";
  p.fingerprint.isa = {"avx2", "avx512_bf16", "avx512f"};
  p.fingerprint.cores = 2;
  p.fingerprint.l3_bytes = 32 << 20;
  p.fingerprint.memory_bytes = int64_t{24} << 30;
  p.fingerprint.blas = "OpenBLAS 0.3.21";
  p.calibration.present = true;
  p.calibration.runs = 3;
  p.calibration.other_cpu_cores = 0.5;
  p.calibration.flagged.push_back({"cpu.copy_bytes_per_s", 4, 0.4, true, ""});
  const std::string yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> back = ParseMachineProfile(yaml, "p.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(back->fingerprint.present);
  EXPECT_EQ(back->fingerprint.cpu_model, "AMD EPYC 9R14");
  EXPECT_EQ(back->fingerprint.isa, p.fingerprint.isa);
  EXPECT_EQ(back->fingerprint.cores, 2);
  EXPECT_EQ(back->calibration.runs, 3);
  ASSERT_EQ(back->calibration.flagged.size(), 1u);
  EXPECT_EQ(back->calibration.flagged[0].key, "cpu.copy_bytes_per_s");
  EXPECT_TRUE(back->calibration.flagged[0].wide);
  EXPECT_EQ(MachineProfileToYaml(*back), yaml);
  // An unknown key in the block is refused naming it.
  std::string bad = yaml;
  bad.replace(bad.find("  cores:"), 8, "  corez:");
  absl::StatusOr<MachineProfile> refused = ParseMachineProfile(bad, "bad.yaml");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("bad.yaml"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("fingerprint.corez"));
}

TEST(ProfileQualityTest, FingerprintDifferencesNameTheFields) {
  MachineFingerprint a;
  a.present = true;
  a.cpu_model = "AMD EPYC 9R14";
  a.isa = {"avx2", "avx512f"};
  a.cores = 2;
  a.l3_bytes = 32 << 20;
  a.memory_bytes = int64_t{24} << 30;
  MachineFingerprint b = a;
  EXPECT_TRUE(FingerprintDifferences(a, b).empty());
  EXPECT_EQ(FingerprintKey(a), FingerprintKey(b));
  b.memory_bytes += int64_t{1} << 20;  // within 10%: the same machine
  EXPECT_TRUE(FingerprintDifferences(a, b).empty());
  b.cpu_model = "Intel Xeon";
  b.isa = {"amx_tile", "avx2", "avx512f"};
  b.cores = 4;
  std::vector<std::string> d = FingerprintDifferences(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_THAT(d[0], HasSubstr("cpu_model: 'AMD EPYC 9R14' here, 'Intel Xeon' in the profile"));
  EXPECT_THAT(d[1], HasSubstr("isa"));
  EXPECT_THAT(d[2], HasSubstr("cores: 2 here, 4 in the profile"));
  EXPECT_NE(FingerprintKey(a), FingerprintKey(b));
  // A profile without a fingerprint differs in nothing that can be named.
  EXPECT_TRUE(FingerprintDifferences(a, MachineFingerprint{}).empty());
}

TEST(ProfileQualityTest, WaitIsBoundedWhereRanksOwnTheirCores) {
  // T = 2 on one node, 1 thread each, wait_per_compute 0.5 (a calibration under load): with a
  // fingerprint of 2 cores the ranks own theirs and the wait is priced at the bound; with 1 core
  // the ranks share it: their compute takes twice as long (cores_share 2) and the wait is still
  // bounded (the sharing is priced, not the minute's load); without a fingerprint, as measured.
  PlanInputs in = SmallInputs({1000, 1000}, 16, /*world=*/2, /*batch=*/100);
  in.step.threads = 1;
  std::vector<TablePlacement> p = {TableWise(0, in.tables[0].config),
                                   TableWise(1, in.tables[1].config)};
  auto output_dist = [&](const MachineProfile& prof) {
    absl::StatusOr<Estimator> e = Estimator::Create(in, prof, 2);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->Evaluate(p).step.s[kOutputDist] : -1.0;
  };
  const double lookup = 200 / 1e6;  // the compute before the output dist (FlatProfile: 1e6/s)
  const double none = output_dist(FlatProfile());
  MachineProfile loaded = WithWait(0.5);
  EXPECT_NEAR(output_dist(loaded) - none, 0.5 * lookup, 1e-12);
  loaded.fingerprint.present = true;
  loaded.fingerprint.cores = 2;
  EXPECT_NEAR(output_dist(loaded) - none, kMaxWaitPerComputeOwnCores * lookup, 1e-12);
  loaded.fingerprint.cores = 1;
  EXPECT_NEAR(output_dist(loaded) - none, kMaxWaitPerComputeOwnCores * 2 * lookup, 1e-12);
  absl::StatusOr<Estimator> shared = Estimator::Create(in, loaded, 2);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(shared->cores_share(), 2);
  EXPECT_NEAR(shared->Evaluate(p).step.s[kLookup], 2 * lookup, 1e-12);
}

TEST(ProfileQualityTest, EffectiveLlcIsWhereTheGatherHasRisenHalfWay) {
  const int64_t mib = int64_t{1} << 20;
  std::vector<int64_t> sizes;
  for (int64_t b = 4 * mib; b <= 512 * mib; b *= 2) sizes.push_back(b);
  // The curve a 2-core Xeon VM that reports 480 MiB gave (ns per id, 4 .. 512 MiB): half way
  // from 6.3 to 34.3 is 20.3, reached 0.89 of the way (log scale) from 64 to 128 MiB.
  const std::vector<double> vm = {6.3, 8.3, 9.7, 12.2, 15.4, 20.9, 28.5, 34.3};
  const int64_t got = EffectiveLlcBytes(sizes, vm, 480 * mib);
  EXPECT_NEAR(static_cast<double>(got) / mib, 64 * std::pow(2.0, (20.3 - 15.4) / (20.9 - 15.4)),
              0.5);
  // A sharp step from 32 to 64 MiB: half way up it, on the log scale.
  const std::vector<double> step = {5, 5, 5, 5, 30, 30, 30, 30};
  EXPECT_NEAR(static_cast<double>(EffectiveLlcBytes(sizes, step, 480 * mib)) / mib,
              32 * std::sqrt(2.0), 0.5);
  // Never above what sysfs reports.
  EXPECT_EQ(EffectiveLlcBytes(sizes, vm, 32 * mib), 32 * mib);
  // A curve that does not rise kMinCacheRise x (no cache edge in the sizes tried): the reported.
  const std::vector<double> flat = {10, 11, 12, 12, 13, 13, 14, 14};
  EXPECT_EQ(EffectiveLlcBytes(sizes, flat, 64 * mib), 64 * mib);
  // Unmeasured points (0) are skipped.
  std::vector<double> holes = step;
  holes[4] = 0;
  EXPECT_NEAR(static_cast<double>(EffectiveLlcBytes(sizes, holes, 480 * mib)) / mib,
              32 * std::pow(2.0, 1.0), 0.5);
}

}  // namespace
}  // namespace tessera::planner
