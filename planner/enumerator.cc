// The options per table (enumerator.h).
#include "planner/enumerator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::planner {

std::string OptionName(const TableOption& o) {
  std::string s = ShardingTypeName(o.type);
  if (o.row_pieces > 1) absl::StrAppend(&s, " rows/", o.row_pieces);
  if (o.col_pieces > 1) absl::StrAppend(&s, " cols/", o.col_pieces);
  if (o.tiered) {
    if (o.cache_rows_fixed > 0) {
      absl::StrAppend(&s, " rocksdb cache ", o.cache_rows_fixed, " rows");
    } else {
      absl::StrAppend(&s, " rocksdb cache ", o.cache_share * 100, "%");
    }
  }
  return s;
}

void PieceRange(int64_t extent, int pieces, int i, int64_t* begin, int64_t* end) {
  const int64_t base = extent / pieces, rem = extent % pieces;
  // The first `rem` pieces take one extra: sizes differ by at most one.
  *begin = i * base + std::min<int64_t>(i, rem);
  *end = *begin + base + (i < rem ? 1 : 0);
}

std::vector<TableOption> EnumerateTableOptions(const PlanTable& table,
                                               const EnumerateContext& ctx) {
  const TableConfig& c = table.config;
  const int n = ctx.group_size;
  std::vector<int> row_pieces;
  for (int p = 2; p <= std::min(n, kMaxPartialPieces) && p <= c.num_rows; p *= 2) {
    if (p < n) row_pieces.push_back(p);
  }
  if (n > 1 && n <= c.num_rows) row_pieces.push_back(n);
  std::vector<int> col_pieces;
  for (int q = 2; q <= n && c.dim / q >= kMinColumnChunk; q *= 2) {
    if (c.dim % q == 0) col_pieces.push_back(q);
  }

  std::vector<TableOption> layouts;
  auto add = [&](ShardingType type, int p, int q) {
    TableOption o;
    o.type = type;
    o.row_pieces = p;
    o.col_pieces = q;
    layouts.push_back(o);
  };
  add(ShardingType::kTableWise, 1, 1);
  for (int p : row_pieces) add(ShardingType::kRowWise, p, 1);
  if (ctx.node_ranks > 1 && ctx.node_ranks < n && ctx.node_ranks <= c.num_rows) {
    add(ShardingType::kTableRowWise, ctx.node_ranks, 1);
  }
  for (int q : col_pieces) add(ShardingType::kColumnWise, 1, q);
  for (int p : row_pieces) {
    for (int q : col_pieces) {
      if (static_cast<int64_t>(p) * q <= std::min(n, kMaxPartialPieces)) {
        add(ShardingType::kGrid, p, q);
      }
    }
  }

  const bool fixed_rocksdb = table.storage_fixed && c.storage.tier == StorageTier::kRocksDb;
  const bool fixed_memory = table.storage_fixed && c.storage.tier == StorageTier::kMemory;
  std::vector<TableOption> out;
  // A dynamic table is never replicated whole (each replica would admit other keys) and lives
  // in memory (sharding/sharded_embedding.h).
  const bool dynamic = c.dynamic.enabled;
  if (!fixed_rocksdb) {
    if (!dynamic) {
      TableOption dp;
      dp.type = ShardingType::kDataParallel;
      out.push_back(dp);
    }
    for (const TableOption& o : layouts) out.push_back(o);
  }
  if (!dynamic && !fixed_memory && ctx.disk_available && (ctx.tier_allowed || fixed_rocksdb)) {
    for (const TableOption& base : layouts) {
      if (fixed_rocksdb) {
        TableOption o = base;
        o.tiered = true;
        if (c.storage.cache_rows > 0) {
          o.cache_rows_fixed = c.storage.cache_rows;
        } else {
          const int64_t row_bytes = c.dim * 4;
          o.cache_rows_fixed = std::max<int64_t>(1, c.storage.cache_bytes / row_bytes);
        }
        out.push_back(o);
        continue;
      }
      for (double share : kTierCacheShares) {
        TableOption o = base;
        o.tiered = true;
        o.cache_share = share;
        out.push_back(o);
      }
    }
  }
  if (!table.fixed_type.empty()) {
    std::vector<TableOption> kept;
    for (const TableOption& o : out) {
      if (table.fixed_type == ShardingTypeName(o.type)) kept.push_back(o);
    }
    out = std::move(kept);
  }
  return out;
}

}  // namespace tessera::planner
