// ShardedEmbeddingCollection's input dist pieces shared by the blocking and the pipelined path:
// packing a batch (requester), sizing and looking up what arrived (owner), and the float
// all-to-all with 16-bit payloads.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/row_dtype.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera::internal {
namespace {

// Payload bytes of one (sender, receiver) pair from the header h = [batch, flags, counts...].
int64_t PayloadBytes(const ShardedEmbeddingCollection::Impl& s, const int64_t* h,
                     const std::vector<int>& reqs) {
  const int64_t b = h[0];
  const bool w = (h[1] & kWeightedFlag) != 0;
  int64_t ids = 0, i32 = 0, fl = 0;
  h += 2;
  for (int ri : reqs) {
    ids += *h++;
    for (int64_t fi = 0; fi < NumFeatures(s, s.requests[ri].table); ++fi) {
      const int64_t np = *h++;
      i32 += b + np;
      fl += w ? np : 0;
    }
  }
  return Align8(8 * ids + 4 * i32 + 4 * fl);
}

// Appends v's bytes at *p and advances it. An empty vector may have a null data(), and memcpy
// from null is undefined even for 0 bytes, so nothing is copied then.
template <typename T>
void Put(char** p, const std::vector<T>& v) {
  if (v.empty()) return;
  std::memcpy(*p, v.data(), v.size() * sizeof(T));
  *p += v.size() * sizeof(T);
}

}  // namespace

