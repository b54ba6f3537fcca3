// CreateNcclCommunicator for builds without the CUDA path (the real one is
// nccl_communicator_cuda.cu).
#include "sharding/nccl_communicator.h"

#if !TESSERA_HAVE_CUDA
namespace tessera {

bool NcclCompiled() { return false; }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<Communicator>, const NcclCommunicatorOptions&) {
  return absl::UnimplementedError(
      "the NCCL communicator needs the CUDA path; this build has none (TESSERA_CUDA=OFF)");
}

}  // namespace tessera
#endif
