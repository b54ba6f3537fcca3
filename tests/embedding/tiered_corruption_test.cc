// A tiered table whose SST file rots on disk after a checkpoint: the first read that touches the
// damaged block is DataLoss naming the table and the file (block checksums are verified on
// read), every later use keeps failing rather than training on garbage, and the last checkpoint
// (whose files the rot did not reach) restores bit for bit.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "embedding/tiered_row_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::AllRows;
using testing::BitEqual;
using testing::SkewedIdStream;
using testing::TempDir;
using testing::TrainSteps;
using ::testing::HasSubstr;

constexpr int64_t kRows = 2000;

TieredRowStoreOptions Options(const std::string& path) {
  TieredRowStoreOptions o;
  o.path = path;
  o.name = "users";
  o.num_rows = kRows;
  o.dim = 8;
  o.state_dim = 1;
  o.seed = 5;
  o.table_id = 3;
  o.cache_rows = 150;
  o.reader_threads = 2;
  return o;
}

// The largest SST file of `db` that no checkpoint shares (one hard link): written after it.
std::string UnsharedSst(const std::string& db) {
  std::string best;
  uintmax_t best_size = 0;
  for (const auto& e : fs::directory_iterator(db)) {
    if (e.path().extension() != ".sst" || fs::hard_link_count(e.path()) != 1) continue;
    if (e.file_size() > best_size) {
      best = e.path().string();
      best_size = e.file_size();
    }
  }
  return best;
}

// Overwrites bytes [offset, offset + n) of `path` with their complement, in place (as bit rot
// on the disk would: same size, same inode).
void Rot(const std::string& path, int64_t offset, int64_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> buf(n);
  f.seekg(offset);
  f.read(buf.data(), n);
  for (char& c : buf) c = static_cast<char>(~c);
  f.seekp(offset);
  f.write(buf.data(), n);
}

TEST(TieredCorruptionTest, ARottedSstIsDataLossNamingTableAndFileAndTheCheckpointRestores) {
  TempDir tmp;
  const std::string db = tmp.Sub("db"), ckpt = tmp.Sub("ckpt");
  auto ids = SkewedIdStream(17, kRows, 40);
  std::vector<float> ckpt_w, ckpt_s;
  {
    auto store = TieredRowStore::Open(Options(db));
    ASSERT_TRUE(store.ok()) << store.status();
    TrainSteps(store->get(), ids, 0, 20);
    ASSERT_TRUE((*store)->Checkpoint(ckpt).ok());
    ckpt_w = AllRows(store->get(), &ckpt_s);
    TrainSteps(store->get(), ids, 20, 40);
    ASSERT_TRUE((*store)->Flush().ok());
  }
  const std::string victim = UnsharedSst(db);
  ASSERT_FALSE(victim.empty()) << "no SST written after the checkpoint";
  // Data blocks come first in an SST: damage the first one.
  Rot(victim, 16, 48);
  const std::string file = fs::path(victim).filename().string();

  auto store = TieredRowStore::Open(Options(db));
  if (!store.ok()) {
    // A background compaction started by the reopen may reach the damaged block first; the
    // open then fails the same way (DataLoss naming the file).
    EXPECT_TRUE(absl::IsDataLoss(store.status())) << store.status();
    EXPECT_THAT(std::string(store.status().message()), HasSubstr(file));
    GTEST_SKIP() << "the damage was found by the reopen's compaction: " << store.status();
  }
  // Touch every row, one cache-sized step at a time, until the damaged block is read.
  absl::Status first;
  for (int64_t begin = 0; begin < kRows && first.ok(); begin += 100) {
    std::vector<int64_t> step_ids, slots(100);
    for (int64_t r = begin; r < begin + 100; ++r) step_ids.push_back(r);
    first = (*store)->Resolve(step_ids, absl::MakeSpan(slots));
    if (first.ok()) first = (*store)->EndStep();
  }
  ASSERT_FALSE(first.ok()) << "no read reached the damaged block of " << victim;
  EXPECT_TRUE(absl::IsDataLoss(first)) << first;
  const std::string msg(first.message());
  ::testing::Test::RecordProperty("error", msg);
  EXPECT_THAT(msg, HasSubstr("table 'users'"));
  EXPECT_THAT(msg, HasSubstr(file));
  EXPECT_THAT(msg, HasSubstr("restore the table from its last checkpoint"));
  // An export scan over the damaged rows fails the same way, never returning garbage.
  std::vector<float> w(kRows * 8), s(kRows);
  absl::Status scan = (*store)->ReadRows(0, kRows, w.data(), s.data());
  EXPECT_TRUE(absl::IsDataLoss(scan)) << scan;
  EXPECT_THAT(std::string(scan.message()), HasSubstr("table 'users'"));

  // The checkpoint's files were not touched: restoring it gives its rows back bit for bit.
  store->reset();
  TieredRowStoreOptions restore = Options(db);
  restore.restore_from = ckpt;
  auto restored = TieredRowStore::Open(restore);
  ASSERT_TRUE(restored.ok()) << restored.status();
  std::vector<float> rs;
  EXPECT_TRUE(BitEqual(AllRows(restored->get(), &rs), ckpt_w));
  EXPECT_TRUE(BitEqual(rs, ckpt_s));
}

}  // namespace
}  // namespace tessera
