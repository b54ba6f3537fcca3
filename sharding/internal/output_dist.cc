// OutputDist (output_dist.h): the owner's pooling, the partial sums' all-to-all and reduce, the
// gradient slices' all-to-all and the owner's aggregation.
#include "sharding/internal/output_dist.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "sharding/internal/shard_kernels.h"

namespace tessera::internal {

void OutputDist::SizeRoutes(const std::vector<int64_t>& src_batch, int64_t batch) {
  const int n = l_.n;
  batch_ = batch;
  ask_counts_.assign(n, 0);
  ask_displs_.assign(n, 0);
  reply_counts_.assign(n, 0);
  reply_displs_.assign(n, 0);
  for (int d = 0; d < n; ++d) {
    for (int ri : l_.dst_requests[d]) {
      const Request& r = l_.requests[ri];
      ask_counts_[d] += batch * r.rect.num_cols() * l_.NumFeatures(r.table);
    }
  }
  for (int src = 0; src < n; ++src) {
    for (int ri : l_.dst_requests[l_.me]) {
      const LocalShard& ls = l_.local[l_.requests[ri].local];
      reply_counts_[src] += src_batch[src] * ls.width * l_.NumFeatures(ls.table);
    }
  }
  std::exclusive_scan(ask_counts_.begin(), ask_counts_.end(), ask_displs_.begin(), int64_t{0});
  std::exclusive_scan(reply_counts_.begin(), reply_counts_.end(), reply_displs_.begin(),
                      int64_t{0});
}

absl::Status OutputDist::PoolLocal(const std::vector<OwnerIds>& owners,
                                   const std::vector<int64_t>& src_batch, int64_t batch) {
  const int n = l_.n;
  const auto& mine = l_.dst_requests[l_.me];
  SizeRoutes(src_batch, batch);
  // Reply layout to sender src: per request of mine, per feature, [batch(src), width]; every
  // float of it is written below (a sender of no samples has no block).
  TESSERA_ASSIGN_OR_RETURN(float* send,
                           send_f_.Reserve(l_.ctx, reply_displs_[n - 1] + reply_counts_[n - 1],
                                           "the pooled partial sums"));
  for (int src = 0; src < n; ++src) {
    float* o = send + reply_displs_[src];
    for (int ri : mine) {
      const int li = l_.requests[ri].local;
      const LocalShard& ls = l_.local[li];
      const OwnerIds& ids = owners[li];
      const int64_t nf = l_.NumFeatures(ls.table);
      for (int64_t fi = 0; fi < nf; ++fi) {
        PooledLookupArgs a;
        a.weights = ls.store->weight_data();
        a.weight_dtype = ls.store->weight_dtype();
        a.dim = ls.width;
        a.offsets = ids.ctx_offsets + ids.offsets_start[src * nf + fi];
        a.indices = ids.ctx_slots;
        a.per_id_weights = ids.ctx_weights;
        a.num_bags = src_batch[src];
        a.pooling = PoolingMode::kSum;
        a.out = o;
        a.out_stride = ls.width;
        if (a.num_bags > 0) TESSERA_RETURN_IF_ERROR(PooledLookupForward(l_.ctx, a));
        o += src_batch[src] * ls.width;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status OutputDist::ExchangeForward() {
  const int n = l_.n;
  TESSERA_ASSIGN_OR_RETURN(float* recv,
                           recv_f_.Reserve(l_.ctx, ask_displs_[n - 1] + ask_counts_[n - 1],
                                           "the received partial sums"));
  // Sending what this rank computed (reply) and receiving what it asked for (ask).
  return ExchangeFloats(send_f_.data(), reply_counts_, reply_displs_, recv, ask_counts_,
                        ask_displs_);
}

absl::Status OutputDist::Reduce(const int64_t* batch_offsets, float* out) {
  const auto& co = l_.options.collection;
  const int n = l_.n;
  const int64_t b = batch_, od = l_.output_dim;
  if (b > 0) TESSERA_RETURN_IF_ERROR(FillFloats(l_.ctx, 0.0f, b * od, out));
  std::vector<const float*> block(l_.requests.size());
  for (int d = 0; d < n; ++d) {
    const float* p = recv_f_.data() + ask_displs_[d];
    for (int ri : l_.dst_requests[d]) {
      block[ri] = p;
      p += b * l_.requests[ri].rect.num_cols() * l_.NumFeatures(l_.requests[ri].table);
    }
  }
  if (b == 0) return absl::OkStatus();
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const TableConfig& cfg = co.tables[t];
    const auto& route = l_.routes[t];
    if (route.data_parallel) continue;
    for (size_t fi = 0; fi < cfg.features.size(); ++fi) {
      const int f = cfg.features[fi];
      for (int ri : route.requests) {  // shard order: columns, then rows
        const Request& r = l_.requests[ri];
        const int64_t w = r.rect.num_cols();
        TESSERA_RETURN_IF_ERROR(AddPartials(l_.ctx, block[ri] + fi * b * w, b, w,
                                            out + l_.feature_column[f] + r.rect.col_begin, od));
      }
      if (cfg.pooling == PoolingMode::kMean) {
        TESSERA_RETURN_IF_ERROR(ScaleBagsByLength(l_.ctx, batch_offsets + static_cast<int64_t>(f) * b,
                                                  b, cfg.dim, out + l_.feature_column[f], od));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status OutputDist::ExchangeBackward(const LocalStep& step,
                                          const std::vector<int64_t>& src_batch,
                                          const float* d_out) {
  const auto& co = l_.options.collection;
  const int n = l_.n;
  const int64_t b = step.batch, od = l_.output_dim;
  SizeRoutes(src_batch, b);
  TESSERA_ASSIGN_OR_RETURN(float* p,
                           send_f_.Reserve(l_.ctx, ask_displs_[n - 1] + ask_counts_[n - 1],
                                           "the output gradient slices"));
  for (int d = 0; d < n && b > 0; ++d) {
    for (int ri : l_.dst_requests[d]) {
      const Request& r = l_.requests[ri];
      const TableConfig& cfg = co.tables[r.table];
      const int64_t w = r.rect.num_cols();
      for (int f : cfg.features) {
        const int64_t* offs = step.ctx_offsets + static_cast<int64_t>(f) * b;
        TESSERA_RETURN_IF_ERROR(
            PackGradSlice(l_.ctx, d_out + l_.feature_column[f] + r.rect.col_begin, od,
                          cfg.pooling == PoolingMode::kMean ? offs : nullptr, b, w, p));
        p += b * w;
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(float* recv,
                           recv_f_.Reserve(l_.ctx, reply_displs_[n - 1] + reply_counts_[n - 1],
                                           "the received gradient slices"));
  return ExchangeFloats(send_f_.data(), ask_counts_, ask_displs_, recv, reply_counts_,
                        reply_displs_);
}

absl::Status OutputDist::Aggregate(const std::vector<OwnerIds>& owners,
                                   const std::vector<int64_t>& src_batch,
                                   std::vector<RowGrads>* grads) {
  const int n = l_.n;
  const auto& mine = l_.dst_requests[l_.me];
  std::vector<std::vector<BagGradients>> sources(mine.size());
  for (int src = 0; src < n; ++src) {
    const float* p = recv_f_.data() + reply_displs_[src];
    for (size_t q = 0; q < mine.size(); ++q) {
      const int li = l_.requests[mine[q]].local;
      const LocalShard& ls = l_.local[li];
      const OwnerIds& ids = owners[li];
      const int64_t nf = l_.NumFeatures(ls.table);
      for (int64_t fi = 0; fi < nf; ++fi) {
        BagGradients bg;
        bg.offsets = ids.ctx_offsets + ids.offsets_start[src * nf + fi];
        bg.indices = ids.ctx_slots;
        bg.per_id_weights = ids.ctx_weights;
        bg.num_bags = src_batch[src];
        bg.grad = p;
        bg.grad_stride = ls.width;
        if (bg.num_bags > 0) sources[q].push_back(bg);
        p += src_batch[src] * ls.width;
      }
    }
  }
  std::vector<int64_t> uslots;
  for (size_t q = 0; q < mine.size(); ++q) {
    const int li = l_.requests[mine[q]].local;
    const LocalShard& ls = l_.local[li];
    const OwnerIds& ids = owners[li];
    RowGrads& rg = (*grads)[li];
    rg.rows.clear();
    rg.grads.clear();
    rg.bags.clear();
    if (sources[q].empty()) continue;
    const bool dynamic = l_.IsDynamic(ls);
    const bool slots_are_rows = !dynamic && ids.uslots == ids.urows;  // in-memory stores
    // A dynamic shard updates its slots fused as an in-memory store does (its rows are then
    // slots, which nothing reads with M = 1 outside column-split AdaGrad, which is not fused).
    if (l_.UpdatesFused(ls) && (slots_are_rows || dynamic)) {
      rg.bags = std::move(sources[q]);  // ApplyShardUpdates pools and applies them in one pass
      if (l_.ctx.is_cuda()) {
        // The CPU update reports its distinct rows (ws->unique_slots); the CUDA one keeps them
        // on the device, so name them here: every unique row received has a position.
        rg.rows = ids.urows;
        std::sort(rg.rows.begin(), rg.rows.end());
        rg.rows.erase(std::unique(rg.rows.begin(), rg.rows.end()), rg.rows.end());
      }
      continue;
    }
    if (slots_are_rows) {
      // Slots are the rows (in-memory stores): AggregateRowGradients's distinct slots, in
      // increasing order, are already the rows ordered by row; aggregate in place.
      TESSERA_RETURN_IF_ERROR(AggregateRowGradients(l_.ctx, sources[q], ls.width, PoolingMode::kSum,
                                                    &ws_, &rg.rows, &rg.grads));
      continue;
    }
    std::vector<float> g;
    TESSERA_RETURN_IF_ERROR(
        AggregateRowGradients(l_.ctx, sources[q], ls.width, PoolingMode::kSum, &ws_, &uslots, &g));
    // Slots back to rows (a tiered store's cache slots; a dynamic shard's keys), ordered by
    // row. A dynamic shard's slot 0 (the zero row of every key without a row) is left out: it
    // learns nothing, and its keys are not rows to sum over replicas or column siblings.
    absl::flat_hash_map<int64_t, int64_t> row_of;
    for (size_t i = 0; i < ids.uslots.size(); ++i) row_of[ids.uslots[i]] = ids.urows[i];
    std::vector<int64_t> order;
    order.reserve(uslots.size());
    for (size_t i = 0; i < uslots.size(); ++i) {
      if (!(dynamic && uslots[i] == 0)) order.push_back(static_cast<int64_t>(i));
    }
    std::vector<int64_t> rows(uslots.size());
    for (int64_t i : order) rows[i] = row_of.at(uslots[i]);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return rows[a] < rows[c]; });
    rg.rows.resize(order.size());
    rg.grads.resize(order.size() * ls.width);
    for (size_t i = 0; i < order.size(); ++i) rg.rows[i] = rows[order[i]];
    TESSERA_RETURN_IF_ERROR(GatherRows(l_.host, g.data(), order.data(),
                                       static_cast<int64_t>(order.size()), ls.width,
                                       rg.grads.data()));
  }
  return absl::OkStatus();
}

absl::Status OutputDist::ExchangeFloats(const float* send, const std::vector<int64_t>& sc,
                                        const std::vector<int64_t>& sd, float* recv,
                                        const std::vector<int64_t>& rc,
                                        const std::vector<int64_t>& rd) {
  const int n = l_.n;
  const PayloadDType dt = l_.options.comm_dtype;
  if (dt == PayloadDType::kF32) return l_.payload->AllToAllV<float>(send, sc, sd, recv, rc, rd);
  const int64_t ns = sd[n - 1] + sc[n - 1], nr = rd[n - 1] + rc[n - 1];
  TESSERA_ASSIGN_OR_RETURN(uint16_t* sh, send_h_.Reserve(l_.ctx, ns, "16-bit payloads"));
  TESSERA_ASSIGN_OR_RETURN(uint16_t* rh, recv_h_.Reserve(l_.ctx, nr, "16-bit payloads"));
  TESSERA_RETURN_IF_ERROR(FloatsTo16(l_.ctx, dt, send, ns, sh));
  TESSERA_RETURN_IF_ERROR(l_.payload->AllToAllV<uint16_t>(sh, sc, sd, rh, rc, rd));
  return FloatsFrom16(l_.ctx, dt, rh, nr, recv);
}

}  // namespace tessera::internal
