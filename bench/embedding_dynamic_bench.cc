// Dynamic tables: the key-to-slot probe rate (DynamicRowStore::Resolve over its KeySlotIndex)
// beside the row gather (PooledLookupForward) and a static table's Resolve, on the same Zipf
// batches. The dynamic table holds 2^20 keys (TESSERA_BENCH_DYNAMIC_ROWS to change) drawn from
// a 2^40 key space; the static table has as many rows, and its ids are the keys' slots, so both
// gather the same rows. Counters: ids/s, probes/id (index buckets examined per lookup).
// BM_DistinctStream: RSS over a stream of distinct keys (bounded memory).
//   build/bin/embedding_dynamic_bench --benchmark_filter=Resolve\|Lookup --benchmark_repetitions=3
//   TESSERA_BENCH_STREAM_IDS=1000000000 build/bin/embedding_dynamic_bench --benchmark_filter=Stream
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench/resident.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"

namespace tessera {
namespace {

constexpr int64_t kBags = 4096;
constexpr int64_t kPooling = 8;
constexpr int kBatches = 64;
constexpr double kZipfS = 1.05;

int64_t Rows() {
  const char* env = std::getenv("TESSERA_BENCH_DYNAMIC_ROWS");
  return env != nullptr ? std::max<int64_t>(1024, std::atoll(env)) : int64_t{1} << 20;
}

// The key of rank r: rank scattered over a 2^40 space (distinct for distinct ranks).
int64_t KeyOfRank(int64_t r) {
  return static_cast<int64_t>((static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull) >> 24);
}

struct Setup {
  int64_t dim = 0;
  std::unique_ptr<DynamicRowStore> dyn;
  std::unique_ptr<RowStore> stat;
  std::vector<int64_t> offsets;
  std::vector<int64_t> keys;  // [kBatches, kBags * kPooling] keys of the dynamic table
  std::vector<int64_t> rows;  // the same lookups as slots of the static table
};

Setup& SetupFor(int64_t dim) {
  static Setup s;
  if (s.dim == dim) return s;
  s = Setup();
  s.dim = dim;
  const int64_t n = Rows();
  DynamicRowStoreOptions o;
  o.capacity = n;
  o.dim = dim;
  o.state_dim = 1;
  o.seed = 1;
  s.dyn = DynamicRowStore::Create(o).value();
  // Admit every key once (one training step over all ranks, in chunks).
  std::vector<int64_t> all(n), slots(n);
  for (int64_t r = 0; r < n; ++r) all[r] = KeyOfRank(r);
  TESSERA_CHECK_OK(s.dyn->Resolve(all, absl::MakeSpan(slots)));
  TESSERA_CHECK_OK(s.dyn->EndStep());
  InMemoryRowStoreOptions so;
  so.num_rows = n + 1;
  so.dim = dim;
  so.state_dim = 1;
  so.seed = 1;
  s.stat = CreateInMemoryRowStore(so).value();
  for (int64_t b = 0; b <= kBags; ++b) s.offsets.push_back(b * kPooling);
  CounterRng rng(7, static_cast<uint64_t>(dim));
  s.keys.resize(kBatches * kBags * kPooling);
  s.rows.resize(s.keys.size());
  const double a = 1.0 - kZipfS;
  for (size_t i = 0; i < s.keys.size(); ++i) {
    const double u = rng.NextUniformDouble();
    const double x = std::pow((std::pow(double(n + 1), a) - 1.0) * u + 1.0, 1.0 / a);
    const int64_t rank = std::min<int64_t>(static_cast<int64_t>(x) - 1, n - 1);
    s.keys[i] = KeyOfRank(rank);
  }
  // The static ids: the dynamic slots of the same keys (so both gather the same addresses).
  TESSERA_CHECK_OK(s.dyn->Resolve(s.keys, absl::MakeSpan(s.rows)));
  TESSERA_CHECK_OK(s.dyn->EndReadOnlyStep());
  return s;
}

constexpr int64_t kIds = kBags * kPooling;

void Rate(benchmark::State& state) {
  state.counters["ids/s"] =
      benchmark::Counter(double(state.iterations()) * kIds, benchmark::Counter::kIsRate);
}

// Resolve only: the dynamic table's probes (then EndReadOnlyStep: nothing changes).
void BM_DynamicResolve(benchmark::State& state) {
  Setup& s = SetupFor(state.range(0));
  SetNumThreads(1);
  s.dyn->set_admitting(false);
  std::vector<int64_t> slots(kIds);
  const DynamicTableStats before = s.dyn->stats();
  int batch = 0;
  for (auto _ : state) {
    TESSERA_CHECK_OK(s.dyn->Resolve(absl::MakeConstSpan(s.keys.data() + batch * kIds, kIds),
                                    absl::MakeSpan(slots)));
    TESSERA_CHECK_OK(s.dyn->EndReadOnlyStep());
    benchmark::DoNotOptimize(slots.data());
    batch = (batch + 1) % kBatches;
  }
  const DynamicTableStats after = s.dyn->stats();
  Rate(state);
  state.counters["probes/id"] =
      double(after.probes - before.probes) / double(after.lookups - before.lookups);
}

// A static table's Resolve (range check and copy) of the same lookups.
void BM_StaticResolve(benchmark::State& state) {
  Setup& s = SetupFor(state.range(0));
  SetNumThreads(1);
  std::vector<int64_t> slots(kIds);
  int batch = 0;
  for (auto _ : state) {
    TESSERA_CHECK_OK(s.stat->Resolve(absl::MakeConstSpan(s.rows.data() + batch * kIds, kIds),
                                     absl::MakeSpan(slots)));
    benchmark::DoNotOptimize(slots.data());
    batch = (batch + 1) % kBatches;
  }
  Rate(state);
}

// Resolve + pooled gather, dynamic (arg 1 = 1) or static (0).
void BM_Lookup(benchmark::State& state) {
  const int64_t dim = state.range(0);
  const bool dynamic = state.range(1) != 0;
  Setup& s = SetupFor(dim);
  SetNumThreads(1);
  s.dyn->set_admitting(false);
  std::vector<int64_t> slots(kIds);
  std::vector<float> out(kBags * dim);
  PooledLookupArgs a;
  a.dim = dim;
  a.offsets = s.offsets.data();
  a.indices = slots.data();
  a.num_bags = kBags;
  a.out = out.data();
  a.out_stride = dim;
  int batch = 0;
  for (auto _ : state) {
    if (dynamic) {
      TESSERA_CHECK_OK(s.dyn->Resolve(absl::MakeConstSpan(s.keys.data() + batch * kIds, kIds),
                                      absl::MakeSpan(slots)));
      a.weights = s.dyn->weight_data();
    } else {
      TESSERA_CHECK_OK(s.stat->Resolve(absl::MakeConstSpan(s.rows.data() + batch * kIds, kIds),
                                       absl::MakeSpan(slots)));
      a.weights = s.stat->weight_data();
    }
    TESSERA_CHECK_OK(PooledLookupForward(DeviceContext::Cpu(), a));
    if (dynamic) TESSERA_CHECK_OK(s.dyn->EndReadOnlyStep());
    benchmark::DoNotOptimize(out.data());
    batch = (batch + 1) % kBatches;
  }
  Rate(state);
}

using bench::RssMib;

// Bounded memory: a stream of distinct keys (every id new, TESSERA_BENCH_STREAM_IDS of them,
// default 10^8) through a dynamic table of 2^20 rows (dim 64, row-wise AdaGrad state, LRU):
// each step admits its batch, which waits for room, and the step end evicts. Counters: RSS
// after the first tenth of the stream and at its end (MiB), and their ratio.
void BM_DistinctStream(benchmark::State& state) {
  const char* env = std::getenv("TESSERA_BENCH_STREAM_IDS");
  const int64_t total = env != nullptr ? std::atoll(env) : int64_t{100000000};
  constexpr int64_t kBatch = 65536;
  const int64_t steps = std::max<int64_t>(10, total / kBatch);
  DynamicRowStoreOptions o;
  o.capacity = int64_t{1} << 20;
  o.dim = 64;
  o.state_dim = 1;
  o.seed = 3;
  o.dynamic.policy = EvictionPolicy::kLru;
  auto store = DynamicRowStore::Create(o).value();
  std::vector<int64_t> ids(kBatch), slots(kBatch);
  double rss_warm = 0;
  int64_t next = 0;
  for (auto _ : state) {
    for (int64_t step = 0; step < steps; ++step) {
      for (int64_t& id : ids) id = static_cast<int64_t>(Mix64(static_cast<uint64_t>(next++)));
      TESSERA_CHECK_OK(store->Resolve(ids, absl::MakeSpan(slots)));
      TESSERA_CHECK_OK(store->EndStep());
      if (step == steps / 10) rss_warm = RssMib();
    }
  }
  const double rss_end = RssMib();
  const DynamicTableStats st = store->stats();
  state.counters["ids"] = static_cast<double>(next);
  state.counters["rss_warm_mib"] = rss_warm;
  state.counters["rss_end_mib"] = rss_end;
  state.counters["rss_growth"] = rss_end / rss_warm;
  state.counters["evictions"] = static_cast<double>(st.evictions);
  state.counters["occupancy"] = static_cast<double>(st.occupancy);
  state.counters["ids/s"] =
      benchmark::Counter(static_cast<double>(next), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_DistinctStream)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_DynamicResolve)->ArgName("dim")->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StaticResolve)->ArgName("dim")->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Lookup)
    ->ArgNames({"dim", "dynamic"})
    ->Args({64, 0})
    ->Args({64, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
