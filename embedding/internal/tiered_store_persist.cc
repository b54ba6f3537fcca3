// Flush, Checkpoint, ReadRows, WriteRows and metrics of the tiered row store (the step path is
// in embedding/tiered_row_store.cc).
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/internal/rocksdb_rows.h"
#include "embedding/internal/tiered_store_impl.h"
#include "rocksdb/utilities/checkpoint.h"

namespace tessera::internal {

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
  std::vector<char> values;
  for (size_t b = 0; b < rows.size(); b += kChunk) {
    size_t e = std::min(rows.size(), b + kChunk);
    values.resize((e - b) * value_bytes_);
    for (size_t i = b; i < e; ++i) GetSlot(slots[i], values.data() + (i - b) * value_bytes_);
    std::vector<int64_t> chunk_rows(rows.begin() + b, rows.begin() + e);
    absl::Status s = WriteValues(chunk_rows, values.data(), &m_.write_seconds);
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
    m_.rows_written += static_cast<int64_t>(chunk_rows.size());
    for (size_t i = b; i < e; ++i) cache_.set_dirty(slots[i], false);
  }
  rocksdb::FlushOptions fo;
  fo.wait = true;
  absl::Status s = FromRocksAt(db_->Flush(fo), label_, "flushing memtables");
  // A failed write or memtable flush (a full disk: RocksDB then stops accepting writes until
  // resumed) makes the store fail every later call, also once space is back: a step would
  // otherwise report success while its write-back fails in the background. The way back is
  // Restore from the last checkpoint.
  if (!s.ok()) broken_ = s;
  return s;
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

absl::Status TieredRowStoreImpl::Restore(const std::string& dir) {
  if (cache_.pinned_count() > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": Restore in the middle of a step (", cache_.pinned_count(),
                     " rows pinned); call EndStep first"));
  }
  // Quiesce the background threads: no prefetch read or write-back may touch the old database.
  DropAllStaged();
  (void)WaitWrite();  // its rows are about to be replaced anyway
  pending_.Clear();
  deleting_.clear();
  skip_reads_.clear();
  cache_.Clear();
  reader_.reset();
  db_.reset();
  TieredRowStoreOptions o = options_;
  o.restore_from = dir;
  absl::StatusOr<std::unique_ptr<rocksdb::DB>> db = OpenRowDb(o);
  if (!db.ok()) {
    broken_ = db.status();
    return broken_;
  }
  db_ = *std::move(db);
  reader_ = std::make_unique<RowReader>(db_.get(), label_, options_.table_id,
                                        static_cast<size_t>(value_bytes_),
                                        options_.reader_threads, options_.multiget_batch);
  broken_ = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
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
  const int64_t wb = weight_bytes_, sd = options_.state_dim;
  char* w_out = static_cast<char*>(weights_out);
  std::vector<uint8_t> covered(count, 0);
  // `s` may be unaligned (a RocksDB value's state follows 16-bit weights): copied as bytes.
  auto put = [&](int64_t row, const char* w, const void* s) {
    int64_t i = row - begin;
    std::memcpy(w_out + i * wb, w, wb);
    if (state_out != nullptr) std::memcpy(state_out + i * sd, s, sd * sizeof(float));
    covered[i] = 1;
  };
  // Newest source last: RocksDB, then the write-back buffer, then the cache.
  char lo[kRowKeyBytes], hi[kRowKeyBytes];
  EncodeRowKey(options_.table_id, begin, lo);
  EncodeRowKey(options_.table_id, begin + count, hi);
  rocksdb::Slice upper(hi, kRowKeyBytes);
  rocksdb::ReadOptions ro = internal::RowScanOptions();
  ro.iterate_upper_bound = &upper;
  // An export scan would evict the hot blocks of training reads from the block cache.
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  const size_t value_bytes = static_cast<size_t>(value_bytes_);
  for (it->Seek(rocksdb::Slice(lo, kRowKeyBytes)); it->Valid(); it->Next()) {
    int64_t row;
    if (!internal::DecodeRowKey(it->key(), options_.table_id, &row)) continue;
    if (row < begin || row >= begin + count || Deleting(row)) continue;
    if (it->value().size() != value_bytes) {
      return absl::DataLossError(absl::StrCat(label_, ": row ", row,
                                              " has ", it->value().size(),
                                              " bytes, expected ", value_bytes));
    }
    const char* v = it->value().data();
    put(row, v, v + wb);
  }
  TESSERA_RETURN_IF_ERROR(internal::FromRocksAt(it->status(), label_, "scanning rows"));
  for (size_t p = 0; p < pending_.rows.size(); ++p) {
    int64_t row = pending_.rows[p];
    if (row < begin || row >= begin + count) continue;
    const char* v = pending_.values.data() + p * value_bytes_;
    put(row, v, v + wb);
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
      InitValue(begin + i, w_out + i * wb, state_out ? state_out + i * sd : nullptr);
    }
  }
  return absl::OkStatus();
}

