#include "embedding/tiered_row_store.h"

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
#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/internal/rocksdb_rows.h"
#include "embedding/internal/tiered_cache.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace tessera {

absl::StatusOr<CachePolicy> ParseCachePolicy(const std::string& name) {
  if (name == "lru") return CachePolicy::kLru;
  if (name == "lfu") return CachePolicy::kLfu;
  return absl::InvalidArgumentError(
      absl::StrCat("cache policy '", name, "' is not one of: lru, lfu"));
}

const char* CachePolicyName(CachePolicy policy) {
  return policy == CachePolicy::kLru ? "lru" : "lfu";
}

TieredRowStore::~TieredRowStore() = default;

namespace {

std::string TableLabel(const TieredRowStoreOptions& o) {
  return absl::StrCat(o.name.empty() ? absl::StrCat("table ", o.table_id)
                                     : absl::StrCat("table '", o.name, "'"),
                      " (RocksDB tier at ", o.path, ")");
}

using internal::EncodeRowKey;
using internal::FromRocks;
using internal::kRowKeyBytes;

// Rows whose values a Prefetch call is reading in the background. The prefetch thread writes
// values/found/status and then sets done (under the store's prefetch mutex); the training thread
// reads them only after seeing done.
struct PrefetchBatch {
  std::vector<int64_t> rows;  // sorted, distinct
  std::vector<float> values;  // rows.size() × (dim + state_dim)
  std::vector<uint8_t> found;
  absl::Status status;
  bool done = false;
};

// Rows evicted dirty, waiting to be written: row -> its value (dim weights + state floats).
struct WriteBack {
  absl::flat_hash_map<int64_t, int64_t> index;  // row -> position in rows/values
  std::vector<int64_t> rows;
  std::vector<float> values;
  // Results of the background write (set by the writer thread before done).
  absl::Status status;
  double seconds = 0;

  const float* Find(int64_t row, int64_t row_floats) const {
    auto it = index.find(row);
    return it == index.end() ? nullptr : values.data() + it->second * row_floats;
  }
  void Clear() {
    index.clear();
    rows.clear();
    values.clear();
    status = absl::OkStatus();
    seconds = 0;
  }
};

// Reorders `wb` by row (index follows).
void SortWriteBack(WriteBack* wb, int64_t row_floats) {
  const size_t n = wb->rows.size();
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return wb->rows[a] < wb->rows[b]; });
  std::vector<int64_t> rows(n);
  std::vector<float> values(wb->values.size());
  for (size_t i = 0; i < n; ++i) {
    rows[i] = wb->rows[order[i]];
    std::memcpy(values.data() + i * row_floats, wb->values.data() + order[i] * row_floats,
                row_floats * sizeof(float));
    wb->index[rows[i]] = static_cast<int64_t>(i);
  }
  wb->rows = std::move(rows);
  wb->values = std::move(values);
}

