// The RocksDB side of the tiered row store: key encoding, the options chosen for batched point
// reads of fixed-size float rows, the layout record that guards against reinterpreting a
// database, checkpoint restore, and RowReader, which reads many rows with several MultiGets in
// flight at once. Internal to embedding/.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/tiered_row_store.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace tessera::internal {

// Row keys: 8-byte big-endian table id, then 8-byte big-endian row, so byte order = row order.
inline constexpr size_t kRowKeyBytes = 16;
void EncodeRowKey(uint64_t table_id, int64_t row, char* out);
// Decodes a row key of `table_id`; false for any other key (metadata, another table).
bool DecodeRowKey(const rocksdb::Slice& key, uint64_t table_id, int64_t* row);

// The key of the layout record (not 16 bytes long, so never a row key).
inline constexpr const char* kLayoutKey = "tessera.tiered_layout";
// The layout record's text for `options`: "key=value" lines of every field that changes how the
// stored bytes or lazily initialised rows are interpreted.
std::string LayoutRecord(const TieredRowStoreOptions& options);
// Compares a stored layout record with the expected one; InvalidArgument naming `path` and each
// differing field ("dim: database has 64, table has 128").
absl::Status CheckLayout(const std::string& path, const std::string& stored,
                         const std::string& expected);

// The key of the open record (not 16 bytes long either): written and flushed when a store opens
// the database, deleted and flushed by a clean close (MarkClosedCleanly). With the WAL off, a
// database still holding it was left by a process that died or by a close whose flush failed
// (a full disk): its rows may mix several steps, so OpenRowDb refuses to reopen it as it is.
inline constexpr const char* kOpenKey = "tessera.open";
// Deletes the open record and flushes; call after the store's last successful Flush.
absl::Status MarkClosedCleanly(rocksdb::DB* db, const std::string& path);

// RocksDB options for this access pattern (reasons in the .cc and docs/TIER.md).
rocksdb::Options RowDbOptions(const TieredRowStoreOptions& options);
rocksdb::WriteOptions RowWriteOptions();
rocksdb::ReadOptions RowReadOptions();
// For iterators (range scans): total order, whatever the prefix extractor.
rocksdb::ReadOptions RowScanOptions();

// Converts a RocksDB failure into an absl::Status whose message names `what` and `path`.
absl::Status FromRocks(const rocksdb::Status& s, const std::string& what, const std::string& path);
// The same with the message "<where>: <what>: <RocksDB's text>" (where = the table's label).
// Corruption (a block checksum mismatch names the SST file and offset) becomes DataLoss with a
// hint to restore the table from its last checkpoint.
absl::Status FromRocksAt(const rocksdb::Status& s, const std::string& where,
                         const std::string& what);

// Creates `path` if needed (error naming the path when it cannot be created or written),
// restores `options.restore_from` into it when set, opens the database, checks or writes the
// layout record and writes the open record. A database at `path` that was not closed cleanly
// (open record present; restore_from empty) is FailedPrecondition naming the path: restore it
// from a checkpoint or discard it.
absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenRowDb(const TieredRowStoreOptions& options);

// Destroys the RocksDB database at `path` (nothing to do when absent or an empty directory);
// FailedPrecondition "<what>: <path> exists and is not a RocksDB database" for anything else.
absl::Status DestroyRowDb(const std::string& path, const rocksdb::Options& db_options,
                          const std::string& what);

// Replaces the database at `path` by a copy of the checkpoint at `checkpoint` (SST files are
// immutable, so they are hard-linked; CURRENT, MANIFEST and OPTIONS files are copied).
absl::Status RestoreCheckpoint(const std::string& checkpoint, const std::string& path,
                               const rocksdb::Options& db_options);

// Reads rows with up to `threads` MultiGet calls in flight. Thread-safe: Read may be called
// from several threads at once (the training thread and the prefetch thread share the pool).
class RowReader {
 public:
  // `value_bytes`: the exact size of a stored row; a value of another size is DataLoss.
  // `where` starts every error message (the table's label, which names the path).
  RowReader(rocksdb::DB* db, std::string where, uint64_t table_id, size_t value_bytes,
            int threads, int64_t batch);
  ~RowReader();
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  // Called once per row found, with its index in `rows` and its value_bytes bytes; calls for
  // different indices may run concurrently on different threads.
  using Sink = std::function<void(int64_t index, const char* value)>;
  // Reads `rows` (sorted ascending for the best block locality) and calls `sink` for each row
  // present. Blocks until all reads are done (the calling thread reads chunks too). Returns the
  // rows found in `*found`.
  absl::Status Read(absl::Span<const int64_t> rows, const Sink& sink, int64_t* found);

 private:
  void WorkerLoop();
  absl::Status ReadChunk(absl::Span<const int64_t> rows, int64_t base, const Sink& sink,
                         int64_t* found);

  rocksdb::DB* db_;
  std::string path_;
  uint64_t table_id_;
  size_t value_bytes_;
  int64_t batch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::internal
