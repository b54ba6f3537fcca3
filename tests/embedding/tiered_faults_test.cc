// The tiered row store when the disk fills: RocksDB's file I/O goes through a FileSystem wrapper
// (TieredRowStoreOptions::env) that lets a budget of bytes be written and then fails every
// append and sync with IOStatus::NoSpace, the status a real full disk (ENOSPC) gives. Checks:
// the error surfaces as ResourceExhausted naming the path, later calls keep failing, a
// checkpoint taken before is untouched and restores bit for bit, a checkpoint into the full
// disk leaves nothing that restores, and after space is freed the documented recovery works.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "embedding/tiered_row_store.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using testing::AllRows;
using testing::BitEqual;
using testing::SkewedIdStream;
using testing::TempDir;
using testing::TrainStep;
using testing::TrainSteps;

constexpr int64_t kRows = 2000;
constexpr int64_t kDim = 8;

// A file system whose disk can be made to fill: after Fill(bytes, under), files whose path
// starts with `under` (every file when empty) may take `bytes` more bytes of appends; past that
// every Append / PositionedAppend / Sync / Fsync / RangeSync / Allocate of such a file fails
// with NoSpace, and GetFreeSpace reports 0 (so RocksDB's own recovery thread sees a full disk).
// Free() makes the space come back. Thread-safe (RocksDB writes from background threads).
class FullDiskFs : public rocksdb::FileSystemWrapper {
 public:
  FullDiskFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FullDiskFs"; }

