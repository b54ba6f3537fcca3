// PinnedBuffer: page-locked host memory (cudaMallocHost) for staging transfers between host and
// device. Copies from pinned memory run at full PCIe/NVLink-C2C speed and truly asynchronously,
// so the next batch's upload can overlap the current step's kernels; pageable memory is staged
// through a driver bounce buffer and serialises with the host.
//
// Ownership: an owning, move-only block; freed (cudaFreeHost) on destruction. The caller must
// not free or reuse it while a copy queued from it is still pending on a stream.
// Thread-safety: none. Without the CUDA path Allocate returns Unimplemented.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace tessera {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // `bytes` of pinned host memory (contents unspecified). Internal naming cudaMallocHost when
  // the driver refuses (e.g. no device), Unimplemented without the CUDA path.
  [[nodiscard]] static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes);
  // Grows to at least `bytes` (contents lost when it grows); never shrinks.
  [[nodiscard]] absl::Status Reserve(size_t bytes);

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

 private:
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera
