// RocksDB tier: cost per row of the TieredRowStore's miss path and write-back, the code the
// trainer runs for a `storage: {tier: rocksdb}` table. Per value size (dim floats + 1 row-wise
// AdaGrad float):
//   read_cached_s  Resolve of `step_rows` distinct rows that all miss the row cache, with the
//                  database just flushed (its SST blocks in the OS page cache and the block
//                  cache), divided by the misses: hash lookups, MultiGet, install, eviction
//   read_disk_s    the same after reopening with O_DIRECT reads and a 1 MiB block cache
//   read_memtable_s the same on a fresh database whose rows were written but never flushed
//                  (all in the memtable, as in a run whose written rows fit in one write buffer)
//   write_s        the store's WriteBatch seconds per row written back (dirty rows evicted)
//   hit_s          Resolve of the last step's rows again (all in the row cache) per id
// Page-cache reads are timed in process CPU seconds (reader threads included) when
// CalibrateOptions::cpu_clock, disk reads in wall seconds (they wait for the device).
// Prefetch is off so the reads happen inside Resolve, where they are timed; two reader threads
// (the bench's tiered configs use two: more only add context switches on 2 cores).
#include <filesystem>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/tiered_row_store.h"
#include "tools/plan_calibrate_internal.h"

namespace tessera::calibrate_internal {
namespace {

constexpr int64_t kStepRows = 2048;

TieredRowStoreOptions StoreOptions(const std::string& path, int64_t rows, int64_t dim,
                                   bool direct) {
  TieredRowStoreOptions s;
  s.path = path;
  s.num_rows = rows;
  s.dim = dim;
  s.state_dim = 1;
  s.cache_rows = kStepRows + 1;
  s.prefetch = false;
  s.reader_threads = 2;
  s.name = "calibrate";
  if (direct) {
    s.use_direct_reads = true;
    s.block_cache_bytes = int64_t{1} << 20;
  }
  return s;
}

struct StepCosts {
  double read_s = 0;   // Resolve seconds per miss
  double write_s = 0;  // WriteBatch seconds per row written
  double hit_s = 0;    // Resolve seconds per id already in the row cache
};

// Steps of kStepRows distinct rows drawn from a shuffled order of all rows (each step misses).
absl::StatusOr<StepCosts> RunSteps(TieredRowStore& store, int64_t rows, double min_seconds,
                                   uint64_t seed, bool cpu_clock) {
  std::vector<int64_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  CounterRng rng(seed, 1);
  for (int64_t i = rows - 1; i > 0; --i) {
    std::swap(order[i], order[static_cast<int64_t>(rng.NextUniformDouble() * (i + 1))]);
  }
  std::vector<int64_t> slots(kStepRows);
  std::vector<double> per_miss;
  const TieredRowStoreMetrics before = store.metrics();
  Stopwatch total;
  int64_t last_step = 0;
  for (int64_t step = 0; (step + 1) * kStepRows <= rows; ++step) {
    if (per_miss.size() >= 3 && total.ElapsedSeconds() > min_seconds) break;
    last_step = step;
    absl::Span<const int64_t> ids(order.data() + step * kStepRows, kStepRows);
    const int64_t misses0 = store.metrics().misses;
    IntervalTimer w(cpu_clock);
    TESSERA_RETURN_IF_ERROR(store.Resolve(ids, absl::MakeSpan(slots)));
    const double s = w.Seconds();
    const int64_t misses = store.metrics().misses - misses0;
    // Touch the rows as an update would, so they are written back when evicted.
    float* wts = store.weights();
    for (int64_t slot : slots) wts[slot * store.dim()] += 1e-6f;
    TESSERA_RETURN_IF_ERROR(store.EndStep());
    if (step > 0 && misses > 0) per_miss.push_back(s / misses);
  }
  // Hits: the last step's rows are cached; Resolve them again (no miss, no write-back).
  std::vector<double> per_hit;
  {
    absl::Span<const int64_t> ids(order.data() + last_step * kStepRows, kStepRows);
    TESSERA_RETURN_IF_ERROR(store.Resolve(ids, absl::MakeSpan(slots)));
    TESSERA_RETURN_IF_ERROR(store.EndStep());
    Stopwatch hits;
    while (per_hit.size() < 5 || hits.ElapsedSeconds() < min_seconds / 4) {
      const int64_t misses0 = store.metrics().misses;
      IntervalTimer w(cpu_clock);
      TESSERA_RETURN_IF_ERROR(store.Resolve(ids, absl::MakeSpan(slots)));
      const double s = w.Seconds();
      TESSERA_RETURN_IF_ERROR(store.EndStep());
      if (store.metrics().misses == misses0) per_hit.push_back(s / kStepRows);
      if (per_hit.empty() && hits.ElapsedSeconds() > min_seconds) break;
    }
  }
  TESSERA_RETURN_IF_ERROR(store.Flush());
  const TieredRowStoreMetrics after = store.metrics();
  if (per_miss.empty()) return absl::InternalError("calibrate: tier: no miss measured");
  std::sort(per_miss.begin(), per_miss.end());
  StepCosts c;
  c.read_s = per_miss[per_miss.size() / 2];
  if (!per_hit.empty()) {
    std::sort(per_hit.begin(), per_hit.end());
    c.hit_s = per_hit[per_hit.size() / 2];
  }
  const int64_t written = after.rows_written - before.rows_written;
  c.write_s = written > 0 ? (after.write_seconds - before.write_seconds) / written : 0;
  return c;
}

// A fresh database at `path` with every row written once (not flushed: the rows are in the
// memtable until the caller flushes), so later misses read RocksDB, not lazy init.
absl::StatusOr<std::unique_ptr<TieredRowStore>> WrittenStore(const std::string& path,
                                                             int64_t rows, int64_t dim) {
  TieredRowStoreOptions so = StoreOptions(path, rows, dim, /*direct=*/false);
  so.discard_existing = true;
  TESSERA_ASSIGN_OR_RETURN(auto store, TieredRowStore::Open(so));
  const int64_t chunk = 8192;
  std::vector<float> w(chunk * dim, 0.01f), st(chunk, 0.0f);
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    TESSERA_RETURN_IF_ERROR(store->WriteRows(r, n, w.data(), st.data()));
  }
  return store;
}

}  // namespace

