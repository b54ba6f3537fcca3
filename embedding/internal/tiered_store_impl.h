// TieredRowStoreImpl: the implementation class of TieredRowStore, shared by the .cc files that
// implement it (embedding/tiered_row_store.cc: the step path, Resolve / Prefetch / EndStep and
// its threads; embedding/internal/tiered_store_persist.cc: Flush, Checkpoint, ReadRows,
// WriteRows, metrics). Internal to embedding/; the contract is in embedding/tiered_row_store.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/internal/rocksdb_rows.h"
#include "embedding/internal/tiered_cache.h"
#include "embedding/tiered_row_store.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace tessera::internal {

// "table 'name' (RocksDB tier at path)" for error messages.
std::string TableLabel(const TieredRowStoreOptions& o);

// Rows whose values a Prefetch call is reading in the background. The prefetch thread writes
// values/found/status and then sets done (under the store's prefetch mutex); the training thread
// reads them only after seeing done.
struct PrefetchBatch {
  // rows[0, db_rows): read from RocksDB by the prefetch thread (sorted, distinct); the rest:
  // rows of the write-back in flight, copied at Prefetch (that buffer is gone after the next
  // EndStep, before the Resolve this batch is for). Distinct over the whole vector.
  std::vector<int64_t> rows;
  int64_t db_rows = 0;
  std::vector<char> values;  // rows.size() × the stored value (weights, then fp32 state)
  std::vector<uint8_t> found;
  absl::Status status;
  bool done = false;
};

// Rows evicted dirty, waiting to be written: row -> its stored value (weights + state).
struct WriteBack {
  absl::flat_hash_map<int64_t, int64_t> index;  // row -> position in rows/values
  std::vector<int64_t> rows;
  std::vector<char> values;
  // Rows to delete (DropRows), written before `rows` in the same batch; none of them is in
  // `rows` when dropped (DropRows takes it out), so a row dropped and then evicted again in
  // the same step is deleted, then written.
  std::vector<int64_t> deletes;
  // Results of the background write (set by the writer thread before done).
  absl::Status status;
  double seconds = 0;

  const char* Find(int64_t row, int64_t value_bytes) const {
    auto it = index.find(row);
    return it == index.end() ? nullptr : values.data() + it->second * value_bytes;
  }
  void Clear() {
    index.clear();
    rows.clear();
    values.clear();
    deletes.clear();
    status = absl::OkStatus();
    seconds = 0;
  }
};


class TieredRowStoreImpl final : public TieredRowStore {
 public:
  TieredRowStoreImpl(const TieredRowStoreOptions& options, std::unique_ptr<rocksdb::DB> db,
                     int64_t cache_rows)
      : options_(options),
        label_(TableLabel(options)),
        weight_bytes_(options.dim * RowDtypeBytes(options.dtype)),
        value_bytes_(weight_bytes_ + options.state_dim * static_cast<int64_t>(sizeof(float))),
        db_(std::move(db)),
        reader_(std::make_unique<internal::RowReader>(
            db_.get(), label_, options.table_id,
            static_cast<size_t>(value_bytes_), options.reader_threads,
            options.multiget_batch)),
        cache_(cache_rows, options.policy) {
    weights_bytes_ = static_cast<size_t>(cache_rows * weight_bytes_);
    state_bytes_ = static_cast<size_t>(cache_rows * std::max<int64_t>(1, options_.state_dim)) *
                   sizeof(float);
    weights_ = static_cast<char*>(AllocateHost(weights_bytes_));
    state_ = static_cast<float*>(AllocateHost(state_bytes_));
    if (options_.prefetch) prefetch_thread_ = std::thread([this] { PrefetchLoop(); });
    writer_thread_ = std::thread([this] { WriterLoop(); });
  }

  bool allocated() const { return weights_ != nullptr && state_ != nullptr; }

