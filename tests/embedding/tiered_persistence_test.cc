// Persistence of the tiered row store: checkpoint and restore (a resumed run equals one never
// interrupted), reopen, WriteRows, layout mismatch and unwritable path errors.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "embedding/tiered_row_store.h"
#include "rocksdb/db.h"
#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using testing::AllRows;
using testing::BitEqual;
using testing::SkewedIdStream;
using testing::TempDir;
using testing::TrainSteps;

constexpr int64_t kRows = 2000;
constexpr int64_t kDim = 8;

TieredRowStoreOptions Options(const std::string& path) {
  TieredRowStoreOptions o;
  o.path = path;
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.seed = 77;
  o.table_id = 2;
  o.cache_rows = 150;
  o.policy = CachePolicy::kLfu;
  o.reader_threads = 2;
  return o;
}

std::vector<std::vector<int64_t>> IdStream(int steps) { return SkewedIdStream(11, kRows, steps); }

void Train(RowStore* store, const std::vector<std::vector<int64_t>>& ids, int from, int to) {
  TrainSteps(store, ids, from, to);
}

// Train 40 steps with a checkpoint at step 20, keep training the same store past it (so the
// working database moves on, as when a process dies mid-run), then restore from the checkpoint
// and train steps 20..40 again: the result equals the uninterrupted run bit for bit.
TEST(TieredPersistenceTest, ResumeFromCheckpointEqualsUninterruptedRun) {
  TempDir tmp;
  auto ids = IdStream(40);
  std::vector<float> want_w, want_s, ckpt_w, ckpt_s;
  {
    auto store = TieredRowStore::Open(Options(tmp.Sub("db")));
    ASSERT_TRUE(store.ok()) << store.status();
    Train(store->get(), ids, 0, 20);
    ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt")).ok());
    ckpt_w = AllRows(store->get(), &ckpt_s);
    Train(store->get(), ids, 20, 40);
    want_w = AllRows(store->get(), &want_s);
    // Rows evicted after the checkpoint were written into the working database, and a later
    // checkpoint into an existing directory is refused.
    EXPECT_FALSE((*store)->Checkpoint(tmp.Sub("ckpt")).ok());
  }
  ASSERT_FALSE(BitEqual(ckpt_w, want_w));

  auto opts = Options(tmp.Sub("db"));
  opts.restore_from = tmp.Sub("ckpt");
  auto resumed = TieredRowStore::Open(opts);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  std::vector<float> s;
  EXPECT_TRUE(BitEqual(AllRows(resumed->get(), &s), ckpt_w));
  EXPECT_TRUE(BitEqual(s, ckpt_s));
  Train(resumed->get(), ids, 20, 40);
  EXPECT_TRUE(BitEqual(AllRows(resumed->get(), &s), want_w));
  EXPECT_TRUE(BitEqual(s, want_s));
  resumed->reset();

  // The checkpoint itself was not modified by the resumed run: restoring it again gives the
  // step-20 rows (into a fresh path this time).
  auto again_opts = Options(tmp.Sub("db2"));
  again_opts.restore_from = tmp.Sub("ckpt");
  auto again = TieredRowStore::Open(again_opts);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(BitEqual(AllRows(again->get(), &s), ckpt_w));
}

// Restore in place (the trainer's resume): the same open store, mid-run with dirty rows,
// pending write-back and staged prefetches, goes back to the checkpoint and retrains to the
// same bits; a failed Restore (no checkpoint there) leaves a store that reports the error.
TEST(TieredPersistenceTest, RestoreInPlaceEqualsUninterruptedRun) {
  TempDir tmp;
  auto ids = IdStream(40);
  std::vector<float> want_w, want_s, ckpt_w, ckpt_s, s;
  auto store = TieredRowStore::Open(Options(tmp.Sub("db")));
  ASSERT_TRUE(store.ok()) << store.status();
  Train(store->get(), ids, 0, 20);
  ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt")).ok());
  ckpt_w = AllRows(store->get(), &ckpt_s);
  Train(store->get(), ids, 20, 40);
  want_w = AllRows(store->get(), &want_s);
  (*store)->Prefetch(ids[5]);  // staged rows must not survive the restore
  ASSERT_TRUE((*store)->Restore(tmp.Sub("ckpt")).ok());
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), ckpt_w));
  EXPECT_TRUE(BitEqual(s, ckpt_s));
  Train(store->get(), ids, 20, 40);
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), want_w));
  EXPECT_TRUE(BitEqual(s, want_s));

  absl::Status bad = (*store)->Restore(tmp.Sub("nowhere"));
  EXPECT_EQ(bad.code(), absl::StatusCode::kNotFound) << bad;
  std::vector<int64_t> slot(1);
  EXPECT_FALSE((*store)->Resolve(std::vector<int64_t>{1}, absl::MakeSpan(slot)).ok());
}

