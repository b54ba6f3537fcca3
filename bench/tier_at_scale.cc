// tier_at_scale: the RocksDB tier with more touched rows than the machine has memory, so cold
// rows come from the disk (issue 14 item 3). Driven by bench/tier_at_scale.sh; not a test.
//
// One table of --rows rows x --dim floats (+ 1 row-wise AdaGrad state float) in a
// TieredRowStore at --path with a cache of --cache_rows rows:
//   load   every row is written once (WriteRows in row order, --load_chunk rows per call) and
//          the memtables flushed, so the database holds --rows rows (the touched rows of a long
//          run) and its SST files, not the memtables, serve the reads;
//   run    --steps training-like steps of --ids_per_step ids drawn uniformly (--zipf 0: every id
//          cold) or Zipf(--zipf) over the rows (ranks scattered by a bijective hash):
//          Prefetch(next step's ids), Resolve(this step's ids), one weight of every distinct row
//          changed (the row becomes dirty and is written back when evicted), EndStep. This is the
//          tier's part of a training step with no dense work to hide the reads behind: the step
//          rate is the tier's own.
// Prints one line per phase and a final JSON line: rows/s read from RocksDB, hit rate, ids/s,
// steps/s, synchronous reads and stall ms per step, peak RSS, bytes on disk (SST files).
// Flags are --name=value. Errors: a message and exit code 1.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/timer.h"
#include "embedding/tiered_row_store.h"

namespace tessera {
namespace {

struct Flags {
  std::string path, mode = "all";
  int64_t rows = 1 << 20, dim = 128, cache_rows = 1 << 16, ids_per_step = 8192, steps = 100;
  int64_t load_chunk = 1 << 16, reader_threads = 16, multiget_batch = 256;
  int64_t block_cache_mib = 64;
  bool direct_reads = true;
  double zipf = 0;
};

bool Parse(int argc, char** argv, Flags* f) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "tier_at_scale: expected --name=value, got '%s'\n", argv[i]);
      return false;
    }
    kv[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  auto num = [&](const char* k, int64_t* out) {
    auto it = kv.find(k);
    if (it == kv.end()) return;
    *out = std::strtoll(it->second.c_str(), nullptr, 10);
    kv.erase(it);
  };
  num("rows", &f->rows);
  num("dim", &f->dim);
  num("cache_rows", &f->cache_rows);
  num("ids_per_step", &f->ids_per_step);
  num("steps", &f->steps);
  num("load_chunk", &f->load_chunk);
  num("reader_threads", &f->reader_threads);
  num("multiget_batch", &f->multiget_batch);
  num("block_cache_mib", &f->block_cache_mib);
  int64_t direct = f->direct_reads ? 1 : 0;
  num("direct_reads", &direct);
  f->direct_reads = direct != 0;
  if (auto it = kv.find("zipf"); it != kv.end()) {
    f->zipf = std::atof(it->second.c_str());
    kv.erase(it);
  }
  if (auto it = kv.find("path"); it != kv.end()) f->path = it->second, kv.erase(it);
  if (auto it = kv.find("mode"); it != kv.end()) f->mode = it->second, kv.erase(it);
  if (!kv.empty()) {
    std::fprintf(stderr, "tier_at_scale: unknown flag --%s\n", kv.begin()->first.c_str());
    return false;
  }
  if (f->path.empty() || f->rows <= 0 || f->dim <= 0 || f->steps < 0 || f->ids_per_step <= 0 ||
      f->load_chunk <= 0 || (f->mode != "all" && f->mode != "load" && f->mode != "run")) {
    std::fprintf(stderr, "tier_at_scale: need --path, positive --rows/--dim/--ids_per_step/"
                         "--load_chunk, --steps >= 0, --mode all|load|run\n");
    return false;
  }
  return true;
}

double PeakRssMib() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // KiB on Linux
}

// Ids of one step: uniform, or Zipf(s) by inverse CDF over the first 2^24 ranks (a table of
// 64 MiB), ranks mapped to rows by an odd multiplier mod rows (a bijection when rows is a power of
// two; a few ranks may share a row otherwise), so hot rows are spread over the key space.
class IdStream {
 public:
  IdStream(int64_t rows, double zipf) : rows_(rows), zipf_(zipf) {
    if (zipf_ <= 0) return;
    const int64_t n = std::min<int64_t>(rows, int64_t{1} << 24);
    cdf_.resize(n);
    double acc = 0;
    for (int64_t r = 0; r < n; ++r) cdf_[r] = acc += std::pow(static_cast<double>(r + 1), -zipf);
    for (double& c : cdf_) c /= acc;
  }
  void Step(int64_t step, int64_t count, std::vector<int64_t>* ids) const {
    CounterRng rng(HashCombine(2026, static_cast<uint64_t>(step)), 0);
    ids->resize(count);
    for (int64_t i = 0; i < count; ++i) {
      const double u = rng.NextUniformDouble();
      if (zipf_ <= 0) {
        (*ids)[i] = std::min<int64_t>(static_cast<int64_t>(u * rows_), rows_ - 1);
        continue;
      }
      const int64_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
      (*ids)[i] = static_cast<int64_t>((static_cast<unsigned __int128>(rank) *
                                        0x9E3779B97F4A7C15ull) % static_cast<uint64_t>(rows_));
    }
  }

 private:
  int64_t rows_;
  double zipf_;
  std::vector<double> cdf_;
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tier_at_scale: %s\n", s.ToString().c_str());
  return 1;
}

