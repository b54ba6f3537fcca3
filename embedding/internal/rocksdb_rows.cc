#include "embedding/internal/rocksdb_rows.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/status.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"

namespace tessera::internal {

namespace fs = std::filesystem;

void EncodeRowKey(uint64_t table_id, int64_t row, char* out) {
  uint64_t r = static_cast<uint64_t>(row);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(table_id >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<char>(r >> (56 - 8 * i));
}

bool DecodeRowKey(const rocksdb::Slice& key, uint64_t table_id, int64_t* row) {
  if (key.size() != kRowKeyBytes) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(key.data());
  uint64_t t = 0, r = 0;
  for (int i = 0; i < 8; ++i) t = (t << 8) | p[i];
  for (int i = 0; i < 8; ++i) r = (r << 8) | p[8 + i];
  if (t != table_id) return false;
  *row = static_cast<int64_t>(r);
  return true;
}

namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Parses "key=value" lines.
std::map<std::string, std::string> ParseRecord(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

std::string LayoutRecord(const TieredRowStoreOptions& o) {
  // Floats are recorded by their bits: a scale that differs in the last bit changes every lazily
  // initialised row, and that must be caught, not rounded away.
  return absl::StrCat("format=1\n", "dtype=", RowDtypeName(o.dtype), "\n", "table_id=", o.table_id, "\n",
                      "dim=", o.dim, "\n", "state_dim=", o.state_dim, "\n",
                      "num_rows=", o.num_rows, "\n", "seed=", o.seed, "\n",
                      "init_type=", static_cast<int>(o.init.type), "\n",
                      "init_scale_bits=", FloatBits(o.init.scale), "\n",
                      "state_init_bits=", FloatBits(o.state_init), "\n",
                      // Only when set, so databases written before these fields still match.
                      o.row_offset != 0 ? absl::StrCat("row_offset=", o.row_offset, "\n") : "",
                      o.init_dim != 0 ? absl::StrCat("init_dim=", o.init_dim, "\n",
                                                     "init_col_begin=", o.init_col_begin, "\n")
                                      : "");
}

absl::Status CheckLayout(const std::string& path, const std::string& stored,
                         const std::string& expected) {
  auto have = ParseRecord(stored);
  auto want = ParseRecord(expected);
  std::string diffs;
  for (const auto& [key, value] : want) {
    auto it = have.find(key);
    std::string got = it == have.end() ? "(missing)" : it->second;
    if (got != value) {
      absl::StrAppend(&diffs, diffs.empty() ? "" : "; ", key, ": database has ", got,
                      ", table has ", value);
    }
  }
  if (diffs.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "RocksDB tier at ", path, " was written with another table layout (", diffs,
      "); refusing to reinterpret it. Use another path or the matching table config."));
}

namespace {

// RocksDB's info log, through Tessera's logger (errors only; the API returns them anyway)
// in the database directory. On a full disk that file's writer hits ENOSPC too, and Debian's
// RocksDB 7.8.3 (built with assertions) then aborts the process in WritableFileWriter::Append
// (assertion `sync_without_flush_called_`) at the next log line, instead of letting the
// ResourceExhausted error reach the caller: seen in 2 of 8 runs of
// tests/embedding/tiered_small_fs_test.cc on a real 24 MiB tmpfs before this logger.
class RocksLogger : public rocksdb::Logger {
 public:
  RocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::ERROR_LEVEL) {}
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    char text[1024];
    std::vsnprintf(text, sizeof(text), format, ap);
    TESSERA_LOG(WARNING) << "rocksdb: " << text;
  }
};

}  // namespace