class TieredRowStoreImpl final : public TieredRowStore {
 public:
  TieredRowStoreImpl(const TieredRowStoreOptions& options, std::unique_ptr<rocksdb::DB> db,
                     int64_t cache_rows)
      : options_(options),
        label_(TableLabel(options)),
        row_floats_(options.dim + options.state_dim),
        db_(std::move(db)),
        reader_(std::make_unique<internal::RowReader>(
            db_.get(), options.path, options.table_id,
            static_cast<size_t>(row_floats_) * sizeof(float), options.reader_threads,
            options.multiget_batch)),
        cache_(cache_rows, options.policy) {
    weights_bytes_ = static_cast<size_t>(cache_rows * options_.dim) * sizeof(float);
    state_bytes_ = static_cast<size_t>(cache_rows * std::max<int64_t>(1, options_.state_dim)) *
                   sizeof(float);
    weights_ = static_cast<float*>(AllocateHost(weights_bytes_));
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
    if (broken_.ok() && allocated()) {
      cache_.UnpinAll(/*mark_dirty=*/true);
      absl::Status s = Flush();
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
  float* weights() override { return weights_; }
  float* state() override { return state_; }
  const TieredRowStoreOptions& options() const override { return options_; }

  absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) override;
  void Prefetch(absl::Span<const int64_t> ids) override;
  absl::Status EndStep() override;
  absl::Status ReadRows(int64_t begin, int64_t count, float* weights_out,
                        float* state_out) override;
  absl::Status WriteRows(int64_t begin, int64_t count, const float* weights,
                         const float* state) override;
  absl::Status Flush() override;
  absl::Status Checkpoint(const std::string& dir) override;
  TieredRowStoreMetrics metrics() override;
  void ResetMetrics() override {
    m_ = TieredRowStoreMetrics();
    prefetch_rows_read_ = 0;
  }

 private:
  float* SlotWeights(int32_t slot) { return weights_ + int64_t{slot} * options_.dim; }
  float* SlotState(int32_t slot) { return state_ + int64_t{slot} * options_.state_dim; }
  // Writes a row's initial value (InitRow + state_init), as CreateInMemoryRowStore does.
  void InitValue(int64_t row, float* w, float* s) const {
    InitRow(options_.init, options_.seed, options_.table_id, options_.num_rows, row,
            options_.dim, w);
    if (s != nullptr) std::fill(s, s + options_.state_dim, options_.state_init);
  }
  void SetSlot(int32_t slot, const float* value) {
    std::memcpy(SlotWeights(slot), value, options_.dim * sizeof(float));
    std::memcpy(SlotState(slot), value + options_.dim, options_.state_dim * sizeof(float));
  }
  absl::Status CheckRange(int64_t begin, int64_t count, const char* what) const;
  // Fills freshly installed slots of rows not staged by a prefetch: write-back buffer, RocksDB,
  // lazy init.
  absl::Status FillFromDb(const std::vector<std::pair<int64_t, int32_t>>& rows_slots);
  // Waits for `batch` to finish reading and returns the time waited.
  double WaitBatch(PrefetchBatch* batch);
  void DropOldestBatch();
  void DropAllStaged();
  void PrefetchLoop();
  // Writes (key, value) pairs to RocksDB in WriteBatches of bounded size.
  // Adds the rows written and the seconds taken to `*seconds`.
  absl::Status WriteValues(const std::vector<int64_t>& rows, const float* values,
                           double* seconds);
  // The background writer: writes writing_ (one WriteBatch) while the next step trains.
  void WriterLoop();
  // Waits for the write in flight (if any), folds its counts into the metrics, clears writing_
  // and returns its status.
  absl::Status WaitWrite();

  const TieredRowStoreOptions options_;
  const std::string label_;
  const int64_t row_floats_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<internal::RowReader> reader_;
  internal::SlotCache cache_;
  float* weights_ = nullptr;
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
  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;       // new work or stop
  std::condition_variable prefetch_done_cv_;  // a batch finished
  std::deque<std::shared_ptr<PrefetchBatch>> prefetch_queue_;
  bool prefetch_stop_ = false;
  std::thread prefetch_thread_;
  std::atomic<int64_t> prefetch_rows_read_{0};

  TieredRowStoreMetrics m_;
};

absl::Status TieredRowStoreImpl::CheckRange(int64_t begin, int64_t count,
                                            const char* what) const {
  if (begin < 0 || count < 0 || begin > options_.num_rows - count) {
    return absl::InvalidArgumentError(absl::StrCat(
        label_, ": ", what, ": rows [", begin, ", ", begin, " + ", count,
        ") out of range [0, ", options_.num_rows, ")"));
  }
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::Resolve(absl::Span<const int64_t> ids,
                                         absl::Span<int64_t> slots) {
  TESSERA_RETURN_IF_ERROR(broken_);
  if (ids.size() != slots.size()) {
    return absl::InvalidArgumentError(absl::StrCat(label_, ": Resolve got ", ids.size(),
                                                   " ids but ", slots.size(), " slots"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= options_.num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_, ": Resolve: id ", ids[i], " at position ", i,
                       " out of range [0, ", options_.num_rows, ")"));
    }
  }
  // Pass 1: pin hits; collect the distinct misses. A miss is recorded in slots as -1 - index.
  miss_index_.clear();
  miss_rows_.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t slot = cache_.Find(ids[i]);
    if (slot >= 0) {
      if (!cache_.pinned(slot)) {
        cache_.Pin(slot);
        ++m_.hits;
      }
      slots[i] = slot;
      continue;
    }
    auto [it, inserted] = miss_index_.try_emplace(ids[i], static_cast<int32_t>(miss_rows_.size()));
    if (inserted) miss_rows_.push_back(ids[i]);
    slots[i] = -1 - it->second;
  }
  const int64_t misses = static_cast<int64_t>(miss_rows_.size());
  if (misses > cache_.capacity() - cache_.pinned_count()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        label_, ": this step needs ",
        cache_.pinned_count() + misses, " distinct rows (", cache_.pinned_count(),
        " already pinned + ", misses, " new) but the cache holds ", cache_.capacity(),
        " rows; raise cache_rows/cache_bytes or shrink the batch"));
  }
  if (misses == 0) return absl::OkStatus();

  // Pass 2: give each miss a slot, saving dirty victims for EndStep's WriteBatch.
  miss_slots_.resize(misses);
  for (int64_t m = 0; m < misses; ++m) {
    int64_t evicted_row;
    bool evicted_dirty;
    int32_t slot = cache_.Install(miss_rows_[m], &evicted_row, &evicted_dirty);
    TESSERA_CHECK(slot >= 0) << "no evictable slot after the capacity check";
    miss_slots_[m] = slot;
    if (evicted_row < 0) continue;
    ++m_.evictions;
    if (!evicted_dirty) continue;
    auto [it, inserted] = pending_.index.try_emplace(evicted_row, pending_.rows.size());
    if (inserted) {
      pending_.rows.push_back(evicted_row);
      pending_.values.resize(pending_.values.size() + row_floats_);
    }
    float* dst = pending_.values.data() + it->second * row_floats_;
    std::memcpy(dst, SlotWeights(slot), options_.dim * sizeof(float));
    std::memcpy(dst + options_.dim, SlotState(slot), options_.state_dim * sizeof(float));
  }
  m_.misses += misses;

  // Pass 3: fill. Staged rows first (waiting for their batch if still in flight), the rest from
  // the write-back buffer, RocksDB or lazy init.
  std::vector<std::pair<int64_t, int32_t>> from_db;
  for (int64_t m = 0; m < misses; ++m) {
    auto it = staged_.find(miss_rows_[m]);
    if (it == staged_.end()) {
      from_db.emplace_back(miss_rows_[m], miss_slots_[m]);
      continue;
    }
    PrefetchBatch* batch = it->second.batch;
    int64_t index = it->second.index;
    staged_.erase(it);
    m_.prefetch_stall_seconds += WaitBatch(batch);
    if (!batch->status.ok()) {
      broken_ = batch->status;
      return broken_;
    }
    ++m_.prefetch_used;
    if (batch->found[index]) {
      SetSlot(miss_slots_[m], batch->values.data() + index * row_floats_);
    } else {
      InitValue(miss_rows_[m], SlotWeights(miss_slots_[m]), SlotState(miss_slots_[m]));
      ++m_.rows_initialized;
    }
  }
  if (!from_db.empty()) {
    Stopwatch watch;
    absl::Status s = FillFromDb(from_db);
    m_.read_seconds += watch.ElapsedSeconds();
    if (!s.ok()) {
      // Installed slots hold no valid row now; nothing may use this cache again.
      broken_ = s;
      return s;
    }
  }
  for (auto& s : slots) {
    if (s < 0) s = miss_slots_[-1 - s];
  }
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::FillFromDb(
    const std::vector<std::pair<int64_t, int32_t>>& rows_slots) {
  std::vector<int64_t> rows;
  std::vector<int32_t> slots;
  rows.reserve(rows_slots.size());
  slots.reserve(rows_slots.size());
  for (const auto& [row, slot] : rows_slots) {
    const float* v = pending_.Find(row, row_floats_);
    if (v == nullptr) v = writing_.Find(row, row_floats_);
    if (v != nullptr) {
      SetSlot(slot, v);
      continue;
    }
    rows.push_back(row);
    slots.push_back(slot);
  }
  if (rows.empty()) return absl::OkStatus();
  // Sorted keys: MultiGet skips its sort and neighbouring rows share blocks.
  std::vector<int64_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
  std::vector<int64_t> sorted_rows(rows.size());
  for (size_t i = 0; i < order.size(); ++i) sorted_rows[i] = rows[order[i]];
  std::vector<uint8_t> found(rows.size(), 0);
  int64_t n_found = 0;
  TESSERA_RETURN_IF_ERROR(reader_->Read(
      sorted_rows,
      [&](int64_t i, const char* value) {
        SetSlot(slots[order[i]], reinterpret_cast<const float*>(value));
        found[i] = 1;
      },
      &n_found));
  m_.rows_read += n_found;
  for (size_t i = 0; i < sorted_rows.size(); ++i) {
    if (found[i]) continue;
    int32_t slot = slots[order[i]];
    InitValue(sorted_rows[i], SlotWeights(slot), SlotState(slot));
    ++m_.rows_initialized;
  }
  return absl::OkStatus();
}

