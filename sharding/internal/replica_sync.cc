// ReplicaSyncPhase (replica_sync.h): exact mode's gradient sum and average mode's periodic weight
// and state averaging over the replica group, and the sync's rows read ahead. All sums are
// Communicator all-reduces (rank order), so every member of a replica group computes the same
// bits.
#include "sharding/internal/replica_sync.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>
#include <optional>

#include "core/scratch.h"
#include "core/status.h"
#include "core/trace.h"
#include "embedding/dynamic_row_store.h"
#include "sharding/internal/ctx_array.h"
#include "sharding/internal/shard_kernels.h"

namespace tessera::internal {
namespace {

// The union of each list of `rows` over the replica group, increasing. Collective over `rep`
// (all members pass the same number of lists, for the same shards).
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
  // Each list's pieces, one per replica, end to end; a list whose pieces are each increasing
  // (the aggregated rows are) is merged piece by piece (linear), any other sorted whole.
  std::vector<std::vector<int64_t>> ends(s, std::vector<int64_t>{0});
  std::vector<char> sorted(s, 1);
  const int64_t* p = got.data();
  for (int r = 0; r < m; ++r) {
    for (int64_t q = 0; q < s; ++q) {
      const int64_t n = all[r * s + q];
      sorted[q] &= std::is_sorted(p, p + n);
      unions[q].insert(unions[q].end(), p, p + n);
      ends[q].push_back(static_cast<int64_t>(unions[q].size()));
      p += n;
    }
  }
  for (int64_t q = 0; q < s; ++q) {
    std::vector<int64_t>& u = unions[q];
    if (sorted[q]) {
      // Each replica's piece merged into the merged ones before it (M - 1 linear passes).
      for (int r = 1; r < m; ++r) {
        std::inplace_merge(u.begin(), u.begin() + ends[q][r], u.begin() + ends[q][r + 1]);
      }
    } else {
      std::sort(u.begin(), u.end());
    }
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  return unions;
}

}  // namespace

ReplicaSyncPhase::ReplicaSyncPhase(const ShardLayout& layout) : l_(layout) {
  state_.resize(l_.local.size());
}

absl::Status ReplicaSyncPhase::ReduceGradients(const InputDist& in, std::vector<RowGrads>* grads) {
  if (l_.options.replica_sync == tessera::ReplicaSync::kExact) return ExactSum(in, grads);
  const float scale = static_cast<float>(l_.m);
  for (RowGrads& rg : *grads) {
    TESSERA_RETURN_IF_ERROR(ScaleFloats(l_.host, scale, static_cast<int64_t>(rg.grads.size()),
                                        rg.grads.data()));
  }
  return absl::OkStatus();
}

absl::Status ReplicaSyncPhase::ExactSum(const InputDist& in, std::vector<RowGrads>* grads) {
  if (l_.m == 1) return absl::OkStatus();
  const auto& local = l_.local;
  std::vector<RowGrads>& rg = *grads;
  // Dynamic shards are summed in the global batch's order (every replica owns the same shards,
  // so all take this collective or none); the union below leaves them out.
  bool any_dynamic = false;
  for (const LocalShard& ls : local) any_dynamic |= l_.IsDynamic(ls);
  if (any_dynamic) TESSERA_RETURN_IF_ERROR(ExactSumDynamic(in, grads));
  static const std::vector<int64_t> kNone;
  std::vector<const std::vector<int64_t>*> rows;
  for (size_t q = 0; q < local.size(); ++q) {
    rows.push_back(l_.IsDynamic(local[q]) ? &kNone : &rg[q].rows);
  }
  // Tiered shards: the next batch's rows (HintNextRows) ride along in the same all-gather, so
  // each replica also reads ahead the rows the other replicas' batches will bring into its
  // update next step. Every member owns the same shards, so all agree on the lists sent.
  const bool any_tiered = l_.AnyReadsAhead();
  if (any_tiered) {
    for (size_t q = 0; q < local.size(); ++q) {
      const std::vector<int64_t>* next = in.hinted_rows(q);
      rows.push_back(next != nullptr ? next : &kNone);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(auto unions, ReplicaUnion(*l_.replica, rows));
  // Handed to the stores after the update: this step's union rows, read ahead the same way a
  // step earlier, are still to be resolved there, and a store stages only its two latest hints.
  replica_next_.resize(local.size());
  for (size_t q = 0; q < local.size(); ++q) {
    if (any_tiered) {
      replica_next_[q] = std::move(unions[local.size() + q]);
    } else {
      replica_next_[q].clear();
    }
  }
  // Per shard, its union's gradients: this replica's placed in a zeroed buffer, summed over the
  // replica group (one call per shard: every replica owns the same shards, and the ordered
  // all-reduce sums each value in rank order whatever the call's size), then swapped in as the
  // shard's gradients; the shard's old gradients' vector is the next step's buffer. Both keep
  // their pages across steps (a fresh buffer of tens of MB is a fresh mapping whose every page
  // faults in), and nothing is copied out.
  exact_bufs_.resize(local.size());
  for (size_t q = 0; q < local.size(); ++q) {
    if (l_.IsDynamic(local[q])) continue;  // an empty union
    const int64_t w = local[q].width, u = static_cast<int64_t>(unions[q].size());
    std::vector<float>& buf = exact_bufs_[q];
    ReserveScratch(&buf, static_cast<size_t>(u * w));
    buf.assign(u * w, 0.0f);
    TESSERA_RETURN_IF_ERROR(
        ScatterToUnion(l_.host, rg[q].rows.data(), static_cast<int64_t>(rg[q].rows.size()),
                       unions[q].data(), u, rg[q].grads.data(), w, buf.data()));
    TESSERA_RETURN_IF_ERROR(l_.replica->AllReduce(buf.data(), u * w, ReduceOp::kSum));
    rg[q].rows = std::move(unions[q]);
    std::swap(rg[q].grads, buf);
  }
  return absl::OkStatus();
}

void ReplicaSyncPhase::PrefetchReplicaRows() {
  // The other replicas' rows of the next batch (exact mode): read ahead from here on; the own
  // ones among them are staged or resident already, so Prefetch skips them.
  for (size_t q = 0; q < replica_next_.size(); ++q) {
    if (!replica_next_[q].empty()) l_.local[q].store->Prefetch(replica_next_[q]);
    replica_next_[q].clear();
  }
}

absl::Status ReplicaSyncPhase::AfterUpdate(const InputDist& in,
                                           const std::vector<RowGrads>& grads) {
  ++updates_;
  if (l_.options.replica_sync != tessera::ReplicaSync::kAverage) return absl::OkStatus();
  // kAll syncs every row, so the touched set is not needed.
  if (l_.options.sync_rows != SyncRows::kAll) {
    trace::Span span("sync_touched", "sync");
    for (size_t q = 0; q < state_.size(); ++q) {
      std::vector<int64_t>& touched = state_[q].touched;
      std::vector<int64_t> merged;
      std::set_union(touched.begin(), touched.end(), grads[q].rows.begin(), grads[q].rows.end(),
                     std::back_inserter(merged));
      touched.swap(merged);
    }
  }
  if (updates_ % l_.options.sync_every == 0) TESSERA_RETURN_IF_ERROR(AverageSync(in));
  return absl::OkStatus();
}

absl::Status ReplicaSyncPhase::StartAhead(const InputDist& in) {
  Ahead& a = ahead_;
  a.pending.reset();  // only left by a Forward that failed part way (fatal for the run anyway)
  a.phase = 0;
  a.for_update = -1;
  if (l_.options.replica_sync != tessera::ReplicaSync::kAverage || l_.m == 1) {
    return absl::OkStatus();
  }
  if ((updates_ + 1) % l_.options.sync_every != 0) return absl::OkStatus();
  if (!l_.AnyReadsAhead()) return absl::OkStatus();
  a.for_update = updates_;
  if (l_.options.sync_rows == SyncRows::kAll) {
    a.phase = 3;  // every row of the shard: nothing to exchange
    return absl::OkStatus();
  }
  // The rows this step's update will touch are exactly the distinct rows of its batch (every
  // unique id a sender routed here has a position, so it gets a gradient); AverageSync checks
  // that what was sent is its touched set.
  const int m = l_.m;
  const int64_t nl = static_cast<int64_t>(l_.local.size());
  a.sent.resize(nl);
  std::vector<int64_t> step_rows;
  for (int64_t q = 0; q < nl; ++q) {
    const std::vector<int64_t>& urows = in.owners()[q].urows;
    step_rows.assign(urows.begin(), urows.end());
    std::sort(step_rows.begin(), step_rows.end());
    step_rows.erase(std::unique(step_rows.begin(), step_rows.end()), step_rows.end());
    a.sent[q].clear();
    const std::vector<int64_t>& touched = state_[q].touched;
    std::set_union(touched.begin(), touched.end(), step_rows.begin(), step_rows.end(),
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
                           l_.replica->StartAllToAllV(a.send_counts.data(), bytes, displs,
                                                      a.recv_counts.data(), bytes, displs));
  a.phase = 1;
  return absl::OkStatus();
}

absl::Status ReplicaSyncPhase::AdvanceAhead() {
  Ahead& a = ahead_;
  if (a.phase != 1) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(a.pending->Wait());
  a.pending.reset();
  const int m = l_.m;
  const int64_t nl = static_cast<int64_t>(l_.local.size());
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
  TESSERA_ASSIGN_OR_RETURN(
      a.pending, l_.replica->StartAllToAllV(a.send_ids.data(), sb, sd, a.recv_ids.data(), rb, rd));
  a.phase = 2;
  return absl::OkStatus();
}

absl::Status ReplicaSyncPhase::FinishAhead(bool hint) {
  Ahead& a = ahead_;
  if (a.phase == 0) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(AdvanceAhead());
  const int64_t nl = static_cast<int64_t>(l_.local.size());
  if (a.phase == 2) {
    TESSERA_RETURN_IF_ERROR(a.pending->Wait());
    a.pending.reset();
    a.unions.resize(nl);
    for (auto& u : a.unions) u.clear();
    const int64_t* p = a.recv_ids.data();
    for (int r = 0; r < l_.m; ++r) {
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
    const LocalShard& ls = l_.local[q];
    if (!l_.ReadsAhead(ls)) continue;
    if (l_.options.sync_rows == SyncRows::kAll) {
      rows.resize(ls.rect.num_rows());
      std::iota(rows.begin(), rows.end(), int64_t{0});
    } else {
      rows.clear();
      const std::vector<int64_t>& pending = state_[q].pending_rows;
      std::set_union(a.unions[q].begin(), a.unions[q].end(), pending.begin(), pending.end(),
                     std::back_inserter(rows));
    }
    if (!rows.empty()) ls.store->Prefetch(rows);
  }
  return absl::OkStatus();
}

void ReplicaSyncPhase::DropEvictedKeys(const LocalShard& ls, std::vector<int64_t>* keys,
                                       std::vector<float>* avg, std::vector<float>* snap) {
  std::vector<int64_t> slots(keys->size());
  static_cast<const DynamicRowStore*>(ls.store.get())->FindSlots(*keys, absl::MakeSpan(slots));
  const int64_t sd = ls.store->state_dim();
  size_t k = 0;
  for (size_t i = 0; i < keys->size(); ++i) {
    if (slots[i] < 0) continue;
    (*keys)[k] = (*keys)[i];
    for (std::vector<float>* v : {avg, snap}) {
      if (v == nullptr || v->empty()) continue;
      std::copy(v->begin() + i * sd, v->begin() + (i + 1) * sd, v->begin() + k * sd);
    }
    ++k;
  }
  keys->resize(k);
  for (std::vector<float>* v : {avg, snap}) {
    if (v != nullptr && !v->empty()) v->resize(k * sd);
  }
}

absl::Status ReplicaSyncPhase::AverageSync(const InputDist& in) {
  const auto& local = l_.local;
  const DeviceContext& ctx = l_.ctx;
  if (l_.m == 1) {
    for (ShardSyncState& st : state_) st.touched.clear();
    return absl::OkStatus();
  }
  // The exchange this step's Forward did (StartAhead), if any.
  Ahead& a = ahead_;
  const bool ahead = a.phase == 3 && a.for_update == updates_ - 1;
  a.phase = 0;
  a.for_update = -1;
  // The rows to average: kTouched, the union over the replica group of the rows touched since
  // the last sync; kAll, every row of the shard (known to all replicas, so no id exchange and a
  // fixed payload of shard bytes per sync).
  std::vector<std::vector<int64_t>> unions;
  std::optional<trace::Span> span;  // the sync's stages, one at a time
  span.emplace("sync_union", "sync");
  if (l_.options.sync_rows == SyncRows::kAll) {
    unions.resize(local.size());
    for (size_t q = 0; q < local.size(); ++q) {
      unions[q].resize(local[q].rect.num_rows());
      for (int64_t r = 0; r < local[q].rect.num_rows(); ++r) unions[q][r] = r;
    }
  } else if (ahead) {
    for (size_t q = 0; q < local.size(); ++q) {
      TESSERA_CHECK(state_[q].touched == a.sent[q])
          << "table '" << l_.options.collection.tables[local[q].table].name
          << "': the rows exchanged ahead of the sync are not the rows the updates touched";
    }
    unions = std::move(a.unions);
    a.unions.clear();
  } else {
    std::vector<const std::vector<int64_t>*> rows;
    for (const ShardSyncState& st : state_) rows.push_back(&st.touched);
    TESSERA_ASSIGN_OR_RETURN(unions, ReplicaUnion(*l_.replica, rows));
  }
  // Dynamic shards: keys evicted since they were touched have no row to average (every replica
  // holds the same keys: they admit and evict on the replica group's lookups), and neither do
  // the delayed state average's.
  for (size_t q = 0; q < local.size(); ++q) {
    if (!l_.IsDynamic(local[q])) continue;
    DropEvictedKeys(local[q], &unions[q], nullptr, nullptr);
    ShardSyncState& st = state_[q];
    DropEvictedKeys(local[q], &st.pending_rows, &st.pending_avg, &st.pending_snapshot);
  }
  span.emplace("sync_delayed_state", "sync");
  // The state average of the previous sync, applied now (one sync behind), keeping the local
  // increments since its snapshot. Rows move between the stores (ctx's memory: HBM for CUDA
  // shards) and the host buffer of the all-reduce through ctx arrays (no copy on the CPU).
  std::vector<int64_t> slots;
  for (size_t q = 0; q < local.size(); ++q) {
    const LocalShard& ls = local[q];
    const ShardSyncState& st = state_[q];
    const int64_t sd = ls.store->state_dim();
    if (sd == 0 || st.pending_rows.empty()) continue;
    slots.resize(st.pending_rows.size());
    TESSERA_RETURN_IF_ERROR(ResolveRows(l_, ls, st.pending_rows, absl::MakeSpan(slots)));
    TESSERA_ASSIGN_OR_RETURN(const int64_t* cs, Mirror(ctx, slots, &sync_slots_, "sync slots"));
    TESSERA_ASSIGN_OR_RETURN(const float* avg,
                             Mirror(ctx, st.pending_avg, &sync_avg_, "the state average"));
    TESSERA_ASSIGN_OR_RETURN(const float* snap, Mirror(ctx, st.pending_snapshot, &sync_snap_,
                                                       "the state snapshot"));
    TESSERA_RETURN_IF_ERROR(ApplyDelayedAverage(ctx, avg, snap, cs,
                                                static_cast<int64_t>(slots.size()), sd,
                                                ls.store->state()));
  }
  span.emplace("sync_gather", "sync");
  int64_t total = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    total +=
        static_cast<int64_t>(unions[q].size()) * (local[q].width + local[q].store->state_dim());
  }
  // Kept across syncs: a fresh buffer faults in every page each sync (mlperf-mini at N = 1,
  // M = 2, k = 8, 209 MB: the steady sync 377 -> 300 ms on a 2-core Xeon, tessera-bench --trace).
  std::vector<float>& buf = sync_buf_;
  ReserveScratch(&buf, static_cast<size_t>(total));
  buf.resize(total);
  // The gathered rows in ctx's memory: buf itself on the CPU.
  float* rows = buf.data();
  if (ctx.is_cuda()) {
    TESSERA_ASSIGN_OR_RETURN(rows, sync_rows_.Reserve(ctx, total, "sync rows"));
  }
  std::vector<std::vector<int64_t>> union_slots(local.size());
  int64_t at = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    const LocalShard& ls = local[q];
    const int64_t w = ls.width, sd = ls.store->state_dim(), u = unions[q].size();
    union_slots[q].resize(u);
    TESSERA_RETURN_IF_ERROR(ResolveRows(l_, ls, unions[q], absl::MakeSpan(union_slots[q])));
    TESSERA_ASSIGN_OR_RETURN(const int64_t* cs,
                             Mirror(ctx, union_slots[q], &sync_slots_, "sync slots"));
    TESSERA_RETURN_IF_ERROR(GatherRows(ctx, ls.store->weights(), cs, u, w, rows + at));
    if (sd > 0) {
      TESSERA_RETURN_IF_ERROR(
          GatherRows(ctx, ls.store->state(), cs, u, sd, rows + at + u * w));
    }
    at += u * (w + sd);
  }
  if (ctx.is_cuda()) TESSERA_RETURN_IF_ERROR(CopyToHost(ctx, buf.data(), rows, total));
  span.reset();
  TESSERA_RETURN_IF_ERROR(l_.replica->AllReduce(buf.data(), total, ReduceOp::kAvg));
  span.emplace("sync_scatter", "sync");
  const float* avg_rows = buf.data();
  if (ctx.is_cuda()) {
    TESSERA_ASSIGN_OR_RETURN(avg_rows, Mirror(ctx, buf, &sync_rows_, "averaged sync rows"));
  }
  at = 0;
  for (size_t q = 0; q < local.size(); ++q) {
    const LocalShard& ls = local[q];
    ShardSyncState& st = state_[q];
    const int64_t w = ls.width, sd = ls.store->state_dim(), u = unions[q].size();
    TESSERA_RETURN_IF_ERROR(ResolveRows(l_, ls, unions[q], absl::MakeSpan(union_slots[q])));
    TESSERA_ASSIGN_OR_RETURN(const int64_t* cs,
                             Mirror(ctx, union_slots[q], &sync_slots_, "sync slots"));
    TESSERA_RETURN_IF_ERROR(ScatterRows(ctx, avg_rows + at, cs, u, w, ls.store->weights()));
    if (sd > 0) {
      st.pending_rows = unions[q];
      st.pending_avg.assign(buf.begin() + at + u * w, buf.begin() + at + u * (w + sd));
      st.pending_snapshot.resize(u * sd);
      float* snap = st.pending_snapshot.data();
      if (ctx.is_cuda()) {
        TESSERA_ASSIGN_OR_RETURN(snap, sync_snap_.Reserve(ctx, u * sd, "the state snapshot"));
      }
      TESSERA_RETURN_IF_ERROR(GatherRows(ctx, ls.store->state(), cs, u, sd, snap));
      if (ctx.is_cuda()) {
        TESSERA_RETURN_IF_ERROR(CopyToHost(ctx, st.pending_snapshot.data(),
                                           static_cast<const float*>(snap), u * sd));
      }
    }
    at += u * (w + sd);
    st.touched.clear();
    // The next batch's rows once more, now that the sync resolved its own (the store keeps its
    // two latest hints: the next batch's and this one). Those the step evicted sit in the
    // write-back buffer that this EndStep drops, so Prefetch copies them into staging now; with
    // one EndStep per step they would still be in it at the next Resolve.
    const std::vector<int64_t>* next = in.hinted_rows(q);
    if (l_.ReadsAhead(ls) && next != nullptr && !next->empty()) ls.store->Prefetch(*next);
    // (Not a dynamic shard: its EndStep is its step clock, which admission and ttl read.)
    if (!l_.IsDynamic(ls)) TESSERA_RETURN_IF_ERROR(ls.store->EndStep());
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