// discard_existing: a reopened database starts from the initial rows again.
TEST(TieredPersistenceTest, DiscardExistingStartsFromInitialRows) {
  TempDir tmp;
  auto ids = IdStream(10);
  std::vector<float> fresh_w, s;
  {
    auto store = TieredRowStore::Open(Options(tmp.Sub("fresh")));
    ASSERT_TRUE(store.ok());
    fresh_w = AllRows(store->get(), &s);
  }
  {
    auto store = TieredRowStore::Open(Options(tmp.Sub("db")));
    ASSERT_TRUE(store.ok());
    Train(store->get(), ids, 0, 10);
  }
  auto o = Options(tmp.Sub("db"));
  auto kept = TieredRowStore::Open(o);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(BitEqual(AllRows(kept->get(), &s), fresh_w));
  kept->reset();
  o.discard_existing = true;
  auto discarded = TieredRowStore::Open(o);
  ASSERT_TRUE(discarded.ok()) << discarded.status();
  EXPECT_TRUE(BitEqual(AllRows(discarded->get(), &s), fresh_w));
}

// A process killed inside the first DB::Open leaves LOCK, LOG and 000000.dbtmp but no CURRENT,
// one killed while a restore copied leaves SST, MANIFEST and OPTIONS files (CURRENT is copied
// last) (both found by tests/trainer/kill_resume_check.sh): discard_existing and restore_from
// remove those leftovers instead of refusing the directory forever; one file of anything else
// still refuses.
TEST(TieredPersistenceTest, InterruptedCreationIsDiscarded) {
  TempDir tmp;
  std::vector<float> fresh_w, s;
  {
    auto store = TieredRowStore::Open(Options(tmp.Sub("fresh")));
    ASSERT_TRUE(store.ok());
    fresh_w = AllRows(store->get(), &s);
  }
  std::filesystem::create_directories(tmp.Sub("db"));
  for (const char* f : {"LOCK", "LOG", "000000.dbtmp", "IDENTITY", "000012.sst", "MANIFEST-000005",
                        "OPTIONS-000007"}) {
    std::ofstream(tmp.Sub(std::string("db/") + f)) << "x";
  }
  auto o = Options(tmp.Sub("db"));
  o.discard_existing = true;
  auto store = TieredRowStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), fresh_w));
  store->reset();
  std::filesystem::create_directories(tmp.Sub("mixed"));
  std::ofstream(tmp.Sub("mixed/LOCK")) << "";
  std::ofstream(tmp.Sub("mixed/notes.txt")) << "do not delete";
  o = Options(tmp.Sub("mixed"));
  o.discard_existing = true;
  absl::Status refused = TieredRowStore::Open(o).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(std::filesystem::exists(tmp.Sub("mixed/notes.txt")));
}

TEST(TieredPersistenceTest, RestoreRefusesNonDatabaseDirectory) {
  TempDir tmp;
  {
    auto store = TieredRowStore::Open(Options(tmp.Sub("db")));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt")).ok());
  }
  std::filesystem::create_directories(tmp.Sub("home"));
  std::ofstream(tmp.Sub("home/precious.txt")) << "do not delete";
  auto opts = Options(tmp.Sub("home"));
  opts.restore_from = tmp.Sub("ckpt");
  absl::Status s = TieredRowStore::Open(opts).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(tmp.Sub("home")), std::string::npos) << s;
  EXPECT_TRUE(std::filesystem::exists(tmp.Sub("home/precious.txt")));
  opts.restore_from = tmp.Sub("nothing");
  s = TieredRowStore::Open(opts).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(tmp.Sub("nothing")), std::string::npos) << s;
}

