#include "sharding/dynamic_pieces.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "embedding/row_dtype.h"
#include "sharding/key_routing.h"

namespace tessera {
namespace {

// Where a shard's state column c of a row lands in the full row's state (-1: nowhere): row-wise
// AdaGrad keeps one value per row (taken from the column-0 shard), Adam m then u, dim each.
int64_t FullColumn(RowOptimizerType type, const Shard& rect, int64_t dim, int64_t c) {
  if (type == RowOptimizerType::kAdam) {
    const int64_t w = rect.num_cols();
    return c < w ? rect.col_begin + c : dim + rect.col_begin + (c - w);
  }
  return rect.col_begin == 0 ? c : -1;
}

void AddStats(const DynamicTableStats& s, DynamicTableStats* to) {
  to->steps = std::max(to->steps, s.steps);
  to->admissions += s.admissions;
  to->evictions += s.evictions;
  to->refused += s.refused;
  to->lookups += s.lookups;
  to->unadmitted_lookups += s.unadmitted_lookups;
  to->probes += s.probes;
}

}  // namespace

absl::StatusOr<DynamicTableState> MergeDynamicPieces(const std::vector<DynamicPiece>& pieces,
                                                     const std::string& table, int64_t dim,
                                                     RowOptimizerType type) {
  DynamicTableState out;
  out.dim = dim;
  if (pieces.empty()) return out;
  out.dtype = pieces[0].state->dtype;
  bool with_state = RowStateDim(type, dim) > 0;
  for (const DynamicPiece& p : pieces) with_state &= !p.state->state.empty();
  out.state_dim = RowStateDim(type, dim);
  const int64_t vb = RowDtypeBytes(out.dtype);
  // Row ranges, each with its column pieces.
  std::map<std::pair<int64_t, int64_t>, std::vector<const DynamicPiece*>> ranges;
  for (const DynamicPiece& p : pieces) ranges[{p.rect.row_begin, p.rect.row_end}].push_back(&p);
  std::vector<std::pair<uint64_t, std::pair<const DynamicPiece*, int64_t>>> order;  // key -> first
  struct Range {
    std::vector<const DynamicPiece*> cols;
  };
  std::vector<Range> rs;
  for (auto& [rows, cols] : ranges) {
    std::sort(cols.begin(), cols.end(), [](const DynamicPiece* a, const DynamicPiece* b) {
      return a->rect.col_begin < b->rect.col_begin;
    });
    int64_t c = 0;
    for (const DynamicPiece* p : cols) {
      if (p->rect.col_begin != c || p->state->keys != cols[0]->state->keys) {
        return absl::InvalidArgumentError(
            absl::StrCat("table '", table, "': the column shards of rows [", rows.first, ", ",
                         rows.second, ") do not tile its columns with the same keys"));
      }
      c = p->rect.col_end;
    }
    if (c != dim) {
      return absl::InvalidArgumentError(absl::StrCat("table '", table, "': the shards of rows [",
                                                     rows.first, ", ", rows.second, ") cover ", c,
                                                     " of its ", dim, " columns"));
    }
    AddStats(cols[0]->state->stats, &out.stats);
    for (size_t i = 0; i < cols[0]->state->keys.size(); ++i) {
      order.push_back({cols[0]->state->keys[i], {cols[0], static_cast<int64_t>(rs.size())}});
    }
    rs.push_back({cols});
  }
  // Keys ascending; each key's position in its range's pieces.
  std::vector<int64_t> at(order.size());
  {
    std::vector<int64_t> next(rs.size(), 0);
    for (size_t i = 0; i < order.size(); ++i) at[i] = next[order[i].second.second]++;
  }
  std::vector<size_t> idx(order.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return order[a].first < order[b].first; });
  const int64_t n = static_cast<int64_t>(order.size());
  out.keys.resize(n);
  out.weights.resize(static_cast<size_t>(n * dim * vb));
  out.state.assign(with_state ? static_cast<size_t>(n * out.state_dim) : 0, 0.0f);
  out.lookups.resize(n);
  out.last_step.resize(n);
  for (int64_t j = 0; j < n; ++j) {
    const size_t i = idx[j];
    const Range& r = rs[order[i].second.second];
    const int64_t k = at[i];
    const DynamicTableState& first = *r.cols[0]->state;
    out.keys[j] = order[i].first;
    out.lookups[j] = first.lookups[k];
    out.last_step[j] = first.last_step[k];
    for (const DynamicPiece* p : r.cols) {
      const int64_t w = p->rect.num_cols();
      std::memcpy(out.weights.data() + (j * dim + p->rect.col_begin) * vb,
                  p->state->weights.data() + k * w * vb, static_cast<size_t>(w * vb));
      if (!with_state) continue;
      const int64_t sd = RowStateDim(type, w);
      for (int64_t c = 0; c < sd; ++c) {
        const int64_t fc = FullColumn(type, p->rect, dim, c);
        if (fc >= 0) out.state[j * out.state_dim + fc] = p->state->state[k * sd + c];
      }
    }
  }
  if (rs.size() == 1) out.sketch = rs[0].cols[0]->state->sketch;
  return out;
}

DynamicTableState SliceDynamicState(const DynamicTableState& full, const Shard& rect,
                                    int64_t capacity, RowOptimizerType type) {
  DynamicTableState out;
  const int64_t w = rect.num_cols(), vb = RowDtypeBytes(full.dtype);
  out.dim = w;
  out.dtype = full.dtype;
  out.state_dim = RowStateDim(type, w);
  const bool with_state = !full.state.empty() && out.state_dim > 0;
  for (size_t i = 0; i < full.keys.size(); ++i) {
    const int64_t row = DynamicKeyRow(static_cast<int64_t>(full.keys[i]), capacity);
    if (row < rect.row_begin || row >= rect.row_end) continue;
    out.keys.push_back(full.keys[i]);
    const uint8_t* src = full.weights.data() + (i * full.dim + rect.col_begin) * vb;
    out.weights.insert(out.weights.end(), src, src + w * vb);
    if (with_state) {
      for (int64_t c = 0; c < out.state_dim; ++c) {
        // Row-wise AdaGrad: every column shard holds the row's one value.
        const int64_t fc =
            type == RowOptimizerType::kAdam ? FullColumn(type, rect, full.dim, c) : c;
        out.state.push_back(full.state[i * full.state_dim + fc]);
      }
    }
    out.lookups.push_back(full.lookups[i]);
    out.last_step.push_back(full.last_step[i]);
  }
  out.stats.steps = full.stats.steps;
  if (rect.row_begin == 0 && rect.col_begin == 0) {
    out.stats = full.stats;
  }
  if (rect.row_begin == 0 && rect.row_end == capacity) out.sketch = full.sketch;
  return out;
}

}  // namespace tessera
