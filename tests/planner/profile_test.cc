// MachineProfile: the shipped profiles parse, a profile round-trips through YAML, bad files are
// refused naming the file and the key, and the interpolation helpers.
#include "planner/profile.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "core/hardware.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/profile_quality.h"
#include "planner/shipped_profiles.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ProfileTest, ShippedProfilesParse) {
  ASSERT_GE(ShippedProfiles().size(), 2u);
  for (const auto& [name, text] : ShippedProfiles()) {
    absl::StatusOr<MachineProfile> p = ParseMachineProfile(text, name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_FALSE(p->source.empty()) << name;
    EXPECT_FALSE(p->devices.empty()) << name;
  }
}

// core/hardware.h's constants are the shipped default's numbers (2 threads): the two cannot
// drift apart.
TEST(ProfileTest, CpuDefaultHoldsHardwareH) {
  absl::StatusOr<MachineProfile> p;
  for (const auto& [name, text] : ShippedProfiles()) {
    if (name == "cpu_default") p = ParseMachineProfile(text, name);
  }
  ASSERT_TRUE(p.ok()) << p.status();
  const DeviceProfile* d = p->device("cpu");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->copy_bytes_per_s, hardware::kCopyBytesPerSec2T);
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(*d, 64, 1), hardware::kGatherRowsPerSecDim16_2T);
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(*d, 256, 1), hardware::kGatherRowsPerSecDim64_2T);
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(*d, 512, 1), hardware::kGatherRowsPerSecDim128_2T);
  EXPECT_EQ(GemmFlopsPerSec(*d, 2048, 256, 512), hardware::kSgemmFlopsPerSec2T);
}

TEST(ProfileTest, RoundTrips) {
  MachineProfile p = FlatProfile(1e-5);
  std::string yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "rt");
  ASSERT_TRUE(q.ok()) << q.status() << "\n" << yaml;
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  EXPECT_EQ(q->devices[0].base_memory_bytes, p.devices[0].base_memory_bytes);
  EXPECT_EQ(q->collectives.size(), p.collectives.size());
}

TEST(ProfileTest, SaveAndLoad) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "tessera_profile_test.yaml").string();
  ASSERT_TRUE(SaveMachineProfile(FlatProfile(), path).ok());
  absl::StatusOr<MachineProfile> q = LoadMachineProfile(path);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->machine, "test machine");
  std::remove(path.c_str());
  absl::StatusOr<MachineProfile> missing = LoadMachineProfile(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// The first `key: value` with its value replaced (up to the next ',', '}' or newline).
std::string SetValue(std::string s, const std::string& key, const std::string& value) {
  size_t at = s.find(key + ": ");
  EXPECT_NE(at, std::string::npos) << key;
  if (at == std::string::npos) return s;
  at += key.size() + 2;
  size_t end = s.find_first_of(",}\n", at);
  return s.replace(at, end - at, value);
}

// Without the first line holding `key`.
std::string DropLine(std::string s, const std::string& key) {
  size_t at = s.find(key);
  EXPECT_NE(at, std::string::npos) << key;
  if (at == std::string::npos) return s;
  size_t b = s.rfind('\n', at), e = s.find('\n', at);
  return s.erase(b, e - b);
}

TEST(ProfileTest, WaitPerComputeIsOptionalAndRoundTrips) {
  // Absent: 0 (files written before the key stay valid); present: parsed and written back;
  // negative: refused naming the key.
  MachineProfile p = FlatProfile(1e-5);
  absl::StatusOr<MachineProfile> absent = ParseMachineProfile(MachineProfileToYaml(p), "a");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->collectives[0].wait_per_compute, 0);
  p.collectives[0].wait_per_compute = 0.25;  // all_to_all at world size 2
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("wait_per_compute: 0.25"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "b");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->collectives[0].wait_per_compute, 0.25);
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "wait_per_compute: 0.25", "wait_per_compute: -1"), "c");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("wait_per_compute: must be >= 0"));
  // Per world size (0.25 at 2, 0 at 4); Wait(c) = wait_per_compute x c.
  absl::StatusOr<CollectiveCost> at2 = CollectiveAt(*q, CollectiveOp::kAllToAll, "mpi", 2);
  ASSERT_TRUE(at2.ok());
  EXPECT_DOUBLE_EQ(at2->wait_per_compute, 0.25);
  EXPECT_DOUBLE_EQ(at2->Wait(0.004), 0.001);
  EXPECT_EQ(CollectiveAt(*q, CollectiveOp::kAllToAll, "mpi", 4)->wait_per_compute, 0);
  // wait_cap_s bounds it (a wait the scheduler's slices bound), where every size has one.
  MachineProfile capped = *q;
  for (CollectivePoint& c : capped.collectives) {
    if (c.op == CollectiveOp::kAllToAll) c.wait_cap_s = 0.002;
  }
  const std::string cy = MachineProfileToYaml(capped);
  EXPECT_THAT(cy, HasSubstr("wait_cap_s: 0.002"));
  absl::StatusOr<MachineProfile> cq = ParseMachineProfile(cy, "capped");
  ASSERT_TRUE(cq.ok()) << cq.status();
  EXPECT_EQ(MachineProfileToYaml(*cq), cy);
  absl::StatusOr<CollectiveCost> c2 = CollectiveAt(*cq, CollectiveOp::kAllToAll, "mpi", 2);
  ASSERT_TRUE(c2.ok());
  EXPECT_DOUBLE_EQ(c2->Wait(0.004), 0.001);  // under the bound
  EXPECT_DOUBLE_EQ(c2->Wait(0.1), 0.002);    // 0.025 without it
  capped.collectives[2].wait_cap_s = 0;      // all_to_all at 8 without one: no bound
  EXPECT_DOUBLE_EQ(CollectiveAt(capped, CollectiveOp::kAllToAll, "mpi", 2)->Wait(0.1), 0.025);
}

