#include "sharding/process_grid.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GridShapeTest, ReplicasAdjacent2x2) {
  auto s = GridShape::Make(4, 2, GridLayout::kReplicasAdjacent);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_groups, 2);
  // Sharding group i = ranks i, M+i; replicas of shard s on ranks sM .. sM+M-1.
  EXPECT_THAT(s->ShardingGroupRanks(0), ElementsAre(0, 2));
  EXPECT_THAT(s->ShardingGroupRanks(1), ElementsAre(1, 3));
  EXPECT_THAT(s->ReplicaGroupRanks(0), ElementsAre(0, 1));
  EXPECT_THAT(s->ReplicaGroupRanks(1), ElementsAre(2, 3));
}

TEST(GridShapeTest, GroupsContiguous2x2) {
  auto s = GridShape::Make(4, 2, GridLayout::kGroupsContiguous);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(s->ShardingGroupRanks(0), ElementsAre(0, 1));
  EXPECT_THAT(s->ShardingGroupRanks(1), ElementsAre(2, 3));
  EXPECT_THAT(s->ReplicaGroupRanks(0), ElementsAre(0, 2));
  EXPECT_THAT(s->ReplicaGroupRanks(1), ElementsAre(1, 3));
}

TEST(GridShapeTest, OneByFourAndFourByOne) {
  for (GridLayout layout : {GridLayout::kReplicasAdjacent, GridLayout::kGroupsContiguous}) {
    auto one_group = GridShape::Make(4, 4, layout);  // 1 x 4: the 1-D layout
    ASSERT_TRUE(one_group.ok());
    EXPECT_EQ(one_group->num_groups, 1);
    EXPECT_THAT(one_group->ShardingGroupRanks(0), ElementsAre(0, 1, 2, 3));
    for (int s = 0; s < 4; ++s) EXPECT_THAT(one_group->ReplicaGroupRanks(s), ElementsAre(s));

    auto replicas = GridShape::Make(4, 1, layout);  // 4 x 1: every rank a full replica
    ASSERT_TRUE(replicas.ok());
    EXPECT_EQ(replicas->num_groups, 4);
    for (int g = 0; g < 4; ++g) EXPECT_THAT(replicas->ShardingGroupRanks(g), ElementsAre(g));
    EXPECT_THAT(replicas->ReplicaGroupRanks(0), ElementsAre(0, 1, 2, 3));
  }
}

TEST(GridShapeTest, EveryRankInExactlyOneGroupOfEachKind) {
  for (int n : {1, 2, 3, 6}) {
    for (GridLayout layout : {GridLayout::kReplicasAdjacent, GridLayout::kGroupsContiguous}) {
      auto s = GridShape::Make(6, n, layout);
      ASSERT_TRUE(s.ok());
      std::multiset<int> in_sharding, in_replica;
      for (int g = 0; g < s->num_groups; ++g) {
        for (int r : s->ShardingGroupRanks(g)) {
          in_sharding.insert(r);
          EXPECT_EQ(s->GroupOf(r), g);
        }
      }
      for (int sr = 0; sr < n; ++sr) {
        for (int r : s->ReplicaGroupRanks(sr)) {
          in_replica.insert(r);
          EXPECT_EQ(s->ShardRankOf(r), sr);
        }
      }
      for (int r = 0; r < 6; ++r) {
        EXPECT_EQ(in_sharding.count(r), 1u);
        EXPECT_EQ(in_replica.count(r), 1u);
        EXPECT_EQ(s->WorldRank(s->GroupOf(r), s->ShardRankOf(r)), r);
      }
    }
  }
}

TEST(GridShapeTest, GroupSizeMustDivideWorld) {
  auto s = GridShape::Make(4, 3, GridLayout::kReplicasAdjacent);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("3 does not divide the world size 4"));
  EXPECT_FALSE(GridShape::Make(4, -2, GridLayout::kReplicasAdjacent).ok());
  EXPECT_EQ(GridShape::Make(4, 0, GridLayout::kReplicasAdjacent)->group_size, 4);
}

TEST(GridLayoutTest, Parse) {
  EXPECT_EQ(*ParseGridLayout("groups_contiguous"), GridLayout::kGroupsContiguous);
  EXPECT_EQ(*ParseGridLayout("replicas_adjacent"), GridLayout::kReplicasAdjacent);
  auto bad = ParseGridLayout("diagonal");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'diagonal'"));
}

TEST(ProcessGridTest, WorldOfOne) {
  std::shared_ptr<Communicator> world = CreateSingleProcessCommunicator();
  auto grid = ProcessGrid::Create(world, {});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->num_groups(), 1);
  EXPECT_EQ(grid->group_size(), 1);
  EXPECT_EQ(grid->sharding_group().size(), 1);
  EXPECT_EQ(grid->replica_group().size(), 1);
  auto bad = ProcessGrid::Create(world, {.group_size = 2});
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace tessera
