// StagedCommunicator: collectives on device buffers over a host-memory communicator (MPI),
// staging each buffer through pinned host memory: device -> pinned copy, the inner collective
// on the pinned copy, pinned -> device copy. The second device transport of issue 10 beside NCCL:
// it lets several ranks share one GPU (NCCL refuses two ranks on one device) and serves clusters
// without NCCL-capable links.
//
// Semantics are the inner communicator's (same sums and bits, same counters on the inner), with
// every buffer pointer naming memory on the copier's device. Each collective is blocking for the
// device too: it waits for the work queued on the compute stream before reading a buffer (the
// device -> host copy waits) and for its own host -> device copies before returning, so a
// pinned staging buffer is never reused under a pending copy. Receive buffers are written only
// inside their blocks (recv_displs[r] .. + recv_bytes[r]); bytes between blocks keep their values.
//
// Copies: blocks adjacent in the device buffer are merged into one copy (the usual packed
// layout needs one copy per direction). Staging buffers grow to the largest collective and are
// kept (two of them: send and receive).
//
// Ownership: owns the inner communicator and the copier. Thread-safety: one thread at a time, as
// any Communicator. Nonblocking Start* run to completion at Start (Communicator's default).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "sharding/communicator.h"

namespace tessera {

// The copies and staging memory of a StagedCommunicator. The CUDA one (CreateCudaStagingCopier)
// copies on a DeviceContext's compute stream through pinned buffers; tests use a host one.
class StagingCopier {
 public:
  virtual ~StagingCopier() = default;
  // Host memory of at least `bytes` for staging buffer `which` (0: send, 1: receive); grows,
  // never shrinks; contents are not kept across a growth. Valid until the next call for `which`.
  [[nodiscard]] virtual absl::StatusOr<void*> Staging(int which, size_t bytes) = 0;
  // Device -> host; returns once `host` holds the bytes (waits for earlier device work).
  [[nodiscard]] virtual absl::Status ToHost(void* host, const void* device, size_t bytes) = 0;
  // Host -> device; may return once queued.
  [[nodiscard]] virtual absl::Status ToDevice(void* device, const void* host, size_t bytes) = 0;
  // Waits for every queued ToDevice.
  [[nodiscard]] virtual absl::Status Finish() = 0;
  // A copier for a communicator split from this one's (same device).
  virtual std::unique_ptr<StagingCopier> Clone() const = 0;
};

// Copies on ctx's compute stream (core/cuda_context.h) through pinned buffers (core/pinned.h).
// Returns InvalidArgument for a CPU ctx and Unimplemented ("this build of Tessera has no CUDA
// path") in a build without the CUDA path.
[[nodiscard]] absl::StatusOr<std::unique_ptr<StagingCopier>> CreateCudaStagingCopier(
    const DeviceContext& ctx);

// One copy between a device buffer and its packed staging copy.
struct StagingRun {
  int64_t device_offset = 0;   // bytes into the device buffer
  int64_t staging_offset = 0;  // bytes into the staging buffer
  int64_t bytes = 0;
};

// How per-rank blocks (bytes[r] at displs[r] of a device buffer) are laid out in staging memory:
// packed in rank order (staging_displs[r], total bytes `staging_bytes`), and the copies that move
// them, one per maximal group of blocks that follow each other in rank order and in the device
// buffer without a gap. Empty blocks need no copy.
struct StagingLayout {
  std::vector<int64_t> staging_displs;  // [ranks]
  int64_t staging_bytes = 0;
  std::vector<StagingRun> runs;
};
// Returns InvalidArgument for spans of different sizes, a negative count or displacement.
[[nodiscard]] absl::StatusOr<StagingLayout> PlanStaging(absl::Span<const int64_t> bytes,
                                                        absl::Span<const int64_t> displs);

class StagedCommunicator final : public Communicator {
 public:
  // Wraps `inner` (host memory; not null). Returns InvalidArgument for a null inner or copier.
  static absl::StatusOr<std::unique_ptr<StagedCommunicator>> Create(
      std::unique_ptr<Communicator> inner, std::unique_ptr<StagingCopier> copier);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  // "<inner>+staged", e.g. "mpi+staged".
  std::string backend() const override { return inner_->backend() + "+staged"; }
  const Communicator& inner() const { return *inner_; }

 protected:
  absl::Status DoAllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                           absl::Span<const int64_t> send_displs, void* recv,
                           absl::Span<const int64_t> recv_bytes,
                           absl::Span<const int64_t> recv_displs) override;
  absl::Status DoAllReduce(void* data, int64_t count, CommDType dtype, ReduceOp op) override;
  absl::Status DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                            absl::Span<const int64_t> recv_bytes,
                            absl::Span<const int64_t> recv_displs) override;
  absl::Status DoBroadcast(void* data, int64_t bytes, int root) override;
  absl::Status DoBarrier() override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;

 private:
  StagedCommunicator(std::unique_ptr<Communicator> inner, std::unique_ptr<StagingCopier> copier);
  // Copies the runs of `layout` between `device` and `staging`.
  absl::Status CopyIn(const StagingLayout& layout, const void* device, char* staging);
  absl::Status CopyOut(const StagingLayout& layout, const char* staging, void* device);

  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<StagingCopier> copier_;
};

}  // namespace tessera
