// ShardedEmbeddingCollection's synchronisation: exact replica sync of row gradients, average
// mode's periodic weight/state averaging, the column-split row-wise AdaGrad update and the
// data-parallel tables. All sums are Communicator all-reduces (rank order), so every member of a
// replica group computes the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera {

using internal::LocalShard;
using internal::Request;

namespace {

// The union of each local shard's `rows_of(ls)` over the replica group, increasing. Collective
// over `rep` (all members own the same shards, in the same order).
absl::StatusOr<std::vector<std::vector<int64_t>>> ReplicaUnion(
    Communicator& rep, const std::vector<const std::vector<int64_t>*>& rows) {
  const int m = rep.size();
  const int64_t s = static_cast<int64_t>(rows.size());
  std::vector<int64_t> mine(s), all(m * s);
  int64_t total = 0;
  for (int64_t q = 0; q < s; ++q) total += mine[q] = static_cast<int64_t>(rows[q]->size());
  std::vector<int64_t> cb(m, s * 8), cd(m);
  for (int r = 0; r < m; ++r) cd[r] = r * s * 8;
  TESSERA_RETURN_IF_ERROR(rep.AllGatherV(mine.data(), s * 8, all.data(), cb, cd));
  std::vector<int64_t> rb(m), rd(m);
  int64_t at = 0;
  for (int r = 0; r < m; ++r) {
    int64_t n = 0;
    for (int64_t q = 0; q < s; ++q) n += all[r * s + q];
    rb[r] = n * 8;
    rd[r] = at;
    at += n * 8;
  }
  std::vector<int64_t> send;
  send.reserve(total);
  for (const auto* v : rows) send.insert(send.end(), v->begin(), v->end());
  std::vector<int64_t> got(at / 8);
  TESSERA_RETURN_IF_ERROR(rep.AllGatherV(send.data(), total * 8, got.data(), rb, rd));
  std::vector<std::vector<int64_t>> unions(s);
  const int64_t* p = got.data();
  for (int r = 0; r < m; ++r) {
    for (int64_t q = 0; q < s; ++q) {
      unions[q].insert(unions[q].end(), p, p + all[r * s + q]);
      p += all[r * s + q];
    }
  }
  for (auto& u : unions) {
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  return unions;
}

int64_t IndexOf(const std::vector<int64_t>& sorted, int64_t x) {
  return std::lower_bound(sorted.begin(), sorted.end(), x) - sorted.begin();
}

}  // namespace

absl::Status ShardedEmbeddingCollection::Impl::ExactReplicaSync() {
  if (m == 1) return absl::OkStatus();
  std::vector<const std::vector<int64_t>*> rows;
  for (auto& ls : local) rows.push_back(&ls.rows);
  // Tiered shards: the next batch's rows (HintNextRows) ride along in the same all-gather, so
  // each replica also reads ahead the rows the other replicas' batches will bring into its
  // update next step. Every member owns the same shards, so all agree on the lists sent.
  bool any_tiered = false;
  for (const auto& ls : local) {
    any_tiered |= internal::ReadsAhead(*this, ls);
  }
  const bool hinted = inflight != nullptr && inflight->hinted;
  static const std::vector<int64_t> kNone;
  if (any_tiered) {
    for (size_t q = 0; q < local.size(); ++q) rows.push_back(hinted ? &hint_rows[q] : &kNone);
  }
  TESSERA_ASSIGN_OR_RETURN(auto unions, ReplicaUnion(*replica, rows));
  // Handed to the stores after ApplyUpdates: this step's union rows, read ahead the same way a
  // step earlier, are still to be resolved there, and a store stages only its two latest hints.
  replica_next.resize(local.size());
  for (size_t q = 0; q < local.size(); ++q) {
    if (any_tiered) {
      replica_next[q] = std::move(unions[local.size() + q]);
    } else {
      replica_next[q].clear();
    }
  }
  int64_t total = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    total += static_cast<int64_t>(unions[q].size()) * local[q].width;
  }
  // Its own buffer: the union's gradients are copied out of it below, and dp_buf (the
  // data-parallel tables' kept gradient table) must stay all zero between steps.
  std::vector<float> buf(total, 0.0f);
  int64_t at = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    LocalShard& ls = local[q];
    for (size_t i = 0; i < ls.rows.size(); ++i) {
      std::memcpy(buf.data() + at + IndexOf(unions[q], ls.rows[i]) * ls.width,
                  ls.grads.data() + i * ls.width, ls.width * sizeof(float));
    }
    at += static_cast<int64_t>(unions[q].size()) * ls.width;
  }
  TESSERA_RETURN_IF_ERROR(replica->AllReduce(buf.data(), total, ReduceOp::kSum));
  at = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    LocalShard& ls = local[q];
    const int64_t n = static_cast<int64_t>(unions[q].size()) * ls.width;
    ls.rows = std::move(unions[q]);
    ls.grads.assign(buf.begin() + at, buf.begin() + at + n);
    at += n;
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::ApplyUpdates(float lr, int64_t step) {
  const auto& tables = options.collection.tables;
  bool col_adagrad = false;
  if (update_opt.type == RowOptimizerType::kRowWiseAdagrad) {
    for (const Request& r : requests) col_adagrad |= r.col_split;
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
    for (const LocalShard& ls : local) {
      if (!ls.col_split) continue;
      const int64_t n = static_cast<int64_t>(ls.rows.size());
      put(&n, 8);
      for (int64_t r : ls.rows) {
        const int64_t global = r + ls.rect.row_begin;
        put(&global, 8);
      }
      std::vector<float> partial(n, 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        const float* g = ls.grads.data() + i * ls.width;
        float sq = 0.0f;
        for (int64_t c = 0; c < ls.width; ++c) sq += g[c] * g[c];
        partial[i] = sq;
      }
      put(partial.data(), n * 4);
      block.resize((block.size() + 7) & ~size_t{7}, 0);
    }
    std::vector<int64_t> sizes(n);
    TESSERA_RETURN_IF_ERROR(group->AllGatherCounts(static_cast<int64_t>(block.size()),
                                                   absl::MakeSpan(sizes)));
    std::vector<int64_t> displs(n);
    for (int r = 1; r < n; ++r) displs[r] = displs[r - 1] + sizes[r - 1];
    std::vector<char> all(displs[n - 1] + sizes[n - 1]);
    TESSERA_RETURN_IF_ERROR(
        group->AllGatherV(block.data(), static_cast<int64_t>(block.size()), all.data(), sizes,
                          displs));
    // Per request: its rows and partial sums.
    std::vector<const int64_t*> req_rows(requests.size(), nullptr);
    std::vector<const float*> req_sq(requests.size(), nullptr);
    std::vector<int64_t> req_n(requests.size(), 0);
    for (int r = 0; r < n; ++r) {
      const char* p = all.data() + displs[r];
      for (int ri : dst_requests[r]) {
        if (!requests[ri].col_split) continue;
        int64_t cnt;
        std::memcpy(&cnt, p, 8);
        p += 8;
        req_n[ri] = cnt;
        req_rows[ri] = reinterpret_cast<const int64_t*>(p);
        p += cnt * 8;
        req_sq[ri] = reinterpret_cast<const float*>(p);
        p += cnt * 4;
        p = all.data() + displs[r] + (((p - all.data() - displs[r]) + 7) & ~int64_t{7});
      }
    }
    for (size_t q = 0; q < local.size(); ++q) {
      const LocalShard& ls = local[q];
      if (!ls.col_split) continue;
      total_sq[q].assign(ls.rows.size(), 0.0f);
      for (size_t i = 0; i < ls.rows.size(); ++i) {
        const int64_t x = ls.rows[i] + ls.rect.row_begin;
        float sum = 0.0f;
        for (int ri : routes[ls.table].requests) {
          const Request& k = requests[ri];
          if (x < k.rect.row_begin || x >= k.rect.row_end) continue;
          const int64_t* end = req_rows[ri] + req_n[ri];
          const int64_t* it = std::lower_bound(req_rows[ri], end, x);
          TESSERA_CHECK(it != end && *it == x)
              << "row " << x << " of table '" << tables[ls.table].name
              << "' missing from a sibling shard's gradient rows";
          sum += req_sq[ri][it - req_rows[ri]];
        }
        total_sq[q][i] = sum;
      }
    }
  }
  std::vector<int64_t> slots;
  for (size_t q = 0; q < local.size(); ++q) {
    LocalShard& ls = local[q];
    if (ls.rows.empty()) continue;
    slots.resize(ls.rows.size());
    TESSERA_RETURN_IF_ERROR(ls.store->Resolve(ls.rows, absl::MakeSpan(slots)));
    if (col_adagrad && ls.col_split) {
      // Row-wise AdaGrad (embedding/row_optimizer.h) with the full row's squared-gradient sum.
      const float dim = static_cast<float>(tables[ls.table].dim);
      float* w = ls.store->weights();
      float* st = ls.store->state();
      for (size_t i = 0; i < ls.rows.size(); ++i) {
        RowWiseAdagradStep(update_opt, lr, total_sq[q][i] / dim, ls.width,
                           ls.grads.data() + i * ls.width, w + slots[i] * ls.width,
                           st + slots[i]);
      }
      continue;
    }
    RowUpdateArgs a;
    a.weights = ls.store->weight_data();
    a.weight_dtype = ls.store->weight_dtype();
    a.rounding = tables[ls.table].storage.rounding;
    a.rounding_seed = options.collection.seed;
    a.state = ls.store->state();
    a.dim = ls.width;
    a.optimizer = update_opt;
    a.lr = lr;
    a.step = step;
    TESSERA_RETURN_IF_ERROR(ApplyRowUpdates(ctx, slots, ls.grads.data(), a));
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::DataParallelBackward(const float* d_out, float lr,
                                                                     int64_t step) {
  if (dp.empty()) return absl::OkStatus();
  const auto& tables = options.collection.tables;
  // Dense [rows, dim + 1] per table: the summed gradient and, last, how many ranks touched the
  // row, so that exactly the rows some rank saw get an update (as one rank would).
  int64_t total = 0;
  std::vector<int64_t> base(dp.size());
  for (size_t i = 0; i < dp.size(); ++i) {
    base[i] = total;
    total += tables[dp[i].table].num_rows * (tables[dp[i].table].dim + 1);
  }
  // Zero between steps: cleared row by row below after the update (the rows the all-reduce made
  // nonzero are exactly those with a nonzero count), so only the first step allocates.
  std::vector<float>& buf = dp_buf;
  if (static_cast<int64_t>(buf.size()) != total) buf.assign(total, 0.0f);
  // An error part way leaves rows set: drop the buffer then, so the next step starts from zero.
  struct DropOnError {
    std::vector<float>* buf;
    bool done = false;
    ~DropOnError() {
      if (!done) buf->clear();
    }
  } guard{&buf};
  std::vector<int64_t> uslots;
  std::vector<float> grads;
  for (size_t i = 0; i < dp.size(); ++i) {
    const TableConfig& cfg = tables[dp[i].table];
    std::vector<BagGradients> sources;
    for (int f : cfg.features) {
      BagGradients g;
      g.offsets = offsets.data() + static_cast<int64_t>(f) * batch;
      g.indices = dp_slots.data();
      g.per_id_weights = id_weights.empty() ? nullptr : id_weights.data();
      g.num_bags = batch;
      g.grad = d_out + feature_column[f];
      g.grad_stride = output_dim;
      if (batch > 0) sources.push_back(g);
    }
    if (sources.empty()) continue;
    TESSERA_RETURN_IF_ERROR(
        AggregateRowGradients(ctx, sources, cfg.dim, cfg.pooling, &ws, &uslots, &grads));
    // In-memory stores: slot == row.
    for (size_t u = 0; u < uslots.size(); ++u) {
      float* row = buf.data() + base[i] + uslots[u] * (cfg.dim + 1);
      std::memcpy(row, grads.data() + u * cfg.dim, cfg.dim * sizeof(float));
      row[cfg.dim] = 1.0f;
    }
  }
  TESSERA_RETURN_IF_ERROR(world->AllReduce(buf.data(), total, ReduceOp::kSum));
  for (size_t i = 0; i < dp.size(); ++i) {
    const TableConfig& cfg = tables[dp[i].table];
    std::vector<int64_t> rows;
    std::vector<float> g;
    for (int64_t r = 0; r < cfg.num_rows; ++r) {
      float* row = buf.data() + base[i] + r * (cfg.dim + 1);
      if (row[cfg.dim] == 0.0f) continue;
      rows.push_back(r);
      g.insert(g.end(), row, row + cfg.dim);
      std::fill(row, row + cfg.dim + 1, 0.0f);
    }
    if (rows.empty()) continue;
    std::vector<int64_t> slots(rows.size());
    TESSERA_RETURN_IF_ERROR(dp[i].store->Resolve(rows, absl::MakeSpan(slots)));
    RowUpdateArgs a;
    a.weights = dp[i].store->weight_data();
    a.weight_dtype = dp[i].store->weight_dtype();
    a.rounding = cfg.storage.rounding;
    a.rounding_seed = options.collection.seed;
    a.state = dp[i].store->state();
    a.dim = cfg.dim;
    a.optimizer = options.collection.optimizer;
    a.lr = lr;
    a.step = step;
    TESSERA_RETURN_IF_ERROR(ApplyRowUpdates(ctx, slots, g.data(), a));
  }
  guard.done = true;
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::StartSyncAhead() {
  internal::SyncAhead& a = sync_ahead;
  a.pending.reset();  // only left by a Forward that failed part way (fatal for the run anyway)
  a.phase = 0;
  a.for_update = -1;
  if (options.replica_sync != ReplicaSync::kAverage || m == 1) return absl::OkStatus();
  if ((updates + 1) % options.sync_every != 0) return absl::OkStatus();
  bool any_tiered = false;
  for (const auto& ls : local) any_tiered |= internal::ReadsAhead(*this, ls);
  if (!any_tiered) return absl::OkStatus();
  a.for_update = updates;
  if (options.sync_rows == SyncRows::kAll) {
    a.phase = 3;  // every row of the shard: nothing to exchange
    return absl::OkStatus();
  }
  // The rows this step's update will touch are exactly the distinct rows of its batch (every
  // unique id a sender routed here has a position, so it gets a gradient); AverageSync checks
  // that what was sent is its touched set.
  const int64_t nl = static_cast<int64_t>(local.size());
  a.sent.resize(nl);
  std::vector<int64_t> step_rows;
  for (int64_t q = 0; q < nl; ++q) {
    const LocalShard& ls = local[q];
    step_rows.assign(ls.urows.begin(), ls.urows.end());
    std::sort(step_rows.begin(), step_rows.end());
    step_rows.erase(std::unique(step_rows.begin(), step_rows.end()), step_rows.end());
    a.sent[q].clear();
    std::set_union(ls.touched.begin(), ls.touched.end(), step_rows.begin(), step_rows.end(),
                   std::back_inserter(a.sent[q]));
  }
  // An all-gather as an all-to-all (the nonblocking collective there is), the block repeated
  // per peer.
  a.send_counts.resize(m * nl);
  a.recv_counts.resize(m * nl);
  for (int r = 0; r < m; ++r) {
    for (int64_t q = 0; q < nl; ++q) a.send_counts[r * nl + q] = a.sent[q].size();
  }
  std::vector<int64_t> bytes(m, nl * 8), displs(m);
  for (int r = 0; r < m; ++r) displs[r] = r * nl * 8;
  TESSERA_ASSIGN_OR_RETURN(a.pending,
                           replica->StartAllToAllV(a.send_counts.data(), bytes, displs,
                                                   a.recv_counts.data(), bytes, displs));
  a.phase = 1;
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::AdvanceSyncAhead() {
  internal::SyncAhead& a = sync_ahead;
  if (a.phase != 1) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(a.pending->Wait());
  a.pending.reset();
  const int64_t nl = static_cast<int64_t>(local.size());
  int64_t mine = 0;
  for (const auto& v : a.sent) mine += static_cast<int64_t>(v.size());
  a.send_ids.clear();
  a.send_ids.reserve(m * mine);
  for (int r = 0; r < m; ++r) {
    for (const auto& v : a.sent) a.send_ids.insert(a.send_ids.end(), v.begin(), v.end());
  }
  std::vector<int64_t> sb(m, mine * 8), sd(m), rb(m), rd(m);
  int64_t at = 0;
  for (int r = 0; r < m; ++r) {
    sd[r] = r * mine * 8;
    int64_t n = 0;
    for (int64_t q = 0; q < nl; ++q) n += a.recv_counts[r * nl + q];
    rb[r] = n * 8;
    rd[r] = at;
    at += n * 8;
  }
  a.recv_ids.resize(at / 8);
  TESSERA_ASSIGN_OR_RETURN(a.pending, replica->StartAllToAllV(a.send_ids.data(), sb, sd,
                                                              a.recv_ids.data(), rb, rd));
  a.phase = 2;
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::FinishSyncAhead(bool hint) {
  internal::SyncAhead& a = sync_ahead;
  if (a.phase == 0) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(AdvanceSyncAhead());
  const int64_t nl = static_cast<int64_t>(local.size());
  if (a.phase == 2) {
    TESSERA_RETURN_IF_ERROR(a.pending->Wait());
    a.pending.reset();
    a.unions.resize(nl);
    for (auto& u : a.unions) u.clear();
    const int64_t* p = a.recv_ids.data();
    for (int r = 0; r < m; ++r) {
      for (int64_t q = 0; q < nl; ++q) {
        const int64_t c = a.recv_counts[r * nl + q];
        a.unions[q].insert(a.unions[q].end(), p, p + c);
        p += c;
      }
    }
    for (auto& u : a.unions) {
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
    }
    a.phase = 3;
  }
  // The sync resolves the union and the rows of the delayed state average (pending_rows);
  // Prefetch skips those resident, so the misses are read during the dense work.
  if (!hint) return absl::OkStatus();
  std::vector<int64_t> rows;
  for (int64_t q = 0; q < nl; ++q) {
    LocalShard& ls = local[q];
    if (!internal::ReadsAhead(*this, ls)) continue;
    if (options.sync_rows == SyncRows::kAll) {
      rows.resize(ls.rect.num_rows());
      std::iota(rows.begin(), rows.end(), int64_t{0});
    } else {
      rows.clear();
      std::set_union(a.unions[q].begin(), a.unions[q].end(), ls.pending_rows.begin(),
                     ls.pending_rows.end(), std::back_inserter(rows));
    }
    if (!rows.empty()) ls.store->Prefetch(rows);
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::AverageSync() {
  if (m == 1) {
    for (auto& ls : local) ls.touched.clear();
    return absl::OkStatus();
  }
  // The exchange this step's Forward did (StartSyncAhead), if any.
  internal::SyncAhead& a = sync_ahead;
  const bool ahead = a.phase == 3 && a.for_update == updates - 1;
  a.phase = 0;
  a.for_update = -1;
  // The rows to average: kTouched, the union over the replica group of the rows touched since
  // the last sync; kAll, every row of the shard (known to all replicas, so no id exchange and a
  // fixed payload of shard bytes per sync).
  std::vector<std::vector<int64_t>> unions;
  if (options.sync_rows == SyncRows::kAll) {
    unions.resize(local.size());
    for (size_t q = 0; q < local.size(); ++q) {
      unions[q].resize(local[q].rect.num_rows());
      for (int64_t r = 0; r < local[q].rect.num_rows(); ++r) unions[q][r] = r;
    }
  } else if (ahead) {
    for (size_t q = 0; q < local.size(); ++q) {
      TESSERA_CHECK(local[q].touched == a.sent[q])
          << "table '" << options.collection.tables[local[q].table].name
          << "': the rows exchanged ahead of the sync are not the rows the updates touched";
    }
    unions = std::move(a.unions);
    a.unions.clear();
  } else {
    std::vector<const std::vector<int64_t>*> rows;
    for (auto& ls : local) rows.push_back(&ls.touched);
    TESSERA_ASSIGN_OR_RETURN(unions, ReplicaUnion(*replica, rows));
  }
  // The state average of the previous sync, applied now (one sync behind), keeping the local
  // increments since its snapshot.
  std::vector<int64_t> slots;
  for (auto& ls : local) {
    const int64_t sd = ls.store->state_dim();
    if (sd == 0 || ls.pending_rows.empty()) continue;
    slots.resize(ls.pending_rows.size());
    TESSERA_RETURN_IF_ERROR(ls.store->Resolve(ls.pending_rows, absl::MakeSpan(slots)));
    float* st = ls.store->state();
    for (size_t i = 0; i < slots.size(); ++i) {
      for (int64_t c = 0; c < sd; ++c) {
        float& v = st[slots[i] * sd + c];
        v = ls.pending_avg[i * sd + c] + (v - ls.pending_snapshot[i * sd + c]);
      }
    }
  }
  int64_t total = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    total += static_cast<int64_t>(unions[q].size()) *
             (local[q].width + local[q].store->state_dim());
  }
  std::vector<float> buf(total);
  std::vector<std::vector<int64_t>> union_slots(local.size());
  int64_t at = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    LocalShard& ls = local[q];
    const int64_t w = ls.width, sd = ls.store->state_dim(), u = unions[q].size();
    union_slots[q].resize(u);
    TESSERA_RETURN_IF_ERROR(ls.store->Resolve(unions[q], absl::MakeSpan(union_slots[q])));
    for (int64_t i = 0; i < u; ++i) {
      std::memcpy(buf.data() + at + i * w, ls.store->weights() + union_slots[q][i] * w,
                  w * sizeof(float));
      if (sd > 0) {
        std::memcpy(buf.data() + at + u * w + i * sd, ls.store->state() + union_slots[q][i] * sd,
                    sd * sizeof(float));
      }
    }
    at += u * (w + sd);
  }
  TESSERA_RETURN_IF_ERROR(replica->AllReduce(buf.data(), total, ReduceOp::kAvg));
  at = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    LocalShard& ls = local[q];
    const int64_t w = ls.width, sd = ls.store->state_dim(), u = unions[q].size();
    TESSERA_RETURN_IF_ERROR(ls.store->Resolve(unions[q], absl::MakeSpan(union_slots[q])));
    for (int64_t i = 0; i < u; ++i) {
      std::memcpy(ls.store->weights() + union_slots[q][i] * w, buf.data() + at + i * w,
                  w * sizeof(float));
    }
    if (sd > 0) {
      ls.pending_rows = unions[q];
      ls.pending_avg.assign(buf.begin() + at + u * w, buf.begin() + at + u * (w + sd));
      ls.pending_snapshot.resize(u * sd);
      for (int64_t i = 0; i < u; ++i) {
        std::memcpy(ls.pending_snapshot.data() + i * sd,
                    ls.store->state() + union_slots[q][i] * sd, sd * sizeof(float));
      }
    }
    at += u * (w + sd);
    ls.touched.clear();
    // The next batch's rows once more, now that the sync resolved its own (the store keeps its
    // two latest hints: the next batch's and this one). Those the step evicted sit in the
    // write-back buffer that this EndStep drops, so Prefetch copies them into staging now; with
    // one EndStep per step they would still be in it at the next Resolve.
    if (internal::ReadsAhead(*this, ls) && inflight != nullptr && inflight->hinted &&
        !hint_rows[q].empty()) {
      ls.store->Prefetch(hint_rows[q]);
    }
    TESSERA_RETURN_IF_ERROR(ls.store->EndStep());
  }
  return absl::OkStatus();
}

}  // namespace tessera