TEST(ProfileTest, GemmSlowdownIsOptionalAndFallsBackToTheRowsOne) {
  // Absent: the GEMMs slow down as the row reads do (profiles from before the two were told
  // apart), 1 where neither is given; present: its own, interpolated by world size as
  // compute_slowdown is, and written back; above the world size: flagged as implausible.
  MachineProfile p = FlatProfile(1e-5);
  for (CollectivePoint& c : p.collectives) c.compute_slowdown = c.world_size == 2 ? 1.3 : 0;
  absl::StatusOr<MachineProfile> absent = ParseMachineProfile(MachineProfileToYaml(p), "a");
  ASSERT_TRUE(absent.ok()) << absent.status();
  absl::StatusOr<CollectiveCost> at2 = CollectiveAt(*absent, CollectiveOp::kAllReduce, "mpi", 2);
  ASSERT_TRUE(at2.ok());
  EXPECT_DOUBLE_EQ(at2->compute_slowdown, 1.3);
  EXPECT_DOUBLE_EQ(at2->gemm_slowdown, 1.3);
  EXPECT_DOUBLE_EQ(CollectiveAt(*absent, CollectiveOp::kAllReduce, "mpi", 4)->gemm_slowdown, 1);
  for (CollectivePoint& c : p.collectives) c.gemm_slowdown = c.world_size == 2 ? 1.05 : 0;
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("gemm_slowdown: 1.05"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "b");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  at2 = CollectiveAt(*q, CollectiveOp::kAllReduce, "mpi", 2);
  ASSERT_TRUE(at2.ok());
  EXPECT_DOUBLE_EQ(at2->compute_slowdown, 1.3);
  EXPECT_DOUBLE_EQ(at2->gemm_slowdown, 1.05);
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "gemm_slowdown: 1.05", "gemm_slowdown: -1"), "c");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("gemm_slowdown: must be >= 0"));
  for (CollectivePoint& c : p.collectives) c.gemm_slowdown = c.world_size == 2 ? 2.5 : 0;
  bool flagged = false;
  for (const KeyQuality& k : ImplausibleKeys(p)) {
    flagged |= absl::StrContains(k.key, ".2.gemm_slowdown");
  }
  EXPECT_TRUE(flagged);
}

