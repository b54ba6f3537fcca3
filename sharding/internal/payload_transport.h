// The sharding group's communicator for payloads in the shards' memory (ShardLayout::payload):
// the group itself for CPU shards; for CUDA shards the transport ShardedEmbeddingOptions::
// transport names (sharding/sharded_embedding.h, PayloadTransport). Private to sharding/.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "sharding/communicator.h"
#include "sharding/sharded_embedding.h"

namespace tessera::internal {

// Collective over `world` (kAuto: an all-gather of every rank's (host, GPU) pair, so all ranks
// choose alike) and over `group` (a duplicate of it is split off for the payloads). kAuto picks
// kNccl when NCCL is compiled in and no two ranks of the world share a GPU of one host, else
// kMpi. kMpi: StagedCommunicator (pinned host staging) over the duplicate; kNccl: an NCCL
// communicator bootstrapped over it, on ctx's compute stream. Returns the communicator; the
// choice is its backend() ("mpi+staged", "nccl"). Errors: Unimplemented without the CUDA path,
// the communicators' own (NCCL refusing two ranks on one GPU is Internal naming the call).
absl::StatusOr<std::shared_ptr<Communicator>> CreatePayloadCommunicator(
    const DeviceContext& ctx, PayloadTransport transport, Communicator& world,
    const std::shared_ptr<Communicator>& group);

}  // namespace tessera::internal
