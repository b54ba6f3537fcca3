// StagedCommunicator and its CUDA copier (see staged_communicator.h). Host code only: the copies
// go through core/cuda_context.h and core/pinned.h, which exist in every build (returning
// Unimplemented without the CUDA path), so this file needs no #if and no .cu twin.
#include "sharding/staged_communicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/pinned.h"
#include "core/status.h"

namespace tessera {
namespace {

class CudaStagingCopier final : public StagingCopier {
 public:
  explicit CudaStagingCopier(const DeviceContext& ctx) : ctx_(ctx) {}

  absl::StatusOr<void*> Staging(int which, size_t bytes) override {
    PinnedBuffer& buf = buffers_[which == 0 ? 0 : 1];
    TESSERA_RETURN_IF_ERROR(buf.Reserve(std::max<size_t>(bytes, 1)));
    return buf.data();
  }
  absl::Status ToHost(void* host, const void* device, size_t bytes) override {
    return CudaCopyToHost(ctx_, host, device, bytes);
  }
  absl::Status ToDevice(void* device, const void* host, size_t bytes) override {
    return CudaCopyToDevice(ctx_, device, host, bytes);
  }
  absl::Status Finish() override { return CudaSynchronize(ctx_); }
  std::unique_ptr<StagingCopier> Clone() const override {
    return std::make_unique<CudaStagingCopier>(ctx_);
  }

 private:
  DeviceContext ctx_;
  PinnedBuffer buffers_[2];
};

}  // namespace

absl::StatusOr<std::unique_ptr<StagingCopier>> CreateCudaStagingCopier(const DeviceContext& ctx) {
  if (!CudaCompiled()) {
    return absl::UnimplementedError(
        "StagedCommunicator: this build of Tessera has no CUDA path (TESSERA_CUDA=OFF)");
  }
  if (!ctx.is_cuda()) {
    return absl::InvalidArgumentError(
        "StagedCommunicator: the copier needs a CUDA DeviceContext (host buffers need no "
        "staging: use the inner communicator)");
  }
  return std::unique_ptr<StagingCopier>(new CudaStagingCopier(ctx));
}

absl::StatusOr<StagingLayout> PlanStaging(absl::Span<const int64_t> bytes,
                                          absl::Span<const int64_t> displs) {
  if (bytes.size() != displs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("PlanStaging: ", bytes.size(), " counts and ",
                                                   displs.size(), " displacements"));
  }
  StagingLayout layout;
  layout.staging_displs.resize(bytes.size());
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (bytes[r] < 0 || displs[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("PlanStaging: rank ", r, " has ", bytes[r],
                                                     " bytes at displacement ", displs[r]));
    }
    layout.staging_displs[r] = layout.staging_bytes;
    if (bytes[r] == 0) continue;
    StagingRun* last = layout.runs.empty() ? nullptr : &layout.runs.back();
    if (last != nullptr && last->device_offset + last->bytes == displs[r]) {
      last->bytes += bytes[r];  // follows the previous block in both buffers
    } else {
      layout.runs.push_back({displs[r], layout.staging_bytes, bytes[r]});
    }
    layout.staging_bytes += bytes[r];
  }
  return layout;
}

absl::StatusOr<std::unique_ptr<StagedCommunicator>> StagedCommunicator::Create(
    std::unique_ptr<Communicator> inner, std::unique_ptr<StagingCopier> copier) {
  if (inner == nullptr || copier == nullptr) {
    return absl::InvalidArgumentError("StagedCommunicator: null inner communicator or copier");
  }
  return std::unique_ptr<StagedCommunicator>(
      new StagedCommunicator(std::move(inner), std::move(copier)));
}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> inner,
                                       std::unique_ptr<StagingCopier> copier)
    : inner_(std::move(inner)), copier_(std::move(copier)) {
  InitWorldRanks(inner_->world_ranks());
}

absl::Status StagedCommunicator::CopyIn(const StagingLayout& layout, const void* device,
                                        char* staging) {
  const char* src = static_cast<const char*>(device);
  for (const StagingRun& run : layout.runs) {
    TESSERA_RETURN_IF_ERROR(copier_->ToHost(staging + run.staging_offset,
                                            src + run.device_offset,
                                            static_cast<size_t>(run.bytes)));
  }
  return absl::OkStatus();
}

absl::Status StagedCommunicator::CopyOut(const StagingLayout& layout, const char* staging,
                                         void* device) {
  char* dst = static_cast<char*>(device);
  for (const StagingRun& run : layout.runs) {
    TESSERA_RETURN_IF_ERROR(copier_->ToDevice(dst + run.device_offset,
                                              staging + run.staging_offset,
                                              static_cast<size_t>(run.bytes)));
  }
  return absl::OkStatus();
}