TEST(ProfileTest, PackRateAndSearchStepAreOptionalAndRoundTrip) {
  // Absent (files written before the keys): 0, so the estimator prices packing at
  // copy_bytes_per_s and no sibling search; present:
  // parsed and written back; negative: refused naming the key.
  MachineProfile p = FlatProfile();
  p.devices[0].pack_bytes_per_s = 0;
  const std::string without = MachineProfileToYaml(p);
  EXPECT_THAT(without, ::testing::Not(HasSubstr("pack_bytes_per_s")));
  absl::StatusOr<MachineProfile> absent = ParseMachineProfile(without, "a");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->devices[0].pack_bytes_per_s, 0);
  p.devices[0].pack_bytes_per_s = 1.25e10;
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("pack_bytes_per_s: 1.25e+10"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "b");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->devices[0].pack_bytes_per_s, 1.25e10);
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "pack_bytes_per_s: 1.25e+10", "pack_bytes_per_s: -1"), "c");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("pack_bytes_per_s: must be >= 0"));
  // search_step_s the same way.
  EXPECT_EQ(absent->devices[0].search_step_s, 0);
  p.devices[0].search_step_s = 7.5e-9;
  absl::StatusOr<MachineProfile> r = ParseMachineProfile(MachineProfileToYaml(p), "d");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->devices[0].search_step_s, 7.5e-9);
  // gemm_fused_passes: false when absent, written only when true.
  EXPECT_FALSE(absent->devices[0].gemm_fused_passes);
  EXPECT_THAT(MachineProfileToYaml(p), Not(HasSubstr("gemm_fused_passes")));
  p.devices[0].gemm_fused_passes = true;
  absl::StatusOr<MachineProfile> fused = ParseMachineProfile(MachineProfileToYaml(p), "f");
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_TRUE(fused->devices[0].gemm_fused_passes);
  p.devices[0].gemm_fused_passes = false;
  // pack_id_s too.
  EXPECT_EQ(absent->devices[0].pack_id_s, 0);
  p.devices[0].pack_id_s = 3.5e-8;
  absl::StatusOr<MachineProfile> t = ParseMachineProfile(MachineProfileToYaml(p), "e");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->devices[0].pack_id_s, 3.5e-8);
}

TEST(ProfileTest, PackHotPointInterpolatesInLogDistinct) {
  // Without the hot point every request packs at pack_id_s; with it, log-linear in the unique ids
  // between (pack_distinct, pack_id_s) and (pack_hot_distinct, pack_hot_id_s), held outside.
  MachineProfile p = FlatProfile();
  DeviceProfile& d = p.devices[0];
  d.pack_id_s = 4e-8;
  EXPECT_DOUBLE_EQ(PackIdSeconds(d, 1e5, 64), 4e-8);
  d.pack_distinct = 1000;
  d.pack_hot_id_s = 2e-8;
  d.pack_hot_distinct = 100000;
  EXPECT_DOUBLE_EQ(PackIdSeconds(d, 10, 64), 4e-8);
  EXPECT_DOUBLE_EQ(PackIdSeconds(d, 1e6, 64), 2e-8);
  EXPECT_NEAR(PackIdSeconds(d, 10000, 64), 3e-8, 1e-20);  // halfway in log
  // Round trip, and a hot point without its base refused naming the key.
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("pack_hot_distinct: 100000"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "a");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "pack_hot_distinct: 100000", "pack_hot_distinct: 10"), "b");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("b:"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("pack_hot_id_s"));
}

TEST(ProfileTest, WarmUpdateRateIsOptionalAndRoundTrips) {
  // Absent (FlatProfile, files before the key): 0 (not priced); present on every point:
  // written back and interpolated by time per row; on some points only: 0.
  MachineProfile p = FlatProfile();
  EXPECT_THAT(MachineProfileToYaml(p), ::testing::Not(HasSubstr("warm_rows_per_s")));
  EXPECT_EQ(ScatterUpdateWarmRowsPerSec(p.devices[0], 64), 0);
  p.devices[0].scatter_update[0].warm_rows_per_s = 4e6;
  EXPECT_EQ(ScatterUpdateWarmRowsPerSec(p.devices[0], 64), 0);
  p.devices[0].scatter_update[1].warm_rows_per_s = 2e6;
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("warm_rows_per_s: 4e+06"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "w");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  // Halfway between 64 and 512 bytes: the mean of 0.25 and 0.5 us per row.
  EXPECT_DOUBLE_EQ(ScatterUpdateWarmRowsPerSec(q->devices[0], 288), 1.0 / 0.375e-6);
  // Not a gather key.
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "cold_rows_per_s: 1e+06, bag_s: 0}",
                                  "cold_rows_per_s: 1e+06, bag_s: 0, warm_rows_per_s: 1}"),
                          "x");
  EXPECT_FALSE(bad.ok());
}

