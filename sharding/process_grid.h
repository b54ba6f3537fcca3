// ProcessGrid: the world of T ranks seen as M sharding groups of N ranks each (T = M x N).
// A sharding group holds one full copy of the sharded embedding tables, split over its N ranks
// (its all-to-alls never leave the group); the M ranks that hold the same shard, one per group,
// form a replica group (replica sync). Dense parameters are data-parallel over the world.
//
// Two layouts (both from the 2D sparse parallelism paper and TorchRec's DMPCollection):
//   kReplicasAdjacent: rank = shard_rank * M + group. Sharding group g = ranks g, M+g, 2M+g, ...;
//                      the replicas of one shard sit on neighbouring ranks (the same node).
//   kGroupsContiguous: rank = group * N + shard_rank. Sharding group g = ranks gN .. gN+N-1.
// N = T gives the classic 1-D layout (one group); N = 1 makes every rank a full replica.
//
// The grid owns its sub-communicators (shared, so components can keep them alive).
// Thread-safety: as Communicator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/enum_names.h"
#include "sharding/communicator.h"

namespace tessera {

enum class GridLayout { kReplicasAdjacent, kGroupsContiguous };
inline constexpr EnumName<GridLayout> kGridLayoutNames[] = {
    {GridLayout::kReplicasAdjacent, "replicas_adjacent"},
    {GridLayout::kGroupsContiguous, "groups_contiguous"}};

// "replicas_adjacent" / "groups_contiguous"; InvalidArgument naming the value otherwise.
inline absl::StatusOr<GridLayout> ParseGridLayout(const std::string& name) {
  return ParseIn(kGridLayoutNames, name, "sharding.layout");
}
inline const char* GridLayoutName(GridLayout layout) { return NameIn(kGridLayoutNames, layout); }

struct ProcessGridOptions {
  // N, ranks per sharding group. Default: 0 = the whole world (one group).
  int group_size = 0;
  // Default: kReplicasAdjacent.
  GridLayout layout = GridLayout::kReplicasAdjacent;
};

// The pure geometry of a grid, with no communicators (usable in tests and the planner).
struct GridShape {
  int world_size = 1;   // T
  int num_groups = 1;   // M
  int group_size = 1;   // N
  GridLayout layout = GridLayout::kReplicasAdjacent;

  // Returns InvalidArgument when N does not divide T, or either is not positive.
  static absl::StatusOr<GridShape> Make(int world_size, int group_size, GridLayout layout);

  int WorldRank(int group, int shard_rank) const;
  int GroupOf(int world_rank) const;       // which sharding group (0 .. M-1)
  int ShardRankOf(int world_rank) const;   // position inside its sharding group (0 .. N-1)
  // World ranks of sharding group g, in shard-rank order.
  std::vector<int> ShardingGroupRanks(int group) const;
  // World ranks holding shard rank s, in group order.
  std::vector<int> ReplicaGroupRanks(int shard_rank) const;
};

class ProcessGrid {
 public:
  // Collective over `world`: splits it into the sharding and replica groups. Returns
  // InvalidArgument (the same on every rank) when group_size does not divide the world size.
  static absl::StatusOr<ProcessGrid> Create(std::shared_ptr<Communicator> world,
                                            const ProcessGridOptions& options);

  const GridShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size; }
  int world_rank() const { return world_->rank(); }
  int num_groups() const { return shape_.num_groups; }   // M
  int group_size() const { return shape_.group_size; }   // N
  int group() const { return group_; }                   // this rank's sharding group
  int shard_rank() const { return shard_rank_; }         // this rank's place in it

  Communicator& world() const { return *world_; }
  // The N ranks of this rank's sharding group, rank() == shard_rank().
  Communicator& sharding_group() const { return *sharding_; }
  // The M ranks holding this rank's shards, rank() == group().
  Communicator& replica_group() const { return *replica_; }
  std::shared_ptr<Communicator> world_ptr() const { return world_; }
  std::shared_ptr<Communicator> sharding_group_ptr() const { return sharding_; }
  std::shared_ptr<Communicator> replica_group_ptr() const { return replica_; }

 private:
  GridShape shape_;
  int group_ = 0;
  int shard_rank_ = 0;
  std::shared_ptr<Communicator> world_, sharding_, replica_;
};

}  // namespace tessera