int Run(const Flags& f) {
  TieredRowStoreOptions o;
  o.path = f.path;
  o.discard_existing = f.mode != "run";
  o.num_rows = f.rows;
  o.dim = f.dim;
  o.state_dim = 1;
  o.seed = 1;
  o.name = "at_scale";
  o.cache_rows = std::min(f.cache_rows, f.rows);
  o.reader_threads = static_cast<int>(f.reader_threads);
  o.multiget_batch = f.multiget_batch;
  o.block_cache_bytes = f.block_cache_mib << 20;
  o.use_direct_reads = f.direct_reads;
  auto opened = TieredRowStore::Open(o);
  if (!opened.ok()) return Fail(opened.status());
  TieredRowStore& store = **opened;
  const double row_bytes = static_cast<double>(f.dim + 1) * sizeof(float);

  if (f.mode != "run") {
    Stopwatch watch;
    std::vector<float> w(f.load_chunk * f.dim), st(f.load_chunk, 0.0f);
    for (int64_t b = 0; b < f.rows; b += f.load_chunk) {
      const int64_t n = std::min(f.load_chunk, f.rows - b);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < f.dim; ++c) w[i * f.dim + c] = static_cast<float>((b + i) % 1000);
      }
      if (absl::Status s = store.WriteRows(b, n, w.data(), st.data()); !s.ok()) return Fail(s);
      if ((b / f.load_chunk) % 256 == 255) {
        std::printf("  load: %lld of %lld rows, %.0f s\n", static_cast<long long>(b + n),
                    static_cast<long long>(f.rows), watch.ElapsedSeconds());
        std::fflush(stdout);
      }
    }
    if (absl::Status s = store.Flush(); !s.ok()) return Fail(s);
    const double secs = watch.ElapsedSeconds();
    TieredRowStoreMetrics m = store.metrics();
    std::printf("load: %lld rows (%.2f GB of rows + state) in %.1f s: %.0f rows/s, %.0f MB/s; "
                "%.2f GB of SST files\n",
                static_cast<long long>(f.rows), f.rows * row_bytes / 1e9, secs, f.rows / secs,
                f.rows * row_bytes / secs / 1e6, m.sst_bytes / 1e9);
    std::fflush(stdout);
  }
  if (f.mode == "load") return 0;

  IdStream stream(f.rows, f.zipf);
  std::vector<int64_t> cur, next, slots;
  stream.Step(0, f.ids_per_step, &cur);
  store.ResetMetrics();
  Stopwatch watch;
  store.Prefetch(cur);  // as if the step before had hinted it: every step is read ahead
  for (int64_t step = 0; step < f.steps; ++step) {
    stream.Step(step + 1, f.ids_per_step, &next);
    store.Prefetch(next);
    slots.resize(cur.size());
    if (absl::Status s = store.Resolve(cur, absl::MakeSpan(slots)); !s.ok()) return Fail(s);
    float* w = store.weights();
    for (int64_t s : slots) w[s * f.dim] += 1e-3f;  // dirty: written back when evicted
    if (absl::Status s = store.EndStep(); !s.ok()) return Fail(s);
    std::swap(cur, next);
  }
  const double secs = watch.ElapsedSeconds();
  TieredRowStoreMetrics m = store.metrics();
  const double steps = static_cast<double>(std::max<int64_t>(f.steps, 1));
  const double read_rows_s = m.rows_read / secs;
  std::printf("run: %lld steps x %lld ids (%s) in %.1f s: %.0f ids/s, %.1f steps/s, hit rate %.3f, "
              "%.0f rows/s read from RocksDB (%.0f per step), %.1f sync reads/step, stall "
              "%.2f ms/step, write-back %.0f rows/step\n",
              static_cast<long long>(f.steps), static_cast<long long>(f.ids_per_step),
              f.zipf > 0 ? ("zipf " + std::to_string(f.zipf)).c_str() : "uniform", secs,
              f.steps * f.ids_per_step / secs, f.steps / secs, m.hit_rate(), read_rows_s,
              m.rows_read / steps, m.sync_reads / steps,
              1e3 * (m.read_seconds + m.prefetch_stall_seconds) / steps,
              m.rows_written / steps);
  std::printf("{\"rows\":%lld,\"dim\":%lld,\"cache_rows\":%lld,\"reader_threads\":%lld,"
              "\"direct_reads\":%d,\"zipf\":%g,\"steps\":%lld,\"ids_per_step\":%lld,"
              "\"seconds\":%.3f,\"rows_read_per_s\":%.1f,\"hit_rate\":%.4f,\"ids_per_s\":%.1f,"
              "\"sync_reads_per_step\":%.2f,\"stall_ms_per_step\":%.3f,\"peak_rss_mib\":%.1f,"
              "\"sst_bytes\":%lld}\n",
              static_cast<long long>(f.rows), static_cast<long long>(f.dim),
              static_cast<long long>(o.cache_rows), static_cast<long long>(f.reader_threads),
              f.direct_reads ? 1 : 0, f.zipf, static_cast<long long>(f.steps),
              static_cast<long long>(f.ids_per_step), secs, read_rows_s, m.hit_rate(),
              f.steps * f.ids_per_step / secs, m.sync_reads / steps,
              1e3 * (m.read_seconds + m.prefetch_stall_seconds) / steps, PeakRssMib(),
              static_cast<long long>(m.sst_bytes));
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::Flags f;
  if (!tessera::Parse(argc, argv, &f)) return 2;
  return tessera::Run(f);
}
