// Throughput of the RocksDB-tiered row store against the in-memory store on power-law ids.
//
// One benchmark iteration = one training-like step on one table: Prefetch(next step's ids),
// Resolve(this step's ids), a pooled read of every id's row (the forward lookup), one row-wise
// AdaGrad update per distinct row (the fused backward), EndStep. Ids are Zipf(1.05) over
// kUniverse rows (ranks scattered over the key space by a bijective hash). Each tier benchmark
// first runs the whole id stream once untimed (so the rows live in RocksDB, as in steady-state
// training), then times a second pass.
//   BM_InMemory                  the all-in-memory baseline
//   BM_Tier/<policy>/<pct>       policy 0 = LRU, 1 = LFU; cache = pct% of the rows the stream
//                                touches
//   BM_MultiGet/<threads>/<direct>  raw RocksDB MultiGet of each step's distinct rows (sorted,
//                                256 keys per call) from the tier's database: the I/O bound;
//                                direct = 1 bypasses the OS page cache (O_DIRECT)
// Counters: ids_per_s (lookups/s), rows_per_s (distinct rows/s), hit_rate, and per step:
// misses, rows read from / written to RocksDB, prefetch stall.
//
// Run: build-<name>/bench/embedding_tier_bench --benchmark_counters_tabular=true
// The database lives under TESSERA_TIER_BENCH_DIR (default /tmp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/internal/rocksdb_rows.h"
#include "embedding/row_optimizer.h"
#include "embedding/row_store.h"
#include "embedding/tiered_row_store.h"

