// CtxArray<T>: a grow-only array in the memory of the shards' DeviceContext (host memory for a
// CPU context, device memory for CUDA): the payload and id buffers of the phases, so that one
// orchestration drives both devices. Private to sharding/.
//
// Mirror: the owner's ids and the local batch are computed on the host; on a CUDA context each
// phase uploads them once per step into a CtxArray (Mirror copies, on ctx's compute stream; from
// pageable host memory the copy has read the source when it returns), on a CPU context Mirror
// only hands back the host pointer (no copy), so the CPU path runs what it always ran.
//
// Contents are not kept when an array grows (Reserve); memory is zero-filled when allocated.
// Errors: ResourceExhausted when the allocation fails (naming `what` and the bytes), the CUDA
// copy's Internal. Thread-safety: none.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "core/status.h"

namespace tessera::internal {

template <typename T>
class CtxArray {
 public:
  // Room for at least n elements in ctx's memory; returns data(). Grows to n exactly (a growth
  // drops the contents), never shrinks.
  absl::StatusOr<T*> Reserve(const DeviceContext& ctx, int64_t n, const char* what) {
    if (n <= capacity_ && !buf_.empty()) return data();
    const int64_t want = n > 0 ? n : 1;
    absl::StatusOr<Buffer> b =
        Buffer::Allocate(ctx.device, DType::kU8, {want * static_cast<int64_t>(sizeof(T))});
    if (!b.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "sharded embeddings: cannot allocate ", want * static_cast<int64_t>(sizeof(T)),
          " bytes of ", DeviceName(ctx.device), " memory for ", what, ": ",
          b.status().message()));
    }
    buf_ = std::move(b).value();
    capacity_ = want;
    return data();
  }
  T* data() { return buf_.data<T>(); }
  const T* data() const { return buf_.data<T>(); }
  int64_t capacity() const { return capacity_; }

 private:
  Buffer buf_;
  int64_t capacity_ = 0;
};

// `host[0, n)` in ctx's memory: the host pointer itself for a CPU context, else a copy in
// `*mirror` (grown as needed). Never null, and always ctx's memory: for n == 0 (where `host` may
// be null, or a host address that a CUDA kernel must not be handed) it is the mirror's own
// storage, with no copy, so a callee that checks its pointers sees the same on both devices.
template <typename T>
absl::StatusOr<const T*> Mirror(const DeviceContext& ctx, const T* host, int64_t n,
                                CtxArray<T>* mirror, const char* what) {
  if (n == 0) {
    TESSERA_ASSIGN_OR_RETURN(T* empty, mirror->Reserve(ctx, 0, what));
    return static_cast<const T*>(empty);
  }
  if (!ctx.is_cuda()) return host;
  TESSERA_ASSIGN_OR_RETURN(T* d, mirror->Reserve(ctx, n, what));
  TESSERA_RETURN_IF_ERROR(CudaCopyToDevice(ctx, d, host, static_cast<size_t>(n) * sizeof(T)));
  return static_cast<const T*>(d);
}
template <typename T>
absl::StatusOr<const T*> Mirror(const DeviceContext& ctx, const std::vector<T>& host,
                                CtxArray<T>* mirror, const char* what) {
  return Mirror(ctx, host.data(), static_cast<int64_t>(host.size()), mirror, what);
}

// Copies n elements of ctx's memory at `src` into host `dst` (waits for the work queued before).
template <typename T>
absl::Status CopyToHost(const DeviceContext& ctx, T* dst, const T* src, int64_t n) {
  if (n == 0) return absl::OkStatus();
  if (!ctx.is_cuda()) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    return absl::OkStatus();
  }
  return CudaCopyToHost(ctx, dst, src, static_cast<size_t>(n) * sizeof(T));
}

// Copies n host elements at `src` into ctx's memory at `dst` (a memcpy on a CPU context; on CUDA
// queued on the compute stream: `src` must stay unchanged until the stream reaches the copy).
template <typename T>
absl::Status CopyFromHost(const DeviceContext& ctx, T* dst, const T* src, int64_t n) {
  if (n == 0) return absl::OkStatus();
  if (!ctx.is_cuda()) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    return absl::OkStatus();
  }
  return CudaCopyToDevice(ctx, dst, src, static_cast<size_t>(n) * sizeof(T));
}

}  // namespace tessera::internal
