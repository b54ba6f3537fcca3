// The input dist's packing rate for `tessera-plan calibrate` (plan_calibrate_internal.h).
//
// The trainer's own packing (InputPacker, sharding/input_packer.h: InputDist::Pack), per id: the
// batch checked, each id routed through its table's row blocks to the shard that owns it and
// looked up in (or added to) that request's hash map of unique ids, its position and its bag's
// length recorded, the payload written, the batch kept (as Prefetch keeps the next one). Its
// cost per id grows with the maps: a request of one-id bags over a small table fits its map in
// L1, a request of 40-id bags over a hot table holds ~10^4 unique ids. The caches are evicted
// before each call by the light pass (o.light_evict_bytes: the maps are reused every step and
// what evicts them is the step's row traffic), then the batch read back (the data loader just
// wrote it). Two points, each 8 tables over 2 ranks,
// 2048 bags of Zipf(1.05) ids, 8 distinct batches cycled: one id per bag over 2^17 rows, the
// tables table-wise, and 40 ids per bag over 2^18 rows, each table split row-wise; the planner
// interpolates in log(unique ids per request) between them (planner/profile.h). A copy of the hash-map part alone, timed until
// 2026-12-07, priced skewed's packing on 2 ranks at about half what it measured. Also a dynamic
// table's key probe (key_probe_id_s), which the owner pays per id as the packing does.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/key_index.h"
#include "sharding/input_packer.h"
#include "sharding/plan.h"
#include "tools/plan_calibrate_internal.h"

namespace tessera::calibrate_internal {
namespace {

struct PackPoint {
  double id_s = 0;      // seconds per id
  double distinct = 0;  // mean unique ids per request
};

absl::StatusOr<PackPoint> MeasurePackPoint(const CalibrateOptions& o, const DeviceContext& ctx,
                                           int64_t rows, int64_t pooling, bool row_wise) {
  constexpr int kTables = 8, kRanks = 2;
  constexpr int64_t kBags = 2048, kBatches = 8;
  // kTables tables of `rows` rows, one feature each, over a group of kRanks, packed by rank 0:
  // each split row-wise over the group (as the planner splits a hot table: every request then
  // carries every bag's length), or table-wise on the ranks in turn.
  EmbeddingCollectionOptions co;
  co.num_features = kTables;
  ShardingPlan plan;
  plan.group_size = kRanks;
  for (int t = 0; t < kTables; ++t) {
    TableConfig c;
    c.name = absl::StrCat("pack", t);
    c.num_rows = rows;
    c.dim = 16;
    c.features = {t};
    co.tables.push_back(c);
    TablePlan tp;
    tp.table = c.name;
    tp.type = row_wise ? ShardingType::kRowWise : ShardingType::kTableWise;
    if (!row_wise) {
      tp.shards.push_back(
          {.row_begin = 0, .row_end = rows, .col_begin = 0, .col_end = c.dim, .rank = t % kRanks,
           .line = 0});
    }
    for (int r = 0; row_wise && r < kRanks; ++r) {
      tp.shards.push_back({.row_begin = rows * r / kRanks,
                           .row_end = rows * (r + 1) / kRanks,
                           .col_begin = 0,
                           .col_end = c.dim,
                           .rank = r,
                           .line = 0});
    }
    plan.tables.push_back(tp);
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<InputPacker> packer,
                           InputPacker::Create(co, plan, kRanks));
  // kBatches batches of the kTables features, feature-major (KeyedJagged).
  std::vector<KeyedJagged> batches(kBatches);
  for (int64_t i = 0; i < kBatches; ++i) {
    KeyedJagged& kj = batches[i];
    kj.num_features = kTables;
    kj.batch_size = kBags;
    kj.offsets.assign(1, 0);
    for (int t = 0; t < kTables; ++t) {
      const KeyedJagged one = MakeBatch(rows, kBags, pooling, true, 1.05, 100 + i * kTables + t);
      for (int64_t bag = 0; bag < kBags; ++bag) {
        kj.offsets.push_back(kj.offsets.back() + one.offsets[bag + 1] - one.offsets[bag]);
      }
      kj.values.insert(kj.values.end(), one.values.begin(), one.values.end());
    }
  }
  std::vector<float> flush;
  int64_t call = 0, unique_sum = 0, packs = 0;
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point / 4, [&]() -> absl::StatusOr<double> {
        const KeyedJagged& kj = batches[call++ % kBatches];
        EvictCaches(o, ctx, &flush, o.light_evict_bytes);  // its hash maps are reused every step
        WarmInput(ctx, kj);
        IntervalTimer w(o.cpu_clock);
        TESSERA_ASSIGN_OR_RETURN(const int64_t unique, packer->Pack(kj));
        const double sec = w.Seconds();
        unique_sum += unique;
        packs += 1;
        return sec;
      }));
  PackPoint pt;
  pt.id_s = s / static_cast<double>(kTables * kBags * pooling);
  pt.distinct = static_cast<double>(unique_sum) /
                static_cast<double>(std::max<int64_t>(1, packs) * packer->num_requests());
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
        WarmInput(ctx, keys.data(), static_cast<int64_t>(keys.size() * sizeof(uint64_t)));
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
  TESSERA_ASSIGN_OR_RETURN(PackPoint one, MeasurePackPoint(o, ctx, int64_t{1} << 17, 1, false));
  TESSERA_ASSIGN_OR_RETURN(PackPoint hot, MeasurePackPoint(o, ctx, int64_t{1} << 18, 40, true));
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
