// Config -> planner inputs, machine memory, shipped profiles, `sharding.plan: auto`.
#include "trainer/auto_plan.h"

#include <sys/statvfs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "planner/planner.h"
#include "planner/shipped_profiles.h"
#include "trainer/profile_cache.h"

namespace tessera {

planner::PlanInputs PlanInputsFromConfig(const Config& config, const planner::Topology& topology) {
  planner::PlanInputs in;
  in.source = config.source.empty() ? "config" : config.source;
  in.topology = topology;
  in.topology.groups_contiguous = config.sharding.layout == GridLayout::kGroupsContiguous;
  in.group_size = config.sharding.group_size;
  const std::vector<int64_t>& pooling = config.data.synthetic.pooling;
  const bool synthetic = config.data.format == DataFormat::kSynthetic;
  for (const TableConfig& t : config.model.tables) {
    planner::PlanTable p;
    p.config = t;
    p.num_features = std::max<int>(1, static_cast<int>(t.features.size()));
    double ids = 0;
    for (int f : t.features) {
      int64_t l = 1;
      if (synthetic && !pooling.empty()) {
        l = pooling.size() == 1 ? pooling[0] : pooling[std::min<size_t>(f, pooling.size() - 1)];
      }
      ids += static_cast<double>(l);
    }
    p.ids_per_bag = t.features.empty() ? 1 : ids / static_cast<double>(t.features.size());
    p.zipf_exponent = synthetic ? config.data.synthetic.zipf_exponent : 1.05;
    p.storage_fixed = t.storage.tier == StorageTier::kRocksDb;
    in.tables.push_back(std::move(p));
  }
  const ModelConfig& m = config.model;
  in.dense.num_dense = m.num_dense;
  in.dense.bottom_mlp = m.bottom_mlp;
  in.dense.top_mlp = m.top_mlp;
  in.dense.interaction = m.interaction == InteractionType::kDcn ? planner::Interaction::kDcn
                                                                : planner::Interaction::kDot;
  in.dense.dcn_num_layers = m.dcn_num_layers;
  in.dense.dcn_low_rank = m.dcn_low_rank;
  in.dense.embedding_dim = m.embedding_dim;
  switch (config.optimizer.dense.type) {
    case DenseOptimizerType::kSgd:
      in.dense.optimizer_state_floats = 0;
      break;
    case DenseOptimizerType::kAdagrad:
      in.dense.optimizer_state_floats = 1;
      break;
    case DenseOptimizerType::kAdam:
      in.dense.optimizer_state_floats = 2;
      break;
  }
  planner::StepSettings& s = in.step;
  // data.batch_size is per rank (docs/CONFIG.md): each of the T ranks trains that many samples.
  s.batch_per_rank = std::max<int64_t>(1, config.data.batch_size);
  s.payload_bytes = config.sharding.comm_dtype == PayloadDType::kF32 ? 4 : 2;
  s.replica_sync = config.sharding.replica_sync == ReplicaSync::kAverage
                       ? planner::ReplicaSync::kAverage
                       : planner::ReplicaSync::kExact;
  s.sync_every = config.sharding.sync_every;
  s.sync_all_rows = config.sharding.sync_rows == SyncRows::kAll;
  s.pipeline = config.sharding.pipeline;
  s.bucket_bytes = config.sharding.bucket_bytes;
  switch (config.optimizer.embedding.type) {
    case RowOptimizerType::kSgd:
      s.row_state_fixed = 0;
      s.row_state_per_col = 0;
      break;
    case RowOptimizerType::kRowWiseAdagrad:
      s.row_state_fixed = 1;
      s.row_state_per_col = 0;
      break;
    case RowOptimizerType::kAdam:
      s.row_state_fixed = 0;
      s.row_state_per_col = 2;
      break;
  }
  s.steps = config.train.steps;
  s.threads = config.threads;
  s.device = DeviceName(config.device);
  return in;
}

planner::MemoryLimits MachineMemoryPerRank(int ranks_per_node, const std::string& disk_dir) {
  planner::MemoryLimits m;
  const int r = std::max(1, ranks_per_node);
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") {
      m.host = kb * 1024 / r;
      break;
    }
  }
  std::filesystem::path p =
      disk_dir.empty() ? std::filesystem::path(".") : std::filesystem::path(disk_dir);
  std::error_code ec;
  p = std::filesystem::absolute(p, ec);
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  struct statvfs st;
  if (!p.empty() && statvfs(p.c_str(), &st) == 0) {
    m.disk = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize) / r;
  }
  return m;
}

int LauncherRanksPerNode(int world_size) {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var)) {
      int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return std::max(1, world_size);
}

std::vector<std::string> ShippedProfileNames() {
  std::vector<std::string> out;
  for (const auto& [name, text] : planner::ShippedProfiles()) out.push_back(name);
  return out;
}

