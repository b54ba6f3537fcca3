// CudaContext, the stream-ordered helpers and PinnedBuffer for builds with the CUDA path
// (contracts in core/cuda_context.h and core/pinned.h).
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/cuda_status_cuda.h"
#include "core/pinned.h"

namespace tessera {

absl::Status CudaStatus(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(err)));
}

absl::Status CublasStatus(cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", cublasGetStatusString(st)));
}

absl::Status CudaLaunchStatus(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("launching ", kernel, ": ", cudaGetErrorString(err)));
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(
    const CudaContextOptions& options) {
  const int count = CudaDeviceCount();
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CudaContext: device ", options.device,
                                                   " outside [0, ", count,
                                                   ") (visible CUDA devices)"));
  }
  std::unique_ptr<CudaContext> c(new CudaContext());
  c->ctx_.device = Device::kCuda;
  c->ctx_.cuda_device = options.device;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  cudaStream_t compute = nullptr, comm = nullptr;
  // Blocking streams (not cudaStreamNonBlocking) on purpose: the synchronous CudaMemcpy of
  // core/cuda_runtime.h runs on the legacy default stream, which then waits for our streams'
  // earlier work and they for it. So host code that reads or writes device parameters with
  // CudaMemcpy (initialisation, export, checkpoints) sees a consistent state without an explicit
  // CudaSynchronize. The hot path never touches the legacy stream, so this costs nothing there.
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&compute));
  c->ctx_.compute_stream = compute;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&comm));
  c->ctx_.comm_stream = comm;
  cublasHandle_t handle = nullptr;
  TESSERA_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  c->ctx_.cublas_handle = handle;
  TESSERA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, compute));
  TESSERA_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  TESSERA_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
      handle, options.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  cudaMemPool_t pool = nullptr;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, options.device));
  unsigned long long threshold = options.pool_release_threshold;
  TESSERA_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  return c;
}

CudaContext::~CudaContext() {
  // Destruction must not fail loudly: errors here (a device already lost) are ignored.
  if (ctx_.compute_stream != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.compute_stream));
  }
  if (ctx_.comm_stream != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.comm_stream));
  }
  if (ctx_.cublas_handle != nullptr) cublasDestroy(static_cast<cublasHandle_t>(ctx_.cublas_handle));
  if (ctx_.comm_stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(ctx_.comm_stream));
  if (ctx_.compute_stream != nullptr) {
    cudaStreamDestroy(static_cast<cudaStream_t>(ctx_.compute_stream));
  }
}

absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank) {
  const int count = CudaDeviceCount();
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", local_rank, " < 0"));
  }
  return local_rank % count;
}

namespace {
absl::Status CheckCuda(const DeviceContext& ctx, const char* op) {
  if (ctx.is_cuda() && ctx.compute_stream != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": needs a CUDA DeviceContext from CudaContext::context()"));
}
}  // namespace

absl::Status CudaSynchronize(const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaSynchronize"));
  return CudaStatus(cudaStreamSynchronize(ComputeStream(ctx)), "cudaStreamSynchronize");
}

absl::Status CudaSynchronizeAll(const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(CudaSynchronize(ctx));
  if (ctx.comm_stream == nullptr) return absl::OkStatus();
  return CudaStatus(cudaStreamSynchronize(CommStream(ctx)), "cudaStreamSynchronize(comm)");
}

namespace {
// Records an event on `from` and makes `to` wait for it. The event is destroyed at once: CUDA
// keeps it alive until the wait is satisfied.
absl::Status StreamWaits(cudaStream_t to, cudaStream_t from) {
  cudaEvent_t ev = nullptr;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  absl::Status st = CudaStatus(cudaEventRecord(ev, from), "cudaEventRecord");
  if (st.ok()) st = CudaStatus(cudaStreamWaitEvent(to, ev, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(ev);
  return st;
}
}  // namespace

absl::Status CudaCommWaitsForCompute(const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaCommWaitsForCompute"));
  return StreamWaits(CommStream(ctx), ComputeStream(ctx));
}

absl::Status CudaComputeWaitsForComm(const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaComputeWaitsForComm"));
  return StreamWaits(ComputeStream(ctx), CommStream(ctx));
}

absl::Status CudaCopyToDevice(const DeviceContext& ctx, void* dst, const void* src, size_t bytes) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaCopyToDevice"));
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ComputeStream(ctx)),
                    "cudaMemcpyAsync(host to device)");
}

