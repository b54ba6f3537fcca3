#include "trainer/world.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/logging.h"
#include "sharding/mpi_communicator.h"
#include "sharding/peer_watchdog.h"
#include "sharding/plan.h"
#include "trainer/auto_plan.h"
#include "sharding/sharded_embedding.h"
#include "trainer/sharded_sparse_arch.h"

namespace tessera {

absl::StatusOr<World> CreateWorld(const Config& config) {
  World w;
  // A lost host, link or rank, or a stalled transport, ends the job within the watchdog's
  // timeouts instead of leaving the others in a collective (sharding/peer_watchdog.h). Started
  // once per process.
  PeerWatchdogOptions wo;
  wo.peer_timeout_s = config.sharding.peer_timeout_s;
  wo.collective_timeout_s = config.sharding.collective_timeout_s;
  wo.stall_timeout_s = config.sharding.stall_timeout_s;
  const bool watch = MpiActive() && MpiWorldSize() > 1 && !PeerWatchdogRunning();
  // The ranks' first collectives (the world communicator's MPI_Comm_dup, the watchdog's own
  // exchange) come before any heartbeat: bounded by the stall timeout instead. Seen: a rank's
  // first TCP connection to another host that never completes, and every rank waiting there.
  std::optional<StartupDeadline> first;
  if (watch) {
    first.emplace(wo, MpiWorldRank(),
                  "the world communicator's creation and the peer watchdog's addresses");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateWorldCommunicator());
  w.comm = std::move(comm);
  if (w.size() > 1) {
    if (watch) TESSERA_RETURN_IF_ERROR(StartPeerWatchdog(*w.comm, wo));
    first.reset();
    ProcessGridOptions o;
    o.group_size = config.sharding.group_size;
    if (config.sharding.plan == kAutoPlan) {
      TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, AutoPlanOnWorld(config, *w.comm));
      o.group_size = plan.group_size;
      w.auto_plan = std::move(plan);
    } else if (o.group_size == 0 && !config.sharding.plan.empty()) {
      // A plan file from tessera-plan states the group size it chose.
      TESSERA_ASSIGN_OR_RETURN(o.group_size, ReadPlanGroupSize(config.sharding.plan));
    }
    o.layout = config.sharding.layout;
    absl::StatusOr<ProcessGrid> grid = ProcessGrid::Create(w.comm, o);
    if (!grid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.source, ": sharding.group_size: ", grid.status().message()));
    }
    w.grid.emplace(std::move(grid).value());
  }
  return w;
}

std::string ShardsStayOnHost(const Config& config) {
  for (const TableConfig& t : config.model.tables) {
    if (t.storage.tier != StorageTier::kMemory && !t.storage.device_cached()) {
      return absl::StrCat("table '", t.name,
                          "' is in the RocksDB tier without storage.device_cache_rows");
    }
    if (t.storage.dtype != RowDtype::kF32) {
      return absl::StrCat("table '", t.name, "' has storage.dtype ", RowDtypeName(t.storage.dtype));
    }
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Model>> CreateModelForWorld(const Config& config, World& world,
                                                           const DeviceContext& ctx) {
  if (!world.distributed()) return Model::Create(config, ctx);
  ShardedEmbeddingOptions o;
  o.collection = EmbeddingOptionsFromConfig(config);
  if (world.auto_plan.has_value()) {
    o.plan = *world.auto_plan;
  } else if (!config.sharding.plan.empty()) {
    TESSERA_ASSIGN_OR_RETURN(o.plan, LoadShardingPlan(config.sharding.plan, o.collection.tables,
                                                      world.grid->group_size()));
  }
  ApplyPlanStorage(o.plan, &o.collection.tables);  // tables a plan moved to (or off) RocksDB
  // RocksDB-tier tables: each rank keeps its own shards' databases under the table's resolved
  // path (default tables/<name>), as <path>/rank<r>-shard<k> (sharding/sharded_embedding.h).
  for (int t = 0; t < static_cast<int>(o.collection.tables.size()); ++t) {
    TableStorage& st = o.collection.tables[t].storage;
    if (st.tier == StorageTier::kRocksDb) st.path = TableStoragePath(config, t);
  }
  o.replica_sync = config.sharding.replica_sync;
  o.sync_every = config.sharding.sync_every;
  o.sync_rows = config.sharding.sync_rows;
  o.comm_dtype = config.sharding.comm_dtype;
  o.pipeline_input_dist = config.sharding.pipeline;
  o.transport = config.sharding.transport;
  // device: cuda on several ranks: the shards in HBM, their payloads over sharding.transport,
  // when the collection supports the config there (ShardsStayOnHost); otherwise the shards stay
  // in host memory (their all-to-alls over MPI, as on the CPU) with each rank's dense model on
  // its GPU, the pooled rows and their gradients crossing PCIe per step
  // (trainer/sharded_sparse_arch.h).
  DeviceContext shard_ctx = ctx;
  if (ctx.is_cuda()) {
    const std::string why = ShardsStayOnHost(config);
    if (!why.empty()) {
      shard_ctx = DeviceContext::Cpu();
      if (world.rank() == 0) {
        TESSERA_LOG(INFO) << "device: cuda: the embedding shards stay in host memory (" << why
                          << "); the dense model is on the GPU";
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(auto sharded,
                           ShardedEmbeddingCollection::Create(o, *world.grid, shard_ctx));
  if (ctx.is_cuda() && world.rank() == 0 && shard_ctx.is_cuda()) {
    TESSERA_LOG(INFO) << "device: cuda: embedding shards in device memory, payloads over "
                      << sharded->payload_backend();
  }
  auto sparse = std::make_unique<ShardedSparseArch>(std::move(sharded), ctx);
  return Model::Create(config, ctx, std::move(sparse), world.comm.get());
}

}  // namespace tessera
