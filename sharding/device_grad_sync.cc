#include "sharding/device_grad_sync.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/pinned.h"
#include "core/status.h"

namespace tessera {
namespace {

// Copies on the context's streams; one event per copy of a step, recorded on the comm stream
// right after the copy, so Landed(n) is that event's query (the comm stream runs in order).
class CudaGradStager final : public GradStager {
 public:
  explicit CudaGradStager(const DeviceContext& ctx) : ctx_(ctx) {}

  absl::StatusOr<float*> Allocate(int64_t floats) override {
    TESSERA_ASSIGN_OR_RETURN(pinned_,
                             PinnedBuffer::Allocate(static_cast<size_t>(floats) * sizeof(float)));
    return pinned_.as<float>();
  }

  absl::Status StartToHost(int n, float* host, const float* device, int64_t floats) override {
    while (static_cast<int>(events_.size()) <= n) {
      TESSERA_ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create());
      events_.push_back(std::move(e));
    }
    TESSERA_RETURN_IF_ERROR(CudaCommWaitsForCompute(ctx_));
    TESSERA_RETURN_IF_ERROR(
        CudaCommCopyToHost(ctx_, host, device, static_cast<size_t>(floats) * sizeof(float)));
    return events_[n].RecordOnComm(ctx_);
  }

  absl::StatusOr<bool> Landed(int n) override { return events_.at(n).Done(); }
  absl::Status WaitLanded(int n) override { return events_.at(n).Wait(); }

  absl::Status ToDevice(float* device, const float* host, int64_t floats) override {
    return CudaCopyToDevice(ctx_, device, host, static_cast<size_t>(floats) * sizeof(float));
  }

 private:
  DeviceContext ctx_;
  PinnedBuffer pinned_;
  std::vector<CudaEvent> events_;
};

class HostGradStager final : public GradStager {
 public:
  explicit HostGradStager(int polls_to_land) : polls_to_land_(polls_to_land) {}

  absl::StatusOr<float*> Allocate(int64_t floats) override {
    memory_.assign(static_cast<size_t>(floats), 0.0f);
    return memory_.data();
  }