double TieredRowStoreImpl::WaitBatch(PrefetchBatch* batch) {
  std::unique_lock<std::mutex> lock(prefetch_mu_);
  if (batch->done) return 0;
  Stopwatch watch;
  prefetch_done_cv_.wait(lock, [batch] { return batch->done; });
  return watch.ElapsedSeconds();
}

void TieredRowStoreImpl::PrefetchLoop() {
  for (;;) {
    std::shared_ptr<PrefetchBatch> batch;
    {
      std::unique_lock<std::mutex> lock(prefetch_mu_);
      prefetch_cv_.wait(lock, [this] { return prefetch_stop_ || !prefetch_queue_.empty(); });
      if (prefetch_queue_.empty()) return;
      batch = prefetch_queue_.front();
      prefetch_queue_.pop_front();
    }
    int64_t found = 0;
    absl::Status s = reader_->Read(
        batch->rows,
        [&](int64_t i, const char* value) {
          std::memcpy(batch->values.data() + i * row_floats_, value, row_floats_ * sizeof(float));
          batch->found[i] = 1;
        },
        &found);
    prefetch_rows_read_ += found;
    {
      std::lock_guard<std::mutex> lock(prefetch_mu_);
      batch->status = s;
      batch->done = true;
    }
    prefetch_done_cv_.notify_all();
  }
}