rocksdb::Options RowDbOptions(const TieredRowStoreOptions& o) {
  rocksdb::Options opt;
  opt.create_if_missing = true;
  static const auto* logger = new std::shared_ptr<rocksdb::Logger>(new RocksLogger());
  opt.info_log = *logger;
  // Rows are random floats: compression gains nothing and costs CPU on every miss.
  opt.compression = rocksdb::kNoCompression;
  opt.bottommost_compression = rocksdb::kNoCompression;
  // Large memtables: a step's write-back lands in memory; flushes are rare and big.
  opt.write_buffer_size = static_cast<size_t>(o.write_buffer_bytes);
  opt.max_write_buffer_number = 3;
  opt.target_file_size_base = 128ull << 20;
  opt.max_bytes_for_level_base = 1ull << 30;
  opt.level_compaction_dynamic_level_bytes = true;
  // Two cores shared with training: keep background flush/compaction modest.
  opt.max_background_jobs = 2;
  opt.use_direct_reads = o.use_direct_reads;
  if (o.env != nullptr) opt.env = o.env;
  // No memtable bloom filter: the hashed memtable below answers a row it does not hold (a row
  // never written) with one bucket probe, so a filter would only add a hash to every write.
  //
  // A hashed memtable instead of the default skiplist: every miss is a point read and every
  // write-back a point write of a whole key, so a hash bucket per key replaces a ~20-level
  // skiplist walk (a cache miss per level) by one probe. bench/embedding_memtable_bench.cc
  // (25k rows of 260 bytes, 530-row MultiGets and WriteBatches): 0.49 µs per row read and 0.26 µs
  // per row written, against 3.35 and 2.95 µs with the skiplist.
  // The prefix is the whole 16-byte row key (capped, so the longer layout key is in domain);
  // scans (ReadRows, the foreign-data check) ask for total order (RowScanOptions). One bucket
  // per ~512 bytes of write buffer: about one per row version the memtable can hold.
  opt.prefix_extractor.reset(rocksdb::NewCappedPrefixTransform(kRowKeyBytes));
  opt.memtable_factory.reset(rocksdb::NewHashLinkListRepFactory(
      static_cast<size_t>(std::max<int64_t>(1024, o.write_buffer_bytes / 512))));
  opt.allow_concurrent_memtable_write = false;  // only the skiplist supports it
  // Every write-back rewrites a row already in the memtable with a value of the same size, so
  // update it in place instead of appending a version: the memtable stays one entry per row
  // touched, never fills with stale versions, and needs no flush or compaction while training.
  // Same benchmark, 2,000 steps: a 10 MiB memtable and 0.05 page faults per step, against 191
  // MiB and 24 faults per step appending versions (0.76 / 0.42 µs per row read / written).
  // Snapshots lose point-in-time consistency with this on; the tier takes none, and never reads
  // a row while its write is in flight (the write-back buffer serves it).
  opt.inplace_update_support = true;

  rocksdb::BlockBasedTableOptions t;
  // 10 bits/key: ~1% false positives, so a never-written row costs no disk read.
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  t.whole_key_filtering = true;
  // Our row cache is the real cache; the block cache only absorbs re-reads of recent blocks.
  t.block_cache = rocksdb::NewLRUCache(static_cast<size_t>(o.block_cache_bytes));
  // 4 KiB blocks = one page = one random disk read per point lookup.
  t.block_size = 4096;
  // A hash index inside each data block makes the in-block point lookup O(1).
  t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  opt.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return opt;
}

rocksdb::WriteOptions RowWriteOptions() {
  rocksdb::WriteOptions w;
  // No write-ahead log: durability comes from Checkpoint, and the WAL would double every write.
  w.disableWAL = true;
  return w;
}

rocksdb::ReadOptions RowReadOptions() {
  rocksdb::ReadOptions r;
  // Verify each block's crc32c as it is read (RocksDB's default): a rotted SST file is then a
  // DataLoss naming the file at the first read that touches it, instead of garbage rows
  // trained on silently. The cost is one crc32c (SSE4.2) pass over a 4 KiB block per block
  // read from the file; blocks in the block cache are not re-verified.
  r.verify_checksums = true;
  return r;
}