  ~TieredRowStoreImpl() override {
    if (prefetch_thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(prefetch_mu_);
        prefetch_stop_ = true;
      }
      prefetch_cv_.notify_all();
      prefetch_thread_.join();
    }
    if (broken_.ok()) {
      absl::Status s;
      if (allocated()) {
        cache_.UnpinAll(/*mark_dirty=*/true);
        s = Flush();
      }
      // Only a close that wrote everything lets the next Open trust the working database.
      if (s.ok()) s = MarkClosedCleanly(db_.get(), options_.path);
      if (!s.ok()) {
        TESSERA_LOG(ERROR) << "closing " << label_ << ": " << s.ToString();
      }
    }
    absl::Status ws = WaitWrite();
    if (!ws.ok()) {
      TESSERA_LOG(ERROR) << "closing " << label_ << ": " << ws.ToString();
    }
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      writer_stop_ = true;
    }
    write_cv_.notify_all();
    writer_thread_.join();
    if (weights_) FreeHost(weights_, weights_bytes_);
    if (state_) FreeHost(state_, state_bytes_);
  }

  int64_t num_rows() const override { return options_.num_rows; }
  int64_t dim() const override { return options_.dim; }
  int64_t state_dim() const override { return options_.state_dim; }
  RowDtype weight_dtype() const override { return options_.dtype; }
  void* weight_data() override { return weights_; }
  float* state() override { return state_; }
  const TieredRowStoreOptions& options() const override { return options_; }

  absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) override;
  void Prefetch(absl::Span<const int64_t> ids) override;
  absl::Status EndStep() override { return FinishStep(/*rows_updated=*/true); }
  absl::Status EndReadOnlyStep() override { return FinishStep(/*rows_updated=*/false); }
  absl::Status ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
                            float* state_out) override;
  absl::Status WriteRowBytes(int64_t begin, int64_t count, const void* weights,
                             const float* state) override;
  absl::Status DropRows(absl::Span<const int64_t> rows) override;
  void SkipReads(absl::Span<const int64_t> rows) override {
    skip_reads_.insert(rows.begin(), rows.end());
  }
  absl::Status Flush() override;
  absl::Status Checkpoint(const std::string& dir) override;
  absl::Status Restore(const std::string& dir) override;
  TieredRowStoreMetrics metrics() override;
  void ResetMetrics() override {
    m_ = TieredRowStoreMetrics();
    prefetch_rows_read_ = 0;
  }

 private:
  char* SlotWeights(int32_t slot) { return weights_ + int64_t{slot} * weight_bytes_; }
  float* SlotState(int32_t slot) { return state_ + int64_t{slot} * options_.state_dim; }
  // Writes a row's initial value (InitRow + state_init), as CreateInMemoryRowStore does (a
  // 16-bit table rounds InitRow's values to nearest). `w`: weight_bytes_ bytes.
  void InitValue(int64_t row, char* w, float* s) const {
    const bool whole = options_.init_dim == 0 ||
                       (options_.init_dim == options_.dim && options_.init_col_begin == 0);
    if (whole && options_.dtype == RowDtype::kF32) {
      InitRow(options_.init, options_.seed, options_.table_id, options_.num_rows,
              options_.row_offset + row, options_.dim, reinterpret_cast<float*>(w));
    } else {
      // A column slice of a wider logical row (the counter stream runs over the full width),
      // or a 16-bit row: computed in fp32 first.
      thread_local std::vector<float> full;
      full.resize(whole ? options_.dim : options_.init_dim);
      InitRow(options_.init, options_.seed, options_.table_id, options_.num_rows,
              options_.row_offset + row, static_cast<int64_t>(full.size()), full.data());
      RowValuesFromFloat(options_.dtype, full.data() + (whole ? 0 : options_.init_col_begin),
                         options_.dim, w);
    }
    if (s != nullptr) std::fill(s, s + options_.state_dim, options_.state_init);
  }
  // A stored value (weights, then fp32 state) into `slot`, and back.
  void SetSlot(int32_t slot, const char* value) {
    std::memcpy(SlotWeights(slot), value, weight_bytes_);
    std::memcpy(SlotState(slot), value + weight_bytes_, options_.state_dim * sizeof(float));
  }
  void GetSlot(int32_t slot, char* value) {
    std::memcpy(value, SlotWeights(slot), weight_bytes_);
    std::memcpy(value + weight_bytes_, SlotState(slot), options_.state_dim * sizeof(float));
  }
  absl::Status CheckRange(int64_t begin, int64_t count, const char* what) const;
  // EndStep / EndReadOnlyStep: unpins the step's rows (dirty when `rows_updated`) and hands the
  // step's evicted dirty rows to the writer thread.
  absl::Status FinishStep(bool rows_updated);
  // Fills freshly installed slots of rows not staged by a prefetch: write-back buffer, RocksDB,
  // lazy init.
  absl::Status FillFromDb(const std::vector<std::pair<int64_t, int32_t>>& rows_slots);
  // Waits for `batch` to finish reading and returns the time waited.
  double WaitBatch(PrefetchBatch* batch);
  void DropOldestBatch();
  void DropAllStaged();
  void PrefetchLoop();
  // Deletes `deletes`, then writes (key, value) pairs to RocksDB, in WriteBatches of bounded
  // size. Adds the seconds taken to `*seconds`.
  absl::Status WriteValues(const std::vector<int64_t>& rows, const char* values,
                           double* seconds, const std::vector<int64_t>& deletes = {});
  // Whether `row` was dropped and its delete has not landed (it reads as never written).
  bool Deleting(int64_t row) const { return !deleting_.empty() && deleting_.contains(row); }
  // Writes pending_.deletes now (after the write in flight), so that a direct write of rows
  // (WriteRowBytes) cannot be undone by a delete landing later.
  absl::Status LandPendingDeletes();
  // The background writer: writes writing_ (one WriteBatch) while the next step trains.
  void WriterLoop();
  // Waits for the write in flight (if any), folds its counts into the metrics, clears writing_
  // and returns its status.
  absl::Status WaitWrite();

  const TieredRowStoreOptions options_;
  const std::string label_;
  const int64_t weight_bytes_;  // stored weights per row: dim * RowDtypeBytes(dtype)
  const int64_t value_bytes_;   // a RocksDB value: weights, then state_dim fp32 floats
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<internal::RowReader> reader_;
  internal::SlotCache cache_;
  char* weights_ = nullptr;
  float* state_ = nullptr;
  size_t weights_bytes_ = 0, state_bytes_ = 0;
  // Once an I/O error has left the cache inconsistent, every call returns it.
  absl::Status broken_;

  // Dirty rows evicted this step. EndStep hands them to the writer thread as writing_ (one
  // WriteBatch), which is written while the next step runs; until that write completes, a miss
  // on one of its rows is served from writing_ (read-only while in flight, so both threads may
  // read it). At most one write is in flight: EndStep waits for the previous one first.
  WriteBack pending_;
  WriteBack writing_;
  std::mutex write_mu_;
  std::condition_variable write_cv_;
  bool write_in_flight_ = false;  // guarded by write_mu_
  bool writer_stop_ = false;      // guarded by write_mu_
  std::thread writer_thread_;
  // WriteValues' batch, reused. Used by one thread at a time: the writer thread while a write is
  // in flight, the training thread (Flush, WriteRows) only after WaitWrite.
  rocksdb::WriteBatch write_batch_;

  // Rows dropped whose delete has not landed yet (in pending_.deletes or writing_.deletes),
  // with how many of those lists hold them: read as never written, never from RocksDB.
  absl::flat_hash_map<int64_t, int32_t> deleting_;
  // Rows the next Resolve installs without reading them (SkipReads).
  absl::flat_hash_set<int64_t> skip_reads_;

  // Scratch for Resolve.
  absl::flat_hash_map<int64_t, int32_t> miss_index_;
  std::vector<int64_t> miss_rows_;
  std::vector<int32_t> miss_slots_;

  // Prefetch: staged_ maps a row to its batch and index; only the training thread touches it.
  // Invariant: a staged row is neither resident nor pending, so its RocksDB value cannot change
  // until Resolve installs it (which consumes the staged entry).
  struct Staged {
    PrefetchBatch* batch;
    int64_t index;
  };
  absl::flat_hash_map<int64_t, Staged> staged_;
  std::deque<std::shared_ptr<PrefetchBatch>> live_batches_;
  std::shared_ptr<PrefetchBatch> spare_batch_;  // a dropped batch, reused for its buffers
  std::vector<int64_t> copied_rows_;  // Prefetch's buffer: rows copied from writing_
  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;       // new work or stop
  std::condition_variable prefetch_done_cv_;  // a batch finished
  std::deque<std::shared_ptr<PrefetchBatch>> prefetch_queue_;
  bool prefetch_stop_ = false;
  std::thread prefetch_thread_;
  std::atomic<int64_t> prefetch_rows_read_{0};

  TieredRowStoreMetrics m_;
};

}  // namespace tessera::internal
