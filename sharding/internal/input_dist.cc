// InputDist (input_dist.h): packing (requester), the header and payload exchange with its
// pipelining, unpacking (owner) and the tier's read-ahead of the next batch.
#include "sharding/internal/input_dist.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/internal/shard_kernels.h"
#include "sharding/key_routing.h"

namespace tessera::internal {
namespace {

template <typename T>
ByteSegment Seg(const std::vector<T>& v) {
  return {v.data(), static_cast<int64_t>(v.size() * sizeof(T))};
}

}  // namespace

InputDist::InputDist(const ShardLayout& layout) : l_(layout) {
  ids_.resize(l_.requests.size());
  for (size_t ri = 0; ri < ids_.size(); ++ri) {
    const size_t nf = l_.NumFeatures(l_.requests[ri].table);
    ids_[ri].lengths.resize(nf);
    ids_[ri].pos.resize(nf);
    ids_[ri].wts.resize(nf);
  }
  owners_.resize(l_.local.size());
}

void InputDist::BucketIds(const KeyedJagged& batch) {
  const auto& co = l_.options.collection;
  const int64_t b = batch.batch_size;
  for (RequestIds& r : ids_) {
    // Abseil's clear() frees a large table, so the map would regrow through every power of two
    // each step: size it for last step's unique ids instead (one allocation, no rehash).
    const size_t last = r.uids.size();
    r.uids.clear();
    r.uid_index.clear();
    r.uid_index.reserve(last);
    for (size_t fi = 0; fi < r.pos.size(); ++fi) {
      r.lengths[fi].assign(b, 0);
      r.pos[fi].clear();
      r.wts[fi].clear();
    }
  }
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const auto& route = l_.routes[t];
    if (route.data_parallel) continue;
    const auto& feats = co.tables[t].features;
    const int64_t num_rows = co.tables[t].num_rows;
    for (size_t fi = 0; fi < feats.size(); ++fi) {
      const int f = feats[fi];
      const int64_t* offs = batch.feature_offsets(f);
      for (int64_t bag = 0; bag < b; ++bag) {
        for (int64_t j = offs[bag]; j < offs[bag + 1]; ++j) {
          const int64_t id = batch.values[j];
          // A dynamic table's key goes where its pseudo-row would (sharding/key_routing.h).
          for (int ri : route.block_requests[route.BlockOf(id, num_rows)]) {
            RequestIds& r = ids_[ri];
            auto [it, fresh] = r.uid_index.try_emplace(id, static_cast<int32_t>(r.uids.size()));
            if (fresh) r.uids.push_back(id);
            r.pos[fi].push_back(it->second);
            r.lengths[fi][bag] += 1;
            if (!batch.weights.empty()) r.wts[fi].push_back(batch.weights[j]);
          }
        }
      }
    }
  }
}

int64_t InputDist::PayloadBytes(const int64_t* h, const std::vector<int>& reqs) const {
  const int64_t b = h[0];
  const bool w = (h[1] & kWeightedFlag) != 0;
  int64_t ids = 0, i32 = 0, fl = 0;
  h += 2;
  for (int ri : reqs) {
    ids += *h++;
    for (int64_t fi = 0; fi < l_.NumFeatures(l_.requests[ri].table); ++fi) {
      const int64_t np = *h++;
      i32 += b + np;
      fl += w ? np : 0;
    }
  }
  return Align8(8 * ids + 4 * i32 + 4 * fl);
}