namespace tessera {
namespace {

constexpr int64_t kUniverse = int64_t{1} << 21;  // 2M rows
constexpr int64_t kDim = 64;
constexpr int64_t kIdsPerStep = 8192;
constexpr int kSteps = 120;

struct Stream {
  std::vector<std::vector<int64_t>> steps;
  std::vector<std::vector<int64_t>> distinct;  // sorted distinct ids of each step
  int64_t touched = 0;                         // distinct rows over the whole stream
};

// Zipf(1.05) by inverse CDF over ranks 1..kUniverse; rank r maps to row (r * odd) mod 2^21, a
// bijection, so hot rows are spread over the key space as hashed ids are in real data.
const Stream& GetStream() {
  static const Stream* stream = [] {
    auto* s = new Stream;
    std::vector<double> cdf(kUniverse);
    double acc = 0;
    for (int64_t r = 0; r < kUniverse; ++r) {
      acc += std::pow(static_cast<double>(r + 1), -1.05);
      cdf[r] = acc;
    }
    std::mt19937_64 rng(2024);
    std::uniform_real_distribution<double> u(0.0, acc);
    std::vector<uint8_t> seen(kUniverse, 0);
    for (int t = 0; t < kSteps; ++t) {
      std::vector<int64_t> ids(kIdsPerStep);
      for (auto& id : ids) {
        int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
        rank = std::min(rank, kUniverse - 1);
        id = static_cast<int64_t>((static_cast<uint64_t>(rank) * 0x9E3779B1ull) &
                                  static_cast<uint64_t>(kUniverse - 1));
        if (!seen[id]) {
          seen[id] = 1;
          ++s->touched;
        }
      }
      std::vector<int64_t> d = ids;
      std::sort(d.begin(), d.end());
      d.erase(std::unique(d.begin(), d.end()), d.end());
      s->steps.push_back(std::move(ids));
      s->distinct.push_back(std::move(d));
    }
    return s;
  }();
  return *stream;
}

std::string BenchDir() {
  const char* env = std::getenv("TESSERA_TIER_BENCH_DIR");
  return std::string(env ? env : "/tmp") + "/tessera_tier_bench";
}

// One step; returns a checksum of the pooled forward so the work is not optimised away.
float Step(RowStore* store, const Stream& s, int t, std::vector<int64_t>& slots,
           std::vector<float>& grad) {
  const auto& ids = s.steps[t];
  if (t + 1 < kSteps) store->Prefetch(s.steps[t + 1]);
  TESSERA_CHECK_OK(store->Resolve(ids, absl::MakeSpan(slots)));
  const float* w = store->weights();
  float sum = 0;
  for (int64_t slot : slots) {
    const float* row = w + slot * kDim;
    for (int64_t k = 0; k < kDim; ++k) sum += row[k];
  }
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  RowOptimizerOptions opt;
  for (int64_t slot : slots) {
    ApplyRowUpdate(opt, 0.01f, t + 1, kDim, grad.data(), store->weights() + slot * kDim,
                   store->state() + slot);
  }
  TESSERA_CHECK_OK(store->EndStep());
  slots.resize(ids.size());
  return sum;
}

void RunPass(benchmark::State* state, RowStore* store, const Stream& s) {
  std::vector<int64_t> slots(kIdsPerStep);
  std::vector<float> grad(kDim, 0.01f);
  if (state == nullptr) {
    for (int t = 0; t < kSteps; ++t) benchmark::DoNotOptimize(Step(store, s, t, slots, grad));
    return;
  }
  int t = 0;
  for (auto _ : *state) {
    benchmark::DoNotOptimize(Step(store, s, t, slots, grad));
    t = (t + 1) % kSteps;
  }
}

void SetRateCounters(benchmark::State& state, const Stream& s) {
  int64_t ids = 0, rows = 0;
  for (int64_t i = 0; i < state.iterations(); ++i) {
    ids += static_cast<int64_t>(s.steps[i % kSteps].size());
    rows += static_cast<int64_t>(s.distinct[i % kSteps].size());
  }
  state.counters["ids_per_s"] = benchmark::Counter(ids, benchmark::Counter::kIsRate);
  state.counters["rows_per_s"] = benchmark::Counter(rows, benchmark::Counter::kIsRate);
  state.counters["touched"] = s.touched;
}

void BM_InMemory(benchmark::State& state) {
  const Stream& s = GetStream();
  InMemoryRowStoreOptions o;
  o.num_rows = kUniverse;
  o.dim = kDim;
  o.state_dim = 1;
  auto store = CreateInMemoryRowStore(o).value();
  RunPass(nullptr, store.get(), s);  // touch the pages once, as the tier's warm pass does
  RunPass(&state, store.get(), s);
  SetRateCounters(state, s);
  state.counters["hit_rate"] = 1.0;
}
BENCHMARK(BM_InMemory)->Iterations(kSteps)->Unit(benchmark::kMillisecond)->UseRealTime();

TieredRowStoreOptions TierOptions(CachePolicy policy, int64_t cache_rows) {
  TieredRowStoreOptions o;
  o.path = BenchDir() + "/db";
  o.num_rows = kUniverse;
  o.dim = kDim;
  o.state_dim = 1;
  o.cache_rows = cache_rows;
  o.policy = policy;
  return o;
}

void BM_Tier(benchmark::State& state) {
  const Stream& s = GetStream();
  CachePolicy policy = state.range(0) == 0 ? CachePolicy::kLru : CachePolicy::kLfu;
  int64_t max_distinct = 0;
  for (const auto& d : s.distinct) max_distinct = std::max<int64_t>(max_distinct, d.size());
  // At least one step's distinct rows plus the next step's, or Resolve cannot pin them.
  int64_t cache_rows = std::max<int64_t>(s.touched * state.range(1) / 100, max_distinct + 1);
  std::filesystem::remove_all(BenchDir());
  std::filesystem::create_directories(BenchDir());
  {
    auto store = TieredRowStore::Open(TierOptions(policy, cache_rows)).value();
    RunPass(nullptr, store.get(), s);
    TESSERA_CHECK_OK(store->Flush());
    store->ResetMetrics();
    RunPass(&state, store.get(), s);
    SetRateCounters(state, s);
    TieredRowStoreMetrics m = store->metrics();
    double steps = static_cast<double>(std::max<int64_t>(1, m.steps));
    state.counters["cache_rows"] = static_cast<double>(cache_rows);
    state.counters["hit_rate"] = m.hit_rate();
    state.counters["miss/step"] = m.misses / steps;
    state.counters["read/step"] = m.rows_read / steps;
    state.counters["write/step"] = m.rows_written / steps;
    state.counters["stall_ms/step"] = m.prefetch_stall_seconds * 1e3 / steps;
    state.counters["read_ms/step"] = m.read_seconds * 1e3 / steps;
    state.counters["write_ms/step"] = m.write_seconds * 1e3 / steps;
    state.counters["wstall_ms/step"] = m.write_stall_seconds * 1e3 / steps;
    state.counters["prefetched/step"] = m.prefetched_rows / steps;
    state.counters["sst_MiB"] = m.sst_bytes / 1048576.0;
  }
}
BENCHMARK(BM_Tier)
    ->ArgsProduct({{0, 1}, {1, 5, 10, 25, 100}})
    ->Iterations(kSteps)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Reads each step's distinct rows from the database the last BM_Tier left (every touched row
// written), without any cache of ours.
void BM_MultiGet(benchmark::State& state) {
  const Stream& s = GetStream();
  auto o = TierOptions(CachePolicy::kLru, 1);
  o.use_direct_reads = state.range(1) != 0;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status st = rocksdb::DB::OpenForReadOnly(internal::RowDbOptions(o), o.path, &raw);
  if (!st.ok()) {
    state.SkipWithError(("run BM_Tier first: " + st.ToString()).c_str());
    return;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  internal::RowReader reader(db.get(), o.path, o.table_id, (kDim + 1) * sizeof(float),
                             static_cast<int>(state.range(0)), 256);
  std::vector<float> sink(kDim + 1);
  int64_t rows = 0, found_total = 0;
  int t = 0;
  for (auto _ : state) {
    int64_t found = 0;
    TESSERA_CHECK_OK(reader.Read(
        s.distinct[t],
        [&](int64_t, const char* v) { benchmark::DoNotOptimize(v[0]); }, &found));
    rows += static_cast<int64_t>(s.distinct[t].size());
    found_total += found;
    t = (t + 1) % kSteps;
  }
  state.counters["rows_per_s"] = benchmark::Counter(rows, benchmark::Counter::kIsRate);
  state.counters["found"] = static_cast<double>(found_total) / std::max<int64_t>(1, rows);
}
BENCHMARK(BM_MultiGet)
    ->ArgsProduct({{1, 8, 32}, {0, 1}})
    ->Iterations(kSteps / 4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
