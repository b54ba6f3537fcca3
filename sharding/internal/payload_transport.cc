// CreatePayloadCommunicator (payload_transport.h).
#include "sharding/internal/payload_transport.h"

#include <unistd.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/nccl_communicator.h"
#include "sharding/staged_communicator.h"

namespace tessera::internal {
namespace {

// True when some two ranks of `world` run on the same GPU of the same host.
absl::StatusOr<bool> RanksShareAGpu(const DeviceContext& ctx, Communicator& world) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const int64_t mine[2] = {static_cast<int64_t>(std::hash<std::string>{}(host) >> 1),
                           static_cast<int64_t>(ctx.cuda_device)};
  const int p = world.size();
  std::vector<int64_t> all(2 * p);
  std::vector<int64_t> bytes(p, 16), displs(p);
  for (int r = 0; r < p; ++r) displs[r] = 16 * r;
  TESSERA_RETURN_IF_ERROR(world.AllGatherV(mine, 16, all.data(), bytes, displs));
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int r = 0; r < p; ++r) {
    if (!seen.insert({all[2 * r], all[2 * r + 1]}).second) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> CreatePayloadCommunicator(
    const DeviceContext& ctx, PayloadTransport transport, Communicator& world,
    const std::shared_ptr<Communicator>& group) {
  if (!ctx.is_cuda()) return group;
  if (transport == PayloadTransport::kAuto) {
    TESSERA_ASSIGN_OR_RETURN(const bool shared, RanksShareAGpu(ctx, world));
    transport = NcclCompiled() && !shared ? PayloadTransport::kNccl : PayloadTransport::kMpi;
  }
  // A channel of its own: the payload collectives never interleave with the group's host ones.
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> dup, group->Split(0, group->rank()));
  if (transport == PayloadTransport::kNccl) {
    NcclCommunicatorOptions o;
    o.cuda_device = ctx.cuda_device;
    o.stream = ctx.compute_stream;
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl,
                             CreateNcclCommunicator(std::shared_ptr<Communicator>(std::move(dup)),
                                                    o));
    return std::shared_ptr<Communicator>(std::move(nccl));
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<StagingCopier> copier, CreateCudaStagingCopier(ctx));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<StagedCommunicator> staged,
                           StagedCommunicator::Create(std::move(dup), std::move(copier)));
  return std::shared_ptr<Communicator>(std::move(staged));
}

}  // namespace tessera::internal
