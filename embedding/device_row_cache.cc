// DeviceRowCache (contract in device_row_cache.h). The copies between the backing and the slots
// go through one staging layout, [slots | weights | state] for up to `chunk_` rows, held twice:
// in host memory (pinned for CUDA) where the backing's rows are packed and unpacked, and in the
// context's memory where the twins (cache_rows.h) gather and scatter. On a CPU context both are
// host memory and "upload" is a memcpy, so the CPU tests run every step of the CUDA path.
#include "embedding/device_row_cache.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/pinned.h"
#include "core/status.h"
#include "embedding/cache_rows.h"
#include "embedding/row_cache_index.h"
#include "embedding/tiered_row_store.h"

namespace tessera {
namespace {

// Rows per backing call (and per staging block) unless the backing's own cache is smaller.
constexpr int64_t kMaxChunkRows = 65536;

class DeviceRowCacheImpl final : public DeviceRowCache {
 public:
  DeviceRowCacheImpl(const DeviceRowCacheOptions& o, std::unique_ptr<RowStore> backing,
                     int64_t rows)
      : options_(o), backing_(std::move(backing)), index_(rows, o.policy), rows_(rows) {
    wrb_ = backing_->weight_row_bytes();
    sd_ = backing_->state_dim();
    label_ = o.name.empty() ? std::string("the table") : absl::StrCat("table '", o.name, "'");
  }

  absl::Status Init() {
    const int64_t bytes = cache_memory_bytes();
    const char* where = ctx().is_cuda() ? "GPU" : "host";
    auto exhausted = [&](const std::string& why) {
      return absl::ResourceExhaustedError(absl::StrCat(
          label_, ": the device cache of ", rows_, " rows needs ", bytes, " bytes of ", where,
          " memory (", wrb_, " bytes of weights + ", sd_ * 4, " of optimizer state per row); ",
          why, " (lower storage.device_cache_rows / device_cache_bytes)"));
    };
    if (options_.memory_limit_bytes > 0 && bytes > options_.memory_limit_bytes) {
      return exhausted(absl::StrCat("only ", options_.memory_limit_bytes, " bytes are available"));
    }
    absl::StatusOr<Buffer> w = Buffer::Allocate(ctx().device, DType::kU8, {rows_ * wrb_});
    if (!w.ok()) {
      if (w.status().code() != absl::StatusCode::kResourceExhausted) return w.status();
      return exhausted(std::string(w.status().message()));
    }
    weights_ = std::move(w).value();
    if (sd_ > 0) {
      absl::StatusOr<Buffer> s = Buffer::Allocate(ctx().device, DType::kF32, {rows_ * sd_});
      if (!s.ok()) {
        if (s.status().code() != absl::StatusCode::kResourceExhausted) return s.status();
        return exhausted(std::string(s.status().message()));
      }
      state_ = std::move(s).value();
    }
    chunk_ = kMaxChunkRows;
    if (auto* tier = dynamic_cast<TieredRowStore*>(backing_.get())) {
      chunk_ = std::min(chunk_, std::max<int64_t>(1, tier->metrics().cache_rows));
    }
    return absl::OkStatus();
  }

  // RowStore.
  int64_t num_rows() const override { return backing_->num_rows(); }
  int64_t dim() const override { return backing_->dim(); }
  int64_t state_dim() const override { return sd_; }
  RowDtype weight_dtype() const override { return backing_->weight_dtype(); }
  void* weight_data() override { return weights_.raw(); }
  float* state() override { return sd_ > 0 ? state_.data<float>() : nullptr; }

  absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) override {
    TESSERA_RETURN_IF_ERROR(broken_);
    if (ids.size() != slots.size()) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": Resolve of ", ids.size(),
                                                     " ids into ", slots.size(), " slots"));
    }
    const int64_t n_rows = num_rows();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= n_rows) {
        return absl::InvalidArgumentError(absl::StrCat(label_, ": row ", ids[i], " at position ",
                                                       i, " is outside [0, ", n_rows, ")"));
      }
    }
    plan_.Clear();
    absl::Status st = index_.Assign(ids, slots, &plan_);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat(label_, ": ", st.message(),
                                                  " (raise storage.device_cache_rows)"));
    }
    st = WriteBack(plan_.writeback_slots, plan_.writeback_rows);
    if (st.ok()) st = Fetch(plan_.fetch_rows, plan_.fetch_slots);
    return Break(st);
  }

  void Prefetch(absl::Span<const int64_t> ids) override {
    if (!broken_.ok()) return;
    prefetch_.clear();
    const int64_t n_rows = num_rows();
    for (int64_t id : ids) {
      if (id < 0 || id >= n_rows) return;  // reported by the step's Resolve
    }
    index_.AppendMisses(ids, &prefetch_);
    prefetch_hints_ += static_cast<int64_t>(prefetch_.size());
    if (!prefetch_.empty()) backing_->Prefetch(prefetch_);
  }

  absl::Status EndStep() override {
    TESSERA_RETURN_IF_ERROR(broken_);
    index_.EndStep(/*updated=*/true);
    return absl::OkStatus();
  }
  absl::Status EndReadOnlyStep() override {
    TESSERA_RETURN_IF_ERROR(broken_);
    index_.EndStep(/*updated=*/false);
    return absl::OkStatus();
  }

  absl::Status ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
                            float* state_out) override {
    TESSERA_RETURN_IF_ERROR(Flush());
    return backing_->ReadRowBytes(begin, count, weights_out, state_out);
  }

  absl::Status WriteRowBytes(int64_t begin, int64_t count, const void* weights,
                             const float* state) override {
    TESSERA_RETURN_IF_ERROR(broken_);
    TESSERA_RETURN_IF_ERROR(backing_->WriteRowBytes(begin, count, weights, state));
    // The cached copies of the rows get the same bytes (their dirty marks stay: a dirty row's
    // state, when `state` is null, is still only in the cache).
    std::vector<int64_t> at, slots;
    if (count <= index_.resident()) {
      for (int64_t r = begin; r < begin + count; ++r) {
        if (const int64_t s = index_.SlotOf(r); s >= 0) at.push_back(r - begin), slots.push_back(s);
      }
    } else {
      index_.ResidentIn(begin, begin + count, &at, &slots);
      for (int64_t& r : at) r -= begin;
    }
    const char* w = static_cast<const char*>(weights);
    for (size_t k0 = 0; k0 < at.size(); k0 += static_cast<size_t>(chunk_)) {
      const int64_t n = std::min<int64_t>(chunk_, static_cast<int64_t>(at.size() - k0));
      TESSERA_RETURN_IF_ERROR(Break(Reserve(n)));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = at[k0 + i];
        HostSlots()[i] = slots[k0 + i];
        std::memcpy(HostWeights(n) + i * wrb_, w + j * wrb_, static_cast<size_t>(wrb_));
        if (state != nullptr && sd_ > 0) {
          std::memcpy(HostState(n) + i * sd_, state + j * sd_, sizeof(float) * sd_);
        }
      }
      TESSERA_RETURN_IF_ERROR(Break(Scatter(n, state != nullptr)));
    }
    return absl::OkStatus();
  }

  // DeviceRowCache.
  absl::Status Flush() override {
    TESSERA_RETURN_IF_ERROR(broken_);
    if (index_.dirty() == 0) return absl::OkStatus();
    std::vector<int64_t> rows, slots;
    index_.DirtyRows(&rows, &slots);
    absl::Status st = WriteBack(slots, rows);
    if (st.ok()) index_.MarkClean(slots);
    return Break(st);
  }
  RowStore& backing() override { return *backing_; }
  int64_t cache_rows() const override { return rows_; }
  int64_t cache_memory_bytes() const override { return rows_ * DeviceCacheRowBytes(wrb_, sd_); }
  const DeviceRowCacheOptions& options() const override { return options_; }
  DeviceRowCacheMetrics metrics() const override {
    const RowCacheCounters& c = index_.counters();
    DeviceRowCacheMetrics m;
    m.steps = c.steps;
    m.hits = c.hits;
    m.misses = c.misses;
    m.evictions = c.evictions;
    m.writebacks = writebacks_;
    m.prefetch_hints = prefetch_hints_;
    m.cache_rows = rows_;
    m.resident_rows = index_.resident();
    m.dirty_rows = index_.dirty();
    return m;
  }

 private:
  const DeviceContext& ctx() const { return options_.ctx; }

  absl::Status Break(absl::Status st) {
    if (!st.ok() && broken_.ok()) broken_ = st;
    return st;
  }

  // Staging for n rows: [slots | weights | state] on the host and in ctx's memory.
  size_t StagingBytes(int64_t n) const {
    return static_cast<size_t>(n) * (sizeof(int64_t) + wrb_ + sizeof(float) * sd_);
  }
  absl::Status Reserve(int64_t n) {
    const size_t bytes = StagingBytes(n);
    if (ctx().is_cuda()) {
      TESSERA_RETURN_IF_ERROR(pinned_.Reserve(bytes));
      host_ = static_cast<char*>(pinned_.data());
      if (device_.empty() || static_cast<size_t>(device_.numel()) < bytes) {
        TESSERA_ASSIGN_OR_RETURN(device_, Buffer::Allocate(Device::kCuda, DType::kU8,
                                                           {static_cast<int64_t>(bytes)}));
      }
      dev_ = static_cast<char*>(device_.raw());
    } else {
      if (host_vec_.size() < bytes) host_vec_.resize(bytes);
      if (dev_vec_.size() < bytes) dev_vec_.resize(bytes);
      host_ = host_vec_.data();
      dev_ = dev_vec_.data();
    }
    return absl::OkStatus();
  }
  int64_t* HostSlots() { return reinterpret_cast<int64_t*>(host_); }
  char* HostWeights(int64_t n) { return host_ + n * static_cast<int64_t>(sizeof(int64_t)); }
  float* HostState(int64_t n) { return reinterpret_cast<float*>(HostWeights(n) + n * wrb_); }
  size_t Offset(int64_t n, int part) const {  // 0 slots, 1 weights, 2 state
    const size_t s = static_cast<size_t>(n) * sizeof(int64_t);
    return part == 0 ? 0 : part == 1 ? s : s + static_cast<size_t>(n * wrb_);
  }

  absl::Status ToDevice(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    if (ctx().is_cuda()) return CudaCopyToDevice(ctx(), dst, src, bytes);
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status ToHost(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    if (ctx().is_cuda()) return CudaCopyToHost(ctx(), dst, src, bytes);  // waits
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

  CacheRowsArgs Args(int64_t n, int part) {
    CacheRowsArgs a;
    a.capacity = rows_;
    a.n = n;
    a.slots = reinterpret_cast<const int64_t*>(dev_);
    a.packed = dev_ + Offset(n, part);
    a.base = part == 1 ? weights_.raw() : static_cast<void*>(state());
    a.row_bytes = part == 1 ? wrb_ : sd_ * static_cast<int64_t>(sizeof(float));
    return a;
  }

  // Host staging (slots, weights, state for n rows) -> the slots; state only when `with_state`.
  absl::Status Scatter(int64_t n, bool with_state) {
    const bool st = with_state && sd_ > 0;
    TESSERA_RETURN_IF_ERROR(ToDevice(dev_, host_, st ? StagingBytes(n) : Offset(n, 2)));
    TESSERA_RETURN_IF_ERROR(ScatterCacheRows(ctx(), Args(n, 1)));
    if (st) TESSERA_RETURN_IF_ERROR(ScatterCacheRows(ctx(), Args(n, 2)));
    // The host staging is refilled by the next chunk: wait for the upload to have read it.
    if (ctx().is_cuda()) TESSERA_RETURN_IF_ERROR(CudaSynchronize(ctx()));
    return absl::OkStatus();
  }

  // The rows at `slots` (dirty victims or dirty rows) into the backing as rows `rows`.
  absl::Status WriteBack(const std::vector<int64_t>& slots, const std::vector<int64_t>& rows) {
    for (size_t k0 = 0; k0 < rows.size(); k0 += static_cast<size_t>(chunk_)) {
      const int64_t n = std::min<int64_t>(chunk_, static_cast<int64_t>(rows.size() - k0));
      TESSERA_RETURN_IF_ERROR(Reserve(n));
      std::memcpy(HostSlots(), slots.data() + k0, sizeof(int64_t) * n);
      TESSERA_RETURN_IF_ERROR(ToDevice(dev_, host_, sizeof(int64_t) * n));
      TESSERA_RETURN_IF_ERROR(GatherCacheRows(ctx(), Args(n, 1)));
      if (sd_ > 0) TESSERA_RETURN_IF_ERROR(GatherCacheRows(ctx(), Args(n, 2)));
      TESSERA_RETURN_IF_ERROR(ToHost(HostWeights(n), dev_ + Offset(n, 1),
                                     StagingBytes(n) - Offset(n, 1)));
      bslots_.resize(static_cast<size_t>(n));
      TESSERA_RETURN_IF_ERROR(
          backing_->Resolve(absl::MakeConstSpan(rows.data() + k0, n), absl::MakeSpan(bslots_)));
      char* bw = static_cast<char*>(backing_->weight_data());
      float* bs = backing_->state();
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(bw + bslots_[i] * wrb_, HostWeights(n) + i * wrb_, static_cast<size_t>(wrb_));
        if (sd_ > 0) std::memcpy(bs + bslots_[i] * sd_, HostState(n) + i * sd_, sizeof(float) * sd_);
      }
      TESSERA_RETURN_IF_ERROR(backing_->EndStep());
      writebacks_ += n;
    }
    return absl::OkStatus();
  }

  // Rows `rows` of the backing into the slots `slots`.
  absl::Status Fetch(const std::vector<int64_t>& rows, const std::vector<int64_t>& slots) {
    for (size_t k0 = 0; k0 < rows.size(); k0 += static_cast<size_t>(chunk_)) {
      const int64_t n = std::min<int64_t>(chunk_, static_cast<int64_t>(rows.size() - k0));
      TESSERA_RETURN_IF_ERROR(Reserve(n));
      bslots_.resize(static_cast<size_t>(n));
      TESSERA_RETURN_IF_ERROR(
          backing_->Resolve(absl::MakeConstSpan(rows.data() + k0, n), absl::MakeSpan(bslots_)));
      const char* bw = static_cast<const char*>(backing_->weight_data());
      const float* bs = backing_->state();
      std::memcpy(HostSlots(), slots.data() + k0, sizeof(int64_t) * n);
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(HostWeights(n) + i * wrb_, bw + bslots_[i] * wrb_, static_cast<size_t>(wrb_));
        if (sd_ > 0) std::memcpy(HostState(n) + i * sd_, bs + bslots_[i] * sd_, sizeof(float) * sd_);
      }
      TESSERA_RETURN_IF_ERROR(backing_->EndReadOnlyStep());
      TESSERA_RETURN_IF_ERROR(Scatter(n, /*with_state=*/true));
    }
    return absl::OkStatus();
  }

  DeviceRowCacheOptions options_;
  std::unique_ptr<RowStore> backing_;
  RowCacheIndex index_;
  int64_t rows_;
  int64_t wrb_ = 0, sd_ = 0;
  int64_t chunk_ = kMaxChunkRows;
  std::string label_;
  Buffer weights_, state_;
  RowCachePlan plan_;
  std::vector<int64_t> bslots_, prefetch_;
  // Staging: host_ (pinned_ for CUDA, host_vec_ otherwise) and dev_ (device_ or dev_vec_).
  PinnedBuffer pinned_;
  Buffer device_;
  std::vector<char> host_vec_, dev_vec_;
  char* host_ = nullptr;
  char* dev_ = nullptr;
  int64_t writebacks_ = 0, prefetch_hints_ = 0;
  absl::Status broken_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRowCache>> DeviceRowCache::Create(
    const DeviceRowCacheOptions& options, std::unique_ptr<RowStore> backing) {
  const std::string label =
      options.name.empty() ? std::string("the table") : absl::StrCat("table '", options.name, "'");
  if (backing == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": device cache over a null store"));
  }
  if (options.cache_rows < 0 || options.cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": negative device cache size (rows ", options.cache_rows, ", bytes ",
        options.cache_bytes, ")"));
  }
  const int64_t row_bytes =
      DeviceCacheRowBytes(backing->weight_row_bytes(), backing->state_dim());
  int64_t rows = options.cache_rows > 0 ? options.cache_rows : options.cache_bytes / row_bytes;
  if (rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": the device cache holds no row (storage.device_cache_rows ", options.cache_rows,
        ", device_cache_bytes ", options.cache_bytes, "; a row takes ", row_bytes, " bytes)"));
  }
  rows = std::min(rows, backing->num_rows());
  auto c = std::make_unique<DeviceRowCacheImpl>(options, std::move(backing), rows);
  TESSERA_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<DeviceRowCache>(std::move(c));
}

}  // namespace tessera
