// MachineProfile: the shipped profiles parse, a profile round-trips through YAML, bad files are
// refused naming the file and the key, and the interpolation helpers.
#include "planner/profile.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/shipped_profiles.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

using ::testing::HasSubstr;

TEST(ProfileTest, ShippedProfilesParse) {
  ASSERT_GE(ShippedProfiles().size(), 2u);
  for (const auto& [name, text] : ShippedProfiles()) {
    absl::StatusOr<MachineProfile> p = ParseMachineProfile(text, name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_FALSE(p->source.empty()) << name;
    EXPECT_FALSE(p->devices.empty()) << name;
  }
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

TEST(ProfileTest, BadFilesNameFileAndKey) {
  const std::string good = MachineProfileToYaml(FlatProfile());
  struct Case {
    std::string text, expect;
  };
  std::vector<Case> cases = {
      {Replace(good, "version: 1", "version: 2"), "version"},
      {Replace(good, "version: 1", "version: 2"), "not supported"},
      {DropLine(good, "copy_bytes_per_s"), "devices[0].copy_bytes_per_s: missing"},
      {Replace(good, "threads: 1", "threads: 1\n    colour: red"),
       "devices[0].colour: unknown key"},
      {Replace(good, "row_bytes: 512", "row_bytes: 32"), "gather[1].row_bytes"},
      {SetValue(good, "hot_rows_per_s", "-5"), "must be a positive"},
      {Replace(good, "kind: cpu", "kind: tpu"), "must be cpu or cuda"},
      {Replace(good, "op: all_to_all", "op: scatter"), "unknown collective"},
      {"version: 1\n", "machine: missing"},
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

}  // namespace
}  // namespace tessera::planner