void TieredRowStoreImpl::DropOldestBatch() {
  std::shared_ptr<PrefetchBatch> batch = live_batches_.front();
  live_batches_.pop_front();
  WaitBatch(batch.get());
  for (int64_t row : batch->rows) {
    auto it = staged_.find(row);
    if (it != staged_.end() && it->second.batch == batch.get()) staged_.erase(it);
  }
}

void TieredRowStoreImpl::DropAllStaged() {
  while (!live_batches_.empty()) DropOldestBatch();
  staged_.clear();
}

void TieredRowStoreImpl::Prefetch(absl::Span<const int64_t> ids) {
  if (!options_.prefetch || !broken_.ok()) return;
  auto batch = std::make_shared<PrefetchBatch>();
  for (int64_t id : ids) {
    // Bad ids are Resolve's to report; resident, pending and staged rows need no read.
    if (id < 0 || id >= options_.num_rows) continue;
    if (cache_.Find(id) >= 0 || pending_.index.contains(id) || writing_.index.contains(id) ||
        staged_.contains(id)) {
      continue;
    }
    batch->rows.push_back(id);
  }
  std::sort(batch->rows.begin(), batch->rows.end());
  batch->rows.erase(std::unique(batch->rows.begin(), batch->rows.end()), batch->rows.end());
  if (batch->rows.empty()) return;
  batch->values.resize(batch->rows.size() * row_floats_);
  batch->found.assign(batch->rows.size(), 0);
  for (size_t i = 0; i < batch->rows.size(); ++i) {
    staged_[batch->rows[i]] = Staged{batch.get(), static_cast<int64_t>(i)};
  }
  m_.prefetched_rows += static_cast<int64_t>(batch->rows.size());
  // Staging holds at most the two latest batches: the one being resolved and the next.
  live_batches_.push_back(batch);
  while (live_batches_.size() > 2) DropOldestBatch();
  {
    std::lock_guard<std::mutex> lock(prefetch_mu_);
    prefetch_queue_.push_back(std::move(batch));
  }
  prefetch_cv_.notify_one();
}

