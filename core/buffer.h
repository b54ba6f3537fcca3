// Buffer: a typed, shaped block of memory on one device, owning or a view. Not a tensor library:
// no arithmetic, no autograd; layers and kernels take raw pointers from it.
//
// Ownership: an owning Buffer frees its memory on destruction; a view never does and must not
// outlive the memory it points at. Buffers are move-only (a copy would be a silent aliasing bug).
// Thread-safety: none; share a Buffer across threads only for reading.
//
// Host allocations are 64-byte aligned and zero-filled. Allocations of at least 2 MiB ask the
// kernel for transparent huge pages (madvise), which roughly doubles random-row gather
// throughput on these machines (../shared/MACHINE.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/enum_names.h"

namespace tessera {

enum class Device { kCpu, kCuda };
inline constexpr EnumName<Device> kDeviceNames[] = {{Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}};
// "cpu" / "cuda" (the config's `device`); ParseDevice: InvalidArgument naming the value otherwise.
inline const char* DeviceName(Device device) { return NameIn(kDeviceNames, device); }
inline absl::StatusOr<Device> ParseDevice(const std::string& name) {
  return ParseIn(kDeviceNames, name, "device");
}

enum class DType { kF32, kF16, kBF16, kI32, kI64, kU8 };

// Bytes per element of `dtype`.
size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);

class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Allocates zero-filled memory for `shape` on `device`. Returns ResourceExhausted when the
  // allocation fails and Unimplemented for kCuda in a build without the CUDA path.
  [[nodiscard]] static absl::StatusOr<Buffer> Allocate(Device device, DType dtype,
                                                      std::vector<int64_t> shape);
  // Like Allocate for kCpu, but a failure is a bug (small host allocations only).
  static Buffer Host(DType dtype, std::vector<int64_t> shape);
  // A non-owning view of `data`.
  static Buffer View(void* data, Device device, DType dtype, std::vector<int64_t> shape);

  template <typename T>
  T* data() { return static_cast<T*>(data_); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(data_); }
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool owning() const { return owning_; }
  bool empty() const { return data_ == nullptr; }
  std::string DebugString() const;

 private:
  void Release();

  void* data_ = nullptr;
  Device device_ = Device::kCpu;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  bool owning_ = false;
};

// Host memory helpers used by Buffer and by stores that manage their own arrays.
// AllocateHost returns 64-byte aligned zeroed memory (nullptr on failure); FreeHost releases it.
void* AllocateHost(size_t bytes);
void FreeHost(void* ptr, size_t bytes);

}  // namespace tessera
