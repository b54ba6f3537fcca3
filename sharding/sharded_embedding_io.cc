// ShardedEmbeddingCollection::ReadTable / WriteTable: full rows of a logical table from and to
// its shards, for export, checkpoints and init_from.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera {

using internal::Request;

namespace {

absl::Status CheckRange(const internal::ShardLayout& s, const char* what, int t,
                        int64_t begin, int64_t count) {
  const auto& tables = s.options.collection.tables;
  if (t < 0 || t >= static_cast<int>(tables.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": table ", t, " outside [0, ", tables.size(), ")"));
  }
  if (tables[t].dynamic.enabled) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": table '", tables[t].name, "' is dynamic: its rows are keys, not numbered "
        "(GatherDynamicTable)"));
  }
  if (begin < 0 || count < 0 || begin + count > tables[t].num_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rows [", begin, ", ", begin + count, ") outside table '", tables[t].name,
        "' rows [0, ", tables[t].num_rows, ")"));
  }
  return absl::OkStatus();
}

// Where a shard's state column c lands in a full row of state (EmbeddingCollection's layout):
// row-wise AdaGrad keeps one value per row (the same on every column shard; taken from the
// first), Adam keeps m then u, each `dim` wide.
int64_t FullStateColumn(RowOptimizerType type, const Shard& rect, int64_t dim, int64_t c) {
  if (type == RowOptimizerType::kAdam) {
    const int64_t w = rect.num_cols();
    return c < w ? rect.col_begin + c : dim + rect.col_begin + (c - w);
  }
  return rect.col_begin == 0 ? c : -1;
}

}  // namespace

absl::Status ShardedEmbeddingCollection::ReadTable(int t, int64_t row_begin, int64_t count,
                                                   float* weights_out, float* state_out) {
  const internal::ShardLayout& s = impl_->layout;
  TESSERA_RETURN_IF_ERROR(CheckRange(s, "ReadTable", t, row_begin, count));
  const TableConfig& cfg = s.options.collection.tables[t];
  const auto type = s.options.collection.optimizer.type;
  const auto& route = s.routes[t];
  if (route.data_parallel) {
    return impl_->dp.store(route.dp)->ReadRows(row_begin, count, weights_out, state_out);
  }
  const int64_t row_end = row_begin + count;
  const int64_t full_sd = RowStateDim(type, cfg.dim);
  // Per shard (in shard order) its rows in the range: [rows, width] weights, [rows, sd] state.
  auto piece = [&](const Request& r, int64_t* b, int64_t* e) {
    *b = std::max(row_begin, r.rect.row_begin);
    *e = std::min(row_end, r.rect.row_end);
    if (*e < *b) *e = *b;
    const int64_t sd = state_out ? RowStateDim(type, r.rect.num_cols()) : 0;
    return (*e - *b) * (r.rect.num_cols() + sd);
  };
  const int n = s.n;
  std::vector<int64_t> bytes(n, 0), displs(n, 0);
  for (int ri : route.requests) {
    int64_t b, e;
    bytes[s.requests[ri].owner] += 4 * piece(s.requests[ri], &b, &e);
  }
  for (int r = 1; r < n; ++r) displs[r] = displs[r - 1] + bytes[r - 1];
  std::vector<float> mine(bytes[s.me] / 4), all((displs[n - 1] + bytes[n - 1]) / 4);
  float* p = mine.data();
  for (int ri : route.requests) {
    const Request& r = s.requests[ri];
    if (r.owner != s.me) continue;
    int64_t b, e;
    const int64_t size = piece(r, &b, &e);
    if (e == b) continue;
    const int64_t w = r.rect.num_cols();
    TESSERA_RETURN_IF_ERROR(s.local[r.local].store->ReadRows(
        b - r.rect.row_begin, e - b, p, state_out ? p + (e - b) * w : nullptr));
    p += size;
  }
  TESSERA_RETURN_IF_ERROR(s.group->AllGatherV(mine.data(), bytes[s.me], all.data(), bytes,
                                              displs));
  std::vector<const float*> at(n);
  for (int r = 0; r < n; ++r) at[r] = all.data() + displs[r] / 4;
  for (int ri : route.requests) {
    const Request& r = s.requests[ri];
    int64_t b, e;
    const int64_t size = piece(r, &b, &e);
    const float* src = at[r.owner];
    at[r.owner] += size;
    const int64_t w = r.rect.num_cols();
    for (int64_t x = b; x < e; ++x) {
      std::memcpy(weights_out + (x - row_begin) * cfg.dim + r.rect.col_begin,
                  src + (x - b) * w, w * sizeof(float));
    }
    if (state_out == nullptr) continue;
    const int64_t sd = RowStateDim(type, w);
    const float* st = src + (e - b) * w;
    for (int64_t x = b; x < e; ++x) {
      for (int64_t c = 0; c < sd; ++c) {
        const int64_t fc = FullStateColumn(type, r.rect, cfg.dim, c);
        if (fc >= 0) state_out[(x - row_begin) * full_sd + fc] = st[(x - b) * sd + c];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::WriteTable(int t, int64_t row_begin, int64_t count,
                                                    const float* weights, const float* state) {
  const internal::ShardLayout& s = impl_->layout;
  TESSERA_RETURN_IF_ERROR(CheckRange(s, "WriteTable", t, row_begin, count));
  const TableConfig& cfg = s.options.collection.tables[t];
  const auto type = s.options.collection.optimizer.type;
  const auto& route = s.routes[t];
  if (route.data_parallel) {
    return impl_->dp.store(route.dp)->WriteRows(row_begin, count, weights, state);
  }
  const int64_t full_sd = RowStateDim(type, cfg.dim);
  std::vector<float> w_buf, s_buf;
  for (int ri : route.requests) {
    const Request& r = s.requests[ri];
    if (r.owner != s.me) continue;
    const int64_t b = std::max(row_begin, r.rect.row_begin);
    const int64_t e = std::min(row_begin + count, r.rect.row_end);
    if (e <= b) continue;
    const int64_t w = r.rect.num_cols(), sd = RowStateDim(type, w);
    w_buf.resize((e - b) * w);
    s_buf.resize((e - b) * sd);
    for (int64_t x = b; x < e; ++x) {
      std::memcpy(w_buf.data() + (x - b) * w,
                  weights + (x - row_begin) * cfg.dim + r.rect.col_begin, w * sizeof(float));
      if (state == nullptr) continue;
      for (int64_t c = 0; c < sd; ++c) {
        int64_t fc = FullStateColumn(type, r.rect, cfg.dim, c);
        if (fc < 0) fc = c;  // row-wise AdaGrad on a later column shard: the row's one value
        s_buf[(x - b) * sd + c] = state[(x - row_begin) * full_sd + fc];
      }
    }
    TESSERA_RETURN_IF_ERROR(s.local[r.local].store->WriteRows(
        b - r.rect.row_begin, e - b, w_buf.data(), state ? s_buf.data() : nullptr));
  }
  return absl::OkStatus();
}

}  // namespace tessera
