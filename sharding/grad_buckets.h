// BucketedAllReduce: data-parallel gradient sync in buckets that start while backward still runs
// (as PyTorch DDP). The gradients are grouped, in the order backward produces them, into buckets
// of about `bucket_bytes`; as soon as every gradient of a bucket is final (MarkReady) the bucket
// is copied into its own buffer and summed over the communicator with a nonblocking all-reduce,
// so its traffic overlaps the rest of backward (and whatever the caller does before Finish).
// Finish starts the buckets not started yet, waits for all and writes the sums back.
//
// Determinism: buckets start strictly in bucket order on every rank (a bucket whose gradients
// are ready before an earlier bucket's waits for it), and each element is summed in rank order
// by the communicator (communicator.h), so the result is the same bits as one blocking AllReduce
// of all gradients, whatever the bucket size.
//
// Collective over `comm`: every rank must declare the same tensors (count and sizes) and call
// MarkReady/Finish in the same order. Host memory (the CPU path). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sharding/communicator.h"

namespace tessera {

struct BucketedAllReduceOptions {
  // Target bucket size; a bucket closes once it holds at least this many bytes (one tensor
  // larger than this is a bucket of its own). Default: 25 MiB, as PyTorch DDP.
  int64_t bucket_bytes = int64_t{25} << 20;
  // Sum (default) or average over the ranks.
  ReduceOp op = ReduceOp::kSum;
};

class BucketedAllReduce {
 public:
  // `tensors`: the gradient buffers in the order backward finishes them. `comm` is borrowed and
  // must outlive this object. InvalidArgument for empty tensors, null data or a bad bucket size.
  static absl::StatusOr<std::unique_ptr<BucketedAllReduce>> Create(
      Communicator* comm, std::vector<absl::Span<float>> tensors,
      const BucketedAllReduceOptions& options = {});
  ~BucketedAllReduce();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Tensors [first, last) of bucket b.
  std::pair<int, int> bucket_tensors(int b) const {
    return {buckets_[b].first, buckets_[b].last};
  }

  // Tensor i (or the tensor whose data starts at `data`) is final for this step. Starts every
  // bucket that is complete and whose predecessors have started; polls those in flight.
  // InvalidArgument for an unknown tensor or one marked twice in a step.
  absl::Status MarkReady(int i);
  absl::Status MarkReady(const float* data);
  // Starts the remaining buckets (also those with tensors never marked), waits for every bucket
  // and writes the sums into the tensors. Then the next step begins (all tensors unmarked).
  absl::Status Finish();
  // Buckets started by MarkReady (before Finish) in the last finished step: how many started early.
  int started_early_last_step() const { return started_early_last_; }

 private:
  struct Bucket {
    int first = 0, last = 0;  // tensors
    int64_t floats = 0;
    int missing = 0;          // tensors not yet marked this step
    std::vector<float> buffer;
    std::unique_ptr<PendingCollective> pending;
  };
  BucketedAllReduce() = default;
  absl::Status StartReady(bool all);

  Communicator* comm_ = nullptr;
  BucketedAllReduceOptions options_;
  std::vector<absl::Span<float>> tensors_;
  std::vector<int> bucket_of_;
  std::vector<bool> marked_;
  absl::flat_hash_map<const float*, int> index_;
  std::vector<Bucket> buckets_;
  int next_ = 0;  // the next bucket to start
  int started_early_ = 0;
  int started_early_last_ = 0;
};

}  // namespace tessera