void InputDist::Pack(const KeyedJagged& batch, bool keep_batch, PackedInput* out) {
  const int n = l_.n;
  out->bad = CheckBatch(l_, batch);
  const bool ok = out->bad.ok();
  out->batch = ok ? batch.batch_size : 0;
  out->weighted = ok && !batch.weights.empty();
  if (ok) BucketIds(batch);
  out->hdispl.resize(n);
  int64_t total = 0;
  for (int d = 0; d < n; ++d) {
    out->hdispl[d] = total;
    total += l_.HeaderInts(d);
  }
  out->header.assign(total, 0);
  out->pbytes.assign(n, 0);
  out->pdispl.assign(n, 0);
  for (int d = 0; d < n; ++d) {
    int64_t* h = out->header.data() + out->hdispl[d];
    h[0] = out->batch;
    h[1] = (out->weighted ? kWeightedFlag : 0) | (ok ? 0 : kErrorFlag);
    if (!ok) continue;  // zero counts
    int64_t* c = h + 2;
    for (int ri : l_.dst_requests[d]) {
      const RequestIds& r = ids_[ri];
      *c++ = static_cast<int64_t>(r.uids.size());
      for (const auto& p : r.pos) *c++ = static_cast<int64_t>(p.size());
    }
    out->pbytes[d] = PayloadBytes(h, l_.dst_requests[d]);
  }
  std::exclusive_scan(out->pbytes.begin(), out->pbytes.end(), out->pdispl.begin(), int64_t{0});
  out->payload.assign(out->pdispl[n - 1] + out->pbytes[n - 1], 0);
  if (ok) {
    // Per receiver: [unique ids (int64)] [lengths, positions (int32)] [weights].
    for (int d = 0; d < n; ++d) {
      segs_.clear();
      for (int ri : l_.dst_requests[d]) segs_.push_back(Seg(ids_[ri].uids));
      for (int ri : l_.dst_requests[d]) {
        const RequestIds& r = ids_[ri];
        for (size_t fi = 0; fi < r.pos.size(); ++fi) {
          segs_.push_back(Seg(r.lengths[fi]));
          segs_.push_back(Seg(r.pos[fi]));
        }
      }
      if (out->weighted) {
        for (int ri : l_.dst_requests[d]) {
          for (const auto& w : ids_[ri].wts) segs_.push_back(Seg(w));
        }
      }
      // Host-side packing (ctx is the CPU's here); a device twin packs device buckets.
      TESSERA_CHECK_OK(PackSegments(l_.host, segs_.data(), static_cast<int64_t>(segs_.size()),
                                    out->payload.data() + out->pdispl[d]));
    }
  }
  if (keep_batch) {
    out->offsets.assign(batch.offsets.begin(), batch.offsets.end());
    out->values.assign(batch.values.begin(), batch.values.end());
    out->weights.assign(batch.weights.begin(), batch.weights.end());
  } else {
    out->offsets.clear();
    out->values.clear();
    out->weights.clear();
  }
}

namespace {

// True when `batch` is the one `p` was packed from with keep_batch.
bool SameBatch(const PackedInput& p, const KeyedJagged& batch) {
  return p.bad.ok() && p.batch == batch.batch_size &&
         std::equal(p.offsets.begin(), p.offsets.end(), batch.offsets.begin(),
                    batch.offsets.end()) &&
         std::equal(p.values.begin(), p.values.end(), batch.values.begin(), batch.values.end()) &&
         std::equal(p.weights.begin(), p.weights.end(), batch.weights.begin(), batch.weights.end());
}

}  // namespace

void InputDist::SizeReceived(ReceivedInput* in) const {
  const int n = l_.n;
  const int64_t hme = l_.HeaderInts(l_.me);
  in->qbytes.resize(n);
  in->qdispl.resize(n);
  for (int src = 0; src < n; ++src) {
    in->qbytes[src] = PayloadBytes(in->header.data() + src * hme, l_.dst_requests[l_.me]);
  }
  std::exclusive_scan(in->qbytes.begin(), in->qbytes.end(), in->qdispl.begin(), int64_t{0});
  in->payload.resize(in->qdispl[n - 1] + in->qbytes[n - 1]);
}

void InputDist::Prefetch(const KeyedJagged& next) {
  Pack(next, /*keep_batch=*/true, &staged_);
  staged_valid_ = true;
}

absl::Status InputDist::Exchange(const KeyedJagged& batch, const float* out, Result* result) {
  Communicator& g = *l_.group;
  const int n = l_.n;
  const bool pipe = l_.options.pipeline_input_dist;
  current_ = nullptr;
  // This batch's input dist: already travelling (prefetched) or packed now.
  const bool use_mine = inflight_ != nullptr && SameBatch(inflight_->packed, batch);
  if (!use_mine) Pack(batch, /*keep_batch=*/false, &fresh_);
  const PackedInput& cur = use_mine ? inflight_->packed : fresh_;
  absl::Status bad = cur.bad;
  if (bad.ok() && out == nullptr && batch.batch_size > 0) {
    bad = absl::InvalidArgumentError("ShardedEmbeddingCollection::Forward: null out");
  }
  result->batch = bad.ok() ? cur.batch : 0;
  result->weighted = bad.ok() && cur.weighted;
  result->keeps_inflight = false;

  // 1. Headers (fixed size per pair): A for this batch, and with pipelining B for the batch
  // Prefetch packed, so the group agrees on what is prefetched without another exchange.
  const int sections = pipe ? 2 : 1;
  const int64_t hme = l_.HeaderInts(l_.me);
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  for (int d = 0; d < n; ++d) sc[d] = sections * l_.HeaderInts(d);
  for (int d = 0; d < n; ++d) rc[d] = sections * hme;
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t{0});
  std::vector<int64_t> hsend(sd[n - 1] + sc[n - 1], 0), hrecv(rd[n - 1] + rc[n - 1]);
  for (int d = 0; d < n; ++d) {
    const int64_t hd = l_.HeaderInts(d);
    int64_t* h = hsend.data() + sd[d];
    std::memcpy(h, cur.header.data() + cur.hdispl[d], hd * sizeof(int64_t));
    h[0] = result->batch;
    h[1] |= (bad.ok() ? 0 : kErrorFlag) | (use_mine ? kPrefetchedFlag : 0);
    if (pipe && staged_valid_) {
      std::memcpy(h + hd, staged_.header.data() + staged_.hdispl[d], hd * sizeof(int64_t));
      h[hd + 1] |= kStagedFlag;
    }
  }
  TESSERA_RETURN_IF_ERROR(g.AllToAllV<int64_t>(hsend.data(), sc, sd, hrecv.data(), rc, rd));
  if (!bad.ok()) return bad;
  bool all_use = true, any_use = false, all_staged = pipe;
  for (int src = 0; src < n; ++src) {
    const int64_t flags = hrecv[rd[src] + 1];
    if (flags & kErrorFlag) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardedEmbeddingCollection::Forward: rank ", g.world_ranks()[src],
                       " of this sharding group got a bad batch (its error says which)"));
    }
    const bool used = (flags & kPrefetchedFlag) != 0;
    all_use &= used;
    any_use |= used;
    if (pipe) {
      const int64_t fb = hrecv[rd[src] + hme + 1];
      all_staged &= (fb & kStagedFlag) && !(fb & kErrorFlag);
    }
  }

  // 2. Payload: the prefetched one when every rank of the group has its batch in flight,
  // otherwise the blocking all-to-all (a prefetch some ranks could not use is dropped).
  result->keeps_inflight = inflight_ != nullptr && !any_use;
  if (all_use) {
    in_use_ = std::move(inflight_);
    TESSERA_RETURN_IF_ERROR(in_use_->pending->Wait());
    current_ = &in_use_->received;
    ++prefetched_forwards_;
  } else {
    fresh_in_.header.resize(static_cast<size_t>(n) * hme);
    for (int src = 0; src < n; ++src) {
      std::memcpy(fresh_in_.header.data() + src * hme, hrecv.data() + rd[src],
                  hme * sizeof(int64_t));
    }
    SizeReceived(&fresh_in_);
    TESSERA_RETURN_IF_ERROR(g.AllToAllV(cur.payload.data(), cur.pbytes, cur.pdispl,
                                        fresh_in_.payload.data(), fresh_in_.qbytes,
                                        fresh_in_.qdispl));
    current_ = &fresh_in_;
    if (any_use) {
      TESSERA_RETURN_IF_ERROR(inflight_->pending->Wait());
      inflight_.reset();
    }
  }
  // The next batch's payload starts now and travels during this step's dense work.
  if (all_staged && inflight_ == nullptr) {
    auto next = std::make_unique<InflightInput>();
    std::swap(next->packed, staged_);
    staged_valid_ = false;
    next->received.header.resize(static_cast<size_t>(n) * hme);
    for (int src = 0; src < n; ++src) {
      std::memcpy(next->received.header.data() + src * hme, hrecv.data() + rd[src] + hme,
                  hme * sizeof(int64_t));
    }
    SizeReceived(&next->received);
    const PackedInput& p = next->packed;
    TESSERA_ASSIGN_OR_RETURN(
        next->pending,
        g.StartAllToAllV(p.payload.data(), p.pbytes, p.pdispl, next->received.payload.data(),
                         next->received.qbytes, next->received.qdispl));
    inflight_ = std::move(next);
  } else if (pipe && !all_staged) {
    staged_valid_ = false;
  }
  return absl::OkStatus();
}