TEST(ProfileTest, BeyondLlcRateIsOptionalAndSplitsTheBytes) {
  MachineProfile p = FlatProfile();
  for (CollectivePoint& c : p.collectives) c.beyond_llc_bytes_per_s = 2.5e5;
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("beyond_llc_bytes_per_s: 250000"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "b");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  absl::StatusOr<CollectiveCost> c = CollectiveAt(*q, CollectiveOp::kAllReduce, "mpi", 4);
  ASSERT_TRUE(c.ok());
  // 3 MB with a 1 MB cache: 1 MB at 1e6 B/s + 2 MB at 2.5e5 B/s = 1 + 8 s; 0.5 MB: 0.5 s.
  EXPECT_DOUBLE_EQ(c->Transfer(3e6, 1e6), 9.0);
  EXPECT_DOUBLE_EQ(c->Transfer(5e5, 1e6), 0.5);
  // Absent (FlatProfile): bytes_per_s throughout.
  absl::StatusOr<CollectiveCost> f =
      CollectiveAt(FlatProfile(), CollectiveOp::kAllReduce, "mpi", 4);
  EXPECT_DOUBLE_EQ(f->Transfer(3e6, 1e6), 3.0);
}

TEST(ProfileTest, CachedGatherRatesAreOptionalRoundTripAndInterpolate) {
  MachineProfile p = FlatProfile();
  EXPECT_THAT(MachineProfileToYaml(p), Not(HasSubstr("cached_rows_per_s")));
  EXPECT_LT(GatherCachedSeconds(p.devices[0], 64, 10, 100), 0);
  p.devices[0].gather[0].cached_bag_s = 1e-8;
  p.devices[0].gather[0].cached_rows_per_s = 1e8;
  EXPECT_LT(GatherCachedSeconds(p.devices[0], 64, 10, 100), 0);  // on every point or none
  p.devices[0].gather[1].cached_bag_s = 3e-8;
  p.devices[0].gather[1].cached_rows_per_s = 2.5e7;
  const std::string yaml = MachineProfileToYaml(p);
  EXPECT_THAT(yaml, HasSubstr("cached_bag_s: 1e-08, cached_rows_per_s: 1e+08"));
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "g");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  // At 64 bytes: 10 bags x 10 ns + 100 ids x 10 ns; halfway to 512 bytes: 20 ns and 25 ns.
  EXPECT_NEAR(GatherCachedSeconds(q->devices[0], 64, 10, 100), 1.1e-6, 1e-15);
  EXPECT_NEAR(GatherCachedSeconds(q->devices[0], 288, 10, 100), 10 * 2e-8 + 100 * 2.5e-8, 1e-15);
  // An update point with the keys is refused (gather only).
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "id_s: 0}", "id_s: 0, cached_bag_s: 1}"), "x");
  EXPECT_FALSE(bad.ok());
}

TEST(ProfileTest, CrossPointsAreOptionalRoundTripAndMatchTheirKind) {
  MachineProfile p = FlatProfile();
  EXPECT_THAT(MachineProfileToYaml(p), Not(HasSubstr("cross:")));
  EXPECT_EQ(NearestCrossPoint(p.devices[0], 2048, 432, 0), nullptr);
  p.devices[0].cross = {{2048, 432, 0, 7e10, 6e10}, {2048, 3456, 512, 9e10, 8e10}};
  const std::string yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "c");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  const DeviceProfile& d = q->devices[0];
  ASSERT_EQ(d.cross.size(), 2u);
  EXPECT_EQ(d.cross[1].rank, 512);
  EXPECT_EQ(d.cross[1].backward_flops_per_s, 8e10);
  // A full-rank shape near the low-rank point's dim still takes the full-rank point, and a
  // low-rank shape the low-rank one.
  EXPECT_EQ(NearestCrossPoint(d, 4096, 3000, 0), &d.cross[0]);
  EXPECT_EQ(NearestCrossPoint(d, 1024, 432, 64), &d.cross[1]);
  // Only full-rank points: a low-rank shape takes the nearest of them.
  DeviceProfile full = d;
  full.cross.pop_back();
  EXPECT_EQ(NearestCrossPoint(full, 1024, 432, 64), &full.cross[0]);
  // Each point's rates are calibrate's measured keys.
  std::vector<std::string> names;
  for (const MeasuredKey& k : MeasuredKeys(&*q)) names.push_back(k.name);
  EXPECT_THAT(names, ::testing::Contains("cpu.cross[2048x3456r512].backward_flops_per_s"));
  absl::StatusOr<MachineProfile> bad =
      ParseMachineProfile(Replace(yaml, "rank: 512", "rank: -1"), "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cross[1]"));
}

