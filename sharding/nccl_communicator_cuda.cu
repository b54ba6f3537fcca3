// NCCL backend (see nccl_communicator.h). Compiled only with the CUDA path.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/nccl_communicator.h"

namespace tessera {
namespace {

absl::Status CudaErr(const char* call, cudaError_t e) {
  return absl::InternalError(absl::StrCat(call, " failed: ", cudaGetErrorString(e)));
}
absl::Status NcclErr(const char* call, ncclResult_t r) {
  return absl::InternalError(absl::StrCat(call, " failed: ", ncclGetErrorString(r)));
}
#define TESSERA_CUDA_CALL(x)                            \
  do {                                                  \
    cudaError_t tessera_e_ = (x);                       \
    if (tessera_e_ != cudaSuccess) return CudaErr(#x, tessera_e_); \
  } while (0)
#define TESSERA_NCCL_CALL(x)                            \
  do {                                                  \
    ncclResult_t tessera_r_ = (x);                      \
    if (tessera_r_ != ncclSuccess) return NcclErr(#x, tessera_r_); \
  } while (0)
// Inside ncclGroupStart/ncclGroupEnd: remembers the first failure in `group_err` and goes on, so
// the group is always closed (returning from inside it would leave the communicator unusable).
#define TESSERA_NCCL_GROUP_CALL(group_err, x)                                    \
  do {                                                                             \
    const ncclResult_t tessera_r_ = (x);                                           \
    if (tessera_r_ != ncclSuccess) (group_err).Update(NcclErr(#x, tessera_r_));    \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      std::shared_ptr<Communicator> boot, const NcclCommunicatorOptions& options) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
      cudaGetLastError();
      return absl::FailedPreconditionError("NCCL communicator: no GPU is visible");
    }
    std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
    c->boot_ = std::move(boot);
    c->device_ = options.cuda_device >= 0 ? options.cuda_device : c->boot_->rank() % ndev;
    TESSERA_CUDA_CALL(cudaSetDevice(c->device_));
    if (options.stream != nullptr) {
      c->stream_ = static_cast<cudaStream_t>(options.stream);
    } else {
      TESSERA_CUDA_CALL(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking));
      c->own_stream_ = true;
    }
    ncclUniqueId id;
    if (c->boot_->rank() == 0) TESSERA_NCCL_CALL(ncclGetUniqueId(&id));
    TESSERA_RETURN_IF_ERROR(c->boot_->Broadcast(&id, sizeof(id), 0));
    TESSERA_NCCL_CALL(ncclCommInitRank(&c->comm_, c->boot_->size(), id, c->boot_->rank()));
    c->options_ = options;
    c->options_.cuda_device = c->device_;
    c->InitWorldRanks(c->boot_->world_ranks());
    return std::unique_ptr<Communicator>(std::move(c));
  }

  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (own_stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return boot_->rank(); }
  int size() const override { return boot_->size(); }
  std::string backend() const override { return "nccl"; }

 protected:
  absl::Status DoAllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                           absl::Span<const int64_t> send_displs, void* recv,
                           absl::Span<const int64_t> recv_bytes,
                           absl::Span<const int64_t> recv_displs) override {
    TESSERA_CUDA_CALL(cudaSetDevice(device_));
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    TESSERA_NCCL_CALL(ncclGroupStart());
    absl::Status group;
    for (int p = 0; p < size(); ++p) {
      if (send_bytes[p] > 0) {
        TESSERA_NCCL_GROUP_CALL(group, ncclSend(s + send_displs[p], send_bytes[p], ncclUint8, p,
                                                comm_, stream_));
      }
      if (recv_bytes[p] > 0) {
        TESSERA_NCCL_GROUP_CALL(group, ncclRecv(r + recv_displs[p], recv_bytes[p], ncclUint8, p,
                                                comm_, stream_));
      }
    }
    TESSERA_NCCL_CALL(ncclGroupEnd());
    TESSERA_RETURN_IF_ERROR(group);
    return Sync();
  }

  absl::Status DoAllReduce(void* data, int64_t count, CommDType dtype, ReduceOp op) override {
    if (count == 0) return absl::OkStatus();
    TESSERA_CUDA_CALL(cudaSetDevice(device_));
    ncclDataType_t t = ncclFloat32;
    switch (dtype) {
      case CommDType::kF32: t = ncclFloat32; break;
      case CommDType::kF64: t = ncclFloat64; break;
      case CommDType::kI64: t = ncclInt64; break;
      case CommDType::kU8: t = ncclUint8; break;
    }
    ncclRedOp_t o = op == ReduceOp::kAvg ? ncclAvg : ncclSum;
    TESSERA_NCCL_CALL(ncclAllReduce(data, data, count, t, o, comm_, stream_));
    return Sync();
  }

  absl::Status DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                            absl::Span<const int64_t> recv_bytes,
                            absl::Span<const int64_t> recv_displs) override {
    TESSERA_CUDA_CALL(cudaSetDevice(device_));
    char* r = static_cast<char*>(recv);
    TESSERA_NCCL_CALL(ncclGroupStart());
    absl::Status group;
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      if (send_bytes > 0) {
        TESSERA_NCCL_GROUP_CALL(group, ncclSend(send, send_bytes, ncclUint8, p, comm_, stream_));
      }
      if (recv_bytes[p] > 0) {
        TESSERA_NCCL_GROUP_CALL(group, ncclRecv(r + recv_displs[p], recv_bytes[p], ncclUint8, p,
                                                comm_, stream_));
      }
    }
    TESSERA_NCCL_CALL(ncclGroupEnd());
    TESSERA_RETURN_IF_ERROR(group);
    if (send_bytes > 0 && r + recv_displs[rank()] != send) {
      TESSERA_CUDA_CALL(cudaMemcpyAsync(r + recv_displs[rank()], send, send_bytes,
                                        cudaMemcpyDeviceToDevice, stream_));
    }
    return Sync();
  }

  absl::Status DoBroadcast(void* data, int64_t bytes, int root) override {
    if (bytes == 0) return absl::OkStatus();
    TESSERA_CUDA_CALL(cudaSetDevice(device_));
    TESSERA_NCCL_CALL(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
    return Sync();
  }

  absl::Status DoBarrier() override {
    TESSERA_RETURN_IF_ERROR(Sync());
    return boot_->Barrier();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, boot_->Split(color, key));
    NcclCommunicatorOptions o = options_;
    o.stream = own_stream_ ? nullptr : stream_;
    return Create(std::shared_ptr<Communicator>(std::move(sub)), o);
  }

 private:
  NcclCommunicator() = default;
  absl::Status Sync() {
    TESSERA_CUDA_CALL(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  std::shared_ptr<Communicator> boot_;
  NcclCommunicatorOptions options_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool NcclCompiled() { return true; }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<Communicator> bootstrap, const NcclCommunicatorOptions& options) {
  return NcclCommunicator::Create(std::move(bootstrap), options);
}

}  // namespace tessera