absl::Status TieredRowStoreImpl::WriteValues(const std::vector<int64_t>& rows,
                                             const float* values, double* seconds) {
  constexpr size_t kRowsPerBatch = 16384;
  Stopwatch watch;
  char key[kRowKeyBytes];
  const size_t value_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
  for (size_t b = 0; b < rows.size(); b += kRowsPerBatch) {
    rocksdb::WriteBatch wb;
    size_t e = std::min(rows.size(), b + kRowsPerBatch);
    for (size_t i = b; i < e; ++i) {
      EncodeRowKey(options_.table_id, rows[i], key);
      TESSERA_RETURN_IF_ERROR(FromRocks(
          wb.Put(rocksdb::Slice(key, kRowKeyBytes),
                 rocksdb::Slice(reinterpret_cast<const char*>(values + i * row_floats_),
                                value_bytes)),
          "batching rows", options_.path));
    }
    TESSERA_RETURN_IF_ERROR(
        FromRocks(db_->Write(internal::RowWriteOptions(), &wb), "writing rows", options_.path));
  }
  *seconds += watch.ElapsedSeconds();
  return absl::OkStatus();
}

void TieredRowStoreImpl::WriterLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(write_mu_);
      write_cv_.wait(lock, [this] { return writer_stop_ || write_in_flight_; });
      if (!write_in_flight_) return;
    }
    // writing_ is not modified by the training thread while write_in_flight_.
    writing_.status = WriteValues(writing_.rows, writing_.values.data(), &writing_.seconds);
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      write_in_flight_ = false;
    }
    write_cv_.notify_all();
  }
}

absl::Status TieredRowStoreImpl::WaitWrite() {
  {
    std::unique_lock<std::mutex> lock(write_mu_);
    write_cv_.wait(lock, [this] { return !write_in_flight_; });
  }
  absl::Status s = writing_.status;
  m_.write_seconds += writing_.seconds;
  writing_.Clear();
  return s;
}

absl::Status TieredRowStoreImpl::EndStep() {
  TESSERA_RETURN_IF_ERROR(broken_);
  cache_.UnpinAll(/*mark_dirty=*/true);
  ++m_.steps;
  Stopwatch wait;
  absl::Status s = WaitWrite();
  m_.write_stall_seconds += wait.ElapsedSeconds();
  if (!s.ok()) {
    // The rows of that write are gone from the cache and not on disk.
    broken_ = s;
    return s;
  }
  if (pending_.rows.empty()) return absl::OkStatus();
  // One WriteBatch for the step's evictions (split only past 16k rows), written in the
  // background: the disk write overlaps the next step. Sorted by row: RocksDB's skiplist
  // reuses the previous insert's position for ascending keys (~5-10% less CPU measured here).
  std::swap(pending_, writing_);
  SortWriteBack(&writing_, row_floats_);
  m_.rows_written += static_cast<int64_t>(writing_.rows.size());
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    write_in_flight_ = true;
  }
  write_cv_.notify_all();
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::Flush() {
  TESSERA_RETURN_IF_ERROR(broken_);
  if (cache_.pinned_count() > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": Flush/Checkpoint in the middle of a step (",
                     cache_.pinned_count(), " rows pinned); call EndStep first"));
  }
  TESSERA_RETURN_IF_ERROR(EndStep());
  --m_.steps;  // EndStep above only started the write-back; it was not a training step.
  absl::Status ws = WaitWrite();
  if (!ws.ok()) {
    broken_ = ws;
    return ws;
  }
  std::vector<int64_t> rows;
  std::vector<int32_t> slots;
  for (int32_t slot : cache_.ResidentSlots()) {
    if (!cache_.dirty(slot)) continue;
    rows.push_back(cache_.row(slot));
    slots.push_back(slot);
  }
  constexpr size_t kChunk = 16384;
  std::vector<float> values;
  for (size_t b = 0; b < rows.size(); b += kChunk) {
    size_t e = std::min(rows.size(), b + kChunk);
    values.resize((e - b) * row_floats_);
    for (size_t i = b; i < e; ++i) {
      float* dst = values.data() + (i - b) * row_floats_;
      std::memcpy(dst, SlotWeights(slots[i]), options_.dim * sizeof(float));
      std::memcpy(dst + options_.dim, SlotState(slots[i]), options_.state_dim * sizeof(float));
    }
    std::vector<int64_t> chunk_rows(rows.begin() + b, rows.begin() + e);
    TESSERA_RETURN_IF_ERROR(WriteValues(chunk_rows, values.data(), &m_.write_seconds));
    m_.rows_written += static_cast<int64_t>(chunk_rows.size());
    for (size_t i = b; i < e; ++i) cache_.set_dirty(slots[i], false);
  }
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(db_->Flush(fo), "flushing memtables", options_.path);
}