// calibrate --tier_dims "" writes `tier: []`, which reads back (the planner keeps tables off the
// tier: search_test); `tier` itself stays required.
TEST(ProfileTest, EmptyTierListReadsBack) {
  MachineProfile p = FlatProfile();
  p.tier.clear();
  const std::string yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "t");
  ASSERT_TRUE(q.ok()) << q.status() << "\n" << yaml;
  EXPECT_TRUE(q->tier.empty());
  ASSERT_THAT(yaml, HasSubstr("tier:\n  []"));
  absl::StatusOr<MachineProfile> bad = ParseMachineProfile(Replace(yaml, "tier:\n  []", ""), "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tier: missing"));
}

TEST(ProfileTest, BadFilesNameFileAndKey) {
  const std::string good = MachineProfileToYaml(FlatProfile());
  struct Case {
    std::string text, expect;
  };
  std::vector<Case> cases = {
      {Replace(good, "version: 2", "version: 3"), "version"},
      {Replace(good, "version: 2", "version: 3"), "not supported"},
      // A version-1 file: refused, naming what version 2 added.
      {Replace(good, "version: 2", "version: 1"), "adds devices[].llc_bytes"},
      {DropLine(good, "llc_bytes"), "devices[0].llc_bytes: missing"},
      {DropLine(good, "comm_memory_bytes"), "devices[0].comm_memory_bytes: missing"},
      {Replace(good, ", bag_s: 0", ""), "gather[0].bag_s: missing"},
      {Replace(good, ", id_s: 0", ""), "scatter_update[0].id_s: missing"},
      {SetValue(good, "bag_s", "-1"), "must be >= 0"},
      {DropLine(good, "copy_bytes_per_s"), "devices[0].copy_bytes_per_s: missing"},
      {Replace(good, "threads: 1", "threads: 1\n    colour: red"),
       "devices[0].colour: unknown key"},
      {Replace(good, "row_bytes: 512", "row_bytes: 32"), "gather[1].row_bytes"},
      {SetValue(good, "hot_rows_per_s", "-5"), "must be a positive"},
      {Replace(good, "kind: cpu", "kind: tpu"), "must be cpu or cuda"},
      {Replace(good, "op: all_to_all", "op: scatter"), "unknown collective"},
      {"version: 2\n", "machine: missing"},
      {"[1, 2", "not valid YAML"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<MachineProfile> p = ParseMachineProfile(c.text, "prof.yaml");
    ASSERT_FALSE(p.ok()) << c.expect;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("prof.yaml:")) << c.expect;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.expect));
  }
}

