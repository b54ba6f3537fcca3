// The tiered table on a real, small file system that fills up mid-run (ENOSPC from the kernel,
// not an injected fault): the write that hits it is ResourceExhausted naming the path and
// saying there is no space, the store stays failed after space is freed, and the checkpoint
// taken before (hard links on the same file system) restores bit for bit. Needs a directory on
// a small file system in TESSERA_SMALL_FS; tests/embedding/small_fs_check.sh mounts a 24 MiB
// tmpfs for it when it may (root), and the test skips without one.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "embedding/tiered_row_store.h"
#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::AllRows;
using testing::BitEqual;
using testing::TrainStep;

constexpr int64_t kRows = 100000, kDim = 16, kIdsPerStep = 2000;

TieredRowStoreOptions Options(const std::string& path) {
  TieredRowStoreOptions o;
  o.path = path;
  o.name = "ads";
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.seed = 9;
  o.cache_rows = 3 * kIdsPerStep;
  o.reader_threads = 2;
  o.write_buffer_bytes = 256 << 10;  // flush (and so hit the disk) every few steps
  return o;
}

// Distinct uniform ids: nearly every one a miss, so every step writes evicted rows back.
std::vector<int64_t> StepIds(int step) {
  std::mt19937_64 rng(1000 + step);
  std::vector<int64_t> ids;
  std::vector<bool> seen(kRows, false);
  while (static_cast<int64_t>(ids.size()) < kIdsPerStep) {
    int64_t r = static_cast<int64_t>(rng() % kRows);
    if (!seen[r]) ids.push_back(r), seen[r] = true;
  }
  return ids;
}

TEST(TieredSmallFsTest, RealDiskFullFailsNamingThePathAndTheCheckpointRestores) {
  const char* root = std::getenv("TESSERA_SMALL_FS");
  if (root == nullptr || *root == '\0') GTEST_SKIP() << "TESSERA_SMALL_FS not set";
  const std::string db = std::string(root) + "/db", ckpt = std::string(root) + "/ckpt";
  const std::string filler = std::string(root) + "/filler";
  fs::remove_all(db);
  fs::remove_all(ckpt);
  fs::remove(filler);

  auto store = TieredRowStore::Open(Options(db));
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kCkpt = 10, kMax = 3000;
  for (int t = 0; t < kCkpt; ++t) {
    std::vector<int64_t> next = StepIds(t + 1);
    ASSERT_TRUE(TrainStep(store->get(), t, {StepIds(t)}, &next).ok());
  }
  ASSERT_TRUE((*store)->Checkpoint(ckpt).ok());
  std::vector<float> ckpt_s, ckpt_w = AllRows(store->get(), &ckpt_s);

  // Leave ~2 MiB free: a filler file takes the rest of the file system.
  const fs::space_info space = fs::space(root);
  ASSERT_GT(space.available, uintmax_t{3} << 20) << "the file system is too small";
  {
    std::ofstream f(filler, std::ios::binary);
    std::vector<char> mib(1 << 20, 'x');
    for (uintmax_t left = space.available - (uintmax_t{2} << 20); left >= mib.size();
         left -= mib.size()) {
      f.write(mib.data(), mib.size());
    }
  }
  absl::Status s;
  int t = kCkpt;
  for (; t < kMax && s.ok(); ++t) {
    std::vector<int64_t> next = StepIds(t + 1);
    s = TrainStep(store->get(), t, {StepIds(t)}, &next);
  }
  ASSERT_FALSE(s.ok()) << "no error in " << kMax - kCkpt << " steps with 2 MiB free";
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(db), std::string::npos) << s;
  EXPECT_NE(s.message().find("table 'ads'"), std::string::npos) << s;
  EXPECT_NE(absl::AsciiStrToLower(s.message()).find("no space"), std::string::npos) << s;
  ::testing::Test::RecordProperty("error", std::string(s.message()));
  ::testing::Test::RecordProperty("failed_at_step", t);

  // Still failed once space is back: the rows of the failed write are gone.
  fs::remove(filler);
  std::vector<int64_t> ids = StepIds(t), slots(ids.size());
  absl::Status again = (*store)->Resolve(ids, absl::MakeSpan(slots));
  if (again.ok()) again = (*store)->EndStep();
  EXPECT_FALSE(again.ok());
  store->reset();

  // The checkpoint shares its SST files with the failed database by hard links; restoring it
  // replaces the database and gives the checkpoint's rows bit for bit.
  TieredRowStoreOptions o = Options(db);
  o.restore_from = ckpt;
  auto restored = TieredRowStore::Open(o);
  ASSERT_TRUE(restored.ok()) << restored.status();
  std::vector<float> rs;
  EXPECT_TRUE(BitEqual(AllRows(restored->get(), &rs), ckpt_w));
  EXPECT_TRUE(BitEqual(rs, ckpt_s));
  restored->reset();
  fs::remove_all(db);
  fs::remove_all(ckpt);
}

}  // namespace
}  // namespace tessera
