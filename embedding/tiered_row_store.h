// TieredRowStore: a RowStore whose rows (embedding + optimizer state) live in RocksDB, with the
// hot rows cached in host memory. A table may be far larger than memory (2^31 rows × dim 128 is
// 1 TiB); its memory footprint is the cache, its disk footprint the rows ever written.
//
// Layout. The cache is `cache_rows` slots: weight_data() is [cache_rows × dim] values of `dtype`
// and state() is [cache_rows × state_dim] floats, so the lookup and backward kernels run on it
// exactly as on an in-memory table. A hash map translates row -> slot. RocksDB holds one value
// per written row: the row's dim weights as stored (fp32, or the cache's 16-bit bytes for a
// 16-bit `dtype`) then its state_dim fp32 state floats, native little-endian, under the 16-byte
// key (table_id, row) both big-endian, so keys sort by row and a row range is one scan.
//
// Determinism. A row never written reads as InitRow(init, seed, table_id, num_rows, row, dim)
// with every state float = state_init: exactly what CreateInMemoryRowStore holds for that row.
// The same sequence of Resolve / updates / EndStep therefore gives bit-identical rows whatever
// the tier, cache size or policy.
//
// Step protocol (see row_store.h):
//   Prefetch(next ids)  reads the next batch's misses into staging rows on background threads.
//   Resolve(ids)        pins every row of `ids` (hits stay, misses are installed from staging,
//                       the write-back buffer, RocksDB or lazy init, evicting unpinned rows).
//                       Several Resolve calls may share one step; all their rows stay pinned.
//   kernels update weights()/state() at the slots.
//   EndStep()           every row resolved in the step is marked dirty and unpinned; dirty rows
//                       evicted during the step are written to RocksDB in one WriteBatch.
//   EndReadOnlyStep()   the same for a step that only read its rows (evaluation): they are
//                       unpinned without becoming dirty, so they are not written back.
// Pinned rows are never evicted: if one step's distinct rows exceed cache_rows, Resolve returns
// ResourceExhausted naming the table and the sizes (and leaves the cache consistent; call
// EndStep before the next step).
//
// Durability. The RocksDB write-ahead log is off: rows reach disk through memtable flushes, so
// after a crash the working database at `path` is some mixture of steps. Durable state is a
// Checkpoint(dir): dirty rows flushed, memtables flushed, and a RocksDB checkpoint (hard links
// to the immutable SST files) taken into `dir`. Resume by opening with restore_from = dir.
//
// Thread-safety: one caller at a time (the training loop), as for every RowStore. The store
// runs its own reader threads and one prefetch thread; metrics() may be called from the
// training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "embedding/row_init.h"
#include "embedding/row_store.h"
#include "embedding/table_config.h"  // CachePolicy

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace tessera {

// ParseCachePolicy / CachePolicyName ("lru" / "lfu") live beside CachePolicy in table_config.h.

struct TieredRowStoreOptions {
  // Directory of the working RocksDB database. Created if missing; an existing database is
  // reopened (its layout must match, see below). Required.
  std::string path;
  // When non-empty: a directory written by Checkpoint. The database at `path` (if any) is
  // destroyed and replaced by a copy of the checkpoint (SST files hard-linked, the rest
  // copied), so training resumes from it and the checkpoint itself is never modified.
  // Default: "" (open `path` as it is).
  std::string restore_from;
  // When true (and restore_from is empty), an existing database at `path` is destroyed first,
  // so the store starts with every row at its initial value (a fresh training run). Only a
  // RocksDB database or an empty directory is ever deleted; anything else at `path` is
  // FailedPrecondition naming it. Default: false (reopen an existing database).
  bool discard_existing = false;

  // Table layout; with init/seed/state_init it is recorded in the database on creation and a
  // reopen with any difference is rejected (InvalidArgument naming the path and the field),
  // since lazily-initialised rows would otherwise silently change.
  int64_t num_rows = 0;   // logical rows, up to 2^62
  int64_t dim = 0;        // weights per row, > 0
  int64_t state_dim = 0;  // optimizer state floats per row, >= 0
  // How weights are stored in the cache and in RocksDB (state stays fp32). Default: fp32.
  RowDtype dtype = RowDtype::kF32;
  // Initial value of every state float of a row never written. Default: 0.
  float state_init = 0.0f;
  RowInit init;
  uint64_t seed = 0;
  uint64_t table_id = 0;
  // Table name used in error messages. Default: empty ("table <table_id>").
  std::string name;
  // Where this store sits in a larger logical table (a shard of a sharded table): local row r,
  // column c lazily initialises as InitRow(init, seed, table_id, num_rows, row_offset + r,
  // init_dim)[init_col_begin + c], so a shard's rows start exactly as the full table's slice.
  // Keys in RocksDB stay local row ids. Note InitRow's default scale uses `num_rows` (the
  // store's rows): a shard passes the full table's scale explicitly in init.scale. Recorded in
  // the layout when not the defaults. Defaults: 0, 0, 0 (= dim): the whole table.
  int64_t row_offset = 0;
  int64_t init_col_begin = 0;
  int64_t init_dim = 0;

  // Cache size in rows. When 0, derived from cache_bytes. One of the two is required; the cache
  // must hold at least one step's distinct rows. Default: 0.
  int64_t cache_rows = 0;
  // Cache size in bytes (slots + per-slot bookkeeping ~48 bytes/row), used when cache_rows == 0.
  // Default: 0.
  int64_t cache_bytes = 0;
  // Default: kLru.
  CachePolicy policy = CachePolicy::kLru;

  // When false, Prefetch is a no-op (misses are read synchronously in Resolve). Default: true.
  bool prefetch = true;
  // Threads issuing RocksDB MultiGets for misses. Debian's RocksDB has no io_uring, so requests
  // in flight = threads; the disk here does ~4× more random reads at depth 32 than at depth 1.
  // Use 16-32 for a database much larger than the page cache. Default: 8.
  int reader_threads = 8;
  // Keys per MultiGet call; a miss list is split into chunks of at most this many keys spread
  // over the reader threads. Default: 256.
  int64_t multiget_batch = 256;

  // RocksDB knobs (see docs/TIER.md for why these defaults).
  // Block cache for SST data blocks. Small: the row cache above is the real cache, and the OS
  // page cache holds recently read blocks too. Default: 64 MiB.
  int64_t block_cache_bytes = int64_t{64} << 20;
  // Memtable size; large so that a step's write-back lands in memory and flushes are rare and
  // big. Default: 128 MiB (×2 memtables).
  int64_t write_buffer_bytes = int64_t{128} << 20;
  // O_DIRECT reads (bypass the OS page cache). Default: false (the page cache is ~10× faster
  // than the disk here when the database fits).
  bool use_direct_reads = false;
  // For tests (fault injection): the Env RocksDB does its file I/O through, e.g. one made by
  // rocksdb::NewCompositeEnv over a FileSystemWrapper that fails writes. Not owned; must
  // outlive the store. Not a config field. Default: nullptr (rocksdb::Env::Default()).
  rocksdb::Env* env = nullptr;
};

// Counters since Open (or since ResetMetrics). Cumulative; callers difference them per step.
struct TieredRowStoreMetrics {
  int64_t steps = 0;               // EndStep calls
  int64_t hits = 0;                // distinct rows per step found in the cache
  int64_t misses = 0;              // distinct rows per step installed into the cache
  int64_t prefetched_rows = 0;     // rows Prefetch started reading
  int64_t prefetch_used = 0;       // misses served from prefetch staging
  int64_t sync_reads = 0;          // misses Resolve looked up in RocksDB itself (not staged,
                                   // not in the write-back buffers): reads the step waited for,
                                   // found or not. With prefetch, misses - prefetch_used -
                                   // sync_reads were served from the write-back buffers.
  int64_t rows_read = 0;           // rows found in RocksDB (sync + prefetch)
  int64_t rows_initialized = 0;    // misses lazily initialised (row never written)
  int64_t rows_written = 0;        // rows written to RocksDB (write-back, flush, WriteRows);
                                   // an EndStep's write-back counts when EndStep starts it
  int64_t evictions = 0;           // rows evicted from the cache
  int64_t rows_deleted = 0;        // rows deleted by DropRows (a dynamic table's evictions)
  double read_seconds = 0;         // time Resolve spent reading misses synchronously
  double prefetch_stall_seconds = 0;  // time Resolve waited for prefetch reads in flight
  double write_stall_seconds = 0;   // time EndStep waited for the previous step's write-back
  double write_seconds = 0;        // time spent in WriteBatch writes (mostly in the background
                                   // writer thread, overlapping the next step)
  // Gauges at the time metrics() was called.
  int64_t cache_rows = 0;
  int64_t resident_rows = 0;
  int64_t sst_bytes = 0;       // rocksdb.total-sst-files-size
  int64_t memtable_bytes = 0;  // rocksdb.cur-size-all-mem-tables

  double hit_rate() const {
    return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
  }
};

class TieredRowStore : public RowStore {
 public:
  // Opens (or creates) the store. Errors: InvalidArgument for bad options or a database whose
  // recorded layout differs (message names the path and each mismatching field);
  // PermissionDenied / Internal naming the path when it cannot be created or opened.
  static absl::StatusOr<std::unique_ptr<TieredRowStore>> Open(
      const TieredRowStoreOptions& options);

  // Flushes (best effort, logging a failure) and closes the database.
  ~TieredRowStore() override;

  // Writes every dirty cached row and the pending write-back to RocksDB and flushes the
  // memtables to SST files, so that `path` alone reproduces the current rows. Rows stay cached.
  virtual absl::Status Flush() = 0;
  // Flush(), then takes a RocksDB checkpoint into `dir` (hard links where on the same file
  // system). `dir` must not exist; its parent must. Restore with restore_from = dir.
  virtual absl::Status Checkpoint(const std::string& dir) = 0;
  // Replaces every row by the rows of a checkpoint written by Checkpoint (`dir`), in place: the
  // cache, staging and write-back buffers are dropped (not written), the database at `path` is
  // destroyed and replaced by a copy of the checkpoint (which is never modified), and the store
  // reopens on it with the same options. REQUIRES: not in the middle of a step (no rows pinned:
  // FailedPrecondition). Errors name the checkpoint and the path; a failure after the old
  // database was closed leaves the store returning that error from every call.
  virtual absl::Status Restore(const std::string& dir) = 0;

  // Deletes `rows` (each in [0, num_rows), not pinned): they leave the cache without being
  // written back, leave the prefetch staging and the write-back buffer, and are deleted from
  // RocksDB with the next step's write-back (the deletes first, then that step's evicted rows),
  // so from now on each reads as never written (its lazy initial value) and the database holds
  // only rows alive. For tables whose rows die: a dynamic table over the tier deletes the rows
  // of its evicted keys. FailedPrecondition naming the row for a pinned row (nothing is
  // dropped then), InvalidArgument for a row out of range.
  virtual absl::Status DropRows(absl::Span<const int64_t> rows) = 0;
  // Hints that the caller overwrites `rows` (weights and state) after the next Resolve: a miss
  // on one of them is installed with its initial value without a read (a dynamic table's key
  // just placed in a slot). Applies to the next Resolve only.
  virtual void SkipReads(absl::Span<const int64_t> rows) = 0;

  virtual TieredRowStoreMetrics metrics() = 0;
  virtual void ResetMetrics() = 0;
  virtual const TieredRowStoreOptions& options() const = 0;

 protected:
  TieredRowStore() = default;
};

}  // namespace tessera
