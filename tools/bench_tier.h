// tessera-bench's RocksDB-tier support (header-only, used by tools/bench_main.cc only): put some
// or all tables of a config in the tier with caches sized as a fraction of the rows the
// benchmark's batches touch, and print the tier's counters over the timed steps.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "io/batch.h"
#include "sharding/communicator.h"
#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/run_log.h"
#include "trainer/stores.h"

namespace tessera {

// User + system CPU seconds of this process (all threads) so far.
inline double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

struct TierRowCounts {
  std::vector<int64_t> touched;        // distinct rows per table over all batches
  std::vector<int64_t> max_per_batch;  // most distinct rows of one batch, per table
};

inline TierRowCounts CountTierRows(const Config& c, const std::vector<Batch>& batches) {
  const size_t n = c.model.tables.size();
  TierRowCounts out{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  for (size_t t = 0; t < n; ++t) {
    absl::flat_hash_set<int64_t> all, one;
    for (const Batch& b : batches) {
      one.clear();
      for (int f : c.model.tables[t].features) {
        const KeyedJagged& kj = b.sparse;
        for (int64_t j = kj.feature_begin(f); j < kj.feature_end(f); ++j) {
          one.insert(kj.values[j]);
          all.insert(kj.values[j]);
        }
      }
      out.max_per_batch[t] = std::max<int64_t>(out.max_per_batch[t], one.size());
    }
    out.touched[t] = static_cast<int64_t>(all.size());
  }
  return out;
}

// --tier_tables ("" = as the config says, "all", or table indices "0,3"), --tier_policy
// ("" / lru / lfu) and --tier_cache_fraction (> 0: cache_rows = fraction × rows touched by the
// batches, at least one batch's distinct rows + 1) applied to `c`.
inline absl::Status ApplyTierFlags(Config* c, const std::string& tables, const std::string& policy,
                                   double fraction, const TierRowCounts& rows) {
  std::vector<int> chosen;
  if (tables == "all") {
    for (size_t t = 0; t < c->model.tables.size(); ++t) chosen.push_back(static_cast<int>(t));
  } else if (!tables.empty()) {
    for (absl::string_view s : absl::StrSplit(tables, ',')) {
      int t;
      if (!absl::SimpleAtoi(s, &t) || t < 0 || t >= static_cast<int>(c->model.tables.size())) {
        return absl::InvalidArgumentError(absl::StrCat("--tier_tables: bad table index '", s, "'"));
      }
      chosen.push_back(t);
    }
  }
  for (int t : chosen) c->model.tables[t].storage.tier = StorageTier::kRocksDb;
  for (size_t t = 0; t < c->model.tables.size(); ++t) {
    TableStorage& st = c->model.tables[t].storage;
    if (st.tier != StorageTier::kRocksDb) continue;
    if (!policy.empty()) {
      if (policy != "lru" && policy != "lfu") {
        return absl::InvalidArgumentError("--tier_policy: expected lru or lfu");
      }
      st.policy = policy == "lfu" ? CachePolicy::kLfu : CachePolicy::kLru;
    }
    if (fraction > 0) {
      st.cache_bytes = 0;
      st.cache_rows = std::max<int64_t>(static_cast<int64_t>(fraction * rows.touched[t]),
                                        rows.max_per_batch[t] + 1);
    } else if (st.cache_rows <= 0 && st.cache_bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", c->model.tables[t].name, " is in the RocksDB tier without a cache size: "
          "give --tier_cache_fraction or storage.cache_rows"));
    }
  }
  return absl::OkStatus();
}