absl::Status TieredRowStoreImpl::Checkpoint(const std::string& dir) {
  TESSERA_RETURN_IF_ERROR(Flush());
  rocksdb::Checkpoint* raw = nullptr;
  TESSERA_RETURN_IF_ERROR(
      FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "checkpoint", options_.path));
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  // log_size_for_flush = 0: flush before linking (a no-op after Flush, but with the WAL off a
  // checkpoint must never depend on memtable contents).
  return FromRocks(cp->CreateCheckpoint(dir, 0), absl::StrCat("checkpoint into ", dir),
                   options_.path);
}

absl::Status TieredRowStoreImpl::ReadRows(int64_t begin, int64_t count, float* weights_out,
                                          float* state_out) {
  TESSERA_RETURN_IF_ERROR(broken_);
  TESSERA_RETURN_IF_ERROR(CheckRange(begin, count, "ReadRows"));
  if (count == 0) return absl::OkStatus();
  // Let the write in flight land so that RocksDB + pending_ + cache is the whole truth.
  absl::Status ws = WaitWrite();
  if (!ws.ok()) {
    broken_ = ws;
    return ws;
  }
  const int64_t d = options_.dim, sd = options_.state_dim;
  std::vector<uint8_t> covered(count, 0);
  auto put = [&](int64_t row, const float* w, const float* s) {
    int64_t i = row - begin;
    std::memcpy(weights_out + i * d, w, d * sizeof(float));
    if (state_out != nullptr) std::memcpy(state_out + i * sd, s, sd * sizeof(float));
    covered[i] = 1;
  };
  // Newest source last: RocksDB, then the write-back buffer, then the cache.
  char lo[kRowKeyBytes], hi[kRowKeyBytes];
  EncodeRowKey(options_.table_id, begin, lo);
  EncodeRowKey(options_.table_id, begin + count, hi);
  rocksdb::Slice upper(hi, kRowKeyBytes);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  // An export scan would evict the hot blocks of training reads from the block cache.
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  const size_t value_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
  for (it->Seek(rocksdb::Slice(lo, kRowKeyBytes)); it->Valid(); it->Next()) {
    int64_t row;
    if (!internal::DecodeRowKey(it->key(), options_.table_id, &row)) continue;
    if (row < begin || row >= begin + count) continue;
    if (it->value().size() != value_bytes) {
      return absl::DataLossError(absl::StrCat("RocksDB tier at ", options_.path, ": row ", row,
                                              " has ", it->value().size(),
                                              " bytes, expected ", value_bytes));
    }
    const float* v = reinterpret_cast<const float*>(it->value().data());
    put(row, v, v + d);
  }
  TESSERA_RETURN_IF_ERROR(FromRocks(it->status(), "scanning rows", options_.path));
  for (size_t p = 0; p < pending_.rows.size(); ++p) {
    int64_t row = pending_.rows[p];
    if (row < begin || row >= begin + count) continue;
    const float* v = pending_.values.data() + p * row_floats_;
    put(row, v, v + d);
  }
  if (count < cache_.resident()) {
    for (int64_t row = begin; row < begin + count; ++row) {
      int32_t slot = cache_.Find(row);
      if (slot >= 0) put(row, SlotWeights(slot), SlotState(slot));
    }
  } else {
    for (int32_t slot : cache_.ResidentSlots()) {
      int64_t row = cache_.row(slot);
      if (row >= begin && row < begin + count) put(row, SlotWeights(slot), SlotState(slot));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    if (!covered[i]) {
      InitValue(begin + i, weights_out + i * d, state_out ? state_out + i * sd : nullptr);
    }
  }
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::WriteRows(int64_t begin, int64_t count, const float* weights,
                                           const float* state) {
  TESSERA_RETURN_IF_ERROR(broken_);
  TESSERA_RETURN_IF_ERROR(CheckRange(begin, count, "WriteRows"));
  // Staged copies of these rows would be stale; drop all staging (WriteRows is for restores).
  DropAllStaged();
  const int64_t d = options_.dim, sd = options_.state_dim;
  constexpr int64_t kChunk = 16384;
  std::vector<float> current_state;
  std::vector<float> scratch_w;
  std::vector<float> values;
  std::vector<int64_t> rows;
  for (int64_t b = begin; b < begin + count; b += kChunk) {
    int64_t n = std::min(kChunk, begin + count - b);
    if (state == nullptr && sd > 0) {
      // Rows not cached keep their current state: read it (RocksDB, write-back, init).
      current_state.resize(n * sd);
      scratch_w.resize(n * d);
      TESSERA_RETURN_IF_ERROR(ReadRows(b, n, scratch_w.data(), current_state.data()));
    }
    rows.clear();
    values.clear();
    for (int64_t i = 0; i < n; ++i) {
      int64_t row = b + i, src = row - begin;
      const float* w = weights + src * d;
      const float* s = state ? state + src * sd : current_state.data() + i * sd;
      int32_t slot = cache_.Find(row);
      if (slot >= 0) {
        std::memcpy(SlotWeights(slot), w, d * sizeof(float));
        if (state != nullptr) std::memcpy(SlotState(slot), s, sd * sizeof(float));
        cache_.set_dirty(slot, true);
        continue;
      }
      rows.push_back(row);
      values.insert(values.end(), w, w + d);
      values.insert(values.end(), s, s + sd);
      // A pending write-back of this row would overwrite the new value at EndStep.
      auto it = pending_.index.find(row);
      if (it != pending_.index.end()) {
        std::memcpy(pending_.values.data() + it->second * row_floats_,
                    values.data() + (rows.size() - 1) * row_floats_,
                    row_floats_ * sizeof(float));
      }
    }
    // ReadRows above (or this) waited for any write in flight, so this write lands after it.
    absl::Status ws = WaitWrite();
    if (!ws.ok()) {
      broken_ = ws;
      return ws;
    }
    TESSERA_RETURN_IF_ERROR(WriteValues(rows, values.data(), &m_.write_seconds));
    m_.rows_written += static_cast<int64_t>(rows.size());
  }
  return absl::OkStatus();
}

TieredRowStoreMetrics TieredRowStoreImpl::metrics() {
  TieredRowStoreMetrics out = m_;
  out.rows_read += prefetch_rows_read_.load();
  out.cache_rows = cache_.capacity();
  out.resident_rows = cache_.resident();
  uint64_t v = 0;
  if (db_->GetIntProperty("rocksdb.total-sst-files-size", &v)) out.sst_bytes = v;
  if (db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &v)) out.memtable_bytes = v;
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TieredRowStore>> TieredRowStore::Open(
    const TieredRowStoreOptions& options) {
  const auto& o = options;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(TableLabel(o), ": ", why));
  };
  if (o.path.empty()) return bad("path is empty");
  if (o.num_rows <= 0 || o.num_rows > (int64_t{1} << 62)) {
    return bad(absl::StrCat("num_rows ", o.num_rows, " not in [1, 2^62]"));
  }
  if (o.dim <= 0) return bad(absl::StrCat("dim ", o.dim, " must be > 0"));
  if (o.state_dim < 0) return bad(absl::StrCat("state_dim ", o.state_dim, " must be >= 0"));
  if (o.reader_threads < 1 || o.reader_threads > 256) {
    return bad(absl::StrCat("reader_threads ", o.reader_threads, " not in [1, 256]"));
  }
  if (o.multiget_batch < 1) return bad("multiget_batch must be >= 1");
  int64_t cache_rows = o.cache_rows;
  if (cache_rows <= 0) {
    // Slot data plus the per-slot bookkeeping (row, links, counts, flags, map entry).
    int64_t per_row = (o.dim + o.state_dim) * static_cast<int64_t>(sizeof(float)) + 48;
    cache_rows = o.cache_bytes / per_row;
    if (cache_rows <= 0) {
      return bad(absl::StrCat("cache_rows is ", o.cache_rows, " and cache_bytes ", o.cache_bytes,
                              " holds no row of ", per_row, " bytes"));
    }
  }
  cache_rows = std::min(cache_rows, o.num_rows);
  if (cache_rows >= std::numeric_limits<int32_t>::max()) {
    return bad(absl::StrCat("cache of ", cache_rows, " rows exceeds 2^31-1 slots"));
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, internal::OpenRowDb(o));
  auto store = std::make_unique<TieredRowStoreImpl>(o, std::move(db), cache_rows);
  if (!store->allocated()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        TableLabel(o), ": cannot allocate a cache of ", cache_rows,
        " rows x ", o.dim + o.state_dim, " floats"));
  }
  return std::unique_ptr<TieredRowStore>(std::move(store));
}

}  // namespace tessera