absl::Status CudaCopyToHost(const DeviceContext& ctx, void* dst, const void* src, size_t bytes) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaCopyToHost"));
  if (bytes > 0) {
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ComputeStream(ctx)));
  }
  return CudaStatus(cudaStreamSynchronize(ComputeStream(ctx)), "cudaStreamSynchronize");
}

absl::Status CudaCopyDeviceToDevice(const DeviceContext& ctx, void* dst, const void* src,
                                    size_t bytes) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaCopyDeviceToDevice"));
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ComputeStream(ctx)),
                    "cudaMemcpyAsync(device to device)");
}

absl::Status CudaCopy2D(const DeviceContext& ctx, void* dst, size_t dpitch, const void* src,
                        size_t spitch, size_t width, size_t height) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaCopy2D"));
  if (width == 0 || height == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault,
                                      ComputeStream(ctx)),
                    "cudaMemcpy2DAsync");
}

absl::Status CudaMemsetAsync(const DeviceContext& ctx, void* dst, int value, size_t bytes) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaMemsetAsync"));
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemsetAsync(dst, value, bytes, ComputeStream(ctx)), "cudaMemsetAsync");
}

absl::StatusOr<void*> CudaMallocAsync(const DeviceContext& ctx, size_t bytes) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaMallocAsync"));
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, ComputeStream(ctx));
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMallocAsync of ", bytes, " bytes: out of device memory"));
  }
  TESSERA_RETURN_IF_ERROR(CudaStatus(err, "cudaMallocAsync"));
  return p;
}

absl::Status CudaFreeAsync(const DeviceContext& ctx, void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaFreeAsync"));
  return CudaStatus(cudaFreeAsync(ptr, ComputeStream(ctx)), "cudaFreeAsync");
}

absl::Status CudaCommCopyToHost(const DeviceContext& ctx, void* dst, const void* src,
                                size_t bytes) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaCommCopyToHost"));
  if (ctx.comm_stream == nullptr) {
    return absl::InvalidArgumentError("CudaCommCopyToHost: the context has no comm stream");
  }
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, CommStream(ctx)),
                    "cudaMemcpyAsync(device to host, comm stream)");
}

// ---- CudaEvent ----------------------------------------------------------------------------

absl::StatusOr<CudaEvent> CudaEvent::Create() {
  cudaEvent_t ev = nullptr;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CudaEvent e;
  e.event_ = ev;
  return e;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

absl::Status CudaEvent::RecordOnComm(const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(CheckCuda(ctx, "CudaEvent::RecordOnComm"));
  if (event_ == nullptr) return absl::FailedPreconditionError("CudaEvent: not created");
  return CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(event_), CommStream(ctx)),
                    "cudaEventRecord(comm stream)");
}

absl::StatusOr<bool> CudaEvent::Done() const {
  if (event_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) return false;
  TESSERA_RETURN_IF_ERROR(CudaStatus(err, "cudaEventQuery"));
  return true;
}

absl::Status CudaEvent::Wait() const {
  if (event_ == nullptr) return absl::OkStatus();
  return CudaStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)),
                    "cudaEventSynchronize");
}

// ---- PinnedBuffer ----------------------------------------------------------------------------

PinnedBuffer::~PinnedBuffer() { Release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::Release() {
  if (data_ != nullptr) cudaFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  PinnedBuffer b;
  TESSERA_RETURN_IF_ERROR(b.Reserve(bytes));
  return b;
}

absl::Status PinnedBuffer::Reserve(size_t bytes) {
  if (data_ != nullptr && bytes_ >= bytes) return absl::OkStatus();
  Release();
  void* p = nullptr;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes == 0 ? 64 : bytes));
  data_ = p;
  bytes_ = bytes;
  return absl::OkStatus();
}

}  // namespace tessera