rocksdb::ReadOptions RowScanOptions() {
  rocksdb::ReadOptions r;
  // The prefix extractor covers a whole row key, so an iterator in the default prefix mode would
  // stop after one row: scans ask for total order.
  r.total_order_seek = true;
  return r;
}

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what,
                       const std::string& path) {
  return FromRocksAt(s, absl::StrCat("RocksDB tier at ", path), what);
}

absl::Status FromRocksAt(const rocksdb::Status& s, const std::string& where,
                         const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(where, ": ", what, ": ", s.ToString());
  if (s.IsCorruption()) {
    return absl::DataLossError(absl::StrCat(
        msg, " (a database file is damaged: restore the table from its last checkpoint)"));
  }
  // A write refused after a background flush or compaction hit ENOSPC comes back as another
  // code (Debian's 7.8.3: "Result incomplete: IO error: No space left on device ...") with the
  // background error only in its text, so the text counts too.
  if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kNoSpace ||
      s.ToString().find("No space left on device") != std::string::npos) {
    return absl::ResourceExhaustedError(msg);
  }
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsIOError() && s.ToString().find("ermission denied") != std::string::npos) {
    return absl::PermissionDeniedError(msg);
  }
  if (s.IsBusy() || s.IsTimedOut()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

absl::Status DestroyRowDb(const std::string& path, const rocksdb::Options& db_options,
                          const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::OkStatus();
  // Only ever delete a RocksDB database: a mistyped path must not wipe a user's directory.
  bool empty = fs::is_directory(path, ec) && fs::is_empty(path, ec);
  if (empty) return absl::OkStatus();
  if (!fs::exists(fs::path(path) / "CURRENT", ec)) {
    // A database whose creation or restore was interrupted (the process killed inside
    // DB::Open, or while RestoreCheckpoint copied, CURRENT last) has no CURRENT yet, only
    // RocksDB's own files: remove those, and nothing else.
    std::vector<fs::path> files;
    bool leftovers = fs::is_directory(path, ec);
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string n = entry.path().filename().string();
      const bool rocks = n == "LOCK" || n == "IDENTITY" || n.rfind("LOG", 0) == 0 ||
                         n.rfind("MANIFEST-", 0) == 0 || n.rfind("OPTIONS-", 0) == 0 ||
                         entry.path().extension() == ".dbtmp" ||
                         entry.path().extension() == ".log" || entry.path().extension() == ".sst";
      leftovers = leftovers && rocks && entry.is_regular_file();
      files.push_back(entry.path());
    }
    if (!leftovers || ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RocksDB tier: ", what, ": ", path, " exists and is not a RocksDB database"));
    }
    for (const fs::path& f : files) fs::remove(f, ec);
    return absl::OkStatus();
  }
  return FromRocks(rocksdb::DestroyDB(path, db_options), what, path);
}

