// CudaContext: the RAII owner of what a CUDA DeviceContext points at: the device ordinal, a
// compute stream, a communication stream (for NCCL, so all-to-all can overlap compute) and a
// cuBLAS handle bound to the compute stream. DeviceContext (core/device.h) stays a plain,
// copyable view; CudaContext owns the objects behind its opaque pointers and destroys them.
//
// Ownership: the CudaContext must outlive every DeviceContext copied from context() and every
// component built with one. Thread-safety: none; one context per rank and thread of work.
//
// Every function here exists in every build: without the CUDA path they return Unimplemented,
// so host code needs no #if. CUDA and cuBLAS failures come back as Internal naming the call
// (e.g. "cudaStreamCreateWithFlags: out of memory").
//
// Async convention of the CUDA twins: kernels and copies are queued on ctx.compute_stream and
// return without waiting; a host read of device memory needs CudaCopyToHost (which waits) or
// CudaSynchronize first. No managed (unified) memory is used anywhere.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "core/device.h"

namespace tessera {

struct CudaContextOptions {
  // CUDA ordinal; one GPU per rank, usually the launcher's local rank modulo the device count
  // (see CudaDeviceForLocalRank). Default: 0.
  int device = 0;
  // Let cuBLAS use TF32 tensor cores for fp32 GEMMs (about 8x the fp32 rate on sm_80+, 10-bit
  // mantissa products). Off keeps fp32 GEMMs within fp32 rounding of the CPU twin. Default: false.
  bool allow_tf32 = false;
  // Bytes the stream-ordered allocator (cudaMallocAsync) keeps cached after frees, so per-step
  // scratch allocations do not go back to the driver. Default: all of it (UINT64_MAX).
  unsigned long long pool_release_threshold = ~0ull;
};

class CudaContext {
 public:
  // Selects `options.device` (cudaSetDevice) on the calling thread and creates the streams and
  // the cuBLAS handle. Returns InvalidArgument for an ordinal outside [0, CudaDeviceCount()),
  // Internal for a CUDA or cuBLAS failure, Unimplemented without the CUDA path.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaContext>> Create(
      const CudaContextOptions& options);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // The view components take (device kCuda, ordinal, streams, cuBLAS handle).
  const DeviceContext& context() const { return ctx_; }
  int device() const { return ctx_.cuda_device; }

 private:
  CudaContext() = default;
  DeviceContext ctx_;
};

// local_rank % CudaDeviceCount(): the usual one-GPU-per-rank mapping (the binary reads the local
// rank from the launcher's environment, e.g. OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID).
// Returns FailedPrecondition when no device is visible, Unimplemented without the CUDA path.
[[nodiscard]] absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank);

// Waits for all work queued on ctx's compute stream; returns the first asynchronous error of
// that work (kernel faults surface here). Internal naming the call on failure.
[[nodiscard]] absl::Status CudaSynchronize(const DeviceContext& ctx);
// Waits for the communication stream too.
[[nodiscard]] absl::Status CudaSynchronizeAll(const DeviceContext& ctx);

// Copies on ctx's compute stream. ToDevice/DeviceToDevice return once queued (the source must
// stay alive and unchanged until the stream reaches the copy: use pinned memory, core/pinned.h,
// for overlap; pageable sources are staged by the driver). ToHost waits for the copy (and so for
// all earlier work on the stream).
[[nodiscard]] absl::Status CudaCopyToDevice(const DeviceContext& ctx, void* dst, const void* src,
                                            size_t bytes);
[[nodiscard]] absl::Status CudaCopyToHost(const DeviceContext& ctx, void* dst, const void* src,
                                          size_t bytes);
[[nodiscard]] absl::Status CudaCopyDeviceToDevice(const DeviceContext& ctx, void* dst,
                                                  const void* src, size_t bytes);
// A strided copy on the compute stream (cudaMemcpy2DAsync): `height` rows of `width` bytes from
// src (row pitch `spitch` bytes) to dst (pitch `dpitch`); either side host or device memory, the
// kind taken from the pointers. Returns once queued: CudaSynchronize before reading a host
// destination or reusing a host source.
[[nodiscard]] absl::Status CudaCopy2D(const DeviceContext& ctx, void* dst, size_t dpitch,
                                      const void* src, size_t spitch, size_t width,
                                      size_t height);
// Fills `bytes` of device memory with byte `value` on the compute stream.
[[nodiscard]] absl::Status CudaMemsetAsync(const DeviceContext& ctx, void* dst, int value,
                                           size_t bytes);

// Cross-stream ordering without a host wait: work queued on the comm stream after
// CudaCommWaitsForCompute starts only after everything queued on the compute stream so far (e.g.
// an NCCL all-reduce of gradients a backward kernel is still writing), and vice versa.
[[nodiscard]] absl::Status CudaCommWaitsForCompute(const DeviceContext& ctx);
[[nodiscard]] absl::Status CudaComputeWaitsForComm(const DeviceContext& ctx);

// Device -> host on ctx's communication stream, after the work queued there so far (order it
// after compute work with CudaCommWaitsForCompute first). Returns once queued: `dst` (pinned, to
// overlap) holds the bytes once a CudaEvent recorded on the comm stream afterwards is done.
[[nodiscard]] absl::Status CudaCommCopyToHost(const DeviceContext& ctx, void* dst, const void* src,
                                              size_t bytes);

// An owned CUDA event (timing disabled): lets the host see, without blocking, how far a stream
// has come. Move-only; destroyed with the object (CUDA keeps a recorded event alive until the
// stream reaches it). Without the CUDA path Create returns Unimplemented.
class CudaEvent {
 public:
  [[nodiscard]] static absl::StatusOr<CudaEvent> Create();
  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Records the event after the work queued so far on ctx's communication stream.
  [[nodiscard]] absl::Status RecordOnComm(const DeviceContext& ctx);
  // True once the work before the last record has finished (cudaEventQuery); true for an event
  // never recorded. Returns that work's asynchronous error, if any.
  [[nodiscard]] absl::StatusOr<bool> Done() const;
  // Blocks until that work has finished (cudaEventSynchronize).
  [[nodiscard]] absl::Status Wait() const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

// Stream-ordered scratch memory (cudaMallocAsync / cudaFreeAsync on the compute stream, served
// from the device's memory pool, so steady-state steps do not reach the driver). The memory may
// be used by work queued on that stream after the call; CudaFreeAsync(nullptr) is a no-op.
[[nodiscard]] absl::StatusOr<void*> CudaMallocAsync(const DeviceContext& ctx, size_t bytes);
[[nodiscard]] absl::Status CudaFreeAsync(const DeviceContext& ctx, void* ptr);

}  // namespace tessera
