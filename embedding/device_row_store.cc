// CreateDeviceRowStore (device_row_store.h): a whole table in device memory. Host code only:
// the copies and allocations go through core/cuda_runtime.h and core/cuda_context.h, which
// return Unimplemented in a build without the CUDA path.
#include "embedding/device_row_store.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

namespace tessera {
namespace {

class DeviceRowStore final : public RowStore {
 public:
  DeviceRowStore(const DeviceContext& ctx, const InMemoryRowStoreOptions& o)
      : ctx_(ctx),
        o_(o),
        label_(o.name.empty() ? absl::StrCat("table ", o.table_id)
                              : absl::StrCat("table '", o.name, "'")) {}
  ~DeviceRowStore() override {
    CudaFree(weights_);
    CudaFree(state_);
  }
  DeviceRowStore(const DeviceRowStore&) = delete;
  DeviceRowStore& operator=(const DeviceRowStore&) = delete;

  absl::Status Allocate() {
    const size_t wb = static_cast<size_t>(o_.num_rows * o_.dim) * sizeof(float);
    const size_t sb = static_cast<size_t>(o_.num_rows * o_.state_dim) * sizeof(float);
    auto fail = [&](const absl::Status& s, const char* what, size_t bytes) {
      if (s.code() != absl::StatusCode::kResourceExhausted) {
        return absl::Status(s.code(), absl::StrCat(label_, ": allocating ", bytes, " bytes of ",
                                                   what, " on the device: ", s.message()));
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          label_, ": device memory cannot hold ", o_.num_rows, " rows (", wb, " bytes of weights + ",
          sb, " bytes of optimizer state on GPU ", ctx_.cuda_device, "); allocating ", bytes,
          " bytes of ", what, " failed: ", s.message(),
          ". Shard the table over more ranks, or keep it in host memory or the RocksDB tier with "
          "storage.device_cache_rows"));
    };
    absl::StatusOr<void*> w = CudaMallocZeroed(wb);
    if (!w.ok()) return fail(w.status(), "weights", wb);
    weights_ = static_cast<float*>(*w);
    if (o_.state_dim > 0) {
      absl::StatusOr<void*> s = CudaMallocZeroed(sb);
      if (!s.ok()) return fail(s.status(), "optimizer state", sb);
      state_ = static_cast<float*>(*s);
    }
    return absl::OkStatus();
  }

  // InitRow on the host in chunks of rows, copied up (the host store's values, bit for bit).
  absl::Status Initialize() {
    constexpr int64_t kChunk = 4096;
    const int64_t dim = o_.dim, sd = o_.state_dim;
    std::vector<float> w, s;
    for (int64_t b = 0; b < o_.num_rows; b += kChunk) {
      const int64_t e = std::min(o_.num_rows, b + kChunk);
      w.resize(static_cast<size_t>((e - b) * dim));
      if (o_.init.type != RowInitType::kZero) {
        for (int64_t r = b; r < e; ++r) {
          InitRow(o_.init, o_.seed, o_.table_id, o_.num_rows, r, dim, w.data() + (r - b) * dim);
        }
        TESSERA_RETURN_IF_ERROR(WriteRowBytes(b, e - b, w.data(), nullptr));
      }
      if (sd > 0 && o_.state_init != 0.0f) {
        s.assign(static_cast<size_t>((e - b) * sd), o_.state_init);
        TESSERA_RETURN_IF_ERROR(
            CudaMemcpy(state_ + b * sd, s.data(), s.size() * sizeof(float)));
      }
    }
    return absl::OkStatus();
  }

  int64_t num_rows() const override { return o_.num_rows; }
  int64_t dim() const override { return o_.dim; }
  int64_t state_dim() const override { return o_.state_dim; }

  absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) override {
    if (ids.size() != slots.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_, ": Resolve got ", ids.size(), " ids but ", slots.size(), " slots"));
    }
    const uint64_t rows = static_cast<uint64_t>(o_.num_rows);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (static_cast<uint64_t>(ids[i]) >= rows) {
        return absl::InvalidArgumentError(absl::StrCat(label_, ": row id ", ids[i],
                                                       " at position ", i, " is out of range [0, ",
                                                       o_.num_rows, ")"));
      }
      slots[i] = ids[i];
    }
    return absl::OkStatus();
  }

  RowDtype weight_dtype() const override { return RowDtype::kF32; }
  void* weight_data() override { return weights_; }
  float* state() override { return state_; }

  absl::Status ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
                            float* state_out) override {
    TESSERA_RETURN_IF_ERROR(CheckRange("ReadRows", begin, count));
    if (count == 0) return absl::OkStatus();
    if (weights_out == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": ReadRows with null weights_out"));
    }
    TESSERA_RETURN_IF_ERROR(CudaMemcpy(weights_out, weights_ + begin * o_.dim,
                                       static_cast<size_t>(count * o_.dim) * sizeof(float)));
    if (state_out != nullptr && o_.state_dim > 0) {
      TESSERA_RETURN_IF_ERROR(
          CudaMemcpy(state_out, state_ + begin * o_.state_dim,
                     static_cast<size_t>(count * o_.state_dim) * sizeof(float)));
    }
    return absl::OkStatus();
  }

  absl::Status WriteRowBytes(int64_t begin, int64_t count, const void* weights,
                             const float* state) override {
    TESSERA_RETURN_IF_ERROR(CheckRange("WriteRows", begin, count));
    if (count == 0) return absl::OkStatus();
    if (weights == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": WriteRows with null weights"));
    }
    TESSERA_RETURN_IF_ERROR(CudaMemcpy(weights_ + begin * o_.dim, weights,
                                       static_cast<size_t>(count * o_.dim) * sizeof(float)));
    if (state != nullptr && o_.state_dim > 0) {
      TESSERA_RETURN_IF_ERROR(
          CudaMemcpy(state_ + begin * o_.state_dim, state,
                     static_cast<size_t>(count * o_.state_dim) * sizeof(float)));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status CheckRange(const char* op, int64_t begin, int64_t count) const {
    if (begin < 0 || count < 0 || begin > o_.num_rows - count) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": ", op, " [", begin, ", ",
                                                     begin + count, ") outside [0, ", o_.num_rows,
                                                     ")"));
    }
    return absl::OkStatus();
  }

  DeviceContext ctx_;
  InMemoryRowStoreOptions o_;
  std::string label_;
  float* weights_ = nullptr;
  float* state_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RowStore>> CreateDeviceRowStore(
    const DeviceContext& ctx, const InMemoryRowStoreOptions& options) {
  if (!ctx.is_cuda()) return CreateInMemoryRowStore(options);
  const std::string label = options.name.empty() ? absl::StrCat("table ", options.table_id)
                                                 : absl::StrCat("table '", options.name, "'");
  if (options.num_rows <= 0 || options.dim <= 0 || options.state_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": num_rows ", options.num_rows,
                                                   ", dim ", options.dim, ", state_dim ",
                                                   options.state_dim, " (rows and dim must be "
                                                   "positive, state_dim not negative)"));
  }
  if (options.dtype != RowDtype::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": storage.dtype ", RowDtypeName(options.dtype),
        " is not supported on CUDA yet (use storage.dtype fp32 with device cuda, or run on the "
        "CPU)"));
  }
  if (!CudaCompiled()) return NoCudaPath("CreateDeviceRowStore");
  auto store = std::make_unique<DeviceRowStore>(ctx, options);
  TESSERA_RETURN_IF_ERROR(store->Allocate());
  TESSERA_RETURN_IF_ERROR(store->Initialize());
  return std::unique_ptr<RowStore>(std::move(store));
}

}  // namespace tessera
