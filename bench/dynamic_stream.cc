// dynamic_stream: bounded memory (and disk) of a dynamic table under a stream of distinct ids.
// Every id of the stream is new (Mix64 of a counter: 64-bit keys, no repeats), so every step's
// keys are admitted, wait for room in the full table, and the step end evicts as many rows
// (lru / lfu), or ttl drops the rows unused for --ttl_steps. Each step writes to every row it
// resolved (a stand-in for the optimizer), so over the tier every row is dirty: the cache
// writes it back when it evicts it and the table's eviction deletes it. A key admitted at a
// step end (the table is full) first gets a row of its own the next time it is looked up, so
// with --revisit 1 each step also looks up the previous step's new keys again (2 lookups per
// distinct id): their rows are trained, written back and later deleted, the tier's real churn.
//
// Prints one line every --report steps (ids so far, wall seconds, RSS, the tier's disk: bytes
// of files under --tier, and the table's occupancy / evictions), then a summary: RSS at the
// end of warm-up (the first step after the table filled plus --warmup_frac of the stream) and
// the min / max after it, their spread relative to the warm value, and the largest disk seen.
//
//   build/bin/dynamic_stream --ids 1000000000                       # in memory, 2^20 rows
//   build/bin/dynamic_stream --ids 100000000 --tier /tmp/dyn_stream --cache_rows 131072
// Flags (absl flags, `--help`): --ids, --capacity, --batch, --dim, --policy, --ttl_steps, --tier,
// --cache_rows, --report, --warmup_frac, --revisit, --write_buffer_mib.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/resident.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/dynamic_row_store.h"

ABSL_FLAG(int64_t, ids, 100000000, "distinct ids in the stream");
ABSL_FLAG(int64_t, capacity, int64_t{1} << 20, "the table's capacity in rows");
ABSL_FLAG(int64_t, batch, 65536, "new ids per step");
ABSL_FLAG(int64_t, dim, 64, "row width");
ABSL_FLAG(std::string, policy, "lru", "eviction: lru, lfu or ttl");
ABSL_FLAG(int64_t, ttl_steps, 2, "with --policy ttl: steps a row may go unused");
ABSL_FLAG(std::string, tier, "", "a RocksDB directory for the rows (empty: in memory)");
ABSL_FLAG(int64_t, cache_rows, 0, "the tier's row cache (0: capacity / 8)");
ABSL_FLAG(int64_t, report, 0, "steps between report lines (0: 40 lines)");
ABSL_FLAG(double, warmup_frac, 0.1, "share of the stream after the table fills that is warm-up");
ABSL_FLAG(int64_t, revisit, 0, "1: each step also looks up the previous step's new ids");
ABSL_FLAG(int64_t, write_buffer_mib, 128, "the tier's memtable size in MiB");

