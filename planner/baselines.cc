// The TorchRec-style greedy baseline (baselines.h).
#include "planner/baselines.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "planner/enumerator.h"

namespace tessera::planner {

namespace {

struct Candidate {
  ShardingType type;
  int row_pieces = 1, col_pieces = 1;
  double perf = 0;         // summed cost of all shards
  double shard_perf = 0;   // cost of one shard
  double shard_bytes = 0;  // storage of one shard
};

}  // namespace

absl::StatusOr<ShardingPlan> TorchRecStylePlan(const PlanInputs& in, int group_size) {
  const int n = std::max(1, group_size);
  const bool gpu = in.step.device == "cuda";
  const double compute_bw = gpu ? kTorchRecHbmBytesPerSec : kTorchRecDdrBytesPerSec;
  const bool one_node = n <= in.topology.ranks_per_node;
  const double comm_bw = one_node ? kTorchRecIntraNodeBytesPerSec : kTorchRecCrossNodeBytesPerSec;
  const double capacity =
      (1 - kTorchRecReservation) *
      static_cast<double>(gpu ? in.topology.memory.device : in.topology.memory.host);
  const double b = static_cast<double>(in.step.batch_per_rank);
  const double e = in.step.payload_bytes;
  const int t_world = in.topology.world_size;

  ShardingPlan plan;
  plan.group_size = n;
  struct Piece {
    int table;
    Shard shard;
    double perf, bytes;
  };
  std::vector<Piece> pieces;
  for (size_t t = 0; t < in.tables.size(); ++t) {
    const PlanTable& tab = in.tables[t];
    const TableConfig& c = tab.config;
    const double ids = b * IdsPerSample(tab);
    const double bags = b * tab.num_features;
    const double state = in.step.row_state_fixed + in.step.row_state_per_col * 1.0 * c.dim;
    auto cost = [&](double rows, double cols, double batch_ranks) {
      // Forward compute: read the ids, the rows looked up and write the pooled outputs.
      const double fwd = batch_ranks * (ids * 8 + ids * cols * 4 + bags * cols * 4) / compute_bw;
      const double comms = batch_ranks * bags * cols * e / comm_bw;
      return fwd + comms + 2 * fwd + comms;
    };
    std::vector<Candidate> cands;
    {
      Candidate dp{ShardingType::kDataParallel};
      const double grad = c.num_rows * c.dim * 4.0;
      dp.shard_perf = cost(c.num_rows, c.dim, 1) + (t_world > 1 ? 2 * grad / comm_bw : 0);
      dp.perf = dp.shard_perf * n;
      dp.shard_bytes = c.num_rows * (c.dim + state) * 4.0;
      cands.push_back(dp);
    }
    {
      Candidate tw{ShardingType::kTableWise};
      tw.shard_perf = cost(c.num_rows, c.dim, n);
      tw.perf = tw.shard_perf;
      tw.shard_bytes = c.num_rows * (c.dim + state) * 4.0;
      cands.push_back(tw);
    }
    if (n > 1 && c.num_rows >= n) {
      Candidate rw{ShardingType::kRowWise, n, 1};
      // Each row shard sees its share of the ids but returns a partial sum of every bag.
      const double share = 1.0 / n;
      rw.shard_perf = n * (ids * share * (8 + c.dim * 4) + bags * c.dim * 4) * 3 / compute_bw +
                      2 * n * bags * c.dim * e / comm_bw;
      rw.perf = rw.shard_perf * n;
      rw.shard_bytes = c.num_rows * share * (c.dim + state) * 4.0;
      cands.push_back(rw);
    }
    const int64_t chunk = c.dim >= 64 ? 32 : c.dim / 2;
    if (n > 1 && chunk >= kMinColumnChunk && c.dim % chunk == 0 && c.dim / chunk <= n) {
      const int q = static_cast<int>(c.dim / chunk);
      Candidate cw{ShardingType::kColumnWise, 1, q};
      cw.shard_perf = cost(c.num_rows, chunk, n);
      cw.perf = cw.shard_perf * q;
      cw.shard_bytes = c.num_rows * (chunk + state) * 4.0;
      cands.push_back(cw);
    }
    // The least summed cost among the options whose shard fits a rank at all.
    const Candidate* best = nullptr;
    for (const Candidate& cd : cands) {
      if (cd.shard_bytes > capacity) continue;
      if (best == nullptr || cd.perf < best->perf) best = &cd;
    }
    if (best == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(in.source, ": TorchRec-style plan: no shard of table '", c.name, "' fits ",
                       capacity / (1 << 30), " GiB (85% of a rank's memory)"));
    }
    TablePlan tp;
    tp.table = c.name;
    tp.type = best->type;
    if (best->type != ShardingType::kDataParallel) {
      for (int i = 0; i < best->row_pieces; ++i) {
        for (int j = 0; j < best->col_pieces; ++j) {
          Shard s;
          PieceRange(c.num_rows, best->row_pieces, i, &s.row_begin, &s.row_end);
          PieceRange(c.dim, best->col_pieces, j, &s.col_begin, &s.col_end);
          pieces.push_back({static_cast<int>(t), s, best->shard_perf, best->shard_bytes});
        }
      }
    } else {
      pieces.push_back({static_cast<int>(t), Shard{}, -1, best->shard_bytes});
    }
    plan.tables.push_back(std::move(tp));
  }
  // Greedy partitioner: costliest shard first onto the rank with the least cost and room.
  std::vector<double> rank_perf(n, 0), rank_bytes(n, 0);
  for (const Piece& p : pieces) {
    if (p.perf < 0) {
      for (int r = 0; r < n; ++r) rank_bytes[r] += p.bytes;  // data-parallel: everywhere
    }
  }
  std::vector<int> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b2) { return pieces[a].perf > pieces[b2].perf; });
  std::set<std::pair<double, int>> by_perf;
  for (int r = 0; r < n; ++r) by_perf.insert({0.0, r});
  auto place = [&](Piece& p, int r) {
    by_perf.erase({rank_perf[r], r});
    rank_perf[r] += p.perf;
    rank_bytes[r] += p.bytes;
    by_perf.insert({rank_perf[r], r});
    p.shard.rank = r;
    plan.tables[p.table].shards.push_back(p.shard);
  };
  std::vector<int> shard_index(in.tables.size(), 0);
  for (int i : order) {
    Piece& p = pieces[i];
    if (p.perf < 0) continue;
    const TablePlan& tp = plan.tables[p.table];
    const bool every_rank = tp.type == ShardingType::kRowWise;  // one shard per rank, in order
    int pick = -1;
    if (every_rank) {
      pick = shard_index[p.table]++;
      if (rank_bytes[pick] + p.bytes > capacity) pick = -1;
    } else {
      for (const auto& [perf, r] : by_perf) {
        if (rank_bytes[r] + p.bytes > capacity) continue;
        bool taken = false;  // the shards of one table on distinct ranks
        for (const Shard& s : tp.shards) taken |= s.rank == r;
        if (taken) continue;
        pick = r;
        break;
      }
    }
    if (pick < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          in.source, ": TorchRec-style plan: a shard of table '", in.tables[p.table].config.name,
          "' finds no rank with ", p.bytes / (1 << 30), " GiB free"));
    }
    place(p, pick);
  }
  return plan;
}

}  // namespace tessera::planner
