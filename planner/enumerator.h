// Enumerator: the ways one table may be placed in a sharding group of N ranks. An option fixes
// the sharding type, how many row pieces P and column pieces C the table is cut into (P x C
// shards of equal size, the last piece taking the remainder), and where the rows live (memory,
// or the RocksDB tier with a cache of a share of each shard's rows). Which rank owns which shard
// is the search's choice (search.h).
//
//   data_parallel   P = C = 1, every rank of the world holds the table
//   table_wise      P = C = 1
//   row_wise        P in {2, 4, 8, ... up to kMaxPartialPieces, and N}, C = 1
//   table_row_wise  P = the group's ranks on one node (> 1), C = 1, shards kept on that node
//   column_wise     P = 1, C in {2, 4, ...} while dim / C >= kMinColumnChunk and dim % C == 0
//   grid            P x C with P, C >= 2 from the lists above, P x C <= min(N, kMaxPartialPieces)
// Tiered variants (the table's rows in RocksDB, a cache of kTierCacheShares of a shard's rows)
// are offered for every type but data_parallel when the table's storage is not fixed by the
// config and disk is available; a table whose config says rocksdb gets only tiered options with
// its configured cache. A config-fixed sharding type limits the options to that type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/inputs.h"
#include "sharding/plan.h"

namespace tessera::planner {

inline constexpr int kMaxPartialPieces = 64;  // row pieces other than N (bounds search work)
inline constexpr int64_t kMinColumnChunk = 4;
inline constexpr double kTierCacheShares[] = {0.01, 0.05, 0.2};

struct TableOption {
  ShardingType type = ShardingType::kTableWise;
  int row_pieces = 1;            // P
  int col_pieces = 1;            // C
  bool tiered = false;           // rows in the RocksDB tier
  double cache_share = 0;        // tiered: cached rows / shard rows
  int64_t cache_rows_fixed = 0;  // tiered with a config-given cache: rows per shard (or 0)
  int shards() const { return row_pieces * col_pieces; }
};

std::string OptionName(const TableOption& o);

struct EnumerateContext {
  int group_size = 1;  // N
  int world_size = 1;  // T
  int node_ranks = 1;  // ranks of one sharding group on one node (table_row_wise P)
  bool disk_available = false;
  bool tier_allowed = true;  // the ranks compute on the CPU (the tier is host-side)
};

// The options of `table` in the order the search tries them (deterministic).
std::vector<TableOption> EnumerateTableOptions(const PlanTable& table, const EnumerateContext& ctx);

// Row range of piece i of P over `rows` rows, column range of piece j of C over `dim`.
void PieceRange(int64_t extent, int pieces, int i, int64_t* begin, int64_t* end);

}  // namespace tessera::planner