absl::Status RestoreCheckpoint(const std::string& checkpoint, const std::string& path,
                               const rocksdb::Options& db_options) {
  std::error_code ec;
  if (!fs::exists(fs::path(checkpoint) / "CURRENT", ec)) {
    return absl::NotFoundError(
        absl::StrCat("RocksDB tier: checkpoint ", checkpoint, " is not a RocksDB checkpoint ",
                     "(no CURRENT file)"));
  }
  TESSERA_RETURN_IF_ERROR(
      DestroyRowDb(path, db_options, absl::StrCat("cannot restore ", checkpoint, " into ", path)));
  fs::create_directories(path, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("RocksDB tier: cannot create ", path, ": ", ec.message()));
  }
  // CURRENT last: until it exists the copy is not a database, and an interrupted restore is
  // discarded as leftovers by the next one (DestroyRowDb).
  std::vector<fs::directory_entry> entries;
  for (const auto& entry : fs::directory_iterator(checkpoint, ec)) {
    if (entry.path().filename() != "CURRENT") entries.push_back(entry);
  }
  entries.push_back(fs::directory_entry(fs::path(checkpoint) / "CURRENT"));
  for (const auto& entry : entries) {
    if (!entry.is_regular_file()) continue;
    std::string name = entry.path().filename().string();
    if (name == "LOCK" || name.rfind("LOG", 0) == 0) continue;
    fs::path dst = fs::path(path) / name;
    std::error_code link_ec;
    bool linked = false;
    if (entry.path().extension() == ".sst") {
      fs::create_hard_link(entry.path(), dst, link_ec);
      linked = !link_ec;
    }
    if (!linked) {
      std::error_code copy_ec;
      fs::copy_file(entry.path(), dst, fs::copy_options::overwrite_existing, copy_ec);
      if (copy_ec) {
        return absl::InternalError(absl::StrCat("RocksDB tier: restoring ", checkpoint, " into ",
                                                path, ": copying ", name, ": ",
                                                copy_ec.message()));
      }
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("RocksDB tier: reading checkpoint ", checkpoint, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenRowDb(const TieredRowStoreOptions& o) {
  rocksdb::Options db_options = RowDbOptions(o);
  if (!o.restore_from.empty()) {
    TESSERA_RETURN_IF_ERROR(RestoreCheckpoint(o.restore_from, o.path, db_options));
  } else if (o.discard_existing) {
    TESSERA_RETURN_IF_ERROR(DestroyRowDb(o.path, db_options, "discarding the old rows"));
  }
  std::error_code ec;
  fs::create_directories(o.path, ec);
  if (ec || !fs::is_directory(o.path, ec)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "RocksDB tier: cannot create directory ", o.path, ": ",
        ec ? ec.message() : std::string("exists and is not a directory")));
  }
  if (::access(o.path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("RocksDB tier: directory ", o.path, " is not writable"));
  }
  rocksdb::DB* raw = nullptr;
  TESSERA_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(db_options, o.path, &raw), "open", o.path));
  std::unique_ptr<rocksdb::DB> db(raw);

  std::string expected = LayoutRecord(o);
  std::string stored;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), kLayoutKey, &stored);
  if (s.IsNotFound()) {
    // A database with rows but no layout record was not written by us: refuse it.
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(RowScanOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RocksDB tier at ", o.path, " holds data without a tessera layout record"));
    }
    // The layout record goes through the WAL-less path too, so it is flushed (below) before any
    // row is written: a database must never hold rows without the record that says how to read
    // them.
    TESSERA_RETURN_IF_ERROR(FromRocks(db->Put(RowWriteOptions(), kLayoutKey, expected),
                                      "writing the layout record", o.path));
  } else {
    TESSERA_RETURN_IF_ERROR(FromRocks(s, "reading the layout record", o.path));
    TESSERA_RETURN_IF_ERROR(CheckLayout(o.path, stored, expected));
    // A restored checkpoint holds the open record (it was taken while open) but is consistent.
    std::string open_record;
    s = db->Get(rocksdb::ReadOptions(), kOpenKey, &open_record);
    if (s.ok() && o.restore_from.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RocksDB tier at ", o.path, " was not closed cleanly (the process died, or a write "
          "failed, e.g. on a full disk): with the write-ahead log off its rows may mix several "
          "steps, so it is not reopened as it is. Restore it from a checkpoint (restore_from) "
          "or start over (discard_existing)."));
    }
    if (!s.IsNotFound()) TESSERA_RETURN_IF_ERROR(FromRocks(s, "reading the open record", o.path));
  }
  // Flushed before any row is written: rows on disk always come with the open record until a
  // clean close deletes it.
  TESSERA_RETURN_IF_ERROR(FromRocks(db->Put(RowWriteOptions(), kOpenKey, "1"),
                                    "writing the open record", o.path));
  TESSERA_RETURN_IF_ERROR(
      FromRocks(db->Flush(rocksdb::FlushOptions()), "flushing the open record", o.path));
  return db;
}

absl::Status MarkClosedCleanly(rocksdb::DB* db, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(
      FromRocks(db->Delete(RowWriteOptions(), kOpenKey), "deleting the open record", path));
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(db->Flush(fo), "flushing the open record", path);
}