absl::Status InputDist::Unpack() {
  TESSERA_CHECK(current_ != nullptr) << "InputDist::Unpack without a successful Exchange";
  const ReceivedInput& in = *current_;
  // Routing is host work (the ids came over MPI); the shards' memory gets a mirror at the end.
  const DeviceContext& ctx = l_.host;
  const int n = l_.n;
  const auto& mine = l_.dst_requests[l_.me];
  const int64_t hme = l_.HeaderInts(l_.me);
  for (OwnerIds& o : owners_) {
    o.urows.clear();
    o.slots.clear();
    o.weights.clear();
    o.offsets.clear();
    o.offsets_start.clear();
  }
  src_batch_.resize(n);
  bool any_weighted = false;
  for (int src = 0; src < n; ++src) {
    const int64_t* hs = in.header.data() + src * hme;
    src_batch_[src] = hs[0];
    any_weighted |= (hs[1] & kWeightedFlag) != 0;
  }
  std::vector<int64_t> ubase(mine.size());
  for (int src = 0; src < n; ++src) {
    const int64_t b = src_batch_[src];
    const int64_t* h = in.header.data() + src * hme + 2;
    const bool w = (in.header[src * hme + 1] & kWeightedFlag) != 0;
    const char* p = in.payload.data() + in.qdispl[src];
    const int64_t* hh = h;
    for (size_t q = 0; q < mine.size(); ++q) {
      const LocalShard& ls = l_.local[l_.requests[mine[q]].local];
      OwnerIds& o = owners_[l_.requests[mine[q]].local];
      const int64_t nu = *hh;
      hh += 1 + l_.NumFeatures(ls.table);
      ubase[q] = static_cast<int64_t>(o.urows.size());
      o.urows.resize(ubase[q] + nu);
      // A dynamic shard's rows are the keys themselves.
      TESSERA_RETURN_IF_ERROR(UnpackIds(ctx, reinterpret_cast<const int64_t*>(p), nu,
                                        l_.IsDynamic(ls) ? 0 : ls.rect.row_begin,
                                        o.urows.data() + ubase[q]));
      p += nu * 8;
    }
    hh = h;
    for (size_t q = 0; q < mine.size(); ++q) {
      const LocalShard& ls = l_.local[l_.requests[mine[q]].local];
      OwnerIds& o = owners_[l_.requests[mine[q]].local];
      ++hh;
      for (int64_t fi = 0; fi < l_.NumFeatures(ls.table); ++fi) {
        const int64_t np = *hh++;
        const int32_t* len = reinterpret_cast<const int32_t*>(p);
        const int32_t* pos = len + b;
        const int64_t ostart = static_cast<int64_t>(o.offsets.size());
        const int64_t at = static_cast<int64_t>(o.slots.size());
        o.offsets_start.push_back(ostart);
        o.offsets.resize(ostart + b + 1);
        o.slots.resize(at + np);
        // Unique-row indices for now; turned into slots after Resolve.
        TESSERA_RETURN_IF_ERROR(UnpackBags(ctx, len, b, pos, np, at, ubase[q],
                                           o.offsets.data() + ostart, o.slots.data() + at));
        p += 4 * (b + np);
      }
    }
    if (w) {
      hh = h;
      for (size_t q = 0; q < mine.size(); ++q) {
        const LocalShard& ls = l_.local[l_.requests[mine[q]].local];
        OwnerIds& o = owners_[l_.requests[mine[q]].local];
        ++hh;
        for (int64_t fi = 0; fi < l_.NumFeatures(ls.table); ++fi) {
          const int64_t np = *hh++;
          const int64_t at = static_cast<int64_t>(o.weights.size());
          o.weights.resize(at + np);
          const ByteSegment seg{p, 4 * np};
          TESSERA_RETURN_IF_ERROR(
              PackSegments(ctx, &seg, 1, reinterpret_cast<char*>(o.weights.data() + at)));
          p += 4 * np;
        }
      }
    } else {
      for (size_t q = 0; q < mine.size(); ++q) {
        OwnerIds& o = owners_[l_.requests[mine[q]].local];
        // A mixed group: unweighted senders weigh 1.
        const int64_t at = static_cast<int64_t>(o.weights.size());
        o.weights.resize(o.slots.size());
        TESSERA_RETURN_IF_ERROR(FillFloats(ctx, 1.0f, static_cast<int64_t>(o.slots.size()) - at,
                                           o.weights.data() + at));
      }
    }
  }
  for (size_t li = 0; li < l_.local.size(); ++li) {
    OwnerIds& o = owners_[li];
    if (!any_weighted) o.weights.clear();
    o.uslots.resize(o.urows.size());
    if (l_.IsDynamic(l_.local[li])) {
      TESSERA_RETURN_IF_ERROR(ResolveDynamic(li, &o));
    } else {
      TESSERA_RETURN_IF_ERROR(l_.local[li].store->Resolve(o.urows, absl::MakeSpan(o.uslots)));
    }
    TESSERA_RETURN_IF_ERROR(
        MapIndices(ctx, o.uslots.data(), static_cast<int64_t>(o.slots.size()), o.slots.data()));
    TESSERA_ASSIGN_OR_RETURN(o.ctx_slots,
                             Mirror(l_.ctx, o.slots, &o.slots_mirror, "the owner's slots"));
    TESSERA_ASSIGN_OR_RETURN(o.ctx_offsets,
                             Mirror(l_.ctx, o.offsets, &o.offsets_mirror, "the owner's offsets"));
    TESSERA_ASSIGN_OR_RETURN(
        o.ctx_weights, Mirror(l_.ctx, o.weights, &o.weights_mirror, "the owner's per-id weights"));
    if (o.weights.empty()) o.ctx_weights = nullptr;
  }
  // The prefetched payload is unpacked: its buffers can go.
  in_use_.reset();
  current_ = nullptr;
  return absl::OkStatus();
}

