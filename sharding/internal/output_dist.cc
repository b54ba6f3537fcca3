// OutputDist (output_dist.h): the owner's pooling, the partial sums' all-to-all and reduce, the
// gradient slices' all-to-all and the owner's aggregation.
#include "sharding/internal/output_dist.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "sharding/internal/shard_kernels.h"
#include "sharding/key_routing.h"

namespace tessera::internal {

namespace {

// The received positions of sender src, feature fi (of nf) of one local shard: [*p0, *p1) of
// ids.slots (empty when the sender had no samples).
void SenderPositions(const OwnerIds& ids, int64_t nf, int src, int64_t fi, int64_t bags,
                     int64_t* p0, int64_t* p1) {
  if (bags == 0) {
    *p0 = *p1 = 0;
    return;
  }
  const int64_t* offs = ids.offsets.data() + ids.offsets_start[src * nf + fi];
  *p0 = offs[0];
  *p1 = offs[bags];
}

}  // namespace

void OutputDist::SizeRoutes(const std::vector<int64_t>& src_batch, int64_t batch,
                            const std::vector<OwnerIds>* owners) {
  const int n = l_.n;
  batch_ = batch;
  ask_counts_.assign(n, 0);
  ask_displs_.assign(n, 0);
  reply_counts_.assign(n, 0);
  reply_displs_.assign(n, 0);
  for (int d = 0; d < n; ++d) {
    for (int ri : l_.dst_requests[d]) {
      const Request& r = l_.requests[ri];
      if (owners == nullptr) {
        ask_counts_[d] += batch * l_.GradStride(r) * l_.NumFeatures(r.table);
      } else if (l_.routes[r.table].rows_back) {
        for (int64_t c : rb_count_[ri]) ask_counts_[d] += c * r.rect.num_cols();
      } else {
        ask_counts_[d] += batch * r.rect.num_cols() * l_.NumFeatures(r.table);
      }
    }
  }
  for (int src = 0; src < n; ++src) {
    for (int ri : l_.dst_requests[l_.me]) {
      const Request& r = l_.requests[ri];
      const LocalShard& ls = l_.local[r.local];
      const int64_t nf = l_.NumFeatures(ls.table);
      if (owners == nullptr) {
        reply_counts_[src] += src_batch[src] * l_.GradStride(r) * nf;
      } else if (l_.routes[ls.table].rows_back) {
        for (int64_t fi = 0; fi < nf; ++fi) {
          int64_t p0, p1;
          SenderPositions((*owners)[r.local], nf, src, fi, src_batch[src], &p0, &p1);
          reply_counts_[src] += (p1 - p0) * ls.width;
        }
      } else {
        reply_counts_[src] += src_batch[src] * ls.width * nf;
      }
    }
  }
  std::exclusive_scan(ask_counts_.begin(), ask_counts_.end(), ask_displs_.begin(), int64_t{0});
  std::exclusive_scan(reply_counts_.begin(), reply_counts_.end(), reply_displs_.begin(),
                      int64_t{0});
}

void OutputDist::RouteRowsBack(const KeyedJagged& local) {
  const auto& co = l_.options.collection;
  rb_count_.resize(l_.requests.size());
  bool any = false;
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    if (!l_.routes[t].rows_back) continue;
    if (!any) block_of_.assign(local.values.size(), -1);
    any = true;
    const auto& route = l_.routes[t];
    const auto& feats = co.tables[t].features;
    for (int ri : route.requests) rb_count_[ri].assign(feats.size(), 0);
    for (size_t fi = 0; fi < feats.size(); ++fi) {
      for (int64_t j = local.feature_begin(feats[fi]); j < local.feature_end(feats[fi]); ++j) {
        // The block the input dist routed the key to (InputDist::BucketIds).
        const int32_t blk =
            static_cast<int32_t>(route.BlockOf(local.values[j], co.tables[t].num_rows));
        block_of_[j] = blk;
        for (int ri : route.block_requests[blk]) ++rb_count_[ri][fi];
      }
    }
  }
}