  void Fill(int64_t bytes, const std::string& under = "") {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    left_ = bytes;
    under_ = under;
  }
  void Free() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }
  // Writes refused so far.
  int64_t refused() const { return refused_.load(); }

  // True when `n` bytes may be written to `file` (and takes them from the budget).
  bool Take(const std::string& file, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!armed_ || !absl::StartsWith(file, under_)) return true;
    if (n <= left_) {
      left_ -= n;
      return true;
    }
    left_ = 0;  // a partial write is not modelled: the disk is full from here on
    ++refused_;
    return false;
  }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return Wrap(f, target()->NewWritableFile(f, o, r, dbg), r);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    return Wrap(f, target()->ReopenWritableFile(f, o, r, dbg), r);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    return Wrap(f, target()->ReuseWritableFile(f, old, o, r, dbg), r);
  }
  rocksdb::IOStatus GetFreeSpace(const std::string& path, const rocksdb::IOOptions& o,
                                 uint64_t* free, rocksdb::IODebugContext* dbg) override {
    if (IsEmptyBudget(path)) {
      *free = 0;
      return rocksdb::IOStatus::OK();
    }
    return target()->GetFreeSpace(path, o, free, dbg);
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(FullDiskFs* fs, std::string name, std::unique_ptr<rocksdb::FSWritableFile> t)
        : FSWritableFileOwnerWrapper(std::move(t)), fs_(fs), name_(std::move(name)) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (!fs_->Take(name_, d.size())) return NoSpace();
      return FSWritableFileOwnerWrapper::Append(d, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* dbg) override {
      if (!fs_->Take(name_, d.size())) return NoSpace();
      return FSWritableFileOwnerWrapper::Append(d, o, v, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& d, uint64_t off,
                                       const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
      if (!fs_->Take(name_, d.size())) return NoSpace();
      return FSWritableFileOwnerWrapper::PositionedAppend(d, off, o, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& d, uint64_t off,
                                       const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo& v,
                                       rocksdb::IODebugContext* dbg) override {
      if (!fs_->Take(name_, d.size())) return NoSpace();
      return FSWritableFileOwnerWrapper::PositionedAppend(d, off, o, v, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->IsEmptyBudget(name_)) return NoSpace();
      return FSWritableFileOwnerWrapper::Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->IsEmptyBudget(name_)) return NoSpace();
      return FSWritableFileOwnerWrapper::Fsync(o, dbg);
    }
    rocksdb::IOStatus RangeSync(uint64_t off, uint64_t n, const rocksdb::IOOptions& o,
                                rocksdb::IODebugContext* dbg) override {
      if (fs_->IsEmptyBudget(name_)) return NoSpace();
      return FSWritableFileOwnerWrapper::RangeSync(off, n, o, dbg);
    }
    rocksdb::IOStatus Allocate(uint64_t off, uint64_t n, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override {
      if (fs_->IsEmptyBudget(name_)) return NoSpace();
      return FSWritableFileOwnerWrapper::Allocate(off, n, o, dbg);
    }

   private:
    rocksdb::IOStatus NoSpace() const {
      return rocksdb::IOStatus::NoSpace("injected: disk full writing", name_);
    }
    FullDiskFs* fs_;
    std::string name_;
  };

  // True when the disk is full for `file`: armed, under the prefix and no bytes left.
  bool IsEmptyBudget(const std::string& file) {
    std::lock_guard<std::mutex> lock(mu_);
    bool full = armed_ && absl::StartsWith(file, under_) && left_ == 0;
    if (full) ++refused_;
    return full;
  }
  rocksdb::IOStatus Wrap(const std::string& f, rocksdb::IOStatus s,
                         std::unique_ptr<rocksdb::FSWritableFile>* r) {
    if (s.ok()) *r = std::make_unique<File>(this, f, std::move(*r));
    return s;
  }

  std::mutex mu_;
  bool armed_ = false;
  int64_t left_ = 0;
  std::string under_;
  std::atomic<int64_t> refused_{0};
};

// One FullDiskFs and the Env over it, per test.
struct FaultEnv {
  std::shared_ptr<FullDiskFs> fs = std::make_shared<FullDiskFs>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
};

TieredRowStoreOptions Options(const std::string& path, rocksdb::Env* env) {
  TieredRowStoreOptions o;
  o.path = path;
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.seed = 5;
  o.table_id = 4;
  o.name = "big";
  o.cache_rows = 150;
  o.policy = CachePolicy::kLru;
  o.reader_threads = 2;
  // Small memtables: the write-back reaches SST files (and the full disk) during training,
  // not only at Flush.
  o.write_buffer_bytes = 64 << 10;
  o.env = env;
  return o;
}

std::vector<std::vector<int64_t>> IdStream(int steps) { return SkewedIdStream(3, kRows, steps); }

void Train(RowStore* store, const std::vector<std::vector<int64_t>>& ids, int from, int to) {
  TrainSteps(store, ids, from, to);
}

// The rows a reference in-memory store holds after steps [0, steps) of `ids`.
std::vector<float> ReferenceRows(const std::vector<std::vector<int64_t>>& ids, int steps,
                                 const TieredRowStoreOptions& o, std::vector<float>* state) {
  InMemoryRowStoreOptions m;
  m.num_rows = o.num_rows;
  m.dim = o.dim;
  m.state_dim = o.state_dim;
  m.state_init = o.state_init;
  m.init = o.init;
  m.seed = o.seed;
  m.table_id = o.table_id;
  auto ref = CreateInMemoryRowStore(m);
  EXPECT_TRUE(ref.ok()) << ref.status();
  for (int t = 0; t < steps; ++t) {
    EXPECT_TRUE(TrainStep(ref->get(), t, {ids[t]}, nullptr).ok());
  }
  return AllRows(ref->get(), state);
}

// A disk-full status: ResourceExhausted, naming the store's path and saying there is no space.
void ExpectNoSpace(const absl::Status& s, const std::string& path) {
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(absl::AsciiStrToLower(s.message()).find("no space"), std::string::npos) << s;
}

// Every file under `dir` (name -> bytes): a checkpoint must not change at all.
std::map<std::string, std::string> DirContents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().lexically_relative(dir).string()] =
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// Opens a store restored from `checkpoint` (default Env) and expects exactly `want_w`/`want_s`.
void ExpectRestores(const std::string& checkpoint, const std::string& path,
                    const std::vector<float>& want_w, const std::vector<float>& want_s) {
  auto o = Options(path, nullptr);
  o.restore_from = checkpoint;
  auto store = TieredRowStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<float> s;
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), want_w)) << checkpoint;
  EXPECT_TRUE(BitEqual(s, want_s)) << checkpoint;
}

