// ReplicaSyncPhase::ExactSumDynamic (replica_sync.h): exact mode's gradient sum of the dynamic
// shards in the global batch's order. One process sums a row's gradient over its occurrences in
// (feature, sample, position) order, the global batch being the world ranks' local batches in
// world rank order; the all-reduce of per-replica sums (ExactSum's union) adds the replicas'
// partial sums instead. So each replica publishes what its owner received (OutputDist::
// Aggregate's RowGrads::sources): per (feature, sender) its bags' lengths, per id its key and
// scale (ids without a row, slot 0, are left out: they update nothing) and per bag its gradient;
// every replica then sums all of them per key in (feature, world rank, bag, position) order with
// AggregateRowGradients, the one-process kernel, and gets the same bits.
//
// Bytes per replica and step, all-gathered over the replica group: per received bag 8 + 4 x width,
// per id 12; the union all-reduce it replaces sent 4 x width per distinct row.
#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "sharding/internal/replica_sync.h"

namespace tessera::internal {

namespace {

// One received (feature, sender) of one replica, parsed.
struct Source {
  std::vector<int64_t> offsets, keys, slots;
  std::vector<float> scales;
  const float* grads = nullptr;  // [bags, width] in the gathered buffer
};

void Put(std::vector<char>* b, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  b->insert(b->end(), c, c + bytes);
}

}  // namespace

absl::Status ReplicaSyncPhase::ExactSumDynamic(const InputDist& in, std::vector<RowGrads>* grads) {
  const auto& local = l_.local;
  const int n = l_.n, m = l_.m;
  std::vector<RowGrads>& rg = *grads;
  // This replica's block: per dynamic local shard, per (feature, sender): bags, ids, lengths
  // (int64), keys (int64), scales (float), gradients (float, width per bag), padded to 8 bytes.
  std::vector<char>& block = dyn_block_;  // reused: a fresh buffer a step faults its pages in
  block.clear();
  dyn_key_at_.resize(local.size());
  dyn_own_slots_.resize(local.size());
  for (size_t q = 0; q < local.size(); ++q) {
    const LocalShard& ls = local[q];
    if (!l_.IsDynamic(ls)) continue;
    const OwnerIds& ids = in.owners()[q];
    std::vector<int64_t>& key_at = dyn_key_at_[q];  // slot -> key, for this step's slots
    for (size_t i = 0; i < ids.uslots.size(); ++i) {
      if (ids.uslots[i] >= static_cast<int64_t>(key_at.size())) key_at.resize(ids.uslots[i] + 1);
      key_at[ids.uslots[i]] = ids.urows[i];
    }
    const int64_t nf = l_.NumFeatures(ls.table);
    dyn_own_slots_[q].resize(nf * n);
    for (int64_t k = 0; k < nf * n; ++k) {
      const BagGradients* bg =
          k < static_cast<int64_t>(rg[q].sources.size()) ? &rg[q].sources[k] : nullptr;
      const int64_t bags = bg != nullptr ? bg->num_bags : 0;
      std::vector<int64_t> lengths(bags), keys;
      std::vector<float> scales;
      std::vector<int64_t>& own = dyn_own_slots_[q][k];  // the keys' slots here
      own.clear();
      for (int64_t b = 0; b < bags; ++b) {
        for (int64_t j = bg->offsets[b]; j < bg->offsets[b + 1]; ++j) {
          const int64_t slot = bg->indices[j];
          if (slot == 0) continue;  // no row: nothing to learn
          ++lengths[b];
          keys.push_back(key_at[slot]);
          own.push_back(slot);
          scales.push_back(bg->per_id_weights != nullptr ? bg->per_id_weights[j] : 1.0f);
        }
      }
      const int64_t head[2] = {bags, static_cast<int64_t>(keys.size())};
      Put(&block, head, sizeof(head));
      Put(&block, lengths.data(), bags * 8);
      Put(&block, keys.data(), keys.size() * 8);
      Put(&block, scales.data(), scales.size() * 4);
      for (int64_t b = 0; b < bags; ++b) Put(&block, bg->grad + b * bg->grad_stride, ls.width * 4);
      block.resize((block.size() + 7) & ~size_t{7}, 0);
    }
  }
  std::vector<int64_t> sizes(m), displs(m);
  TESSERA_RETURN_IF_ERROR(
      l_.replica->AllGatherCounts(static_cast<int64_t>(block.size()), absl::MakeSpan(sizes)));
  for (int r = 1; r < m; ++r) displs[r] = displs[r - 1] + sizes[r - 1];
  std::vector<char>& all = dyn_all_;
  all.resize(displs[m - 1] + sizes[m - 1]);
  TESSERA_RETURN_IF_ERROR(l_.replica->AllGatherV(block.data(), static_cast<int64_t>(block.size()),
                                                 all.data(), sizes, displs));
  // The global batch's rank order: (group g, shard rank s) by world rank.
  std::vector<int> order(m * n);
  for (int i = 0; i < m * n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return l_.world_rank_of[a] < l_.world_rank_of[b]; });
  // Parse every replica's block (replica rank g is sharding group g).
  std::vector<const char*> at(m);
  for (int g = 0; g < m; ++g) at[g] = all.data() + displs[g];
  std::vector<int64_t> uslots;
  std::vector<float> sums;
  for (size_t q = 0; q < local.size(); ++q) {
    const LocalShard& ls = local[q];
    if (!l_.IsDynamic(ls)) continue;
    const int64_t nf = l_.NumFeatures(ls.table), w = ls.width;
    std::vector<Source> src(m * nf * n);  // [(g * nf + fi) * n + s]
    for (int g = 0; g < m; ++g) {
      const char* p = at[g];
      const char* base = all.data() + displs[g];
      for (int64_t k = 0; k < nf * n; ++k) {
        Source& so = src[g * nf * n + k];
        int64_t head[2];
        std::memcpy(head, p, sizeof(head));
        p += sizeof(head);
        const int64_t bags = head[0], np = head[1];
        so.offsets.assign(bags + 1, 0);
        for (int64_t b = 0; b < bags; ++b) {
          int64_t len;
          std::memcpy(&len, p + b * 8, 8);
          so.offsets[b + 1] = so.offsets[b] + len;
        }
        p += bags * 8;
        so.keys.resize(np);
        std::memcpy(so.keys.data(), p, np * 8);
        p += np * 8;
        so.scales.resize(np);
        std::memcpy(so.scales.data(), p, np * 4);
        p += np * 4;
        so.grads = reinterpret_cast<const float*>(p);
        p += bags * w * 4;
        p = base + (((p - base) + 7) & ~int64_t{7});
        if (g == l_.replica->rank()) {
          so.slots = dyn_own_slots_[q][k];
        } else {
          // Every replica admitted the same keys (InputDist::ResolveDynamic): each has a row.
          so.slots.resize(np);
          TESSERA_RETURN_IF_ERROR(ResolveRows(l_, ls, so.keys, absl::MakeSpan(so.slots)));
          std::vector<int64_t>& key_at = dyn_key_at_[q];
          for (int64_t i = 0; i < np; ++i) {
            if (so.slots[i] >= static_cast<int64_t>(key_at.size())) key_at.resize(so.slots[i] + 1);
            key_at[so.slots[i]] = so.keys[i];
          }
        }
      }
      at[g] = p;
    }
    std::vector<BagGradients> sources;
    for (int64_t fi = 0; fi < nf; ++fi) {
      for (int gs : order) {
        const int g = gs / n, s = gs % n;
        const Source& so = src[(g * nf + fi) * n + s];
        if (so.offsets.size() < 2) continue;  // no bags
        BagGradients bg;
        bg.offsets = so.offsets.data();
        bg.indices = so.slots.data();
        bg.per_id_weights = so.scales.data();
        bg.num_bags = static_cast<int64_t>(so.offsets.size()) - 1;
        bg.grad = so.grads;
        bg.grad_stride = w;
        sources.push_back(bg);
      }
    }
    RowGrads& out = rg[q];
    out.rows.clear();
    out.grads.clear();
    out.sources.clear();
    if (sources.empty()) continue;
    TESSERA_RETURN_IF_ERROR(
        AggregateRowGradients(l_.host, sources, w, PoolingMode::kSum, &dyn_ws_, &uslots, &sums));
    // Slots back to keys, ordered by key (RowGrads' order for a dynamic shard).
    std::vector<int64_t> idx(uslots.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    std::vector<int64_t> keys(uslots.size());
    for (size_t i = 0; i < uslots.size(); ++i) keys[i] = dyn_key_at_[q][uslots[i]];
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
    out.rows.resize(idx.size());
    out.grads.resize(idx.size() * w);
    for (size_t i = 0; i < idx.size(); ++i) {
      out.rows[i] = keys[idx[i]];
      std::memcpy(out.grads.data() + i * w, sums.data() + idx[i] * w, w * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
