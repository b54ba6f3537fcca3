// World: the processes a run spans, as the trainer sees them. A single process gets a world of
// one and no grid; under mpirun the world is MPI's, split into the 2D process grid
// (sharding.group_size ranks per sharding group, M = T / N replica groups), and the tables become
// a ShardedEmbeddingCollection placed by sharding.plan (or the default plan).
//
// Everything here is collective over the world: every rank calls it in the same order.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "sharding/communicator.h"
#include "sharding/plan.h"
#include "sharding/process_grid.h"
#include "trainer/config.h"
#include "trainer/model.h"

namespace tessera {

struct World {
  std::shared_ptr<Communicator> comm;  // the world (size 1 when single-process)
  std::optional<ProcessGrid> grid;     // set when comm->size() > 1
  // sharding.plan: auto: the plan made at start-up (rank 0 plans, every rank gets its bytes);
  // its group size made the grid.
  std::optional<ShardingPlan> auto_plan;

  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
  bool chief() const { return rank() == 0; }
  bool distributed() const { return size() > 1; }
};

// The MPI world when MPI is initialised (sharding/mpi_communicator.h), else a world of one; with
// more than one rank, the process grid from config.sharding. InvalidArgument (the same on every
// rank) when the group size does not divide the world.
absl::StatusOr<World> CreateWorld(const Config& config);

// The Model for `world`: local tables for a world of one, sharded tables otherwise, with the
// model's gradient scaling and dense all-reduce attached to `world.comm`. With a CUDA ctx and
// several ranks the shards are in device memory (sharding.transport carries their payloads)
// unless ShardsStayOnHost names a reason, in which case they stay in host memory and only the
// dense model is on the GPU (rank 0 logs which).
absl::StatusOr<std::unique_ptr<Model>> CreateModelForWorld(const Config& config, World& world,
                                                           const DeviceContext& ctx);
// Why a device: cuda model's shards must stay in host memory (what CUDA shards do not support
// yet: a RocksDB-tier table without an HBM cache, a 16-bit table), or ""
// when they can be on the GPU.
std::string ShardsStayOnHost(const Config& config);

}  // namespace tessera