absl::Status StagedCommunicator::DoAllToAllV(const void* send,
                                             absl::Span<const int64_t> send_bytes,
                                             absl::Span<const int64_t> send_displs, void* recv,
                                             absl::Span<const int64_t> recv_bytes,
                                             absl::Span<const int64_t> recv_displs) {
  TESSERA_ASSIGN_OR_RETURN(const StagingLayout in, PlanStaging(send_bytes, send_displs));
  TESSERA_ASSIGN_OR_RETURN(const StagingLayout out, PlanStaging(recv_bytes, recv_displs));
  TESSERA_ASSIGN_OR_RETURN(void* s, copier_->Staging(0, in.staging_bytes));
  TESSERA_ASSIGN_OR_RETURN(void* r, copier_->Staging(1, out.staging_bytes));
  TESSERA_RETURN_IF_ERROR(CopyIn(in, send, static_cast<char*>(s)));
  TESSERA_RETURN_IF_ERROR(
      inner_->AllToAllV(s, send_bytes, in.staging_displs, r, recv_bytes, out.staging_displs));
  TESSERA_RETURN_IF_ERROR(CopyOut(out, static_cast<const char*>(r), recv));
  return copier_->Finish();
}

absl::Status StagedCommunicator::DoAllReduce(void* data, int64_t count, CommDType dtype,
                                             ReduceOp op) {
  const size_t bytes = static_cast<size_t>(count) * CommDTypeSize(dtype);
  TESSERA_ASSIGN_OR_RETURN(void* s, copier_->Staging(0, bytes));
  if (bytes > 0) TESSERA_RETURN_IF_ERROR(copier_->ToHost(s, data, bytes));
  switch (dtype) {
    case CommDType::kF32:
      TESSERA_RETURN_IF_ERROR(inner_->AllReduce(static_cast<float*>(s), count, op));
      break;
    case CommDType::kF64:
      TESSERA_RETURN_IF_ERROR(inner_->AllReduce(static_cast<double*>(s), count, op));
      break;
    case CommDType::kI64:
      TESSERA_RETURN_IF_ERROR(inner_->AllReduce(static_cast<int64_t*>(s), count, op));
      break;
    default:
      return absl::InvalidArgumentError("StagedCommunicator: all-reduce of bytes (kU8)");
  }
  if (bytes > 0) TESSERA_RETURN_IF_ERROR(copier_->ToDevice(data, s, bytes));
  return copier_->Finish();
}

absl::Status StagedCommunicator::DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                                              absl::Span<const int64_t> recv_bytes,
                                              absl::Span<const int64_t> recv_displs) {
  TESSERA_ASSIGN_OR_RETURN(const StagingLayout out, PlanStaging(recv_bytes, recv_displs));
  TESSERA_ASSIGN_OR_RETURN(void* s, copier_->Staging(0, static_cast<size_t>(send_bytes)));
  TESSERA_ASSIGN_OR_RETURN(void* r, copier_->Staging(1, out.staging_bytes));
  if (send_bytes > 0) {
    TESSERA_RETURN_IF_ERROR(copier_->ToHost(s, send, static_cast<size_t>(send_bytes)));
  }
  TESSERA_RETURN_IF_ERROR(inner_->AllGatherV(s, send_bytes, r, recv_bytes, out.staging_displs));
  TESSERA_RETURN_IF_ERROR(CopyOut(out, static_cast<const char*>(r), recv));
  return copier_->Finish();
}

absl::Status StagedCommunicator::DoBroadcast(void* data, int64_t bytes, int root) {
  const size_t n = static_cast<size_t>(bytes);
  TESSERA_ASSIGN_OR_RETURN(void* s, copier_->Staging(0, n));
  const bool is_root = rank() == root;
  if (is_root && n > 0) TESSERA_RETURN_IF_ERROR(copier_->ToHost(s, data, n));
  TESSERA_RETURN_IF_ERROR(inner_->Broadcast(s, bytes, root));
  if (!is_root && n > 0) TESSERA_RETURN_IF_ERROR(copier_->ToDevice(data, s, n));
  return copier_->Finish();
}

absl::Status StagedCommunicator::DoBarrier() { return inner_->Barrier(); }

absl::StatusOr<std::unique_ptr<Communicator>> StagedCommunicator::DoSplit(int color, int key) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, inner_->Split(color, key));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<StagedCommunicator> staged,
                           Create(std::move(sub), copier_->Clone()));
  return std::unique_ptr<Communicator>(std::move(staged));
}

}  // namespace tessera
