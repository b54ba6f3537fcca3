// ApplyShardUpdates (shard_update.h).
#include "sharding/internal/shard_update.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "embedding/pooled_lookup.h"
#include "sharding/internal/shard_kernels.h"
#include "sharding/key_routing.h"

namespace tessera::internal {

absl::Status ApplyShardUpdates(const ShardLayout& l, std::vector<RowGrads>* all_grads, float lr,
                               int64_t step, UpdateScratch* scratch) {
  EmbeddingWorkspace* ws = &scratch->ws;
  const std::vector<RowGrads>& grads = *all_grads;
  const auto& tables = l.options.collection.tables;
  const auto& local = l.local;
  const int n = l.n;
  bool col_adagrad = false;
  if (l.update_opt.type == RowOptimizerType::kRowWiseAdagrad) {
    for (const Request& r : l.requests) col_adagrad |= r.col_split;
  }
  // Column-split row-wise AdaGrad: every shard of a row needs the row's full sum of squared
  // gradients. Each rank publishes, per column-split shard it owns, its rows (global ids) and
  // the partial sums over its columns; every shard then adds the partials of all shards holding
  // the row, in shard order, so the siblings of a row compute the same total.
  std::vector<std::vector<float>> total_sq(local.size());
  if (col_adagrad) {
    std::vector<char> block;
    auto put = [&block](const void* p, size_t bytes) {
      const char* c = static_cast<const char*>(p);
      block.insert(block.end(), c, c + bytes);
    };
    std::vector<float> partial;
    for (size_t q = 0; q < local.size(); ++q) {
      const LocalShard& ls = local[q];
      if (!ls.col_split) continue;
      const RowGrads& rg = grads[q];
      const int64_t cnt = static_cast<int64_t>(rg.rows.size());
      put(&cnt, 8);
      const int64_t base = l.IsDynamic(ls) ? 0 : ls.rect.row_begin;  // dynamic: rows are keys
      for (int64_t r : rg.rows) {
        const int64_t global = r + base;
        put(&global, 8);
      }
      if (l.IsDynamic(ls)) {
        // A dynamic table's columns themselves: its siblings rebuild the whole row's gradient
        // and sum its squares as one process does (RowSumOfSquares over dim, lane order).
        put(rg.grads.data(), cnt * ls.width * 4);
      } else {
        partial.assign(cnt, 0.0f);
        TESSERA_RETURN_IF_ERROR(
            RowSquaredSums(l.host, rg.grads.data(), cnt, ls.width, partial.data()));
        put(partial.data(), cnt * 4);
      }
      block.resize((block.size() + 7) & ~size_t{7}, 0);
    }
    std::vector<int64_t> sizes(n);
    TESSERA_RETURN_IF_ERROR(
        l.group->AllGatherCounts(static_cast<int64_t>(block.size()), absl::MakeSpan(sizes)));
    std::vector<int64_t> displs(n);
    for (int r = 1; r < n; ++r) displs[r] = displs[r - 1] + sizes[r - 1];
    std::vector<char> all(displs[n - 1] + sizes[n - 1]);
    TESSERA_RETURN_IF_ERROR(l.group->AllGatherV(block.data(), static_cast<int64_t>(block.size()),
                                                all.data(), sizes, displs));
    // Per request: its rows and partial sums (a dynamic table's: its gradient columns).
    std::vector<const int64_t*> req_rows(l.requests.size(), nullptr);
    std::vector<const float*> req_sq(l.requests.size(), nullptr);
    std::vector<int64_t> req_n(l.requests.size(), 0);
    for (int r = 0; r < n; ++r) {
      const char* p = all.data() + displs[r];
      for (int ri : l.dst_requests[r]) {
        if (!l.requests[ri].col_split) continue;
        int64_t cnt;
        std::memcpy(&cnt, p, 8);
        p += 8;
        req_n[ri] = cnt;
        req_rows[ri] = reinterpret_cast<const int64_t*>(p);
        p += cnt * 8;
        req_sq[ri] = reinterpret_cast<const float*>(p);
        const Request& k = l.requests[ri];
        p += cnt * 4 * (l.routes[k.table].dynamic ? k.rect.num_cols() : 1);
        p = all.data() + displs[r] + (((p - all.data() - displs[r]) + 7) & ~int64_t{7});
      }
    }
    for (size_t q = 0; q < local.size(); ++q) {
      const LocalShard& ls = local[q];
      if (!ls.col_split) continue;
      const RowGrads& rg = grads[q];
      total_sq[q].assign(rg.rows.size(), 0.0f);
      const bool dynamic = l.IsDynamic(ls);
      std::vector<float> full(dynamic ? tables[ls.table].dim : 0);
      for (size_t i = 0; i < rg.rows.size(); ++i) {
        const int64_t x = rg.rows[i] + (dynamic ? 0 : ls.rect.row_begin);
        // The row a key stands for picks its shards (sharding/key_routing.h).
        const int64_t row = dynamic ? DynamicKeyRow(x, tables[ls.table].num_rows) : x;
        float sum = 0.0f;
        for (int ri : l.routes[ls.table].requests) {
          const Request& k = l.requests[ri];
          if (row < k.rect.row_begin || row >= k.rect.row_end) continue;
          const int64_t* end = req_rows[ri] + req_n[ri];
          const int64_t* it = std::lower_bound(req_rows[ri], end, x);
          TESSERA_CHECK(it != end && *it == x)
              << "row " << x << " of table '" << tables[ls.table].name
              << "' missing from a sibling shard's gradient rows";
          if (dynamic) {
            const int64_t w = k.rect.num_cols();
            std::memcpy(full.data() + k.rect.col_begin, req_sq[ri] + (it - req_rows[ri]) * w,
                        w * sizeof(float));
          } else {
            sum += req_sq[ri][it - req_rows[ri]];
          }
        }
        total_sq[q][i] = dynamic ? RowSumOfSquares(full.data(), tables[ls.table].dim) : sum;
      }
    }
  }
  std::vector<int64_t> slots;
  for (size_t q = 0; q < local.size(); ++q) {
    const LocalShard& ls = local[q];
    const RowGrads& rg = grads[q];
    RowUpdateArgs a;
    a.weights = ls.store->weight_data();
    a.weight_dtype = ls.store->weight_dtype();
    a.rounding = tables[ls.table].storage.rounding;
    a.rounding_seed = l.options.collection.seed;
    a.state = ls.store->state();
    a.dim = ls.width;
    a.optimizer = l.update_opt;
    a.lr = lr;
    a.step = step;
    if (!rg.bags.empty()) {
      // Slots are the rows (OutputDist::Aggregate hands bags only for such stores).
      TESSERA_RETURN_IF_ERROR(FusedBackwardUpdate(l.ctx, rg.bags, PoolingMode::kSum, a, ws));
      if (!l.ctx.is_cuda()) {
        (*all_grads)[q].rows.assign(ws->unique_slots.begin(), ws->unique_slots.end());
      }
      continue;
    }
    if (rg.rows.empty()) continue;
    slots.resize(rg.rows.size());
    TESSERA_RETURN_IF_ERROR(ResolveRows(l, ls, rg.rows, absl::MakeSpan(slots)));
    // The host's slots and gradients in the shard's memory (no copy on the CPU).
    const int64_t count = static_cast<int64_t>(slots.size());
    TESSERA_ASSIGN_OR_RETURN(const int64_t* ctx_slots,
                             Mirror(l.ctx, slots, &scratch->slots, "the update's slots"));
    TESSERA_ASSIGN_OR_RETURN(const float* ctx_grads,
                             Mirror(l.ctx, rg.grads, &scratch->grads, "the row gradients"));
    if (col_adagrad && ls.col_split) {
      TESSERA_ASSIGN_OR_RETURN(const float* ctx_sq, Mirror(l.ctx, total_sq[q], &scratch->total_sq,
                                                           "the squared-gradient totals"));
      // Row-wise AdaGrad (embedding/row_optimizer.h) with the full row's squared-gradient sum.
      TESSERA_RETURN_IF_ERROR(ColumnSplitAdagrad(
          l.ctx, l.update_opt, lr, ctx_sq, static_cast<float>(tables[ls.table].dim), ctx_slots,
          count, ls.width, ctx_grads, ls.store->weights(), ls.store->state()));
      continue;
    }
    TESSERA_RETURN_IF_ERROR(
        ApplyRowUpdates(l.ctx, absl::MakeConstSpan(ctx_slots, count), ctx_grads, a));
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
