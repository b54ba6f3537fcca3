// ShardedEmbeddingCollection: setup, input/output dist, forward and backward routes, export.
// Replica sync, data-parallel tables and column-split AdaGrad are in internal/sharded_sync.cc.
#include "sharding/sharded_embedding.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/row_init.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera {

using internal::Align8;
using internal::BucketIds;
using internal::CheckBatch;
using internal::HeaderInts;
using internal::kErrorFlag;
using internal::kWeightedFlag;
using internal::LocalShard;
using internal::MakeStore;
using internal::NumFeatures;
using internal::Request;

ShardedEmbeddingCollection::~ShardedEmbeddingCollection() = default;


absl::StatusOr<std::unique_ptr<ShardedEmbeddingCollection>> ShardedEmbeddingCollection::Create(
    const ShardedEmbeddingOptions& options, const ProcessGrid& grid, const DeviceContext& ctx) {
  if (ctx.is_cuda()) {
    return absl::UnimplementedError(
        "ShardedEmbeddingCollection: the CUDA path is not implemented yet (host memory only)");
  }
  const auto& co = options.collection;
  // The single-process collection validates tables and features; building one over empty stores
  // would cost memory, so repeat its checks on a tiny copy of the options instead.
  {
    EmbeddingCollectionOptions probe = co;
    for (auto& t : probe.tables) {
      if (t.num_rows <= 0 || t.dim <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table '", t.name, "': num_rows and dim must be positive (got ", t.num_rows, " x ",
            t.dim, ")"));
      }
      t.num_rows = 1;
    }
    TESSERA_RETURN_IF_ERROR(EmbeddingCollection::Create(probe, ctx).status());
  }
  if (options.sync_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharding.sync_every must be >= 1, got ", options.sync_every));
  }
  std::unique_ptr<ShardedEmbeddingCollection> c(new ShardedEmbeddingCollection());
  c->impl_ = std::make_unique<Impl>();
  Impl& s = *c->impl_;
  s.options = options;
  s.ctx = ctx;
  s.world = grid.world_ptr();
  s.group = grid.sharding_group_ptr();
  s.replica = grid.replica_group_ptr();
  s.n = grid.group_size();
  s.m = grid.num_groups();
  s.me = grid.shard_rank();
  if (options.plan.tables.empty()) {
    TESSERA_ASSIGN_OR_RETURN(s.plan, ValidateShardingPlan(DefaultShardingPlan(co.tables, s.n),
                                                          co.tables, s.n, "default plan"));
  } else {
    TESSERA_ASSIGN_OR_RETURN(s.plan, ValidateShardingPlan(options.plan, co.tables, s.n,
                                                          "sharding plan"));
  }
  // 16-bit tables (storage.dtype fp16 / bf16) run the row update of embedding/pooled_lookup.h;
  // the two paths that update rows themselves take fp32 tables only for now.
  for (const TableConfig& cfg : co.tables) {
    if (cfg.storage.dtype == RowDtype::kF32) continue;
    if (options.replica_sync == ReplicaSync::kAverage && s.m > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", cfg.name, "': storage.dtype ", RowDtypeName(cfg.storage.dtype),
          " is not supported with sharding.replica_sync average yet (use exact, or fp32)"));
    }
  }
  s.update_opt = co.optimizer;
  if (options.replica_sync == ReplicaSync::kAverage) {
    s.update_opt.adagrad_divisor =
        options.adagrad_divisor > 0 ? options.adagrad_divisor : static_cast<float>(s.m);
  }

  s.table_of_feature.assign(co.num_features, -1);
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    for (int f : co.tables[t].features) s.table_of_feature[f] = t;
  }
  s.feature_column.resize(co.num_features);
  for (int f = 0; f < co.num_features; ++f) {
    s.feature_column[f] = s.output_dim;
    s.output_dim += co.tables[s.table_of_feature[f]].dim;
  }

  s.routes.resize(co.tables.size());
  s.dst_requests.assign(s.n, {});
  // A store that fails to open (a RocksDB path not writable, memory short) must fail Create on
  // every rank, or the others would wait in the first collective: the first error is kept and
  // the ranks agree below.
  absl::Status store_error;
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const TableConfig& cfg = co.tables[t];
    const TablePlan& tp = s.plan.tables[t];
    auto& route = s.routes[t];
    if (tp.type == ShardingType::kDataParallel) {
      route.data_parallel = true;
      route.dp = static_cast<int>(s.dp.size());
      internal::DpTable d;
      d.table = t;
      if (cfg.storage.tier == StorageTier::kRocksDb) {
        // The data-parallel update indexes the all-reduced gradient table by slot (slot == row
        // in memory), and a replicated table gains nothing from a per-rank database.
        return absl::InvalidArgumentError(absl::StrCat(
            "table '", cfg.name, "': storage.tier rocksdb is not supported for a data_parallel "
            "table (replicated on every rank); use storage.tier memory or shard it"));
      }
      auto store = MakeStore(co, t, 0, cfg.num_rows, 0, cfg.dim, s.world->rank(), 0);
      if (!store.ok()) {
        if (store_error.ok()) store_error = store.status();
        continue;
      }
      d.store = std::move(store).value();
      s.dp.push_back(std::move(d));
      continue;
    }
    std::vector<int64_t> bounds = {0, cfg.num_rows};
    for (const Shard& sh : tp.shards) {
      bounds.push_back(sh.row_begin);
      bounds.push_back(sh.row_end);
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    route.bounds = bounds;
    route.block_requests.assign(bounds.size() - 1, {});
    for (int k = 0; k < static_cast<int>(tp.shards.size()); ++k) {
      const Shard& sh = tp.shards[k];
      Request r;
      r.table = t;
      r.shard = k;
      r.rect = sh;
      r.owner = sh.rank;
      r.col_split = sh.num_cols() != cfg.dim;
      if (r.col_split && cfg.storage.dtype != RowDtype::kF32 &&
          co.optimizer.type == RowOptimizerType::kRowWiseAdagrad) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table '", cfg.name, "': storage.dtype ", RowDtypeName(cfg.storage.dtype),
            " with a column split (column_wise / grid sharding) and rowwise_adagrad is not "
            "supported yet; shard it by rows or tables, or use fp32"));
      }
      const int index = static_cast<int>(s.requests.size());
      for (size_t b = 0; b + 1 < bounds.size(); ++b) {
        if (bounds[b] >= sh.row_begin && bounds[b] < sh.row_end) {
          route.block_requests[b].push_back(index);
        }
      }
      route.requests.push_back(index);
      s.dst_requests[sh.rank].push_back(index);
      if (sh.rank == s.me) {
        LocalShard ls;
        ls.request = index;
        ls.table = t;
        ls.rect = sh;
        ls.width = sh.num_cols();
        ls.col_split = r.col_split;
        auto store = MakeStore(co, t, sh.row_begin, sh.row_end, sh.col_begin, sh.col_end,
                               s.world->rank(), k);
        if (!store.ok()) {
          if (store_error.ok()) store_error = store.status();
        } else {
          ls.store = std::move(store).value();
        }
        r.local = static_cast<int>(s.local.size());
        s.local.push_back(std::move(ls));
      }
      const size_t nf = cfg.features.size();
      r.lengths.resize(nf);
      r.pos.resize(nf);
      r.wts.resize(nf);
      s.requests.push_back(std::move(r));
    }
  }
  // Only with a RocksDB-tier table (the same on every rank), so the all-in-memory Create keeps
  // its collectives (and communicator stats) unchanged.
  bool any_tiered = false;
  for (const TableConfig& cfg : co.tables) any_tiered |= cfg.storage.tier == StorageTier::kRocksDb;
  if (any_tiered) {
    int64_t failed = store_error.ok() ? 0 : 1;
    TESSERA_RETURN_IF_ERROR(s.world->AllReduce(&failed, 1, ReduceOp::kSum));
    if (failed > 0) {
      if (!store_error.ok()) return store_error;
      return absl::FailedPreconditionError(absl::StrCat(
          "ShardedEmbeddingCollection::Create: ", failed,
          " rank(s) could not open their shard stores (see their errors)"));
    }
  } else if (!store_error.ok()) {
    return store_error;
  }
  return c;
}