TEST(TieredPersistenceTest, LayoutMismatchIsRejectedAndNothingIsLost) {
  TempDir tmp;
  std::vector<float> w, s;
  {
    auto store = TieredRowStore::Open(Options(tmp.Sub("db")));
    ASSERT_TRUE(store.ok());
    auto ids = IdStream(5);
    Train(store->get(), ids, 0, 5);
    w = AllRows(store->get(), &s);
  }
  struct Case {
    const char* expect;
    std::function<void(TieredRowStoreOptions&)> change;
  };
  std::vector<Case> cases = {
      {"dim: database has 8, table has 16", [](auto& o) { o.dim = 16; }},
      {"state_dim: database has 1, table has 2", [](auto& o) { o.state_dim = 2; }},
      {"table_id: database has 2, table has 3", [](auto& o) { o.table_id = 3; }},
      {"seed: database has 77, table has 78", [](auto& o) { o.seed = 78; }},
      {"num_rows: database has 2000, table has 2001", [](auto& o) { o.num_rows = 2001; }},
      {"init_scale_bits", [](auto& o) { o.init.scale = 0.01f; }},
  };
  for (const auto& c : cases) {
    auto o = Options(tmp.Sub("db"));
    c.change(o);
    absl::Status st = TieredRowStore::Open(o).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st;
    EXPECT_NE(st.message().find(tmp.Sub("db")), std::string::npos) << st;
  }
  auto store = TieredRowStore::Open(Options(tmp.Sub("db")));
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<float> s2;
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &s2), w));
  EXPECT_TRUE(BitEqual(s2, s));
}

TEST(TieredPersistenceTest, UnwritablePathNamesThePath) {
  TempDir tmp;
  // A path below a regular file can never be created (also as root).
  std::ofstream(tmp.Sub("file")) << "x";
  auto o = Options(tmp.Sub("file/db"));
  absl::Status s = TieredRowStore::Open(o).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(tmp.Sub("file/db")), std::string::npos) << s;
  if (::geteuid() != 0) {
    std::filesystem::create_directories(tmp.Sub("ro"));
    ::chmod(tmp.Sub("ro").c_str(), 0555);
    o = Options(tmp.Sub("ro/db"));
    s = TieredRowStore::Open(o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find(tmp.Sub("ro/db")), std::string::npos) << s;
    ::chmod(tmp.Sub("ro").c_str(), 0755);
  }
  // A directory that is not a tessera database is refused, not reinterpreted.
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options ro;
    ro.create_if_missing = true;
    ASSERT_TRUE(rocksdb::DB::Open(ro, tmp.Sub("foreign"), &raw).ok());
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), "k", "v").ok());
    delete raw;
  }
  s = TieredRowStore::Open(Options(tmp.Sub("foreign"))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("without a tessera layout record"), std::string::npos) << s;
}

TEST(TieredPersistenceTest, WriteRowsThenReadAndResolve) {
  TempDir tmp;
  auto store_or = TieredRowStore::Open(Options(tmp.Sub("db")));
  ASSERT_TRUE(store_or.ok());
  auto& store = *store_or;
  // Put rows 0..9 in the cache, dirty, then overwrite 5..14 (half cached, half not).
  std::vector<int64_t> ids(10), slots(10);
  for (int i = 0; i < 10; ++i) ids[i] = i;
  ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
  for (int i = 0; i < 10; ++i) store->state()[slots[i]] = 3.0f + i;
  ASSERT_TRUE(store->EndStep().ok());
  std::vector<float> w(10 * kDim);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  ASSERT_TRUE(store->WriteRows(5, 10, w.data(), nullptr).ok());
  std::vector<float> rw(15 * kDim), rs(15);
  ASSERT_TRUE(store->ReadRows(0, 15, rw.data(), rs.data()).ok());
  for (int r = 5; r < 15; ++r) {
    for (int k = 0; k < kDim; ++k) EXPECT_EQ(rw[r * kDim + k], w[(r - 5) * kDim + k]);
    // state == nullptr keeps each row's state: set above for cached rows, init for the others.
    EXPECT_EQ(rs[r], r < 10 ? 3.0f + r : 0.0f);
  }
  std::vector<float> st(10, -1.0f);
  ASSERT_TRUE(store->WriteRows(10, 10, w.data(), st.data()).ok());
  std::vector<int64_t> one = {12}, slot(1);
  ASSERT_TRUE(store->Resolve(one, absl::MakeSpan(slot)).ok());
  EXPECT_EQ(store->weights()[slot[0] * kDim + 1], w[2 * kDim + 1]);
  EXPECT_EQ(store->state()[slot[0]], -1.0f);
  ASSERT_TRUE(store->EndStep().ok());
}

}  // namespace
}  // namespace tessera
