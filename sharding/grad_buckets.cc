// Why a copy per bucket: the tensors of a bucket are separate allocations, and one contiguous
// buffer per bucket gives one collective per bucket (as DDP's flat bucket views). The copy is one
// pass over the gradients, small next to the GEMMs that produced them.
#include "sharding/grad_buckets.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<BucketedAllReduce>> BucketedAllReduce::Create(
    Communicator* comm, std::vector<absl::Span<float>> tensors,
    const BucketedAllReduceOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("BucketedAllReduce: null communicator");
  if (options.bucket_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BucketedAllReduce: bucket_bytes must be >= 1, got ", options.bucket_bytes));
  }
  std::unique_ptr<BucketedAllReduce> r(new BucketedAllReduce());
  r->comm_ = comm;
  r->options_ = options;
  r->tensors_ = std::move(tensors);
  const int n = static_cast<int>(r->tensors_.size());
  r->bucket_of_.resize(n);
  r->marked_.assign(n, false);
  Bucket open;
  for (int i = 0; i < n; ++i) {
    const absl::Span<float> t = r->tensors_[i];
    if (t.data() == nullptr || t.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("BucketedAllReduce: tensor ", i, " is empty or null"));
    }
    if (!r->index_.emplace(t.data(), i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("BucketedAllReduce: tensor ", i, " repeats an earlier tensor's data"));
    }
    if (open.last == open.first) open.first = open.last = i;
    r->bucket_of_[i] = static_cast<int>(r->buckets_.size());
    open.last = i + 1;
    open.floats += static_cast<int64_t>(t.size());
    if (open.floats * 4 >= options.bucket_bytes || i + 1 == n) {
      open.missing = open.last - open.first;
      open.buffer.resize(open.floats);
      r->buckets_.push_back(std::move(open));
      open = Bucket();
      open.first = open.last = i + 1;
    }
  }
  return r;
}

BucketedAllReduce::~BucketedAllReduce() = default;

absl::Status BucketedAllReduce::MarkReady(const float* data) {
  auto it = index_.find(data);
  if (it == index_.end()) {
    return absl::InvalidArgumentError("BucketedAllReduce::MarkReady: unknown tensor");
  }
  return MarkReady(it->second);
}

absl::Status BucketedAllReduce::MarkReady(int i) {
  if (i < 0 || i >= static_cast<int>(tensors_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("BucketedAllReduce::MarkReady: tensor ", i, " out of range"));
  }
  if (marked_[i]) {
    return absl::InvalidArgumentError(
        absl::StrCat("BucketedAllReduce::MarkReady: tensor ", i, " marked twice in one step"));
  }
  marked_[i] = true;
  --buckets_[bucket_of_[i]].missing;
  TESSERA_RETURN_IF_ERROR(StartReady(/*all=*/false));
  // Poll: lets MPI move the buckets in flight along while backward goes on.
  for (int b = 0; b < next_; ++b) {
    if (buckets_[b].pending != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(bool done, buckets_[b].pending->Test());
      (void)done;
    }
  }
  return absl::OkStatus();
}

absl::Status BucketedAllReduce::StartReady(bool all) {
  while (next_ < num_buckets() && (all || buckets_[next_].missing == 0)) {
    Bucket& b = buckets_[next_];
    float* p = b.buffer.data();
    for (int t = b.first; t < b.last; ++t) {
      std::memcpy(p, tensors_[t].data(), tensors_[t].size() * sizeof(float));
      p += tensors_[t].size();
    }
    TESSERA_ASSIGN_OR_RETURN(b.pending, comm_->StartAllReduce(b.buffer.data(), b.floats,
                                                              options_.op));
    if (!all) ++started_early_;
    ++next_;
  }
  return absl::OkStatus();
}

absl::Status BucketedAllReduce::Finish() {
  TESSERA_RETURN_IF_ERROR(StartReady(/*all=*/true));
  absl::Status status;
  for (Bucket& b : buckets_) {
    absl::Status s = b.pending->Wait();
    b.pending.reset();
    if (!s.ok()) {
      if (status.ok()) status = s;
      continue;
    }
    const float* p = b.buffer.data();
    for (int t = b.first; t < b.last; ++t) {
      std::memcpy(tensors_[t].data(), p, tensors_[t].size() * sizeof(float));
      p += tensors_[t].size();
    }
  }
  for (Bucket& b : buckets_) b.missing = b.last - b.first;
  marked_.assign(marked_.size(), false);
  next_ = 0;
  started_early_last_ = started_early_;
  started_early_ = 0;
  return status;
}

}  // namespace tessera