absl::Status OutputDist::PoolLocal(const std::vector<OwnerIds>& owners,
                                   const std::vector<int64_t>& src_batch, const KeyedJagged& local,
                                   int64_t batch) {
  const int n = l_.n;
  const auto& mine = l_.dst_requests[l_.me];
  RouteRowsBack(local);  // an empty batch too: it asks for nothing
  SizeRoutes(src_batch, batch, &owners);
  // Reply layout to sender src: per request of mine, per feature, [batch(src), width] (rows_back:
  // [positions of src, width]); every float of it is written below (a sender of no samples has
  // no block).
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
        if (l_.routes[ls.table].rows_back) {
          // The rows themselves in position order, as bags of one id (the lookup kernel's
          // prefetching gather; 0 + 1 * row is the row, a -0 read as +0, which adds the same
          // to a bag's sum); a key without a row reads its slot 0 (zeros).
          int64_t p0, p1;
          SenderPositions(ids, nf, src, fi, src_batch[src], &p0, &p1);
          if (static_cast<int64_t>(unit_offsets_.size()) <= p1) {
            const int64_t had = static_cast<int64_t>(unit_offsets_.size());
            unit_offsets_.resize(p1 + 1);
            std::iota(unit_offsets_.begin() + had, unit_offsets_.end(), had);
          }
          PooledLookupArgs a;
          a.weights = ls.store->weight_data();
          a.weight_dtype = ls.store->weight_dtype();
          a.dim = ls.width;
          a.offsets = unit_offsets_.data() + p0;
          a.indices = ids.ctx_slots;
          a.num_bags = p1 - p0;
          a.pooling = PoolingMode::kSum;
          a.out = o;
          a.out_stride = ls.width;
          if (a.num_bags > 0) TESSERA_RETURN_IF_ERROR(PooledLookupForward(l_.ctx, a));
          o += (p1 - p0) * ls.width;
          continue;
        }
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

OutputDist::OutputDist(const ShardLayout& layout) : l_(layout) {
  first_.assign(l_.requests.size(), 1);
  for (const auto& route : l_.routes) {
    for (size_t i = 0; i < route.requests.size(); ++i) {
      const Shard& ri = l_.requests[route.requests[i]].rect;
      for (size_t j = 0; j < i; ++j) {
        const Shard& rj = l_.requests[route.requests[j]].rect;
        if (rj.col_end <= ri.col_begin || ri.col_end <= rj.col_begin) continue;
        first_[route.requests[i]] = 0;
        zero_out_ |= rj.col_begin != ri.col_begin || rj.col_end != ri.col_end;
      }
    }
  }
}

absl::Status OutputDist::Reduce(const KeyedJagged& local, const int64_t* batch_offsets,
                                float* out) {
  const auto& co = l_.options.collection;
  const int n = l_.n;
  const int64_t b = batch_, od = l_.output_dim;
  // No zeroing pass over the output: every column is written by its first partial (AddPartials
  // `first`), a data-parallel table's lookup or a rows-back pooling; unless some table's shards'
  // columns overlap only in part (not a plan the planner makes): then zeroed and added into.
  if (b > 0 && zero_out_) TESSERA_RETURN_IF_ERROR(FillFloats(l_.ctx, 0.0f, b * od, out));
  std::vector<const float*> block(l_.requests.size());
  for (int d = 0; d < n; ++d) {
    const float* p = recv_f_.data() + ask_displs_[d];
    for (int ri : l_.dst_requests[d]) {
      const Request& r = l_.requests[ri];
      block[ri] = p;
      if (b == 0) continue;
      if (l_.routes[r.table].rows_back) {
        for (int64_t c : rb_count_[ri]) p += c * r.rect.num_cols();
      } else {
        p += b * r.rect.num_cols() * l_.NumFeatures(r.table);
      }
    }
  }
  if (b == 0) return absl::OkStatus();
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const TableConfig& cfg = co.tables[t];
    const auto& route = l_.routes[t];
    if (route.data_parallel) continue;
    for (size_t fi = 0; fi < cfg.features.size(); ++fi) {
      const int f = cfg.features[fi];
      if (route.rows_back) {
        // block[] advances feature by feature through each request's returned rows.
        TESSERA_RETURN_IF_ERROR(PoolRowsBack(local, t, fi, &block, out));
        continue;
      }
      for (int ri : route.requests) {  // shard order: columns, then rows
        const Request& r = l_.requests[ri];
        const int64_t w = r.rect.num_cols();
        TESSERA_RETURN_IF_ERROR(AddPartials(l_.ctx, block[ri] + fi * b * w, b, w,
                                            out + l_.feature_column[f] + r.rect.col_begin, od,
                                            first_[ri] != 0 && !zero_out_));
      }
      if (cfg.pooling == PoolingMode::kMean) {
        TESSERA_RETURN_IF_ERROR(ScaleBagsByLength(l_.ctx,
                                                  batch_offsets + static_cast<int64_t>(f) * b, b,
                                                  cfg.dim, out + l_.feature_column[f], od));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status OutputDist::PoolRowsBack(const KeyedJagged& local, int t, size_t fi,
                                      std::vector<const float*>* cur, float* out) {
  const TableConfig& cfg = l_.options.collection.tables[t];
  const auto& route = l_.routes[t];
  const int f = cfg.features[fi];
  const int64_t b = batch_, od = l_.output_dim;
  const int64_t fb = local.feature_begin(f), np = local.feature_end(f) - fb;
  // The feature's bags over a staging table whose row i is position fb + i's row.
  stage_offsets_.resize(b + 1);
  const int64_t* offs = local.feature_offsets(f);
  for (int64_t i = 0; i <= b; ++i) stage_offsets_[i] = offs[i] - fb;
  if (static_cast<int64_t>(stage_index_.size()) < np) {
    const int64_t had = static_cast<int64_t>(stage_index_.size());
    stage_index_.resize(np);
    std::iota(stage_index_.begin() + had, stage_index_.end(), had);
  }
  // One pass per column segment (the table's shards' column boundaries, sorted: one segment
  // for row_wise and table_row_wise), each position taking the segment from the shard holding
  // its row block's columns there. The positions a shard receives are exactly those of the
  // blocks it covers, so within a pass a per-shard counter finds each position's row.
  std::vector<int64_t> cuts;
  for (int ri : route.requests) {
    cuts.push_back(l_.requests[ri].rect.col_begin);
    cuts.push_back(l_.requests[ri].rect.col_end);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<int> req_of_block(route.block_requests.size());
  std::vector<int64_t> seen(l_.requests.size());
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    const int64_t c0 = cuts[s], w = cuts[s + 1] - c0;
    for (size_t blk = 0; blk < route.block_requests.size(); ++blk) {
      req_of_block[blk] = -1;
      for (int ri : route.block_requests[blk]) {
        const Shard& r = l_.requests[ri].rect;
        if (r.col_begin <= c0 && c0 < r.col_end) req_of_block[blk] = ri;
      }
    }
    for (int ri : route.requests) seen[ri] = 0;
    stage_.resize(np * w);
    for (int64_t i = 0; i < np; ++i) {
      const int ri = req_of_block[block_of_[fb + i]];
      const Shard& r = l_.requests[ri].rect;
      const float* row = (*cur)[ri] + seen[ri]++ * r.num_cols() + (c0 - r.col_begin);
      std::memcpy(stage_.data() + i * w, row, w * sizeof(float));
    }
    PooledLookupArgs a;
    a.weights = stage_.data();
    a.dim = w;
    a.offsets = stage_offsets_.data();
    a.indices = stage_index_.data();
    a.per_id_weights = local.weights.empty() ? nullptr : local.weights.data() + fb;
    a.num_bags = b;
    a.pooling = cfg.pooling;
    a.out = out + l_.feature_column[f] + c0;
    a.out_stride = od;
    TESSERA_RETURN_IF_ERROR(PooledLookupForward(l_.ctx, a));
  }
  for (int ri : route.requests) {
    (*cur)[ri] += rb_count_[ri][fi] * l_.requests[ri].rect.num_cols();
  }
  return absl::OkStatus();
}

absl::Status OutputDist::ExchangeBackward(const LocalStep& step,
                                          const std::vector<int64_t>& src_batch,
                                          const float* d_out) {
  const auto& co = l_.options.collection;
  const int n = l_.n;
  const int64_t b = step.batch, od = l_.output_dim;
  SizeRoutes(src_batch, b, nullptr);
  TESSERA_ASSIGN_OR_RETURN(float* p,
                           send_f_.Reserve(l_.ctx, ask_displs_[n - 1] + ask_counts_[n - 1],
                                           "the output gradient slices"));
  for (int d = 0; d < n && b > 0; ++d) {
    for (int ri : l_.dst_requests[d]) {
      const Request& r = l_.requests[ri];
      const TableConfig& cfg = co.tables[r.table];
      const int64_t w = r.rect.num_cols();
      const int64_t stride = l_.GradStride(r);
      for (int f : cfg.features) {
        const int64_t* offs = step.ctx_offsets + static_cast<int64_t>(f) * b;
        if (stride != w) {
          // A dynamic mean table (host memory, CheckDynamicTable): per bag its gradient
          // columns unscaled, then 1 / length as FusedBackwardUpdate computes it.
          for (int64_t i = 0; i < b; ++i) {
            std::memcpy(p + i * stride, d_out + i * od + l_.feature_column[f] + r.rect.col_begin,
                        w * sizeof(float));
            const int64_t len = offs[i + 1] - offs[i];
            p[i * stride + w] = len > 0 ? 1.0f / static_cast<float>(len) : 1.0f;
          }
          p += b * stride;
          continue;
        }
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
  // Per local shard, per (feature, sender): a dynamic shard's sources are summed feature-major,
  // the global batch's order (output_dist.h).
  std::vector<std::vector<BagGradients>> by_feature(mine.size());
  id_scales_.resize(l_.local.size());
  for (int src = 0; src < n; ++src) {
    const float* p = recv_f_.data() + reply_displs_[src];
    for (size_t q = 0; q < mine.size(); ++q) {
      const Request& r = l_.requests[mine[q]];
      const int li = r.local;
      const LocalShard& ls = l_.local[li];
      const OwnerIds& ids = owners[li];
      const int64_t nf = l_.NumFeatures(ls.table);
      const int64_t stride = l_.GradStride(r);
      const bool dynamic = l_.IsDynamic(ls);
      if (dynamic) by_feature[q].resize(nf * n);
      for (int64_t fi = 0; fi < nf; ++fi) {
        BagGradients bg;
        bg.offsets = ids.ctx_offsets + ids.offsets_start[src * nf + fi];
        bg.indices = ids.ctx_slots;
        bg.per_id_weights = ids.ctx_weights;
        bg.num_bags = src_batch[src];
        bg.grad = p;
        bg.grad_stride = stride;
        if (stride != ls.width && bg.num_bags > 0) {
          // A dynamic mean table: each position weighs (per-id weight) * (its bag's 1 / length),
          // the factor FusedBackwardUpdate applies on one process; the kSum aggregation below
          // multiplies it by 1 (exact).
          std::vector<float>& sc = id_scales_[li];
          sc.resize(ids.slots.size());
          for (int64_t k = 0; k < bg.num_bags; ++k) {
            const float inv = p[k * stride + ls.width];
            for (int64_t j = bg.offsets[k]; j < bg.offsets[k + 1]; ++j) {
              sc[j] = (ids.weights.empty() ? 1.0f : ids.weights[j]) * inv;
            }
          }
          bg.per_id_weights = sc.data();
        }
        if (dynamic) {
          by_feature[q][fi * n + src] = bg;
        } else if (bg.num_bags > 0) {
          sources[q].push_back(bg);
        }
        p += src_batch[src] * stride;
      }
    }
  }
  for (size_t q = 0; q < mine.size(); ++q) {
    for (const BagGradients& bg : by_feature[q]) {
      if (bg.num_bags > 0) sources[q].push_back(bg);
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
    rg.sources.clear();
    const bool dynamic = l_.IsDynamic(ls);
    if (dynamic && l_.m > 1 && l_.options.replica_sync == ReplicaSync::kExact) {
      // Summed with the other replicas' in the global batch's order (ReplicaSyncPhase).
      rg.sources = std::move(by_feature[q]);
      continue;
    }
    if (sources[q].empty()) continue;
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
  TESSERA_ASSIGN_OR_RETURN(uint16_t * sh, send_h_.Reserve(l_.ctx, ns, "16-bit payloads"));
  TESSERA_ASSIGN_OR_RETURN(uint16_t * rh, recv_h_.Reserve(l_.ctx, nr, "16-bit payloads"));
  TESSERA_RETURN_IF_ERROR(FloatsTo16(l_.ctx, dt, send, ns, sh));
  TESSERA_RETURN_IF_ERROR(l_.payload->AllToAllV<uint16_t>(sh, sc, sd, rh, rc, rd));
  return FloatsFrom16(l_.ctx, dt, rh, nr, recv);
}

}  // namespace tessera::internal