// The disk fills while training: the write-back that hits it fails, the error is
// ResourceExhausted naming the path, and every later call fails too, also after space comes
// back (the rows of the failed write are neither cached nor on disk). The checkpoint taken
// before is untouched and restores to the reference rows, and training resumes from it.
TEST(TieredFaultsTest, DiskFullWhileTrainingFailsAndStaysFailed) {
  TempDir tmp;
  FaultEnv fe;
  constexpr int kCkpt = 20, kMax = 400;
  auto ids = IdStream(kMax + 1);
  const std::string path = tmp.Sub("db");
  std::vector<float> ref_s, ref_w = ReferenceRows(ids, kCkpt, Options(path, nullptr), &ref_s);
  auto store = TieredRowStore::Open(Options(path, fe.env.get()));
  ASSERT_TRUE(store.ok()) << store.status();
  Train(store->get(), ids, 0, kCkpt);
  ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt")).ok());
  auto ckpt_files = DirContents(tmp.Sub("ckpt"));

  fe.fs->Fill(4096);
  absl::Status s;
  int t = kCkpt;
  for (; t < kMax && s.ok(); ++t) s = TrainStep(store->get(), t, {ids[t]}, &ids[t + 1]);
  // Training must notice within these steps: the memtables (64 KiB) fill every ~30 steps.
  ASSERT_FALSE(s.ok()) << "no error in " << kMax - kCkpt << " steps on a full disk";
  ASSERT_GT(fe.fs->refused(), 0);
  ExpectNoSpace(s, path);

  // Broken from now on, whatever is called, and also once the disk has space again.
  std::vector<int64_t> slots(ids[t].size());
  std::vector<float> row(kDim), st(1);
  for (bool freed : {false, true}) {
    if (freed) fe.fs->Free();
    SCOPED_TRACE(freed ? "space freed" : "disk full");
    EXPECT_FALSE((*store)->Resolve(ids[t], absl::MakeSpan(slots)).ok());
    EXPECT_FALSE((*store)->EndStep().ok());
    EXPECT_FALSE((*store)->ReadRows(0, 1, row.data(), st.data()).ok());
    EXPECT_FALSE((*store)->WriteRows(0, 1, row.data(), st.data()).ok());
    absl::Status f = (*store)->Flush();
    ExpectNoSpace(f, path);
    absl::Status c = (*store)->Checkpoint(tmp.Sub("ckpt2"));
    ExpectNoSpace(c, path);
    EXPECT_FALSE(std::filesystem::exists(tmp.Sub("ckpt2")));
  }
  store->reset();

  // The working database, reopened as it is, is refused: it was not closed cleanly.
  absl::Status reopen = TieredRowStore::Open(Options(path, nullptr)).status();
  EXPECT_EQ(reopen.code(), absl::StatusCode::kFailedPrecondition) << reopen;
  EXPECT_NE(reopen.message().find(path), std::string::npos) << reopen;
  EXPECT_NE(reopen.message().find("not closed cleanly"), std::string::npos) << reopen;

  EXPECT_EQ(DirContents(tmp.Sub("ckpt")), ckpt_files);
  ExpectRestores(tmp.Sub("ckpt"), tmp.Sub("restored"), ref_w, ref_s);
  // The documented recovery of the working path itself: restore it from the checkpoint, then
  // training goes on to the reference's bits.
  auto o = Options(path, fe.env.get());
  o.restore_from = tmp.Sub("ckpt");
  auto resumed = TieredRowStore::Open(o);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  Train(resumed->get(), ids, kCkpt, kCkpt + 10);
  std::vector<float> want_s, got_s;
  std::vector<float> want_w = ReferenceRows(ids, kCkpt + 10, o, &want_s);
  EXPECT_TRUE(BitEqual(AllRows(resumed->get(), &got_s), want_w));
  EXPECT_TRUE(BitEqual(got_s, want_s));
}

// Flush (and so Checkpoint) into a full disk: the memtable flush fails, the store reports it and
// stays failed after space is freed, and an in-place Restore from the last checkpoint is the way
// back (then training and checkpoints work again).
TEST(TieredFaultsTest, FlushIntoFullDiskFailsUntilRestore) {
  TempDir tmp;
  FaultEnv fe;
  auto ids = IdStream(30);
  const std::string path = tmp.Sub("db");
  auto o = Options(path, fe.env.get());
  o.write_buffer_bytes = 8 << 20;  // nothing reaches the disk before Flush
  auto store = TieredRowStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  Train(store->get(), ids, 0, 10);
  ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt10")).ok());
  Train(store->get(), ids, 10, 15);

  fe.fs->Fill(0);
  ExpectNoSpace((*store)->Flush(), path);
  ExpectNoSpace((*store)->Checkpoint(tmp.Sub("ckpt15")), path);
  EXPECT_FALSE(std::filesystem::exists(tmp.Sub("ckpt15")));
  // Restoring onto the still-full disk fails too (opening the copy writes a MANIFEST), and says so.
  ExpectNoSpace((*store)->Restore(tmp.Sub("ckpt10")), path);
  fe.fs->Free();
  ExpectNoSpace((*store)->Flush(), path);
  EXPECT_FALSE(TrainStep(store->get(), 15, {ids[15]}, nullptr).ok());

  ASSERT_TRUE((*store)->Restore(tmp.Sub("ckpt10")).ok());
  Train(store->get(), ids, 10, 30);
  ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt30")).ok());
  std::vector<float> want_s, want_w = ReferenceRows(ids, 30, o, &want_s);
  std::vector<float> got_s;
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &got_s), want_w));
  EXPECT_TRUE(BitEqual(got_s, want_s));
  store->reset();
  ExpectRestores(tmp.Sub("ckpt30"), tmp.Sub("restored"), want_w, want_s);
}

