// core/cuda_context.h and core/pinned.h for builds without the CUDA path: every function that
// would touch a device returns Unimplemented, so host code compiles and fails clearly at run time.
#include "core/cuda_context.h"
#include "core/pinned.h"

#if !TESSERA_HAVE_CUDA
namespace tessera {
namespace {
absl::Status NoCuda(const char* what) {
  return absl::UnimplementedError(
      std::string(what) +
      ": this build of Tessera has no CUDA path (TESSERA_CUDA=OFF or no "
      "toolkit found at configure time)");
}
}  // namespace

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(const CudaContextOptions&) {
  return NoCuda("CudaContext::Create");
}
CudaContext::~CudaContext() = default;
absl::StatusOr<int> CudaDeviceForLocalRank(int) { return NoCuda("CudaDeviceForLocalRank"); }
absl::Status CudaSynchronize(const DeviceContext&) { return NoCuda("CudaSynchronize"); }
absl::Status CudaSynchronizeAll(const DeviceContext&) { return NoCuda("CudaSynchronizeAll"); }
absl::Status CudaCommWaitsForCompute(const DeviceContext&) {
  return NoCuda("CudaCommWaitsForCompute");
}
absl::Status CudaComputeWaitsForComm(const DeviceContext&) {
  return NoCuda("CudaComputeWaitsForComm");
}
absl::Status CudaCopyToDevice(const DeviceContext&, void*, const void*, size_t) {
  return NoCuda("CudaCopyToDevice");
}
absl::Status CudaCopyToHost(const DeviceContext&, void*, const void*, size_t) {
  return NoCuda("CudaCopyToHost");
}
absl::Status CudaCopyDeviceToDevice(const DeviceContext&, void*, const void*, size_t) {
  return NoCuda("CudaCopyDeviceToDevice");
}
absl::Status CudaCopy2D(const DeviceContext&, void*, size_t, const void*, size_t, size_t,
                        size_t) {
  return NoCuda("CudaCopy2D");
}
absl::Status CudaMemsetAsync(const DeviceContext&, void*, int, size_t) {
  return NoCuda("CudaMemsetAsync");
}
absl::StatusOr<void*> CudaMallocAsync(const DeviceContext&, size_t) {
  return NoCuda("CudaMallocAsync");
}
absl::Status CudaFreeAsync(const DeviceContext&, void* ptr) {
  return ptr == nullptr ? absl::OkStatus() : NoCuda("CudaFreeAsync");
}

absl::Status CudaCommCopyToHost(const DeviceContext&, void*, const void*, size_t) {
  return NoCuda("CudaCommCopyToHost");
}

absl::StatusOr<CudaEvent> CudaEvent::Create() { return NoCuda("CudaEvent::Create"); }
CudaEvent::~CudaEvent() = default;
CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  event_ = other.event_;
  other.event_ = nullptr;
  return *this;
}
absl::Status CudaEvent::RecordOnComm(const DeviceContext&) {
  return NoCuda("CudaEvent::RecordOnComm");
}
absl::StatusOr<bool> CudaEvent::Done() const { return true; }
absl::Status CudaEvent::Wait() const { return absl::OkStatus(); }

PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  data_ = other.data_;
  bytes_ = other.bytes_;
  other.data_ = nullptr;
  other.bytes_ = 0;
  return *this;
}
void PinnedBuffer::Release() {}
absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t) {
  return NoCuda("PinnedBuffer::Allocate");
}
absl::Status PinnedBuffer::Reserve(size_t) { return NoCuda("PinnedBuffer::Reserve"); }

}  // namespace tessera
#endif
