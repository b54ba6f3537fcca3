#include "embedding/tiered_row_store.h"

#include "core/trace.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/internal/rocksdb_rows.h"
#include "embedding/internal/tiered_store_impl.h"
#include "rocksdb/write_batch.h"

namespace tessera {

TieredRowStore::~TieredRowStore() = default;

namespace internal {

std::string TableLabel(const TieredRowStoreOptions& o) {
  return absl::StrCat(o.name.empty() ? absl::StrCat("table ", o.table_id)
                                     : absl::StrCat("table '", o.name, "'"),
                      " (RocksDB tier at ", o.path, ")");
}

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
  // SkipReads names rows for this Resolve only, whichever way it returns.
  absl::Cleanup consume_skips = [this] { skip_reads_.clear(); };
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
      pending_.values.resize(pending_.values.size() + value_bytes_);
    }
    GetSlot(slot, pending_.values.data() + it->second * value_bytes_);
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
      SetSlot(miss_slots_[m], batch->values.data() + index * value_bytes_);
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
    const char* v = pending_.Find(row, value_bytes_);
    if (v == nullptr) v = writing_.Find(row, value_bytes_);
    if (v != nullptr) {
      SetSlot(slot, v);
      continue;
    }
    if (Deleting(row) || (!skip_reads_.empty() && skip_reads_.contains(row))) {
      // Dropped (its delete has not landed, RocksDB may still hold it), or to be overwritten.
      InitValue(row, SlotWeights(slot), SlotState(slot));
      ++m_.rows_initialized;
      continue;
    }
    rows.push_back(row);
    slots.push_back(slot);
  }
  if (rows.empty()) return absl::OkStatus();
  m_.sync_reads += static_cast<int64_t>(rows.size());
  // Sorted keys: MultiGet skips its sort and neighbouring rows share blocks.
  std::vector<int64_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
  std::vector<int64_t> sorted_rows(rows.size());
  for (size_t i = 0; i < order.size(); ++i) sorted_rows[i] = rows[order[i]];
  std::vector<uint8_t> found(rows.size(), 0);
  int64_t n_found = 0;
  trace::Span span("tier_read", "tier");  // synchronous misses, on the training thread
  span.Arg("rows", static_cast<int64_t>(sorted_rows.size()));
  TESSERA_RETURN_IF_ERROR(reader_->Read(
      sorted_rows,
      [&](int64_t i, const char* value) {
        SetSlot(slots[order[i]], value);
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
    trace::Span span("tier_prefetch_read", "tier");  // the next batch's misses, background
    span.Arg("rows", batch->db_rows);
    absl::Status s = reader_->Read(
        absl::MakeConstSpan(batch->rows.data(), batch->db_rows),
        [&](int64_t i, const char* value) {
          std::memcpy(batch->values.data() + i * value_bytes_, value, value_bytes_);
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
  // Keep its buffers for the next Prefetch: a batch's values (~100s of KiB) would otherwise be
  // mmapped, faulted in and unmapped every step. The prefetch thread may still hold its
  // reference for a moment after `done`; such a batch is simply freed.
  if (batch.use_count() == 1 && spare_batch_ == nullptr) spare_batch_ = std::move(batch);
}

void TieredRowStoreImpl::DropAllStaged() {
  while (!live_batches_.empty()) DropOldestBatch();
  staged_.clear();
}

void TieredRowStoreImpl::Prefetch(absl::Span<const int64_t> ids) {
  if (!options_.prefetch || !broken_.ok()) return;
  trace::Span span("tier_prefetch", "tier");  // probe the cache, queue the misses
  span.Arg("ids", static_cast<int64_t>(ids.size()));
  std::shared_ptr<PrefetchBatch> batch = std::move(spare_batch_);
  if (batch == nullptr) {
    batch = std::make_shared<PrefetchBatch>();
  } else {
    batch->rows.clear();
    batch->status = absl::OkStatus();
    batch->done = false;
  }
  copied_rows_.clear();
  for (int64_t id : ids) {
    // Bad ids are Resolve's to report; resident, pending and staged rows need no read. Rows of
    // the write-back in flight are copied: EndStep drops that buffer (the rows are in RocksDB
    // by then), so Resolve would read them synchronously. Pending rows become that buffer at
    // the next EndStep and are still there for the Resolve after it.
    if (id < 0 || id >= options_.num_rows) continue;
    if (cache_.Find(id) >= 0 || pending_.index.contains(id) || staged_.contains(id)) continue;
    if (Deleting(id) && !writing_.index.contains(id)) continue;  // Resolve initialises it
    (writing_.index.contains(id) ? copied_rows_ : batch->rows).push_back(id);
  }
  auto sort_unique = [](std::vector<int64_t>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  sort_unique(batch->rows);
  sort_unique(copied_rows_);
  batch->db_rows = static_cast<int64_t>(batch->rows.size());
  batch->rows.insert(batch->rows.end(), copied_rows_.begin(), copied_rows_.end());
  if (batch->rows.empty()) {
    spare_batch_ = std::move(batch);
    return;
  }
  batch->values.resize(batch->rows.size() * value_bytes_);  // every found row is overwritten
  batch->found.assign(batch->rows.size(), 0);
  for (size_t i = 0; i < batch->rows.size(); ++i) {
    staged_[batch->rows[i]] = Staged{batch.get(), static_cast<int64_t>(i)};
  }
  // The writer thread only reads writing_ while its write is in flight: copying is safe.
  for (size_t k = 0; k < copied_rows_.size(); ++k) {
    const size_t i = batch->db_rows + k;
    std::memcpy(batch->values.data() + i * value_bytes_, writing_.Find(copied_rows_[k], value_bytes_),
                value_bytes_);
    batch->found[i] = 1;
  }
  m_.prefetched_rows += static_cast<int64_t>(batch->rows.size());
  // Staging holds at most the two latest batches: the one being resolved and the next.
  live_batches_.push_back(batch);
  while (live_batches_.size() > 2) DropOldestBatch();
  if (batch->db_rows == 0) {
    batch->done = true;  // nothing to read; never queued, so no other thread sees it
    return;
  }
  {
    std::lock_guard<std::mutex> lock(prefetch_mu_);
    prefetch_queue_.push_back(std::move(batch));
  }
  prefetch_cv_.notify_one();
}

absl::Status TieredRowStoreImpl::WriteValues(const std::vector<int64_t>& rows,
                                             const char* values, double* seconds,
                                             const std::vector<int64_t>& deletes) {
  constexpr size_t kRowsPerBatch = 16384;
  Stopwatch watch;
  char key[kRowKeyBytes];
  for (size_t b = 0; b < deletes.size(); b += kRowsPerBatch) {
    rocksdb::WriteBatch& wb = write_batch_;
    wb.Clear();
    const size_t e = std::min(deletes.size(), b + kRowsPerBatch);
    for (size_t i = b; i < e; ++i) {
      EncodeRowKey(options_.table_id, deletes[i], key);
      TESSERA_RETURN_IF_ERROR(internal::FromRocksAt(
          wb.Delete(rocksdb::Slice(key, kRowKeyBytes)), label_, "batching row deletes"));
    }
    TESSERA_RETURN_IF_ERROR(internal::FromRocksAt(
        db_->Write(internal::RowWriteOptions(), &wb), label_, "deleting rows"));
  }
  const size_t value_bytes = static_cast<size_t>(value_bytes_);
  for (size_t b = 0; b < rows.size(); b += kRowsPerBatch) {
    rocksdb::WriteBatch& wb = write_batch_;
    wb.Clear();  // keeps its buffer: no new allocation per step
    size_t e = std::min(rows.size(), b + kRowsPerBatch);
    for (size_t i = b; i < e; ++i) {
      EncodeRowKey(options_.table_id, rows[i], key);
      TESSERA_RETURN_IF_ERROR(internal::FromRocksAt(
          wb.Put(rocksdb::Slice(key, kRowKeyBytes),
                 rocksdb::Slice(values + i * value_bytes, value_bytes)),
          label_, "batching rows"));
    }
    TESSERA_RETURN_IF_ERROR(
        internal::FromRocksAt(db_->Write(internal::RowWriteOptions(), &wb), label_, "writing rows"));
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
    trace::Span span("tier_write_back", "tier");
    span.Arg("rows", static_cast<int64_t>(writing_.rows.size()));
    writing_.status = WriteValues(writing_.rows, writing_.values.data(), &writing_.seconds,
                                  writing_.deletes);
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
  for (int64_t row : writing_.deletes) {
    auto it = deleting_.find(row);
    if (it != deleting_.end() && --it->second == 0) deleting_.erase(it);
  }
  writing_.Clear();
  return s;
}

absl::Status TieredRowStoreImpl::LandPendingDeletes() {
  if (pending_.deletes.empty()) return absl::OkStatus();
  absl::Status s = WaitWrite();
  if (s.ok()) s = WriteValues({}, nullptr, &m_.write_seconds, pending_.deletes);
  if (!s.ok()) {
    broken_ = s;
    return s;
  }
  for (int64_t row : pending_.deletes) {
    auto it = deleting_.find(row);
    if (it != deleting_.end() && --it->second == 0) deleting_.erase(it);
  }
  pending_.deletes.clear();
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::DropRows(absl::Span<const int64_t> rows) {
  TESSERA_RETURN_IF_ERROR(broken_);
  for (int64_t row : rows) {
    if (row < 0 || row >= options_.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": DropRows: row ", row,
                                                     " out of range [0, ", options_.num_rows,
                                                     ")"));
    }
    const int32_t slot = cache_.Find(row);
    if (slot >= 0 && cache_.pinned(slot)) {
      return absl::FailedPreconditionError(
          absl::StrCat(label_, ": DropRows: row ", row, " is pinned by the step being run"));
    }
  }
  for (int64_t row : rows) {
    cache_.Remove(row);
    staged_.erase(row);
    // Out of the write-back buffer (the last entry moves into its place).
    auto it = pending_.index.find(row);
    if (it != pending_.index.end()) {
      const int64_t pos = it->second, last = static_cast<int64_t>(pending_.rows.size()) - 1;
      pending_.index.erase(it);
      if (pos != last) {
        pending_.rows[pos] = pending_.rows[last];
        std::memcpy(pending_.values.data() + pos * value_bytes_,
                    pending_.values.data() + last * value_bytes_, value_bytes_);
        pending_.index[pending_.rows[pos]] = pos;
      }
      pending_.rows.pop_back();
      pending_.values.resize(pending_.values.size() - value_bytes_);
    }
    // The write in flight may still put it; the delete follows in the next batch. Only the
    // training thread reads writing_'s index.
    writing_.index.erase(row);
    pending_.deletes.push_back(row);
    ++deleting_[row];
  }
  m_.rows_deleted += static_cast<int64_t>(rows.size());
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::FinishStep(bool rows_updated) {
  TESSERA_RETURN_IF_ERROR(broken_);
  // A row only read keeps its dirty flag as it was: clean when it matches RocksDB.
  cache_.UnpinAll(/*mark_dirty=*/rows_updated);
  ++m_.steps;
  Stopwatch wait;
  absl::Status s = WaitWrite();
  m_.write_stall_seconds += wait.ElapsedSeconds();
  if (!s.ok()) {
    // The rows of that write are gone from the cache and not on disk.
    broken_ = s;
    return s;
  }
  if (pending_.rows.empty() && pending_.deletes.empty()) return absl::OkStatus();
  // One WriteBatch for the step's evictions (split only past 16k rows), written in the
  // background: the disk write overlaps the next step. Unsorted: the hashed memtable updates
  // each row in place whatever the order (a flush sorts when it builds SST files).
  std::swap(pending_, writing_);
  m_.rows_written += static_cast<int64_t>(writing_.rows.size());
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    write_in_flight_ = true;
  }
  write_cv_.notify_all();
  return absl::OkStatus();
}


}  // namespace internal

absl::StatusOr<std::unique_ptr<TieredRowStore>> TieredRowStore::Open(
    const TieredRowStoreOptions& options) {
  const auto& o = options;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(internal::TableLabel(o), ": ", why));
  };
  if (o.path.empty()) return bad("path is empty");
  if (o.num_rows <= 0 || o.num_rows > (int64_t{1} << 62)) {
    return bad(absl::StrCat("num_rows ", o.num_rows, " not in [1, 2^62]"));
  }
  if (o.dim <= 0) return bad(absl::StrCat("dim ", o.dim, " must be > 0"));
  if (o.state_dim < 0) return bad(absl::StrCat("state_dim ", o.state_dim, " must be >= 0"));
  if (o.row_offset < 0 || o.row_offset > (int64_t{1} << 62) - o.num_rows) {
    return bad(absl::StrCat("row_offset ", o.row_offset, " not in [0, 2^62 - num_rows]"));
  }
  if (o.init_dim != 0 &&
      (o.init_dim < o.dim || o.init_col_begin < 0 || o.init_col_begin > o.init_dim - o.dim)) {
    return bad(absl::StrCat("init columns [", o.init_col_begin, ", ", o.init_col_begin + o.dim,
                            ") not inside init_dim ", o.init_dim));
  }
  if (o.init_dim == 0 && o.init_col_begin != 0) {
    return bad(absl::StrCat("init_col_begin ", o.init_col_begin, " needs init_dim"));
  }
  if (o.reader_threads < 1 || o.reader_threads > 256) {
    return bad(absl::StrCat("reader_threads ", o.reader_threads, " not in [1, 256]"));
  }
  if (o.multiget_batch < 1) return bad("multiget_batch must be >= 1");
  int64_t cache_rows = o.cache_rows;
  if (cache_rows <= 0) {
    // Slot data plus the per-slot bookkeeping (row, links, counts, flags, map entry).
    int64_t per_row = o.dim * RowDtypeBytes(o.dtype) +
                      o.state_dim * static_cast<int64_t>(sizeof(float)) + 48;
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
  auto store = std::make_unique<internal::TieredRowStoreImpl>(o, std::move(db), cache_rows);
  if (!store->allocated()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        internal::TableLabel(o), ": cannot allocate a cache of ", cache_rows,
        " rows x (", o.dim, " ", RowDtypeName(o.dtype), " weights + ", o.state_dim,
        " state floats)"));
  }
  return std::unique_ptr<TieredRowStore>(std::move(store));
}


}  // namespace tessera