absl::Status InputDist::ResolveDynamic(size_t li, OwnerIds* o) {
  // o->slots holds each position's unique-row index here (MapIndices turns it into slots).
  const size_t np = o->slots.size();
  dyn_keys_.resize(np);
  for (size_t i = 0; i < np; ++i) dyn_keys_[i] = o->urows[o->slots[i]];
  const std::vector<int64_t>* all = &dyn_keys_;
  int64_t mine = 0;
  if (l_.m > 1) {
    Communicator& rep = *l_.replica;
    std::vector<int64_t> counts(l_.m), displs(l_.m);
    TESSERA_RETURN_IF_ERROR(rep.AllGatherCounts(static_cast<int64_t>(np), absl::MakeSpan(counts)));
    for (int r = 1; r < l_.m; ++r) displs[r] = displs[r - 1] + counts[r - 1];
    dyn_all_.resize(displs[l_.m - 1] + counts[l_.m - 1]);
    mine = displs[rep.rank()];
    for (int r = 0; r < l_.m; ++r) {
      counts[r] *= 8;
      displs[r] *= 8;
    }
    TESSERA_RETURN_IF_ERROR(rep.AllGatherV(dyn_keys_.data(), static_cast<int64_t>(np) * 8,
                                           dyn_all_.data(), counts, displs));
    all = &dyn_all_;
  }
  dyn_slots_.resize(all->size());
  TESSERA_RETURN_IF_ERROR(l_.local[li].store->Resolve(*all, absl::MakeSpan(dyn_slots_)));
  std::fill(o->uslots.begin(), o->uslots.end(), 0);
  for (size_t i = 0; i < np; ++i) o->uslots[o->slots[i]] = dyn_slots_[mine + i];
  return absl::OkStatus();
}

absl::Status InputDist::HintNextRows(bool wait) {
  if (inflight_ == nullptr || inflight_->hinted) return absl::OkStatus();
  if (!l_.AnyReadsAhead()) return absl::OkStatus();
  if (wait) {
    TESSERA_RETURN_IF_ERROR(inflight_->pending->Wait());
  } else {
    TESSERA_ASSIGN_OR_RETURN(bool done, inflight_->pending->Test());
    if (!done) return absl::OkStatus();
  }
  inflight_->hinted = true;
  const ReceivedInput& in = inflight_->received;
  const auto& mine = l_.dst_requests[l_.me];
  const int64_t hme = l_.HeaderInts(l_.me);
  hint_rows_.resize(l_.local.size());
  for (auto& rows : hint_rows_) rows.clear();
  // Each sender's payload opens with the unique ids of every request of mine, in order.
  for (int src = 0; src < l_.n; ++src) {
    const int64_t* h = in.header.data() + src * hme + 2;
    const char* p = in.payload.data() + in.qdispl[src];
    for (int ri : mine) {
      const int li = l_.requests[ri].local;
      const LocalShard& ls = l_.local[li];
      const int64_t nu = *h;
      h += 1 + l_.NumFeatures(ls.table);
      const int64_t* ids = reinterpret_cast<const int64_t*>(p);
      p += nu * 8;
      if (!l_.ReadsAhead(ls)) continue;
      std::vector<int64_t>& rows = hint_rows_[li];
      const int64_t at = static_cast<int64_t>(rows.size());
      rows.resize(at + nu);
      // A dynamic shard reads ahead by key (DynamicRowStore::Prefetch).
      TESSERA_RETURN_IF_ERROR(
          UnpackIds(l_.host, ids, nu, l_.IsDynamic(ls) ? 0 : ls.rect.row_begin, rows.data() + at));
    }
  }
  for (size_t li = 0; li < l_.local.size(); ++li) {
    if (!hint_rows_[li].empty()) l_.local[li].store->Prefetch(hint_rows_[li]);
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