absl::Status TieredRowStoreImpl::WriteRowBytes(int64_t begin, int64_t count,
                                               const void* weights_in, const float* state) {
  TESSERA_RETURN_IF_ERROR(broken_);
  TESSERA_RETURN_IF_ERROR(CheckRange(begin, count, "WriteRows"));
  // Staged copies of these rows would be stale; drop all staging (WriteRows is for restores).
  DropAllStaged();
  // A delete landing after this write would undo it.
  TESSERA_RETURN_IF_ERROR(LandPendingDeletes());
  const int64_t wb = weight_bytes_, sd = options_.state_dim;
  const char* weights = static_cast<const char*>(weights_in);
  constexpr int64_t kChunk = 16384;
  std::vector<float> current_state;
  std::vector<char> scratch_w;
  std::vector<char> values;
  std::vector<int64_t> rows;
  for (int64_t b = begin; b < begin + count; b += kChunk) {
    int64_t n = std::min(kChunk, begin + count - b);
    if (state == nullptr && sd > 0) {
      // Rows not cached keep their current state: read it (RocksDB, write-back, init).
      current_state.resize(n * sd);
      scratch_w.resize(n * wb);
      TESSERA_RETURN_IF_ERROR(ReadRowBytes(b, n, scratch_w.data(), current_state.data()));
    }
    rows.clear();
    values.clear();
    for (int64_t i = 0; i < n; ++i) {
      int64_t row = b + i, src = row - begin;
      const char* w = weights + src * wb;
      const float* s = state ? state + src * sd : current_state.data() + i * sd;
      int32_t slot = cache_.Find(row);
      if (slot >= 0) {
        std::memcpy(SlotWeights(slot), w, wb);
        if (state != nullptr) std::memcpy(SlotState(slot), s, sd * sizeof(float));
        cache_.set_dirty(slot, true);
        continue;
      }
      rows.push_back(row);
      values.insert(values.end(), w, w + wb);
      values.insert(values.end(), reinterpret_cast<const char*>(s),
                    reinterpret_cast<const char*>(s + sd));
      // A pending write-back of this row would overwrite the new value at EndStep.
      auto it = pending_.index.find(row);
      if (it != pending_.index.end()) {
        std::memcpy(pending_.values.data() + it->second * value_bytes_,
                    values.data() + (rows.size() - 1) * value_bytes_, value_bytes_);
      }
    }
    // ReadRows above (or this) waited for any write in flight, so this write lands after it.
    absl::Status ws = WaitWrite();
    if (!ws.ok()) {
      broken_ = ws;
      return ws;
    }
    absl::Status s = WriteValues(rows, values.data(), &m_.write_seconds);
    if (!s.ok()) {
      // Cached rows already hold the new values, uncached ones may be half written.
      broken_ = s;
      return s;
    }
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
  if (db_ == nullptr) return out;  // a failed Restore closed it
  if (db_->GetIntProperty("rocksdb.total-sst-files-size", &v)) out.sst_bytes = v;
  if (db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &v)) out.memtable_bytes = v;
  return out;
}


}  // namespace tessera::internal