// The tier counters the benchmark prints: a single-process model's tiered tables, or for a
// sharded model every tiered table's shards summed over all ranks of `world` (collective over
// the world then; `world` may be null for one process).
inline absl::StatusOr<std::vector<TierTableMetrics>> BenchTierMetrics(Model& model,
                                                                      Communicator* world) {
  std::vector<TierTableMetrics> local = CollectTierMetrics(model);
  if (!local.empty() || world == nullptr) return local;
  std::vector<TierTableMetrics> shards = CollectShardTierMetrics(model);
  std::vector<double> v;
  for (const TierTableMetrics& t : shards) {
    const TieredRowStoreMetrics& m = t.metrics;
    v.insert(v.end(), {double(m.steps), double(m.hits), double(m.misses),
                       double(m.prefetched_rows), double(m.prefetch_used), double(m.sync_reads),
                       double(m.rows_read), double(m.rows_initialized), double(m.rows_written),
                       double(m.evictions), m.read_seconds, m.prefetch_stall_seconds,
                       m.write_stall_seconds, m.write_seconds, double(m.cache_rows),
                       double(m.resident_rows), double(m.sst_bytes), double(m.memtable_bytes)});
  }
  if (!v.empty()) {
    absl::Status st = world->AllReduce(v.data(), static_cast<int64_t>(v.size()), ReduceOp::kSum);
    if (!st.ok()) return st;
  }
  const double* x = v.data();
  for (TierTableMetrics& t : shards) {
    TieredRowStoreMetrics& m = t.metrics;
    auto i64 = [&x] { return static_cast<int64_t>(*x++); };
    m.steps = i64(), m.hits = i64(), m.misses = i64(), m.prefetched_rows = i64();
    m.prefetch_used = i64(), m.sync_reads = i64(), m.rows_read = i64();
    m.rows_initialized = i64(), m.rows_written = i64(), m.evictions = i64();
    m.read_seconds = *x++, m.prefetch_stall_seconds = *x++, m.write_stall_seconds = *x++;
    m.write_seconds = *x++;
    m.cache_rows = i64(), m.resident_rows = i64(), m.sst_bytes = i64(), m.memtable_bytes = i64();
  }
  return shards;
}

// Prints the tier section (one row per RocksDB table: cache, hit rate and traffic per step over
// the timed steps; `ranks` > 1: the table's shards summed over that many ranks, times included)
// and a line of the stalls per step, and adds tier_<name>_<counter> fields to `json`. Stalls:
// misses Resolve read from RocksDB itself ("sync rd") and the milliseconds Resolve waited, for
// those reads and for prefetch reads still in flight.
inline void PrintTierSection(const std::vector<TierTableMetrics>& before,
                             const std::vector<TierTableMetrics>& after, int64_t steps,
                             const TierRowCounts& rows, int ranks, JsonLine* json) {
  if (after.empty()) return;
  if (ranks > 1) {
    std::printf("  RocksDB tier (per timed step, shards summed over %d ranks):\n", ranks);
  } else {
    std::printf("  RocksDB tier (per timed step):\n");
  }
  std::printf("  %-8s %10s %9s %8s %9s %9s %9s %9s %9s %9s %9s %10s\n", "table", "cache",
              "of touched", "hit rate", "misses", "prefetchd", "sync rd", "rows read", "written",
              "stall ms", "read ms", "disk MiB");
  double stall_rows = 0, stall_ms = 0;
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) {
    const TieredRowStoreMetrics& m = after[i].metrics;
    TierRates r = TierRatesBetween(before[i].metrics, m, steps);
    const int t = after[i].table;
    const double of_touched =
        rows.touched[t] > 0 ? static_cast<double>(m.cache_rows) / rows.touched[t] : 0;
    std::printf("  %-8s %10lld %8.1f%% %8.3f %9.0f %9.0f %9.0f %9.0f %9.0f %9.2f %9.2f %10.1f\n",
                after[i].name.c_str(), static_cast<long long>(m.cache_rows),
                100 * of_touched, r.hit_rate, r.misses_per_step, r.prefetch_used_per_step,
                r.sync_reads_per_step, r.rows_read_per_step, r.rows_written_per_step,
                r.prefetch_stall_ms_per_step, r.read_ms_per_step, r.disk_bytes / 1048576.0);
    stall_rows += r.sync_reads_per_step;
    stall_ms += r.prefetch_stall_ms_per_step + r.read_ms_per_step;
    const std::string p = "tier_" + after[i].name + "_";
    json->Add(p + "cache_rows", m.cache_rows)
        .Add(p + "rows_touched", rows.touched[t])
        .Add(p + "hit_rate", r.hit_rate)
        .Add(p + "rows_read_per_step", r.rows_read_per_step)
        .Add(p + "rows_written_per_step", r.rows_written_per_step)
        .Add(p + "prefetch_used_per_step", r.prefetch_used_per_step)
        .Add(p + "sync_reads_per_step", r.sync_reads_per_step)
        .Add(p + "prefetch_stall_ms_per_step", r.prefetch_stall_ms_per_step)
        .Add(p + "read_ms_per_step", r.read_ms_per_step)
        .Add(p + "disk_bytes", r.disk_bytes);
  }
  std::printf("  tier stalls/step%s: %.1f sync reads, %.3f ms waited (sync reads + prefetch in "
              "flight)\n", ranks > 1 ? " (all ranks)" : "", stall_rows, stall_ms);
  json->Add("tier_stall_rows_per_step", stall_rows).Add("tier_stall_ms_per_step", stall_ms);
}

}  // namespace tessera
