#include "sharding/process_grid.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<GridShape> GridShape::Make(int world_size, int group_size, GridLayout layout) {
  if (world_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("world size must be positive, got ",
                                                   world_size));
  }
  if (group_size == 0) group_size = world_size;
  if (group_size < 0 || world_size % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding.group_size: ", group_size, " does not divide the world size ", world_size,
        " (the world is M sharding groups of group_size ranks)"));
  }
  GridShape s;
  s.world_size = world_size;
  s.group_size = group_size;
  s.num_groups = world_size / group_size;
  s.layout = layout;
  return s;
}

int GridShape::WorldRank(int group, int shard_rank) const {
  return layout == GridLayout::kReplicasAdjacent ? shard_rank * num_groups + group
                                                 : group * group_size + shard_rank;
}

int GridShape::GroupOf(int world_rank) const {
  return layout == GridLayout::kReplicasAdjacent ? world_rank % num_groups
                                                 : world_rank / group_size;
}

int GridShape::ShardRankOf(int world_rank) const {
  return layout == GridLayout::kReplicasAdjacent ? world_rank / num_groups
                                                 : world_rank % group_size;
}

std::vector<int> GridShape::ShardingGroupRanks(int group) const {
  std::vector<int> ranks;
  for (int s = 0; s < group_size; ++s) ranks.push_back(WorldRank(group, s));
  return ranks;
}

std::vector<int> GridShape::ReplicaGroupRanks(int shard_rank) const {
  std::vector<int> ranks;
  for (int g = 0; g < num_groups; ++g) ranks.push_back(WorldRank(g, shard_rank));
  return ranks;
}

absl::StatusOr<ProcessGrid> ProcessGrid::Create(std::shared_ptr<Communicator> world,
                                                const ProcessGridOptions& options) {
  ProcessGrid grid;
  TESSERA_ASSIGN_OR_RETURN(grid.shape_,
                           GridShape::Make(world->size(), options.group_size, options.layout));
  grid.group_ = grid.shape_.GroupOf(world->rank());
  grid.shard_rank_ = grid.shape_.ShardRankOf(world->rank());
  TESSERA_ASSIGN_OR_RETURN(auto sharding, world->Split(grid.group_, grid.shard_rank_));
  TESSERA_ASSIGN_OR_RETURN(auto replica, world->Split(grid.shard_rank_, grid.group_));
  grid.sharding_ = std::move(sharding);
  grid.replica_ = std::move(replica);
  grid.world_ = std::move(world);
  return grid;
}

}  // namespace tessera
