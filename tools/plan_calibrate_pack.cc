// The input dist's packing rate for `tessera-plan calibrate` (plan_calibrate_internal.h).
//
// sharding/internal/input_dist.cc's BucketIds, per request and id: the id looked up in (or added
// to) the request's hash map of unique ids (reserved for the last call's unique ids, as
// BucketIds does), its position and the bag's length recorded; then the positions copied into
// the payload (PackSegments). Its cost per id grows with the map: a request of one-id bags over
// a small table fits its map in L1, a request of 40-id bags over a hot table holds ~10^4 unique
// ids. The caches are evicted before each call (EvictCaches): in training a step's lookups and
// dense work run between two packings, so the maps and the batch are not cached. Two points, each 8 requests (tables) of 2048 bags of Zipf(1.05) ids, 8 distinct
// batches cycled: one id per bag over 2^17 rows, and 40 ids per bag over 2^18 rows; the planner
// interpolates in log(unique ids per request) between them (planner/profile.h). Also a dynamic
// table's key probe (key_probe_id_s), which the owner pays per id as the packing does.
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/key_index.h"
#include "tools/plan_calibrate_internal.h"

namespace tessera::calibrate_internal {
namespace {

struct PackPoint {
  double id_s = 0;      // seconds per id
  double distinct = 0;  // mean unique ids per request
};

absl::StatusOr<PackPoint> MeasurePackPoint(const CalibrateOptions& o, const DeviceContext& ctx,
                                           int64_t rows, int64_t pooling) {
  constexpr int64_t kTables = 8, kBags = 2048, kBatches = 8;
  std::vector<KeyedJagged> batches;
  for (int64_t i = 0; i < kBatches * kTables; ++i) {
    batches.push_back(MakeBatch(rows, kBags, pooling, true, 1.05, 100 + i));
  }
  struct Req {
    std::vector<int64_t> uids;
    absl::flat_hash_map<int64_t, int32_t> index;
    std::vector<int32_t> lengths, pos;
  };
  std::vector<Req> reqs(kTables);
  std::vector<char> payload;
  std::vector<float> flush;
  int64_t call = 0, unique_sum = 0, requests = 0;
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point / 4, [&]() -> absl::StatusOr<double> {
        const int64_t first = (call++ % kBatches) * kTables;
        EvictCaches(o, ctx, &flush);
        IntervalTimer w(o.cpu_clock);
        for (int64_t t = 0; t < kTables; ++t) {
          const KeyedJagged& kj = batches[first + t];
          Req& r = reqs[t];
          const size_t last = r.uids.size();
          r.uids.clear();
          r.index.clear();
          r.index.reserve(last);
          r.lengths.assign(kBags, 0);
          r.pos.clear();
          for (int64_t bag = 0; bag < kBags; ++bag) {
            for (int64_t j = kj.offsets[bag]; j < kj.offsets[bag + 1]; ++j) {
              auto [it, fresh] =
                  r.index.try_emplace(kj.values[j], static_cast<int32_t>(r.uids.size()));
              if (fresh) r.uids.push_back(kj.values[j]);
              r.pos.push_back(it->second);
              r.lengths[bag] += 1;
            }
          }
          const size_t bytes = 8 * r.uids.size() + 4 * (r.lengths.size() + r.pos.size());
          if (payload.size() < bytes) payload.resize(bytes);
          char* p = payload.data();
          std::memcpy(p, r.uids.data(), 8 * r.uids.size());
          p += 8 * r.uids.size();
          std::memcpy(p, r.lengths.data(), 4 * r.lengths.size());
          p += 4 * r.lengths.size();
          std::memcpy(p, r.pos.data(), 4 * r.pos.size());
        }
        const double sec = w.Seconds();
        for (const Req& r : reqs) unique_sum += static_cast<int64_t>(r.uids.size());
        requests += kTables;
        return sec;
      }));
  PackPoint pt;
  pt.id_s = s / static_cast<double>(kTables * kBags * pooling);
  pt.distinct = static_cast<double>(unique_sum) / static_cast<double>(requests);
  return pt;
}

// A dynamic table's key -> slot probe (KeySlotIndex::Find): 2^20 random 64-bit keys held, Zipf
// batches of 32,768 of them looked up, caches evicted before each batch.
absl::StatusOr<double> MeasureKeyProbe(const CalibrateOptions& o, const DeviceContext& ctx) {
  constexpr int64_t kKeys = int64_t{1} << 20, kIds = 32768, kBatches = 8;
  TESSERA_ASSIGN_OR_RETURN(KeySlotIndex index, KeySlotIndex::Create(kKeys));
  for (int64_t k = 0; k < kKeys; ++k) index.Insert(Mix64(static_cast<uint64_t>(k)), k);
  std::vector<std::vector<uint64_t>> batches;
  for (int64_t i = 0; i < kBatches; ++i) {
    KeyedJagged kj = MakeBatch(kKeys, kIds, 1, true, 1.05, 500 + i);
    batches.emplace_back();
    for (int64_t v : kj.values) batches.back().push_back(Mix64(static_cast<uint64_t>(v)));
  }
  std::vector<float> flush;
  int64_t call = 0, sink = 0;
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point / 4, [&]() -> absl::StatusOr<double> {
        const std::vector<uint64_t>& keys = batches[call++ % kBatches];
        EvictCaches(o, ctx, &flush);
        IntervalTimer w(o.cpu_clock);
        int64_t probes = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (i + 8 < keys.size()) index.Prefetch(keys[i + 8]);
          sink += index.Find(keys[i], &probes);
        }
        return w.Seconds();
      }));
  if (sink == -1) Progress(o, "");  // keeps the lookups
  return s / static_cast<double>(batches[0].size());
}

}  // namespace

absl::Status MeasurePackIds(const CalibrateOptions& o, const DeviceContext& ctx,
                            planner::DeviceProfile* d) {
  if (ctx.is_cuda()) return absl::OkStatus();
  TESSERA_ASSIGN_OR_RETURN(PackPoint one, MeasurePackPoint(o, ctx, int64_t{1} << 17, 1));
  TESSERA_ASSIGN_OR_RETURN(PackPoint hot, MeasurePackPoint(o, ctx, int64_t{1} << 18, 40));
  d->pack_id_s = one.id_s;
  d->pack_distinct = one.distinct;
  d->pack_hot_id_s = hot.id_s;
  d->pack_hot_distinct = hot.distinct;
  TESSERA_ASSIGN_OR_RETURN(d->key_probe_id_s, MeasureKeyProbe(o, ctx));
  Progress(o, absl::StrFormat("%s dynamic-table key probe %.1f ns per id", d->kind,
                              1e9 * d->key_probe_id_s));
  Progress(o, absl::StrFormat("%s input packing %.1f ns per id at %.0f unique ids per request, "
                              "%.1f at %.0f",
                              d->kind, 1e9 * one.id_s, one.distinct, 1e9 * hot.id_s,
                              hot.distinct));
  return absl::OkStatus();
}

}  // namespace tessera::calibrate_internal
