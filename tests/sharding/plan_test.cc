#include "sharding/plan.h"

#include <algorithm>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

std::vector<TableConfig> Tables() {
  std::vector<TableConfig> t(3);
  t[0].name = "users";
  t[0].num_rows = 1000;
  t[0].dim = 16;
  t[1].name = "ads";
  t[1].num_rows = 100;
  t[1].dim = 8;
  t[2].name = "tiny";
  t[2].num_rows = 10;
  t[2].dim = 4;
  return t;
}

constexpr char kGoodPlan[] = R"(
group_size: 4
tables:
  - name: ads
    type: grid
    shards:
      - {rank: 0, rows: [0, 50], cols: [0, 4]}
      - {rank: 1, rows: [50, 100], cols: [0, 4]}
      - {rank: 2, rows: [0, 100], cols: [4, 8]}
  - name: users
    type: row_wise
    shards:
      - {rank: 3, rows: [500, 1000]}
      - {rank: 2, rows: [0, 500]}
  - name: tiny
    type: data_parallel
)";

TEST(PlanTest, ParsesAndNormalises) {
  auto plan = ParseShardingPlan(kGoodPlan, "plan.yaml", Tables(), 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tables.size(), 3u);
  // Model order, shards sorted by (col_begin, row_begin).
  EXPECT_EQ(plan->tables[0].table, "users");
  EXPECT_EQ(plan->tables[0].type, ShardingType::kRowWise);
  EXPECT_EQ(plan->tables[0].shards[0].row_begin, 0);
  EXPECT_EQ(plan->tables[0].shards[0].rank, 2);
  EXPECT_EQ(plan->tables[0].shards[1].col_end, 16);  // omitted cols = all columns
  EXPECT_EQ(plan->tables[1].type, ShardingType::kGrid);
  EXPECT_EQ(plan->tables[1].shards[2].col_begin, 4);
  EXPECT_EQ(plan->tables[2].type, ShardingType::kDataParallel);
  // Round trip.
  auto again = ParseShardingPlan(ShardingPlanToYaml(*plan), "again", Tables(), 4);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ShardingPlanToYaml(*again), ShardingPlanToYaml(*plan));
}

// Each bad plan must fail with InvalidArgument whose message contains every listed fragment.
struct BadCase {
  std::string yaml;
  std::vector<std::string> fragments;
};

