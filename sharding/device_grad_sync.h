// DeviceGradSync: the dense data-parallel all-reduce of gradients that live in device memory
// (issue 10 item 3), overlapped with backward as BucketedAllReduce is on the CPU.
//
// As soon as backward has queued the kernels that finish a gradient (MarkReady, from the dense
// towers' gradient-ready callback), its copy to pinned host memory is queued on the
// communication stream, ordered after everything queued on the compute stream so far: the copy
// runs on the copy engine while the rest of backward computes. Once a copy has landed (polled
// without blocking by MarkReady, Poll and Finish, in the order the copies were queued) the
// gradient is handed to a BucketedAllReduce (sharding/grad_buckets.h) over the host
// communicator, whose buckets start in bucket order as they fill and move while the host goes on
// (the embedding update). Finish queues the copies of gradients never marked, waits for every
// copy and bucket, and queues the sums back into the device gradients on the compute stream, so
// the optimizer step queued after it reads them; the compute stream itself is never waited for.
//
// Bits: each element is summed by the communicator in rank order (communicator.h), so the result
// is the same bits as one flat all-reduce whatever the bucket size, and the same bits as the CPU
// path's for the same gradients. NCCL's all-reduce is not used here: its reduction order depends
// on an element's offset inside the buffer, so the bucket size would change the bits.
//
// Copies go through a GradStager: the CUDA one (CreateCudaGradStager) on a DeviceContext's
// streams with one event per copy; the host one (CreateHostGradStager) copies only when a copy is
// polled, after a set number of polls, so the CPU tests run the ordering logic as a GPU would.
//
// Collective over `comm` (host memory): every rank declares the same tensors and calls
// MarkReady/Finish in the same order. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "sharding/communicator.h"
#include "sharding/grad_buckets.h"

namespace tessera {

// The device side of a DeviceGradSync: host staging memory and the copies.
class GradStager {
 public:
  virtual ~GradStager() = default;
  // Host memory of `floats` floats (pinned on CUDA), kept by the stager; called once.
  [[nodiscard]] virtual absl::StatusOr<float*> Allocate(int64_t floats) = 0;
  // Queues copy number `n` (0, 1, ... in each step): `floats` floats device -> host, after all
  // work queued on the compute stream so far. Returns once queued.
  [[nodiscard]] virtual absl::Status StartToHost(int n, float* host, const float* device,
                                                 int64_t floats) = 0;
  // True once copy `n` (and every copy queued before it) has landed; never blocks.
  [[nodiscard]] virtual absl::StatusOr<bool> Landed(int n) = 0;
  // Blocks until copy `n` (and every one before it) has landed.
  [[nodiscard]] virtual absl::Status WaitLanded(int n) = 0;
  // Queues host -> device on the compute stream; returns once queued. The host memory is not
  // written again before the next step's StartToHost, which is ordered after this copy.
  [[nodiscard]] virtual absl::Status ToDevice(float* device, const float* host,
                                              int64_t floats) = 0;
};

// On ctx's communication stream (device -> host) and compute stream (host -> device), with pinned
// staging memory. InvalidArgument for a CPU ctx; Unimplemented without the CUDA path.
[[nodiscard]] absl::StatusOr<std::unique_ptr<GradStager>> CreateCudaGradStager(
    const DeviceContext& ctx);
// Host memory standing in for device memory: copy n lands when it is polled (Landed) for the
// `polls_to_land`-th time, or at WaitLanded; it reads the "device" floats at that moment, as a
// GPU's copy engine reads them when it gets there.
[[nodiscard]] std::unique_ptr<GradStager> CreateHostGradStager(int polls_to_land);

struct DeviceGradTensor {
  float* data = nullptr;  // device memory
  int64_t floats = 0;
};

class DeviceGradSync {
 public:
  // `tensors`: the device gradients in the order backward finishes them. `comm` is borrowed and
  // must outlive this object. InvalidArgument for an empty or repeated tensor or a bad bucket
  // size (BucketedAllReduce's errors), and the stager's errors.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DeviceGradSync>> Create(
      Communicator* comm, std::vector<DeviceGradTensor> tensors,
      std::unique_ptr<GradStager> stager, const BucketedAllReduceOptions& options = {});

  int num_buckets() const { return buckets_->num_buckets(); }
  // Buckets started before Finish in the last finished step (BucketedAllReduce's count).
  int started_early_last_step() const { return buckets_->started_early_last_step(); }

  // The gradient at `device_data` is final once the compute stream reaches the work queued so
  // far: queues its copy, then polls. InvalidArgument for an unknown tensor or one marked twice.
  [[nodiscard]] absl::Status MarkReady(const float* device_data);
  // Hands the copies that have landed to the buckets (which start as they fill); never blocks.
  [[nodiscard]] absl::Status Poll();
  // Copies the unmarked gradients, waits for every copy and bucket, queues the sums back into
  // the device gradients (compute stream). Then the next step begins.
  [[nodiscard]] absl::Status Finish();

 private:
  DeviceGradSync() = default;
  absl::Status StartCopy(int i);

  std::vector<DeviceGradTensor> tensors_;
  std::unique_ptr<GradStager> stager_;
  std::unique_ptr<BucketedAllReduce> buckets_;
  float* host_ = nullptr;                // staging copy of every tensor, packed in order
  std::vector<int64_t> offset_;          // [tensors] floats into host_
  absl::flat_hash_map<const float*, int> index_;
  std::vector<bool> marked_;
  std::vector<int> copy_order_;          // tensor of copy n, this step
  int handed_ = 0;                       // copies handed to the buckets, this step
};

}  // namespace tessera