absl::StatusOr<ResolvedProfile> ResolveProfile(const std::string& name_or_path,
                                               const std::string& config_path) {
  if (name_or_path == kAutoProfile) return AutoProfile(config_path);
  ResolvedProfile r;
  bool shipped = false;
  for (const auto& [name, text] : planner::ShippedProfiles()) {
    if (name == name_or_path) {
      TESSERA_ASSIGN_OR_RETURN(r.profile, planner::ParseMachineProfile(
                                              text, absl::StrCat("planner/profiles/", name, ".yaml")));
      r.origin = absl::StrCat("shipped ", name);
      shipped = true;
    }
  }
  if (!shipped) {
    const bool file = name_or_path.find('/') != std::string::npos ||
                      absl::EndsWith(name_or_path, ".yaml") ||
                      absl::EndsWith(name_or_path, ".json");
    if (!file) {
      return absl::NotFoundError(absl::StrCat(
          "'", name_or_path, "' is neither auto (this machine's profile), a shipped profile (",
          absl::StrJoin(ShippedProfileNames(), ", "),
          ") nor a profile file (a path or *.yaml, *.json)"));
    }
    TESSERA_ASSIGN_OR_RETURN(r.profile, planner::LoadMachineProfile(name_or_path));
    r.origin = absl::StrCat("file ", name_or_path);
  }
  CheckFingerprint(&r);
  return r;
}

absl::StatusOr<planner::MachineProfile> LoadProfileByNameOrPath(const std::string& name_or_path,
                                                                const std::string& config_path) {
  TESSERA_ASSIGN_OR_RETURN(ResolvedProfile r, ResolveProfile(name_or_path, config_path));
  return std::move(r.profile);
}

absl::StatusOr<ShardingPlan> AutoPlan(const Config& config, int world_size) {
  absl::StatusOr<ResolvedProfile> loaded = ResolveProfile(config.sharding.profile, config.source);
  if (!loaded.ok()) {
    return absl::Status(
        loaded.status().code(),
        absl::StrCat(config.source, ": sharding.profile: ", loaded.status().message()));
  }
  if (!loaded->differences.empty()) {
    std::fprintf(stderr, "sharding.plan: auto: %s\n", ProfileProvenance(*loaded).c_str());
  }
  planner::MachineProfile profile = std::move(loaded->profile);
  planner::Topology topo;
  topo.world_size = world_size;
  topo.ranks_per_node = LauncherRanksPerNode(world_size);
  topo.memory = MachineMemoryPerRank(topo.ranks_per_node, config.output.dir);
  topo.transport = "mpi";
  planner::PlanInputs in = PlanInputsFromConfig(config, topo);
  absl::StatusOr<planner::PlanResult> r =
      planner::PlanSharding(in, profile, planner::PlannerOptions{});
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat("sharding.plan: auto: ", r.status().message()));
  }
  return std::move(r->plan);
}

void ApplyPlanStorage(const ShardingPlan& plan, std::vector<TableConfig>* tables) {
  for (const TablePlan& tp : plan.tables) {
    if (!tp.storage.set) continue;
    for (TableConfig& t : *tables) {
      if (t.name != tp.table) continue;
      t.storage.tier = tp.storage.tier;
      if (tp.storage.tier == StorageTier::kRocksDb) {
        t.storage.cache_rows = tp.storage.cache_rows;
        t.storage.cache_bytes = 0;
      }
    }
  }
}

}  // namespace tessera

namespace tessera {

absl::StatusOr<ShardingPlan> AutoPlanOnWorld(const Config& config, Communicator& world) {
  // Rank 0 plans; [status code, text length, group size] then the text (the plan file or the error)
  // go to every rank, so all agree even if their machines differ.
  std::string text;
  int64_t header[3] = {0, 0, 0};
  {
    // Rank 0 may calibrate this machine first (`sharding.profile: auto` without a cached
    // profile, about a minute): the other ranks wait in a nonblocking all-reduce tested every
    // 20 ms, not in a blocking call (Open MPI busy-polls there), so the calibration has their
    // cores.
    float ready = 0;
    std::optional<absl::StatusOr<ShardingPlan>> mine;
    if (world.rank() == 0) mine = AutoPlan(config, world.size());
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<PendingCollective> wait,
                             world.StartAllReduce(&ready, 1, ReduceOp::kSum));
    for (;;) {
      TESSERA_ASSIGN_OR_RETURN(bool done, wait->Test());
      if (done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (world.rank() == 0) {
      if (mine->ok()) {
        text = ShardingPlanToYaml(**mine);
        header[2] = (*mine)->group_size;
      } else {
        header[0] = static_cast<int64_t>(mine->status().code());
        text = std::string(mine->status().message());
      }
      header[1] = static_cast<int64_t>(text.size());
    }
  }
  TESSERA_RETURN_IF_ERROR(world.Broadcast(header, sizeof(header), 0));
  text.resize(static_cast<size_t>(header[1]));
  if (header[1] > 0) TESSERA_RETURN_IF_ERROR(world.Broadcast(text.data(), header[1], 0));
  if (header[0] != 0) return absl::Status(static_cast<absl::StatusCode>(header[0]), text);
  absl::StatusOr<ShardingPlan> plan = ParseShardingPlan(
      text, "sharding.plan: auto", config.model.tables, static_cast<int>(header[2]));
  if (!plan.ok()) return plan.status();
  return plan;
}

}  // namespace tessera