int64_t ShardedEmbeddingCollection::output_dim() const { return impl_->output_dim; }
int64_t ShardedEmbeddingCollection::feature_column(int f) const {
  return impl_->feature_column[f];
}
int ShardedEmbeddingCollection::num_tables() const {
  return static_cast<int>(impl_->options.collection.tables.size());
}
const TableConfig& ShardedEmbeddingCollection::table(int t) const {
  return impl_->options.collection.tables[t];
}
const ShardingPlan& ShardedEmbeddingCollection::plan() const { return impl_->plan; }
void ShardedEmbeddingCollection::set_phase_times(PhaseTimes* times) { impl_->times = times; }


int64_t ShardedEmbeddingCollection::prefetched_forwards() const {
  return impl_->prefetched_forwards;
}

void ShardedEmbeddingCollection::Prefetch(const KeyedJagged& next) {
  Impl& s = *impl_;
  if (!s.options.pipeline_input_dist) return;
  internal::PackInput(s, next, /*keep_batch=*/true, &s.staged);
  s.staged_valid = true;
}

absl::Status ShardedEmbeddingCollection::Forward(const KeyedJagged& batch, float* out) {
  Impl& s = *impl_;
  const auto& co = s.options.collection;
  Communicator& g = *s.group;
  const int n = s.n;
  const bool pipe = s.options.pipeline_input_dist;
  std::optional<ScopedPhase> phase_in;
  phase_in.emplace(s.times, "input_dist");
  if (s.pending) {
    // The last Forward had no BackwardUpdate (evaluation): its rows were only read. End that
    // step so a tiered shard unpins them (without marking them dirty); otherwise every forward of
    // an evaluation would pin more rows until the cache is full.
    for (auto& ls : s.local) TESSERA_RETURN_IF_ERROR(ls.store->EndReadOnlyStep());
    for (auto& d : s.dp) TESSERA_RETURN_IF_ERROR(d.store->EndReadOnlyStep());
  }
  s.pending = false;

  // This batch's input dist: already travelling (prefetched) or packed now.
  const bool use_mine = s.inflight != nullptr && internal::SameBatch(s.inflight->packed, batch);
  if (!use_mine) internal::PackInput(s, batch, /*keep_batch=*/false, &s.fresh);
  const internal::PackedInput& cur = use_mine ? s.inflight->packed : s.fresh;
  absl::Status bad = cur.bad;
  if (bad.ok() && out == nullptr && batch.batch_size > 0) {
    bad = absl::InvalidArgumentError("ShardedEmbeddingCollection::Forward: null out");
  }
  s.batch = bad.ok() ? cur.batch : 0;
  s.weighted = bad.ok() && cur.weighted;

  // 1. Headers (fixed size per pair): A for this batch, and with pipelining B for the batch
  // Prefetch packed, so the group agrees on what is prefetched without another exchange.
  const int sections = pipe ? 2 : 1;
  const int64_t hme = HeaderInts(s, s.me);
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  for (int d = 0; d < n; ++d) sc[d] = sections * HeaderInts(s, d);
  for (int d = 0; d < n; ++d) rc[d] = sections * hme;
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t{0});
  std::vector<int64_t> hsend(sd[n - 1] + sc[n - 1], 0), hrecv(rd[n - 1] + rc[n - 1]);
  for (int d = 0; d < n; ++d) {
    const int64_t hd = HeaderInts(s, d);
    int64_t* h = hsend.data() + sd[d];
    std::memcpy(h, cur.header.data() + cur.hdispl[d], hd * sizeof(int64_t));
    h[0] = s.batch;
    h[1] |= (bad.ok() ? 0 : kErrorFlag) | (use_mine ? internal::kPrefetchedFlag : 0);
    if (pipe && s.staged_valid) {
      std::memcpy(h + hd, s.staged.header.data() + s.staged.hdispl[d], hd * sizeof(int64_t));
      h[hd + 1] |= internal::kStagedFlag;
    }
  }
  TESSERA_RETURN_IF_ERROR(g.AllToAllV<int64_t>(hsend.data(), sc, sd, hrecv.data(), rc, rd));
  if (!bad.ok()) return bad;
  bool all_use = true, any_use = false, all_staged = pipe;
  for (int src = 0; src < n; ++src) {
    const int64_t flags = hrecv[rd[src] + 1];
    if (flags & kErrorFlag) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ShardedEmbeddingCollection::Forward: rank ", g.world_ranks()[src],
          " of this sharding group got a bad batch (its error says which)"));
    }
    const bool used = (flags & internal::kPrefetchedFlag) != 0;
    all_use &= used;
    any_use |= used;
    if (pipe) {
      const int64_t fb = hrecv[rd[src] + hme + 1];
      all_staged &= (fb & internal::kStagedFlag) && !(fb & kErrorFlag);
    }
  }

  // 2. Payload: the prefetched one when every rank of the group has its batch in flight,
  // otherwise the blocking all-to-all (a prefetch some ranks could not use is dropped).
  const internal::ReceivedInput* in = nullptr;
  // A batch in flight that this Forward does not use (an evaluation's) stays for a later one.
  const bool keeps_inflight = s.inflight != nullptr && !any_use;
  if (all_use) {
    s.in_use = std::move(s.inflight);
    TESSERA_RETURN_IF_ERROR(s.in_use->pending->Wait());
    in = &s.in_use->received;
    ++s.prefetched_forwards;
  } else {
    s.fresh_in.header.resize(static_cast<size_t>(n) * hme);
    for (int src = 0; src < n; ++src) {
      std::memcpy(s.fresh_in.header.data() + src * hme, hrecv.data() + rd[src],
                  hme * sizeof(int64_t));
    }
    internal::SizeReceived(s, &s.fresh_in);
    TESSERA_RETURN_IF_ERROR(g.AllToAllV(cur.payload.data(), cur.pbytes, cur.pdispl,
                                        s.fresh_in.payload.data(), s.fresh_in.qbytes,
                                        s.fresh_in.qdispl));
    in = &s.fresh_in;
    if (any_use) {
      TESSERA_RETURN_IF_ERROR(s.inflight->pending->Wait());
      s.inflight.reset();
    }
  }
  // The next batch's payload starts now and travels during this step's dense work.
  if (all_staged && s.inflight == nullptr) {
    auto next = std::make_unique<internal::InflightInput>();
    std::swap(next->packed, s.staged);
    s.staged_valid = false;
    next->received.header.resize(static_cast<size_t>(n) * hme);
    for (int src = 0; src < n; ++src) {
      std::memcpy(next->received.header.data() + src * hme, hrecv.data() + rd[src] + hme,
                  hme * sizeof(int64_t));
    }
    internal::SizeReceived(s, &next->received);
    const internal::PackedInput& p = next->packed;
    TESSERA_ASSIGN_OR_RETURN(
        next->pending, g.StartAllToAllV(p.payload.data(), p.pbytes, p.pdispl,
                                        next->received.payload.data(), next->received.qbytes,
                                        next->received.qdispl));
    s.inflight = std::move(next);
  } else if (pipe && !all_staged) {
    s.staged_valid = false;
  }
  phase_in.reset();

  // 3. Owner: unpack, resolve once per shard, pool each (sender, feature) into the reply.
  {
    ScopedPhase phase(s.times, "lookup");
    TESSERA_RETURN_IF_ERROR(s.LookupReceived(*in, &rc, &rd));
  }
  // Average mode: the next sync's rows are known now when this step's update syncs.
  TESSERA_RETURN_IF_ERROR(s.StartSyncAhead());
  s.in_use.reset();

  // 4. Output dist: partial sums back to the requesters.
  ScopedPhase phase_out(s.times, "output_dist");
  for (int d = 0; d < n; ++d) {
    sc[d] = 0;
    for (int ri : s.dst_requests[d]) {
      const Request& r = s.requests[ri];
      sc[d] += s.batch * r.rect.num_cols() * NumFeatures(s, r.table);
    }
  }
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t{0});
  s.recv_f.resize(sd[n - 1] + sc[n - 1]);
  // Sending what this rank computed (rc/rd) and receiving what it asked for (sc/sd).
  TESSERA_RETURN_IF_ERROR(s.ExchangeFloats(s.send_f.data(), rc, rd, s.recv_f.data(), sc, sd));
  TESSERA_RETURN_IF_ERROR(s.AdvanceSyncAhead());

  const int64_t b = s.batch, od = s.output_dim;
  if (b > 0) std::fill(out, out + b * od, 0.0f);
  std::vector<const float*> block(s.requests.size());
  for (int d = 0; d < n; ++d) {
    const float* p = s.recv_f.data() + sd[d];
    for (int ri : s.dst_requests[d]) {
      block[ri] = p;
      p += b * s.requests[ri].rect.num_cols() * NumFeatures(s, s.requests[ri].table);
    }
  }
  s.offsets.assign(batch.offsets.begin(), batch.offsets.end());
  s.id_weights.assign(batch.weights.begin(), batch.weights.end());
  s.dp_slots.resize(batch.values.size());
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const TableConfig& cfg = co.tables[t];
    const auto& route = s.routes[t];
    if (route.data_parallel) {
      RowStore& store = *s.dp[route.dp].store;
      for (int f : cfg.features) {
        const int64_t fb = batch.feature_begin(f), nv = batch.feature_end(f) - fb;
        TESSERA_RETURN_IF_ERROR(store.Resolve(absl::MakeConstSpan(batch.values.data() + fb, nv),
                                              absl::MakeSpan(s.dp_slots.data() + fb, nv)));
      }
      for (int f : cfg.features) {
        PooledLookupArgs a;
        a.weights = store.weight_data();
        a.weight_dtype = store.weight_dtype();
        a.dim = cfg.dim;
        a.offsets = batch.feature_offsets(f);
        a.indices = s.dp_slots.data();
        a.per_id_weights = s.weighted ? batch.weights.data() : nullptr;
        a.num_bags = b;
        a.pooling = cfg.pooling;
        a.out = out + s.feature_column[f];
        a.out_stride = od;
        if (b > 0) TESSERA_RETURN_IF_ERROR(PooledLookupForward(s.ctx, a));
      }
      continue;
    }
    for (size_t fi = 0; fi < cfg.features.size(); ++fi) {
      const int f = cfg.features[fi];
      for (int ri : route.requests) {  // shard order: columns, then rows
        const Request& r = s.requests[ri];
        const int64_t w = r.rect.num_cols();
        const float* src = block[ri] + fi * b * w;
        float* dst = out + s.feature_column[f] + r.rect.col_begin;
        for (int64_t i = 0; i < b; ++i) {
          for (int64_t c = 0; c < w; ++c) dst[i * od + c] += src[i * w + c];
        }
      }
      if (cfg.pooling == PoolingMode::kMean) {
        const int64_t* offs = batch.feature_offsets(f);
        for (int64_t i = 0; i < b; ++i) {
          const int64_t len = offs[i + 1] - offs[i];
          if (len == 0) continue;
          const float inv = 1.0f / static_cast<float>(len);
          float* row = out + i * od + s.feature_column[f];
          for (int64_t c = 0; c < cfg.dim; ++c) row[c] *= inv;
        }
      }
    }
  }
  // The sync's rows first, then the next batch's: a store stages its two latest hints, and the
  // sync hands over the next batch's rows again (AverageSync) after resolving its own. Not while
  // a batch in flight was kept: its rows, staged already, must stay staged for its Forward.
  TESSERA_RETURN_IF_ERROR(s.FinishSyncAhead(/*hint=*/!keeps_inflight));
  // The next batch's payload has usually landed during this step's all-to-alls: hand its rows
  // to the tiered shards now, so their reads overlap the dense work (else BackwardUpdate waits).
  TESSERA_RETURN_IF_ERROR(s.HintNextRows(/*wait=*/false));
  s.pending = true;
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::BackwardUpdate(const float* d_out, float lr,
                                                        int64_t step) {
  Impl& s = *impl_;
  const auto& co = s.options.collection;
  if (!s.pending) {
    return absl::FailedPreconditionError(
        "ShardedEmbeddingCollection::BackwardUpdate: no Forward since the last update");
  }
  s.pending = false;
  if (d_out == nullptr && s.batch > 0) {
    // Other ranks are already heading into the gradient all-to-all: this is a caller bug.
    return absl::InvalidArgumentError("ShardedEmbeddingCollection::BackwardUpdate: null d_out");
  }
  const int n = s.n;
  const int64_t b = s.batch, od = s.output_dim;
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  {
    ScopedPhase phase(s.times, "backward_dist");
    for (int d = 0; d < n; ++d) {
      sc[d] = 0;
      for (int ri : s.dst_requests[d]) {
        sc[d] += b * s.requests[ri].rect.num_cols() * NumFeatures(s, s.requests[ri].table);
      }
    }
    std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t{0});
    s.send_f.resize(sd[n - 1] + sc[n - 1]);
    float* p = s.send_f.data();
    for (int d = 0; d < n; ++d) {
      for (int ri : s.dst_requests[d]) {
        const Request& r = s.requests[ri];
        const TableConfig& cfg = co.tables[r.table];
        const int64_t w = r.rect.num_cols();
        for (int f : cfg.features) {
          const int64_t* offs = s.offsets.data() + static_cast<int64_t>(f) * b;
          for (int64_t i = 0; i < b; ++i) {
            const float* g = d_out + i * od + s.feature_column[f] + r.rect.col_begin;
            const int64_t len = offs[i + 1] - offs[i];
            if (cfg.pooling == PoolingMode::kMean && len > 0) {
              const float inv = 1.0f / static_cast<float>(len);
              for (int64_t c = 0; c < w; ++c) p[c] = g[c] * inv;
            } else {
              std::memcpy(p, g, w * sizeof(float));
            }
            p += w;
          }
        }
      }
    }
    for (int src = 0; src < n; ++src) {
      rc[src] = 0;
      for (int ri : s.dst_requests[s.me]) {
        const LocalShard& ls = s.local[s.requests[ri].local];
        rc[src] += s.src_batch[src] * ls.width * NumFeatures(s, ls.table);
      }
    }
    std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t{0});
    s.recv_f.resize(rd[n - 1] + rc[n - 1]);
    TESSERA_RETURN_IF_ERROR(s.ExchangeFloats(s.send_f.data(), sc, sd, s.recv_f.data(), rc, rd));
    // The next batch's rows, if Forward could not hint them yet: its payload is due at the next
    // Forward anyway, so waiting here costs nothing there and the reads overlap the update.
    TESSERA_RETURN_IF_ERROR(s.HintNextRows(/*wait=*/true));
  }
  {
    ScopedPhase phase(s.times, "aggregate");
    const auto& mine = s.dst_requests[s.me];
    std::vector<std::vector<BagGradients>> sources(mine.size());
    for (int src = 0; src < n; ++src) {
      const float* p = s.recv_f.data() + rd[src];
      for (size_t q = 0; q < mine.size(); ++q) {
        LocalShard& ls = s.local[s.requests[mine[q]].local];
        const int64_t nf = NumFeatures(s, ls.table);
        for (int64_t fi = 0; fi < nf; ++fi) {
          BagGradients bg;
          bg.offsets = ls.offsets.data() + ls.offsets_start[src * nf + fi];
          bg.indices = ls.slots.data();
          bg.per_id_weights = ls.weights.empty() ? nullptr : ls.weights.data();
          bg.num_bags = s.src_batch[src];
          bg.grad = p;
          bg.grad_stride = ls.width;
          if (bg.num_bags > 0) sources[q].push_back(bg);
          p += s.src_batch[src] * ls.width;
        }
      }
    }
    std::vector<int64_t> uslots;
    for (size_t q = 0; q < mine.size(); ++q) {
      LocalShard& ls = s.local[s.requests[mine[q]].local];
      ls.rows.clear();
      ls.grads.clear();
      if (sources[q].empty()) continue;
      if (ls.uslots == ls.urows) {
        // Slots are the rows (in-memory stores): AggregateRowGradients's distinct slots, in
        // increasing order, are already the rows ordered by row; aggregate in place.
        TESSERA_RETURN_IF_ERROR(AggregateRowGradients(s.ctx, sources[q], ls.width,
                                                      PoolingMode::kSum, &s.ws, &ls.rows,
                                                      &ls.grads));
        continue;
      }
      std::vector<float> grads;
      TESSERA_RETURN_IF_ERROR(AggregateRowGradients(s.ctx, sources[q], ls.width,
                                                    PoolingMode::kSum, &s.ws, &uslots, &grads));
      // Slots back to rows (identity for in-memory stores), ordered by row.
      absl::flat_hash_map<int64_t, int64_t> row_of;
      for (size_t i = 0; i < ls.uslots.size(); ++i) row_of[ls.uslots[i]] = ls.urows[i];
      std::vector<int64_t> order(uslots.size());
      std::iota(order.begin(), order.end(), 0);
      std::vector<int64_t> rows(uslots.size());
      for (size_t i = 0; i < uslots.size(); ++i) rows[i] = row_of.at(uslots[i]);
      std::sort(order.begin(), order.end(),
                [&](int64_t a, int64_t c) { return rows[a] < rows[c]; });
      ls.rows.resize(rows.size());
      ls.grads.resize(grads.size());
      for (size_t i = 0; i < order.size(); ++i) {
        ls.rows[i] = rows[order[i]];
        std::memcpy(ls.grads.data() + i * ls.width, grads.data() + order[i] * ls.width,
                    ls.width * sizeof(float));
      }
    }
  }
  {
    ScopedPhase phase(s.times, "replica_sync");
    if (s.options.replica_sync == ReplicaSync::kExact) {
      TESSERA_RETURN_IF_ERROR(s.ExactReplicaSync());
    } else {
      const float scale = static_cast<float>(s.m);
      for (auto& ls : s.local) {
        for (auto& g : ls.grads) g *= scale;
      }
    }
  }
  {
    ScopedPhase phase(s.times, "update");
    TESSERA_RETURN_IF_ERROR(s.ApplyUpdates(lr, step));
    // The other replicas' rows of the next batch (exact mode): read ahead from here on; the own
    // ones among them are staged or resident already, so Prefetch skips them.
    for (size_t q = 0; q < s.replica_next.size(); ++q) {
      if (!s.replica_next[q].empty()) s.local[q].store->Prefetch(s.replica_next[q]);
      s.replica_next[q].clear();
    }
    TESSERA_RETURN_IF_ERROR(s.DataParallelBackward(d_out, lr, step));
    for (auto& ls : s.local) TESSERA_RETURN_IF_ERROR(ls.store->EndStep());
    for (auto& d : s.dp) TESSERA_RETURN_IF_ERROR(d.store->EndStep());
  }
  ++s.updates;
  if (s.options.replica_sync == ReplicaSync::kAverage) {
    ScopedPhase phase(s.times, "replica_sync");
    // kAll syncs every row, so the touched set is not needed.
    for (auto& ls : s.local) {
      if (s.options.sync_rows == SyncRows::kAll) break;
      std::vector<int64_t> merged;
      std::set_union(ls.touched.begin(), ls.touched.end(), ls.rows.begin(), ls.rows.end(),
                     std::back_inserter(merged));
      ls.touched.swap(merged);
    }
    if (s.updates % s.options.sync_every == 0) TESSERA_RETURN_IF_ERROR(s.AverageSync());
  }
  return absl::OkStatus();
}

}  // namespace tessera