  absl::Status StartToHost(int n, float* host, const float* device, int64_t floats) override {
    if (n == 0) copies_.clear();  // a new step
    if (n != static_cast<int>(copies_.size())) {
      return absl::InternalError(absl::StrCat("HostGradStager: copy ", n, " out of order"));
    }
    copies_.push_back({host, device, floats, 0, false});
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Landed(int n) override {
    if (n < 0 || n >= static_cast<int>(copies_.size())) {
      return absl::InternalError(absl::StrCat("HostGradStager: no copy ", n));
    }
    Copy& c = copies_[n];
    if (!c.landed && ++c.polls < polls_to_land_) return false;
    Land(n);
    return true;
  }

  absl::Status WaitLanded(int n) override {
    if (n < 0 || n >= static_cast<int>(copies_.size())) {
      return absl::InternalError(absl::StrCat("HostGradStager: no copy ", n));
    }
    Land(n);
    return absl::OkStatus();
  }

  absl::Status ToDevice(float* device, const float* host, int64_t floats) override {
    std::memcpy(device, host, static_cast<size_t>(floats) * sizeof(float));
    return absl::OkStatus();
  }

 private:
  struct Copy {
    float* host;
    const float* device;
    int64_t floats;
    int polls;
    bool landed;
  };
  // Lands copy n and every earlier one (a stream runs its copies in order).
  void Land(int n) {
    for (int k = 0; k <= n; ++k) {
      Copy& c = copies_[k];
      if (c.landed) continue;
      std::memcpy(c.host, c.device, static_cast<size_t>(c.floats) * sizeof(float));
      c.landed = true;
    }
  }

  int polls_to_land_;
  std::vector<float> memory_;
  std::vector<Copy> copies_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradStager>> CreateCudaGradStager(const DeviceContext& ctx) {
  if (!ctx.is_cuda()) {
    return absl::InvalidArgumentError("CreateCudaGradStager: needs a CUDA DeviceContext");
  }
  if (!CudaCompiled()) return NoCudaPath("CreateCudaGradStager");
  return std::unique_ptr<GradStager>(new CudaGradStager(ctx));
}

std::unique_ptr<GradStager> CreateHostGradStager(int polls_to_land) {
  return std::make_unique<HostGradStager>(polls_to_land < 1 ? 1 : polls_to_land);
}

absl::StatusOr<std::unique_ptr<DeviceGradSync>> DeviceGradSync::Create(
    Communicator* comm, std::vector<DeviceGradTensor> tensors, std::unique_ptr<GradStager> stager,
    const BucketedAllReduceOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("DeviceGradSync: null communicator");
  if (stager == nullptr) return absl::InvalidArgumentError("DeviceGradSync: null stager");
  std::unique_ptr<DeviceGradSync> s(new DeviceGradSync());
  s->tensors_ = std::move(tensors);
  s->stager_ = std::move(stager);
  const int n = static_cast<int>(s->tensors_.size());
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const DeviceGradTensor& t = s->tensors_[i];
    if (t.data == nullptr || t.floats < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceGradSync: tensor ", i, " is empty or null"));
    }
    if (!s->index_.emplace(t.data, i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceGradSync: tensor ", i, " repeats an earlier tensor's data"));
    }
    s->offset_.push_back(total);
    total += t.floats;
  }
  if (n > 0) {
    TESSERA_ASSIGN_OR_RETURN(s->host_, s->stager_->Allocate(total));
  }
  std::vector<absl::Span<float>> spans;
  for (int i = 0; i < n; ++i) spans.push_back(absl::MakeSpan(s->host_ + s->offset_[i],
                                                             s->tensors_[i].floats));
  TESSERA_ASSIGN_OR_RETURN(s->buckets_, BucketedAllReduce::Create(comm, std::move(spans), options));
  s->marked_.assign(n, false);
  return s;
}

absl::Status DeviceGradSync::StartCopy(int i) {
  marked_[i] = true;
  const int n = static_cast<int>(copy_order_.size());
  copy_order_.push_back(i);
  return stager_->StartToHost(n, host_ + offset_[i], tensors_[i].data, tensors_[i].floats);
}

absl::Status DeviceGradSync::MarkReady(const float* device_data) {
  auto it = index_.find(device_data);
  if (it == index_.end()) {
    return absl::InvalidArgumentError("DeviceGradSync::MarkReady: unknown tensor");
  }
  if (marked_[it->second]) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceGradSync::MarkReady: tensor ",
                                                   it->second, " marked twice in one step"));
  }
  TESSERA_RETURN_IF_ERROR(StartCopy(it->second));
  return Poll();
}

absl::Status DeviceGradSync::Poll() {
  while (handed_ < static_cast<int>(copy_order_.size())) {
    TESSERA_ASSIGN_OR_RETURN(bool landed, stager_->Landed(handed_));
    if (!landed) break;
    TESSERA_RETURN_IF_ERROR(buckets_->MarkReady(copy_order_[handed_]));
    ++handed_;
  }
  return absl::OkStatus();
}

absl::Status DeviceGradSync::Finish() {
  absl::Status status;
  for (int i = 0; i < static_cast<int>(tensors_.size()) && status.ok(); ++i) {
    if (!marked_[i]) status = StartCopy(i);
  }
  if (status.ok() && !copy_order_.empty()) {
    status = stager_->WaitLanded(static_cast<int>(copy_order_.size()) - 1);
  }
  // Every copy has landed: the buckets' Finish starts those not started yet (they read the
  // staging copy) and waits for all; always called, as buckets in flight must complete on every
  // rank alike.
  absl::Status finished = buckets_->Finish();
  if (status.ok()) status = finished;
  if (status.ok()) {
    for (int i = 0; i < static_cast<int>(tensors_.size()) && status.ok(); ++i) {
      status = stager_->ToDevice(tensors_[i].data, host_ + offset_[i], tensors_[i].floats);
    }
  }
  marked_.assign(marked_.size(), false);
  copy_order_.clear();
  handed_ = 0;
  return status;
}

}  // namespace tessera