TEST(ProfileTest, Interpolation) {
  DeviceProfile d;
  d.gather = {{64, 100, 50}, {512, 20, 10}};
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(d, 64, 1), 100);
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(d, 32, 1), 100);   // clamped
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(d, 1024, 0), 10);  // clamped, cold
  EXPECT_DOUBLE_EQ(GatherRowsPerSec(d, 288, 1), 60);   // halfway
  // Blend by time per row: half the rows at 100/s, half at 50/s -> 1 / (0.005 + 0.01).
  EXPECT_NEAR(GatherRowsPerSec(d, 64, 0.5), 1 / (0.5 / 100 + 0.5 / 50), 1e-9);
  d.gemm = {{10, 10, 10, 1e9}, {1000, 1000, 1000, 5e9}};
  d.gemm_peak_flops_per_s = 9e9;
  EXPECT_EQ(GemmFlopsPerSec(d, 12, 10, 9), 1e9);
  EXPECT_EQ(GemmFlopsPerSec(d, 900, 1000, 1000), 5e9);
  // Per-bag and per-id costs interpolate like the rates.
  d.gather[0].bag_s = 2e-9;
  d.gather[1].bag_s = 6e-9;
  EXPECT_DOUBLE_EQ(GatherBagSeconds(d, 288), 4e-9);
  EXPECT_DOUBLE_EQ(GatherBagSeconds(d, 4096), 6e-9);
  d.scatter_update = {{64, 10, 10, 0, 1e-8}};
  EXPECT_DOUBLE_EQ(ScatterIdSeconds(d, 512), 1e-8);
}

TEST(ProfileTest, GemmNearestByShapeNotByVolume) {
  // Three layers of one m n k = 2048 x 64 x 64 volume: forward, input and weight gradient
  // (calibrate's three points), and a thin output layer.
  DeviceProfile d;
  d.gemm = {
      {2048, 64, 64, 8e10}, {2048, 64, 64 * 1, 8e10}, {64, 64, 2048, 3e10}, {2048, 1, 64, 1e10}};
  d.gemm_peak_flops_per_s = 9e10;
  // Nearest by volume would give all of these the first point's 8e10.
  EXPECT_EQ(GemmFlopsPerSec(d, 64, 64, 2048), 3e10);  // exact shape
  EXPECT_EQ(GemmFlopsPerSec(d, 64, 70, 2000), 3e10);  // nearest shape
  EXPECT_EQ(GemmFlopsPerSec(d, 2048, 1, 70), 1e10);   // thin: not the square layer's rate
  EXPECT_EQ(GemmFlopsPerSec(d, 2048, 64, 64), 8e10);  // ties: the first listed
  // ln-distance: (4096, 2, 64) is 1 doubling from (2048, 1, 64) in m and n, far from the rest.
  EXPECT_EQ(GemmFlopsPerSec(d, 4096, 2, 64), 1e10);
  d.gemm.clear();
  EXPECT_EQ(GemmFlopsPerSec(d, 1, 2, 3), 9e10);
}