absl::StatusOr<std::vector<planner::TierPoint>> MeasureTier(const CalibrateOptions& o) {
  std::vector<planner::TierPoint> points;
  for (int64_t dim : o.tier_dims) {
    const std::string path = absl::StrCat(o.scratch_dir, "/tier-", dim);
    std::filesystem::remove_all(path);
    const int64_t rows = o.tier_rows;
    planner::TierPoint p;
    p.value_bytes = (dim + 1) * 4;
    {
      // Every row written once, flushed to SST files.
      TESSERA_ASSIGN_OR_RETURN(auto store, WrittenStore(path, rows, dim));
      TESSERA_RETURN_IF_ERROR(store->Flush());
      TESSERA_ASSIGN_OR_RETURN(StepCosts cached,
                               RunSteps(*store, rows, o.seconds_per_point, 1, o.cpu_clock));
      p.read_cached_s = cached.read_s;
      p.write_s = cached.write_s;
      p.hit_s = cached.hit_s;
    }
    {
      TESSERA_ASSIGN_OR_RETURN(
          auto store, TieredRowStore::Open(StoreOptions(path, rows, dim, /*direct=*/true)));
      TESSERA_ASSIGN_OR_RETURN(StepCosts disk,
                               RunSteps(*store, rows, o.seconds_per_point, 2, /*cpu_clock=*/false));
      p.read_disk_s = disk.read_s;
      if (p.write_s <= 0) p.write_s = disk.write_s;
    }
    {
      // The memtable: a fresh database, every row written, not flushed (o.tier_rows x value
      // bytes stays within the 128 MiB write buffer at the default sizes).
      std::filesystem::remove_all(path);
      TESSERA_ASSIGN_OR_RETURN(auto store, WrittenStore(path, rows, dim));
      TESSERA_ASSIGN_OR_RETURN(StepCosts mem,
                               RunSteps(*store, rows, o.seconds_per_point, 3, o.cpu_clock));
      p.read_memtable_s = mem.read_s;
    }
    std::filesystem::remove_all(path);
    Progress(o, absl::StrFormat("tier value %d B: read %.2f us (page cache), %.2f us (disk), "
                                "%.2f us (memtable), write %.2f us per row, %.0f ns per cached id",
                                p.value_bytes, p.read_cached_s * 1e6, p.read_disk_s * 1e6,
                                p.read_memtable_s * 1e6, p.write_s * 1e6, p.hit_s * 1e9));
    points.push_back(p);
  }
  return points;
}

}  // namespace tessera::calibrate_internal