TEST(PlanTest, BadPlansGiveOneClearError) {
  const std::string dp = "  - {name: tiny, type: data_parallel}\n  - {name: ads, type: table_wise, "
                         "shards: [{rank: 0}]}\n";
  std::vector<BadCase> cases = {
      {"tables:\n  - {name: nope, type: table_wise, shards: [{rank: 0}]}\n",
       {"plan.yaml", "table 'nope'", "does not exist", "users, ads, tiny"}},
      {("tables:\n  - name: users\n    type: table_wise\n    shards:\n      - {rank: 4}\n" + dp),
       {"table 'users' shard 0 (line 5)", "rank 4", "outside the sharding group [0, 4)"}},
      {("tables:\n  - name: users\n    type: row_wise\n    shards:\n"
        "      - {rank: 0, rows: [0, 600]}\n      - {rank: 1, rows: [500, 1000]}\n" + dp),
       {"table 'users' shard 1 (line 6)", "rows [500, 1000)", "overlaps shard 0",
        "rows [0, 600)"}},
      {("tables:\n  - name: users\n    type: row_wise\n    shards:\n"
        "      - {rank: 0, rows: [0, 400]}\n      - {rank: 1, rows: [500, 1000]}\n" + dp),
       {"table 'users'", "row 400, column 0 is not covered"}},
      {("tables:\n  - name: users\n    type: column_wise\n    shards:\n"
        "      - {rank: 0, cols: [0, 8]}\n      - {rank: 1, cols: [9, 16]}\n" + dp),
       {"table 'users'", "row 0, column 8 is not covered"}},
      {("tables:\n  - name: users\n    type: row_wise\n    shards:\n"
        "      - {rank: 0, rows: [0, 1000], cols: [0, 8]}\n" + dp),
       {"shard 0", "row_wise shard spans all columns [0, 16)", "cols [0, 8)"}},
      {("tables:\n  - name: users\n    type: row_wise\n    shards:\n"
        "      - {rank: 0, rows: [0, 1001]}\n" + dp),
       {"rows [0, 1001)", "outside the table's rows [0, 1000)"}},
      {"tables:\n  - {name: users, type: table_wise, shards: [{rank: 0}]}\n",
       {"model table 'ads' has no entry"}},
      {("tables:\n  - {name: users, type: diagonal, shards: [{rank: 0}]}\n" + dp),
       {"plan.yaml:2", "unknown sharding type 'diagonal'"}},
      {("tables:\n  - {name: users, type: table_wise, shards: [{rank: 0, row: [0, 1]}]}\n" + dp),
       {"plan.yaml:2", "unknown shard key 'row'"}},
      {("group_size: 2\ntables:\n  - {name: users, type: table_wise, shards: [{rank: 0}]}\n" + dp),
       {"plan is for group_size 2", "has 4 ranks"}},
      {("tables:\n  - {name: users, type: table_wise, shards: [{rank: 0}]}\n"
        "  - {name: users, type: table_wise, shards: [{rank: 1}]}\n" + dp),
       {"table 'users' (line 3) is listed twice"}},
      {("tables:\n  - {name: users, type: data_parallel, shards: [{rank: 1}]}\n" + dp),
       {"data_parallel and takes no shards"}},
      {("tables:\n  - {name: users, type: table_wise, shards: [{rank: 0}, {rank: 1}]}\n" + dp),
       {"table_wise and needs exactly one shard, got 2"}},
      {"tables: [", {"plan.yaml", "YAML syntax error"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto plan = ParseShardingPlan(c.yaml, "plan.yaml", Tables(), 4);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    for (const auto& f : c.fragments) EXPECT_THAT(plan.status().message(), HasSubstr(f));
  }
}

TEST(PlanTest, GridOverlapAcrossColumns) {
  const char* yaml = R"(tables:
  - {name: tiny, type: data_parallel}
  - {name: ads, type: table_wise, shards: [{rank: 0}]}
  - name: users
    type: grid
    shards:
      - {rank: 0, rows: [0, 500], cols: [0, 10]}
      - {rank: 1, rows: [500, 1000], cols: [0, 16]}
      - {rank: 2, rows: [0, 500], cols: [8, 16]}
)";
  auto plan = ParseShardingPlan(yaml, "p", Tables(), 3);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("shard 2 (line 9)"));
  EXPECT_THAT(plan.status().message(), HasSubstr("overlaps shard 0"));
}

TEST(PlanTest, MissingFileIsNotFound) {
  auto plan = LoadShardingPlan("/nonexistent/plan.yaml", Tables(), 2);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(plan.status().message(), HasSubstr("/nonexistent/plan.yaml"));
}

TEST(DefaultPlanTest, ValidAndBalanced) {
  // Sizes (rows x dim): 16000, 800, 40; 4 ranks: fair share 4210.
  auto tables = Tables();
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(n);
    ShardingPlan plan = DefaultShardingPlan(tables, n);
    auto valid = ValidateShardingPlan(plan, tables, n, "default plan");
    ASSERT_TRUE(valid.ok()) << valid.status();
    std::vector<int64_t> load = PlanLoadPerRank(*valid, tables, n);
    int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
    EXPECT_EQ(total, 16000 + 800 + 40);
    int64_t fair = (total + n - 1) / n;
    // The big table is split into n pieces; the greedy placement keeps every rank within the
    // largest piece of the fair share.
    int64_t largest_piece = 16000 / n + 16;
    EXPECT_LE(*std::max_element(load.begin(), load.end()), fair + largest_piece);
    EXPECT_EQ(valid->tables[0].type, n == 1 ? ShardingType::kTableWise : ShardingType::kRowWise);
    EXPECT_EQ(valid->tables[0].shards.size(), static_cast<size_t>(n));
  }
}

TEST(DefaultPlanTest, ManyEqualTablesSpreadTableWise) {
  std::vector<TableConfig> tables(8);
  for (int i = 0; i < 8; ++i) {
    tables[i].name = "t";
    tables[i].name += std::to_string(i);
    tables[i].num_rows = 100;
    tables[i].dim = 8;
  }
  ShardingPlan plan = DefaultShardingPlan(tables, 4);
  ASSERT_TRUE(ValidateShardingPlan(plan, tables, 4, "default").ok());
  for (const auto& t : plan.tables) EXPECT_EQ(t.type, ShardingType::kTableWise);
  std::vector<int64_t> load = PlanLoadPerRank(plan, tables, 4);
  for (int64_t l : load) EXPECT_EQ(l, 1600);
}

}  // namespace
}  // namespace tessera
