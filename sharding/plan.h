// ShardingPlan: where every embedding table lives inside a sharding group of N ranks.
//
// Per table a sharding type and its shards; a shard is a rectangle of the table (a row range by
// a column range) owned by one rank of the sharding group (0 .. N-1). All sharding groups hold
// the same plan (each group is one full copy of the model).
//   data_parallel   no shards: every rank holds the whole table; gradients all-reduced over the
//                   world
//   table_wise      one shard: the whole table on one rank
//   row_wise        shards of full rows (every column), row ranges tiling [0, rows)
//   table_row_wise  as row_wise (the same routing); meant for the ranks of one host
//   column_wise     shards of full columns (every row), column ranges tiling [0, dim)
//   grid            rows x columns: rectangles tiling the table
// A rank may own several shards, also of one table.
//
// Plans come from a YAML file (docs/FORMATS.md, "Sharding plan") or from DefaultShardingPlan.
// Both go through ValidateShardingPlan, so every rank, reading the same file, fails with the same
// InvalidArgument before training starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/table_config.h"

namespace tessera {

enum class ShardingType { kDataParallel, kTableWise, kRowWise, kColumnWise, kTableRowWise, kGrid };

const char* ShardingTypeName(ShardingType type);
// The YAML spelling (data_parallel, table_wise, ...); InvalidArgument listing the valid ones.
absl::StatusOr<ShardingType> ParseShardingType(const std::string& name);

struct Shard {
  int64_t row_begin = 0;  // rows [row_begin, row_end) of the table
  int64_t row_end = 0;
  int64_t col_begin = 0;  // columns [col_begin, col_end)
  int64_t col_end = 0;
  int rank = 0;           // owner: a rank of the sharding group, 0 .. N-1
  int line = 0;           // 1-based line in the plan file (0: not from a file)

  int64_t num_rows() const { return row_end - row_begin; }
  int64_t num_cols() const { return col_end - col_begin; }
};

// A plan may also choose where a table's rows live (tessera-plan does when memory is short);
// without it the table's config `storage` holds. Plan files written before this field stay
// valid.
struct PlanStorage {
  bool set = false;                         // the plan chooses the storage
  StorageTier tier = StorageTier::kMemory;  // `storage: memory|rocksdb`
  int64_t cache_rows = 0;                   // rocksdb: cache rows of the whole table (`cache_rows`;
                                            // each shard gets its share, as for the config's)
};

struct TablePlan {
  std::string table;  // TableConfig::name
  ShardingType type = ShardingType::kTableWise;
  std::vector<Shard> shards;  // empty for data_parallel
  PlanStorage storage;
  int line = 0;
};

struct ShardingPlan {
  // N the plan was made for; 0 = not stated (a file may omit it).
  int group_size = 0;
  // After validation: one entry per model table, in the model's table order, shards sorted by
  // (col_begin, row_begin).
  std::vector<TablePlan> tables;
};

// Checks `plan` against the model's tables and the group size N and returns it normalised (see
// ShardingPlan::tables). InvalidArgument, prefixed with `source` (the file name, or "default
// plan"), for: a table that does not exist or is listed twice, a model table missing from the
// plan, a rank outside [0, N), an empty or out-of-bounds row/column range, a shard shape that
// does not fit the type, overlapping shards or rows/columns no shard covers. Each message names
// the table, the shard (index in the file, and its line) and the value; and for a plan storage
// of rocksdb on a data_parallel table or without cache_rows > 0.
absl::StatusOr<ShardingPlan> ValidateShardingPlan(ShardingPlan plan,
                                                  const std::vector<TableConfig>& tables,
                                                  int group_size, const std::string& source);

// Parses YAML text (see docs/FORMATS.md) and validates it. Unknown keys and wrong types are
// InvalidArgument naming `source`, the line and the key.
absl::StatusOr<ShardingPlan> ParseShardingPlan(const std::string& yaml_text,
                                               const std::string& source,
                                               const std::vector<TableConfig>& tables,
                                               int group_size);
// Reads `path` and parses it; NotFound when it cannot be read.
absl::StatusOr<ShardingPlan> LoadShardingPlan(const std::string& path,
                                              const std::vector<TableConfig>& tables,
                                              int group_size);

// The group_size a plan file states (0 when it states none), without validating the rest: the
// trainer sizes its process grid from it when the config leaves sharding.group_size at 0.
// NotFound when the file cannot be read, InvalidArgument for bad YAML or a bad group_size.
absl::StatusOr<int> ReadPlanGroupSize(const std::string& path);

// The plan used without a plan file: balances rows x dim over the N ranks. The fair share is
// (sum of rows x dim) / N; a table above it is split row-wise into ceil(size / fair share)
// pieces (at most N, one per rank); then tables and pieces, largest first, go to the rank with
// the least rows x dim so far (ties: lowest rank; pieces of one table on distinct ranks).
ShardingPlan DefaultShardingPlan(const std::vector<TableConfig>& tables, int group_size);

// rows x dim held by each rank of the group under `plan` (data_parallel tables count on every
// rank).
std::vector<int64_t> PlanLoadPerRank(const ShardingPlan& plan,
                                     const std::vector<TableConfig>& tables, int group_size);

// The plan as YAML in the file format (round-trips through ParseShardingPlan).
std::string ShardingPlanToYaml(const ShardingPlan& plan);

}  // namespace tessera
