#include "core/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

namespace tessera {
namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

void* AllocateHost(size_t bytes) {
  if (bytes == 0) bytes = 64;
  if (bytes >= kHugePageBytes) {
    // mmap gives zeroed pages lazily, so a large table costs nothing until touched.
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p != nullptr) std::memset(p, 0, rounded);
  return p;
}

void FreeHost(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  if (bytes == 0) bytes = 64;
  if (bytes >= kHugePageBytes) {
    munmap(ptr, bytes);
  } else {
    std::free(ptr);
  }
}

Buffer::~Buffer() { Release(); }

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    device_ = other.device_;
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    owning_ = std::exchange(other.owning_, false);
  }
  return *this;
}

void Buffer::Release() {
  if (owning_ && data_ != nullptr) {
    if (device_ == Device::kCpu) {
      FreeHost(data_, bytes());
    } else {
      CudaFree(data_);
    }
  }
  data_ = nullptr;
  owning_ = false;
}

int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

absl::StatusOr<Buffer> Buffer::Allocate(Device device, DType dtype, std::vector<int64_t> shape) {
  Buffer b;
  b.device_ = device;
  b.dtype_ = dtype;
  b.shape_ = std::move(shape);
  for (int64_t d : b.shape_) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative buffer dim ", d));
  }
  if (device == Device::kCpu) {
    b.data_ = AllocateHost(b.bytes());
    if (b.data_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", b.bytes(), " bytes failed"));
    }
  } else {
    TESSERA_ASSIGN_OR_RETURN(b.data_, CudaMallocZeroed(b.bytes()));
  }
  b.owning_ = true;
  return b;
}

Buffer Buffer::Host(DType dtype, std::vector<int64_t> shape) {
  auto b = Allocate(Device::kCpu, dtype, std::move(shape));
  TESSERA_CHECK(b.ok()) << b.status().ToString();
  return std::move(b).value();
}

Buffer Buffer::View(void* data, Device device, DType dtype, std::vector<int64_t> shape) {
  Buffer b;
  b.data_ = data;
  b.device_ = device;
  b.dtype_ = dtype;
  b.shape_ = std::move(shape);
  b.owning_ = false;
  return b;
}

std::string Buffer::DebugString() const {
  return absl::StrCat(DeviceName(device_), ":", DTypeName(dtype_), "[",
                      absl::StrJoin(shape_, ","), "]", owning_ ? "" : " view");
}

}  // namespace tessera