TEST(ProfileTest, Collectives) {
  MachineProfile p;
  for (auto [ws, lat, bw] : {std::tuple{2, 1e-5, 4e9}, {8, 4e-5, 1e9}}) {
    CollectivePoint c;
    c.op = CollectiveOp::kAllToAll;
    c.transport = "mpi";
    c.world_size = ws;
    c.latency_s = lat;
    c.bytes_per_s = bw;
    p.collectives.push_back(c);
  }
  absl::StatusOr<CollectiveCost> at2 = CollectiveAt(p, CollectiveOp::kAllToAll, "mpi", 2);
  ASSERT_TRUE(at2.ok());
  EXPECT_DOUBLE_EQ(at2->latency_s, 1e-5);
  absl::StatusOr<CollectiveCost> at4 = CollectiveAt(p, CollectiveOp::kAllToAll, "mpi", 4);
  EXPECT_NEAR(at4->latency_s, 2.5e-5, 1e-12);  // halfway in log2
  EXPECT_NEAR(1 / at4->bytes_per_s, 0.5 / 4e9 + 0.5 / 1e9, 1e-20);
  absl::StatusOr<CollectiveCost> at32 = CollectiveAt(p, CollectiveOp::kAllToAll, "mpi", 32);
  EXPECT_NEAR(at32->latency_s, 4e-5 + 2 * 1.5e-5, 1e-12);  // extrapolated: slope per doubling
  EXPECT_DOUBLE_EQ(at32->bytes_per_s, 1e9);
  EXPECT_EQ(CollectiveAt(p, CollectiveOp::kAllReduce, "mpi", 2).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(CollectiveAt(p, CollectiveOp::kAllToAll, "mpi", 1)->bytes_per_s, 0);
}

TEST(ProfileTest, CrossNodePointsRoundTripBesideSameNodeOnes) {
  // calibrate across hosts adds same_node: false points at the sizes it measured on one host:
  // the file keeps both, sorted same-node first, and each scope reads its own.
  MachineProfile p = WithCrossNodePoints(FlatProfile(1e-5), 1e5, 1e-4, 2);
  const std::string yaml = MachineProfileToYaml(p);
  absl::StatusOr<MachineProfile> q = ParseMachineProfile(yaml, "cross");
  ASSERT_TRUE(q.ok()) << q.status() << "\n" << yaml;
  EXPECT_EQ(MachineProfileToYaml(*q), yaml);
  ASSERT_EQ(q->collectives.size(), p.collectives.size());
  int cross = 0;
  for (size_t i = 0; i < p.collectives.size(); ++i) {
    EXPECT_EQ(q->collectives[i].same_node, p.collectives[i].same_node) << i;
    EXPECT_EQ(q->collectives[i].bytes_per_s, p.collectives[i].bytes_per_s) << i;
    cross += !q->collectives[i].same_node;
  }
  EXPECT_EQ(cross, 6);
  for (int ws : {2, 4}) {
    absl::StatusOr<CollectiveCost> same =
        CollectiveAtScope(*q, CollectiveOp::kAllToAll, "mpi", ws, true);
    absl::StatusOr<CollectiveCost> across =
        CollectiveAtScope(*q, CollectiveOp::kAllToAll, "mpi", ws, false);
    ASSERT_TRUE(same.ok() && across.ok());
    EXPECT_DOUBLE_EQ(same->bytes_per_s, 1e6) << ws;
    EXPECT_DOUBLE_EQ(across->bytes_per_s, 1e5) << ws;
    EXPECT_DOUBLE_EQ(across->latency_s, 1e-4) << ws;
    EXPECT_DOUBLE_EQ(across->compute_slowdown, 2) << ws;
  }
  // groups (calibrate across hosts: groups of the size measured at once) round-trips, sorts
  // after the lone point of its scope, and must be a whole number >= 1.
  MachineProfile g = p;
  CollectivePoint at_once = g.collectives[1];
  at_once.groups = 2;
  g.collectives.insert(g.collectives.begin() + 2, at_once);
  const std::string gy = MachineProfileToYaml(g);
  EXPECT_THAT(gy, HasSubstr("groups: 2"));
  absl::StatusOr<MachineProfile> gq = ParseMachineProfile(gy, "groups");
  ASSERT_TRUE(gq.ok()) << gq.status();
  EXPECT_EQ(gq->collectives[2].groups, 2);
  EXPECT_EQ(MachineProfileToYaml(*gq), gy);
  for (const char* bad : {"groups: 0", "groups: 1.5"}) {
    std::string text = gy;
    text.replace(text.find("groups: 2"), 9, bad);
    absl::StatusOr<MachineProfile> r = ParseMachineProfile(text, "g.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("collectives[2].groups")) << bad;
  }
  // node_cores (calibrate across hosts: each host's CPUs) round-trips; a whole number >= 0.
  MachineProfile nc = g;
  nc.collectives[2].node_cores = 3;
  const std::string ny = MachineProfileToYaml(nc);
  EXPECT_THAT(ny, HasSubstr("node_cores: 3"));
  absl::StatusOr<MachineProfile> nq = ParseMachineProfile(ny, "node_cores");
  ASSERT_TRUE(nq.ok()) << nq.status();
  EXPECT_EQ(nq->collectives[2].node_cores, 3);
  EXPECT_EQ(nq->collectives[1].node_cores, 0);
  for (const char* bad : {"node_cores: -1", "node_cores: 1.5"}) {
    std::string text = ny;
    text.replace(text.find("node_cores: 3"), 13, bad);
    absl::StatusOr<MachineProfile> r = ParseMachineProfile(text, "n.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("collectives[2].node_cores")) << bad;
  }
  std::swap(g.collectives[1], g.collectives[2]);
  EXPECT_FALSE(ParseMachineProfile(MachineProfileToYaml(g), "unsorted").ok());
  // Out of order (a cross-node point before the same-node one of its size): refused.
  std::swap(p.collectives[0], p.collectives[1]);
  absl::StatusOr<MachineProfile> bad = ParseMachineProfile(MachineProfileToYaml(p), "unsorted");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("sorted"));
}

}  // namespace
}  // namespace tessera::planner