// The checkpoint's own files hit the full disk (the working database has room): for every
// budget that lets the checkpoint write only part of its files, Checkpoint fails with
// ResourceExhausted naming the directory and leaves nothing at `dir` (nor a restorable
// leftover); the previous checkpoint is untouched, and the store, still sound, checkpoints
// fine once space is back.
TEST(TieredFaultsTest, CheckpointIntoFullDiskLeavesNoCheckpoint) {
  TempDir tmp;
  FaultEnv fe;
  auto ids = IdStream(30);
  const std::string path = tmp.Sub("db");
  auto o = Options(path, fe.env.get());
  auto store = TieredRowStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  Train(store->get(), ids, 0, 20);
  ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt20")).ok());
  auto ckpt_files = DirContents(tmp.Sub("ckpt20"));
  Train(store->get(), ids, 20, 30);

  const std::string dir = tmp.Sub("ckpt30");
  int failures = 0;
  absl::Status s;
  // Budgets from nothing to enough: CURRENT is 16 bytes, MANIFEST and OPTIONS a few KiB.
  for (int64_t budget : {0, 8, 16, 64, 512, 2048, 4096, 8192, 16384, 1 << 20}) {
    SCOPED_TRACE(budget);
    fe.fs->Fill(budget, dir);
    s = (*store)->Checkpoint(dir);
    if (s.ok()) break;
    ++failures;
    ExpectNoSpace(s, path);
    EXPECT_NE(s.message().find(dir), std::string::npos) << s;
    for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
      EXPECT_FALSE(absl::StartsWith(e.path().string(), dir)) << "left behind: " << e.path();
    }
    auto r = Options(tmp.Sub("restored"), nullptr);
    r.restore_from = dir;
    EXPECT_FALSE(TieredRowStore::Open(r).ok());
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GE(failures, 3);  // several distinct partial states were tried
  fe.fs->Free();
  std::vector<float> want_s, want_w = ReferenceRows(ids, 30, o, &want_s);
  store->reset();
  EXPECT_EQ(DirContents(tmp.Sub("ckpt20")), ckpt_files);
  ExpectRestores(dir, tmp.Sub("restored30"), want_w, want_s);
  std::vector<float> want20_s, want20_w = ReferenceRows(ids, 20, o, &want20_s);
  ExpectRestores(tmp.Sub("ckpt20"), tmp.Sub("restored20"), want20_w, want20_s);
}

// Reopening the working database: after a clean close it holds exactly the rows of the last
// step; after a close whose flush hit a full disk it is refused (its rows on disk are some
// mixture of steps), naming the path, until restored from a checkpoint or discarded.
TEST(TieredFaultsTest, ReopenTrustsOnlyACleanClose) {
  TempDir tmp;
  FaultEnv fe;
  auto ids = IdStream(20);
  const std::string path = tmp.Sub("db");
  auto o = Options(path, fe.env.get());
  o.write_buffer_bytes = 8 << 20;  // the last steps' rows are only in memory until the close
  std::vector<float> s10, w10 = ReferenceRows(ids, 10, o, &s10);
  {
    auto store = TieredRowStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    Train(store->get(), ids, 0, 10);
  }
  {
    auto store = TieredRowStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<float> s;
    EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), w10));
    EXPECT_TRUE(BitEqual(s, s10));
    ASSERT_TRUE((*store)->Checkpoint(tmp.Sub("ckpt10")).ok());
    Train(store->get(), ids, 10, 20);
    fe.fs->Fill(0);  // the close's flush fails (and is logged)
  }
  fe.fs->Free();
  absl::Status st = TieredRowStore::Open(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << st;
  EXPECT_NE(st.message().find("restore_from"), std::string::npos) << st;
  // Refusing changed nothing: the documented ways out both work.
  auto restored = o;
  restored.restore_from = tmp.Sub("ckpt10");
  {
    auto store = TieredRowStore::Open(restored);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<float> s;
    EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), w10));
    EXPECT_TRUE(BitEqual(s, s10));
  }
  std::vector<float> s0, w0 = ReferenceRows(ids, 0, o, &s0);
  {
    auto store = TieredRowStore::Open(o);  // closed cleanly after the restore
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<float> s;
    EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), w10));
    Train(store->get(), ids, 10, 12);
    fe.fs->Fill(0);
  }
  fe.fs->Free();
  EXPECT_FALSE(TieredRowStore::Open(o).ok());
  auto discarded = o;
  discarded.discard_existing = true;
  auto store = TieredRowStore::Open(discarded);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<float> s;
  EXPECT_TRUE(BitEqual(AllRows(store->get(), &s), w0));
  EXPECT_TRUE(BitEqual(s, s0));
}

}  // namespace
}  // namespace tessera