namespace tessera {
namespace {

using bench::RssMib;

int64_t DirBytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t total = 0;
  if (path.empty() || !fs::exists(path, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  }
  return total;
}

struct Flags {
  int64_t ids = absl::GetFlag(FLAGS_ids);
  int64_t capacity = absl::GetFlag(FLAGS_capacity);
  int64_t batch = absl::GetFlag(FLAGS_batch);
  int64_t dim = absl::GetFlag(FLAGS_dim);
  std::string policy = absl::GetFlag(FLAGS_policy);
  int64_t ttl_steps = absl::GetFlag(FLAGS_ttl_steps);
  std::string tier = absl::GetFlag(FLAGS_tier);
  int64_t cache_rows = absl::GetFlag(FLAGS_cache_rows);
  int64_t report = absl::GetFlag(FLAGS_report);
  double warmup_frac = absl::GetFlag(FLAGS_warmup_frac);
  int64_t revisit = absl::GetFlag(FLAGS_revisit);
  int64_t write_buffer_mib = absl::GetFlag(FLAGS_write_buffer_mib);
};

int Usage(const char* why) {
  std::fprintf(stderr, "dynamic_stream: %s (--help lists the flags)\n", why);
  return 2;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("a stream of distinct ids through a dynamic table (RSS, disk)");
  absl::ParseCommandLine(argc, argv);
  const Flags f;
  if (f.ids <= 0 || f.batch <= 0 || f.capacity <= 0) return Usage("sizes must be positive");
  auto policy = ParseEvictionPolicy(f.policy);
  if (!policy.ok()) return Usage(std::string(policy.status().message()).c_str());

  DynamicRowStoreOptions o;
  o.capacity = f.capacity;
  o.dim = f.dim;
  o.state_dim = 1;  // row-wise AdaGrad's accumulator
  o.state_init = 0.1f;
  o.seed = 3;
  o.name = "stream";
  o.dynamic.enabled = true;
  o.dynamic.policy = *policy;
  if (*policy == EvictionPolicy::kTtl) o.dynamic.ttl_steps = f.ttl_steps;
  if (!f.tier.empty()) {
    o.tier.path = f.tier;
    o.tier.discard_existing = true;
    o.tier.write_buffer_bytes = f.write_buffer_mib << 20;
    o.tier.cache_rows =
        f.cache_rows > 0 ? f.cache_rows : std::max<int64_t>(f.capacity / 8, 2 * f.batch + 1);
  }
  auto made = DynamicRowStore::Create(o);
  if (!made.ok()) {
    std::fprintf(stderr, "dynamic_stream: %s\n", made.status().ToString().c_str());
    return 1;
  }
  DynamicRowStore& s = **made;
  const int64_t steps = (f.ids + f.batch - 1) / f.batch;
  const int64_t report = f.report > 0 ? f.report : std::max<int64_t>(1, steps / 40);
  std::printf(
      "# dynamic_stream: %lld ids in %lld steps of %lld%s, capacity %lld, dim %lld, %s, %s"
      "\n",
      static_cast<long long>(f.ids), static_cast<long long>(steps), static_cast<long long>(f.batch),
      f.revisit > 0 ? " (+ the previous step's, looked up again)" : "",
      static_cast<long long>(f.capacity), static_cast<long long>(f.dim), f.policy.c_str(),
      f.tier.empty()
          ? "in memory"
          : ("tier at " + f.tier + ", cache " + std::to_string(o.tier.cache_rows) + " rows")
                .c_str());
  std::printf("%12s %10s %10s %10s %12s %14s\n", "ids", "seconds", "rss_mib", "disk_mib",
              "occupancy", "evictions");
  std::vector<int64_t> ids, slots, previous;
  uint64_t next = 0;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t full_step = -1, warm_step = -1;
  double rss_warm = 0, rss_min = 0, rss_max = 0;
  int64_t disk_max = 0;
  const int64_t rb = s.weight_row_bytes();
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t n = std::min<int64_t>(f.batch, f.ids - step * f.batch);
    ids.resize(n);
    for (int64_t& id : ids) id = static_cast<int64_t>(Mix64(next++));
    if (f.revisit > 0) {
      const std::vector<int64_t> fresh(ids);
      ids.insert(ids.end(), previous.begin(), previous.end());
      previous = fresh;
    }
    slots.resize(ids.size());
    absl::Status st = s.Resolve(ids, absl::MakeSpan(slots));
    if (st.ok()) {
      // The "update": every resolved row changes (slot 0 too, as the fused update would).
      char* w = static_cast<char*>(s.weight_data());
      for (int64_t slot : slots) w[slot * rb] ^= 1;
      st = s.EndStep();
    }
    if (!st.ok()) {
      std::fprintf(stderr, "dynamic_stream: step %lld: %s\n", static_cast<long long>(step),
                   st.ToString().c_str());
      return 1;
    }
    const DynamicTableStats stats = s.stats();
    if (full_step < 0 && stats.occupancy >= f.capacity) full_step = step;
    if (full_step >= 0 && warm_step < 0 &&
        step >= full_step + static_cast<int64_t>(f.warmup_frac * static_cast<double>(steps))) {
      warm_step = step;
      rss_warm = rss_min = rss_max = RssMib();
    }
    const bool last = step + 1 == steps;
    if ((step + 1) % report != 0 && !last) continue;
    const double rss = RssMib();
    const int64_t disk = DirBytes(f.tier);
    disk_max = std::max(disk_max, disk);
    if (warm_step >= 0) {
      rss_min = std::min(rss_min, rss);
      rss_max = std::max(rss_max, rss);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%12llu %10.1f %10.1f %10.1f %12lld %14lld\n",
                static_cast<unsigned long long>(next), secs, rss,
                static_cast<double>(disk) / (1 << 20), static_cast<long long>(stats.occupancy),
                static_cast<long long>(stats.evictions));
    std::fflush(stdout);
  }
  const DynamicTableStats stats = s.stats();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "# done: %llu ids, %.1f s (%.2f M ids/s), admissions %lld, evictions %lld, "
      "refused %lld\n",
      static_cast<unsigned long long>(next), secs, static_cast<double>(next) / secs / 1e6,
      static_cast<long long>(stats.admissions), static_cast<long long>(stats.evictions),
      static_cast<long long>(stats.refused));
  if (warm_step >= 0) {
    std::printf(
        "# rss after warm-up (step %lld): %.1f MiB; then min %.1f, max %.1f MiB: spread "
        "%.2f%% of the warm value\n",
        static_cast<long long>(warm_step), rss_warm, rss_min, rss_max,
        100.0 * (rss_max - rss_min) / rss_warm);
  } else {
    std::printf("# the stream ended before warm-up (table full at step %lld)\n",
                static_cast<long long>(full_step));
  }
  if (!f.tier.empty()) {
    const TieredRowStoreMetrics m = s.tier()->metrics();
    std::printf(
        "# tier: largest disk %.1f MiB; capacity rows x value bytes = %.1f MiB "
        "(DiskBytes bound %.1f MiB); rows written %lld, deleted %lld, read %lld\n",
        static_cast<double>(disk_max) / (1 << 20),
        static_cast<double>((f.capacity + 1) * (rb + 4)) / (1 << 20),
        static_cast<double>(DynamicRowStore::DiskBytes(o)) / (1 << 20),
        static_cast<long long>(m.rows_written), static_cast<long long>(m.rows_deleted),
        static_cast<long long>(m.rows_read));
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
