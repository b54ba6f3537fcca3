// The bridge from a training config to the planner (planner/): the planner's inputs from a
// Config, the machine's memory per rank, the shipped profiles, and `sharding.plan: auto` (the
// plan made at start-up). tessera-plan uses the same functions, so a plan file written by it and
// an `auto` plan are the same bytes for the same inputs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/inputs.h"
#include "planner/profile.h"
#include "sharding/communicator.h"
#include "sharding/plan.h"
#include "trainer/config.h"
#include "trainer/profile_cache.h"

namespace tessera {

// The planner's inputs for `config` on `topology` (world size, ranks per node, memory per rank):
// tables with their pooling (data.synthetic.pooling; 1 for Criteo files), Zipf exponent
// (data.synthetic.zipf_exponent; 1.05 for files unless measured stats are added), optimizer
// state per row, the dense model, batch per rank (data.batch_size, which is per rank: docs/CONFIG.md),
// comm dtype, replica
// sync, pipelining and the fixed group size (sharding.group_size; 0 = the planner chooses).
// A table whose config says storage rocksdb keeps it.
planner::PlanInputs PlanInputsFromConfig(const Config& config, const planner::Topology& topology);

// This machine's memory per rank: host = MemTotal (/proc/meminfo) / ranks_per_node, disk = the
// free space of `disk_dir` (or its nearest existing parent) / ranks_per_node, device = 0.
planner::MemoryLimits MachineMemoryPerRank(int ranks_per_node, const std::string& disk_dir);

// Ranks on this node as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
// SLURM_NTASKS_PER_NODE), else `world_size` (one node).
int LauncherRanksPerNode(int world_size);

// The profiles shipped in planner/profiles/ (compiled in): "cpu_default", "h200_cluster", and
// whatever else lies there. `name_or_path`: `auto` (this machine's profile, cached or calibrated
// once: trainer/profile_cache.h; `config_path`'s layer shapes when it calibrates), a shipped
// name, or a profile file's path (a value with '/' or ending .yaml/.json); NotFound listing the
// shipped names for any other value. ResolveProfile also says where the profile came from and
// which fields of this machine's fingerprint differ from the profile's.
absl::StatusOr<ResolvedProfile> ResolveProfile(const std::string& name_or_path,
                                               const std::string& config_path = "");
absl::StatusOr<planner::MachineProfile> LoadProfileByNameOrPath(
    const std::string& name_or_path, const std::string& config_path = "");
std::vector<std::string> ShippedProfileNames();

// `sharding.plan: auto`: the plan for `config` on a world of `world_size` ranks from the profile
// `sharding.profile` names (default `auto`: this machine's; deterministic: every rank computes
// the same plan). Its errors (unknown profile name, unreadable or bad profile file, a failed
// calibration) name sharding.profile; a profile measured on another machine is planned with,
// and a line on stderr names the fingerprint fields that differ. The plan's storage
// choices are applied with ApplyPlanStorage.
absl::StatusOr<ShardingPlan> AutoPlan(const Config& config, int world_size);
inline constexpr char kAutoPlan[] = "auto";
// AutoPlan on world rank 0, its plan (or its error) broadcast to every rank as the plan file's
// bytes: collective; every rank returns the same plan or the same error. While rank 0 plans
// (and may calibrate), the others sleep between tests of a nonblocking all-reduce.
absl::StatusOr<ShardingPlan> AutoPlanOnWorld(const Config& config, Communicator& world);

// Tables the plan moves to (or from) the RocksDB tier get that storage (cache_rows from the
// plan; the path stays the config's).
void ApplyPlanStorage(const ShardingPlan& plan, std::vector<TableConfig>* tables);

}  // namespace tessera