void PackInput(ShardedEmbeddingCollection::Impl& s, const KeyedJagged& batch, bool keep_batch,
               PackedInput* out) {
  const int n = s.n;
  out->bad = CheckBatch(s, batch);
  const bool ok = out->bad.ok();
  out->batch = ok ? batch.batch_size : 0;
  out->weighted = ok && !batch.weights.empty();
  if (ok) BucketIds(s, batch);
  out->hdispl.resize(n);
  int64_t total = 0;
  for (int d = 0; d < n; ++d) {
    out->hdispl[d] = total;
    total += HeaderInts(s, d);
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
    for (int ri : s.dst_requests[d]) {
      const Request& r = s.requests[ri];
      *c++ = static_cast<int64_t>(r.uids.size());
      for (const auto& p : r.pos) *c++ = static_cast<int64_t>(p.size());
    }
    out->pbytes[d] = PayloadBytes(s, h, s.dst_requests[d]);
  }
  std::exclusive_scan(out->pbytes.begin(), out->pbytes.end(), out->pdispl.begin(), int64_t{0});
  out->payload.assign(out->pdispl[n - 1] + out->pbytes[n - 1], 0);
  if (ok) {
    // Per receiver: [unique ids (int64)] [lengths, positions (int32)] [weights].
    for (int d = 0; d < n; ++d) {
      char* p = out->payload.data() + out->pdispl[d];
      for (int ri : s.dst_requests[d]) {
        Put(&p, s.requests[ri].uids);
      }
      for (int ri : s.dst_requests[d]) {
        const Request& r = s.requests[ri];
        for (size_t fi = 0; fi < r.pos.size(); ++fi) {
          Put(&p, r.lengths[fi]);
          Put(&p, r.pos[fi]);
        }
      }
      if (out->weighted) {
        for (int ri : s.dst_requests[d]) {
          for (const auto& w : s.requests[ri].wts) Put(&p, w);
        }
      }
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

bool SameBatch(const PackedInput& p, const KeyedJagged& batch) {
  return p.bad.ok() && p.batch == batch.batch_size &&
         std::equal(p.offsets.begin(), p.offsets.end(), batch.offsets.begin(),
                    batch.offsets.end()) &&
         std::equal(p.values.begin(), p.values.end(), batch.values.begin(),
                    batch.values.end()) &&
         std::equal(p.weights.begin(), p.weights.end(), batch.weights.begin(),
                    batch.weights.end());
}

void SizeReceived(const ShardedEmbeddingCollection::Impl& s, ReceivedInput* in) {
  const int n = s.n;
  const int64_t hme = HeaderInts(s, s.me);
  in->qbytes.resize(n);
  in->qdispl.resize(n);
  for (int src = 0; src < n; ++src) {
    in->qbytes[src] = PayloadBytes(s, in->header.data() + src * hme, s.dst_requests[s.me]);
  }
  std::exclusive_scan(in->qbytes.begin(), in->qbytes.end(), in->qdispl.begin(), int64_t{0});
  in->payload.resize(in->qdispl[n - 1] + in->qbytes[n - 1]);
}

}  // namespace tessera::internal

namespace tessera {

using internal::LocalShard;
using internal::NumFeatures;

absl::Status ShardedEmbeddingCollection::Impl::LookupReceived(const internal::ReceivedInput& in,
                                                              std::vector<int64_t>* reply_counts,
                                                              std::vector<int64_t>* reply_displs) {
  Impl& s = *this;
  const auto& mine = s.dst_requests[s.me];
  const int64_t hme = internal::HeaderInts(s, s.me);
  for (auto& ls : s.local) {
    ls.urows.clear();
    ls.slots.clear();
    ls.weights.clear();
    ls.offsets.clear();
    ls.offsets_start.clear();
  }
  s.src_batch.resize(n);
  bool any_weighted = false;
  for (int src = 0; src < n; ++src) {
    const int64_t* hs = in.header.data() + src * hme;
    s.src_batch[src] = hs[0];
    any_weighted |= (hs[1] & internal::kWeightedFlag) != 0;
  }
  for (auto& ls : s.local) ls.src_batch = s.src_batch;
  for (int src = 0; src < n; ++src) {
    const int64_t b = s.src_batch[src];
    const int64_t* h = in.header.data() + src * hme + 2;
    const bool w = (in.header[src * hme + 1] & internal::kWeightedFlag) != 0;
    const char* p = in.payload.data() + in.qdispl[src];
    std::vector<int64_t> ubase(mine.size());
    const int64_t* hh = h;
    for (size_t q = 0; q < mine.size(); ++q) {
      LocalShard& ls = s.local[s.requests[mine[q]].local];
      const int64_t nu = *hh;
      hh += 1 + NumFeatures(s, ls.table);
      ubase[q] = static_cast<int64_t>(ls.urows.size());
      const int64_t* ids = reinterpret_cast<const int64_t*>(p);
      for (int64_t i = 0; i < nu; ++i) ls.urows.push_back(ids[i] - ls.rect.row_begin);
      p += nu * 8;
    }
    hh = h;
    for (size_t q = 0; q < mine.size(); ++q) {
      LocalShard& ls = s.local[s.requests[mine[q]].local];
      ++hh;
      for (int64_t fi = 0; fi < NumFeatures(s, ls.table); ++fi) {
        const int64_t np = *hh++;
        const int32_t* len = reinterpret_cast<const int32_t*>(p);
        const int32_t* pos = len + b;
        ls.offsets_start.push_back(static_cast<int64_t>(ls.offsets.size()));
        int64_t at = static_cast<int64_t>(ls.slots.size());
        ls.offsets.push_back(at);
        for (int64_t i = 0; i < b; ++i) ls.offsets.push_back(at += len[i]);
        // Unique-id index for now; turned into a slot after Resolve.
        for (int64_t i = 0; i < np; ++i) ls.slots.push_back(ubase[q] + pos[i]);
        p += 4 * (b + np);
      }
    }
    if (w) {
      hh = h;
      for (size_t q = 0; q < mine.size(); ++q) {
        LocalShard& ls = s.local[s.requests[mine[q]].local];
        ++hh;
        for (int64_t fi = 0; fi < NumFeatures(s, ls.table); ++fi) {
          const int64_t np = *hh++;
          const float* wt = reinterpret_cast<const float*>(p);
          ls.weights.insert(ls.weights.end(), wt, wt + np);
          p += 4 * np;
        }
      }
    } else {
      for (size_t q = 0; q < mine.size(); ++q) {
        LocalShard& ls = s.local[s.requests[mine[q]].local];
        ls.weights.resize(ls.slots.size(), 1.0f);  // a mixed group: unweighted senders weigh 1
      }
    }
  }
  for (auto& ls : s.local) {
    if (!any_weighted) ls.weights.clear();
    ls.uslots.resize(ls.urows.size());
    TESSERA_RETURN_IF_ERROR(ls.store->Resolve(ls.urows, absl::MakeSpan(ls.uslots)));
    for (auto& x : ls.slots) x = ls.uslots[x];
  }
  // Reply layout to sender src: per request of mine, per feature, [batch(src), width].
  std::vector<int64_t>& rc = *reply_counts;
  std::vector<int64_t>& rd = *reply_displs;
  rc.assign(n, 0);
  rd.assign(n, 0);
  for (int src = 0; src < n; ++src) {
    for (int ri : mine) {
      const LocalShard& ls = s.local[s.requests[ri].local];
      rc[src] += s.src_batch[src] * ls.width * NumFeatures(s, ls.table);
    }
  }
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t{0});
  s.send_f.assign(rd[n - 1] + rc[n - 1], 0.0f);
  for (int src = 0; src < n; ++src) {
    float* o = s.send_f.data() + rd[src];
    for (int ri : mine) {
      LocalShard& ls = s.local[s.requests[ri].local];
      const int64_t nf = NumFeatures(s, ls.table);
      for (int64_t fi = 0; fi < nf; ++fi) {
        PooledLookupArgs a;
        a.weights = ls.store->weight_data();
        a.weight_dtype = ls.store->weight_dtype();
        a.dim = ls.width;
        a.offsets = ls.offsets.data() + ls.offsets_start[src * nf + fi];
        a.indices = ls.slots.data();
        a.per_id_weights = ls.weights.empty() ? nullptr : ls.weights.data();
        a.num_bags = s.src_batch[src];
        a.pooling = PoolingMode::kSum;
        a.out = o;
        a.out_stride = ls.width;
        if (a.num_bags > 0) TESSERA_RETURN_IF_ERROR(PooledLookupForward(s.ctx, a));
        o += s.src_batch[src] * ls.width;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::HintNextRows(bool wait) {
  Impl& s = *this;
  if (s.inflight == nullptr || s.inflight->hinted) return absl::OkStatus();
  bool any_tiered = false;
  for (const auto& ls : s.local) {
    any_tiered |= internal::ReadsAhead(s, ls);
  }
  if (!any_tiered) return absl::OkStatus();
  if (wait) {
    TESSERA_RETURN_IF_ERROR(s.inflight->pending->Wait());
  } else {
    TESSERA_ASSIGN_OR_RETURN(bool done, s.inflight->pending->Test());
    if (!done) return absl::OkStatus();
  }
  s.inflight->hinted = true;
  const internal::ReceivedInput& in = s.inflight->received;
  const auto& mine = s.dst_requests[s.me];
  const int64_t hme = internal::HeaderInts(s, s.me);
  s.hint_rows.resize(s.local.size());
  for (auto& rows : s.hint_rows) rows.clear();
  // Each sender's payload opens with the unique ids of every request of mine, in order.
  for (int src = 0; src < n; ++src) {
    const int64_t* h = in.header.data() + src * hme + 2;
    const char* p = in.payload.data() + in.qdispl[src];
    for (int ri : mine) {
      const int li = s.requests[ri].local;
      const LocalShard& ls = s.local[li];
      const int64_t nu = *h;
      h += 1 + NumFeatures(s, ls.table);
      const int64_t* ids = reinterpret_cast<const int64_t*>(p);
      p += nu * 8;
      if (!internal::ReadsAhead(s, ls)) continue;
      std::vector<int64_t>& rows = s.hint_rows[li];
      for (int64_t i = 0; i < nu; ++i) rows.push_back(ids[i] - ls.rect.row_begin);
    }
  }
  for (size_t li = 0; li < s.local.size(); ++li) {
    if (!s.hint_rows[li].empty()) s.local[li].store->Prefetch(s.hint_rows[li]);
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::Impl::ExchangeFloats(
    const float* send, const std::vector<int64_t>& sc, const std::vector<int64_t>& sd,
    float* recv, const std::vector<int64_t>& rc, const std::vector<int64_t>& rd) {
  const PayloadDType dt = options.comm_dtype;
  if (dt == PayloadDType::kF32) return group->AllToAllV<float>(send, sc, sd, recv, rc, rd);
  const int64_t ns = sd[n - 1] + sc[n - 1], nr = rd[n - 1] + rc[n - 1];
  send_h.resize(ns);
  recv_h.resize(nr);
  if (dt == PayloadDType::kF16) {
    for (int64_t i = 0; i < ns; ++i) send_h[i] = row_dtype::FloatToHalf(send[i]);
  } else {
    for (int64_t i = 0; i < ns; ++i) send_h[i] = row_dtype::FloatToBf16(send[i]);
  }
  TESSERA_RETURN_IF_ERROR(
      group->AllToAllV<uint16_t>(send_h.data(), sc, sd, recv_h.data(), rc, rd));
  if (dt == PayloadDType::kF16) {
    for (int64_t i = 0; i < nr; ++i) recv[i] = row_dtype::HalfToFloat(recv_h[i]);
  } else {
    for (int64_t i = 0; i < nr; ++i) recv[i] = row_dtype::Bf16ToFloat(recv_h[i]);
  }
  return absl::OkStatus();
}

}  // namespace tessera
