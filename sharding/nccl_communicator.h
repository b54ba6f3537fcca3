// The NCCL backend of Communicator: collectives on device memory (every buffer passed to it is a
// CUDA device pointer on this rank's GPU). Bootstrapped over a host communicator (MPI): rank 0
// makes the ncclUniqueId and broadcasts it. All-to-all is grouped ncclSend/ncclRecv; all-gather-v
// is grouped send/recv too (NCCL has no v-collectives).
//
// Every call is synchronous: it enqueues on the communicator's stream and waits for it, so the
// buffers may be reused on return. Sums use NCCL's own reduction order, which is fixed for a fixed
// topology but is not rank order; results are the same on every rank.
// Split splits the bootstrap communicator, then starts a new NCCL communicator over it.
//
// In a build without the CUDA path CreateNcclCommunicator returns Unimplemented.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "sharding/communicator.h"

namespace tessera {

struct NcclCommunicatorOptions {
  // CUDA device of this rank. Default: -1 = bootstrap rank modulo the visible device count.
  int cuda_device = -1;
  // cudaStream_t to run on; nullptr = a stream of its own. Default: nullptr.
  void* stream = nullptr;
};

// True when this binary has the NCCL backend compiled in.
bool NcclCompiled();

// Collective over `bootstrap` (a host communicator; the NCCL communicator keeps it). Returns
// Unimplemented without the CUDA path, FailedPrecondition when no GPU is visible, Internal for
// CUDA or NCCL failures (naming the call).
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<Communicator> bootstrap, const NcclCommunicatorOptions& options);

}  // namespace tessera