// ---------------------------------------------------------------------------------------------
// RowReader

RowReader::RowReader(rocksdb::DB* db, std::string path, uint64_t table_id, size_t value_bytes,
                     int threads, int64_t batch)
    : db_(db),
      path_(std::move(path)),
      table_id_(table_id),
      value_bytes_(value_bytes),
      batch_(std::max<int64_t>(1, batch)) {
  for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

RowReader::~RowReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void RowReader::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

absl::Status RowReader::ReadChunk(absl::Span<const int64_t> rows, int64_t base, const Sink& sink,
                                  int64_t* found) {
  const size_t n = rows.size();
  std::vector<char> key_bytes(n * kRowKeyBytes);
  std::vector<rocksdb::Slice> keys(n);
  for (size_t i = 0; i < n; ++i) {
    EncodeRowKey(table_id_, rows[i], key_bytes.data() + i * kRowKeyBytes);
    keys[i] = rocksdb::Slice(key_bytes.data() + i * kRowKeyBytes, kRowKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  // Keys are big-endian rows, so sorted rows are sorted keys; RocksDB then skips its own sort.
  bool sorted = std::is_sorted(rows.begin(), rows.end());
  db_->MultiGet(RowReadOptions(), db_->DefaultColumnFamily(), n, keys.data(), values.data(),
                statuses.data(), sorted);
  int64_t hit = 0;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    TESSERA_RETURN_IF_ERROR(
        FromRocksAt(statuses[i], path_, absl::StrCat("reading row ", rows[i])));
    if (values[i].size() != value_bytes_) {
      return absl::DataLossError(absl::StrCat(path_, ": row ", rows[i],
                                              " has ", values[i].size(), " bytes, expected ",
                                              value_bytes_));
    }
    sink(base + static_cast<int64_t>(i), values[i].data());
    ++hit;
  }
  *found = hit;
  return absl::OkStatus();
}

absl::Status RowReader::Read(absl::Span<const int64_t> rows, const Sink& sink, int64_t* found) {
  *found = 0;
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return absl::OkStatus();
  // Spread the keys over every worker (more requests in flight), but keep each MultiGet at
  // least a few keys long so its per-call overhead stays small.
  int64_t workers = static_cast<int64_t>(workers_.size());
  int64_t chunk = std::min(batch_, std::max<int64_t>(8, (n + workers - 1) / workers));
  int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks == 1) return ReadChunk(rows, 0, sink, found);

  // The caller reads chunks too instead of sleeping until the workers are done: one thread
  // handoff fewer per call, and nothing waits idle when the rows come from memory. Chunks are
  // claimed from a shared counter. The state is shared so that a worker that starts after the
  // last chunk was claimed (the caller may have returned by then) touches only the counter.
  struct State {
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    int64_t remaining = 0;
    std::vector<absl::Status> statuses;
    std::vector<int64_t> counts;
  };
  auto state = std::make_shared<State>();
  state->remaining = chunks;
  state->statuses.resize(chunks);
  state->counts.assign(chunks, 0);
  auto run = [this, state, rows, &sink, chunk, chunks, n] {
    for (;;) {
      const int64_t c = state->next.fetch_add(1);
      if (c >= chunks) return;
      const int64_t b = c * chunk, e = std::min(n, b + chunk);
      state->statuses[c] = ReadChunk(rows.subspan(b, e - b), b, sink, &state->counts[c]);
      std::lock_guard<std::mutex> l(state->mu);
      if (--state->remaining == 0) state->cv.notify_all();
    }
  };
  const int64_t helpers = std::min<int64_t>(workers, chunks - 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t h = 0; h < helpers; ++h) queue_.push_back(run);
  }
  cv_.notify_all();
  run();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->remaining == 0; });
  for (int64_t c = 0; c < chunks; ++c) {
    TESSERA_RETURN_IF_ERROR(state->statuses[c]);
    *found += state->counts[c];
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
