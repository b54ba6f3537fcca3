// Pooled forward lookup and fused backward (row-wise AdaGrad) on a 1 GiB fp32 table (or
// TESSERA_BENCH_TABLE_GIB GiB, best a power of two: the id scrambling is then a bijection) with
// Zipf(1.05) ids, pooling 8, dims 16/64/128, at 1 and 2 threads. Counters: rows/s (ids gathered
// or updated per second), GB/s (row bytes gathered per second) and bound_rows/s, the gather
// bound measured in ../shared/MACHINE.md (core/hardware.h) for the same dim and threads.
//   build-*/bin/embedding_lookup_bench --benchmark_filter=Forward
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/hardware.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"

namespace tessera {
namespace {

// Table size: 1 GiB, or TESSERA_BENCH_TABLE_GIB GiB (MACHINE.md's gather numbers used 4).
int64_t TableBytes() {
  const char* env = std::getenv("TESSERA_BENCH_TABLE_GIB");
  const int64_t gib = env != nullptr ? std::max(1, std::atoi(env)) : 1;
  return gib << 30;
}
constexpr int64_t kBags = 4096;
constexpr int64_t kPooling = 8;
// Distinct batches cycled through: 16M ids (128 MiB), so that the stream does not repeat within
// the 256 MiB L3 of these machines and only Zipf's genuinely hot rows stay cached.
constexpr int kBatches = 512;
constexpr double kZipfS = 1.05;

// One table at a time (1 GiB), rebuilt when the dim changes, with its batches of ids.
struct Table {
  int64_t dim = 0;
  std::unique_ptr<RowStore> store;
  std::vector<int64_t> offsets;  // [kBags + 1], shared by all batches (fixed pooling)
  std::vector<int64_t> ids;      // [kBatches, kBags * kPooling]
  std::vector<float> grad;       // [kBags, dim]
};

// Zipf(s) ranks by inverting the continuous power law on [1, n + 1), then scattered over the
// table by an odd multiplier mod n (a bijection for power-of-two n), so hot rows are not
// neighbours in memory.
int64_t ZipfRow(CounterRng& rng, int64_t n) {
  const double a = 1.0 - kZipfS;
  const double u = rng.NextUniformDouble();
  const double x = std::pow((std::pow(double(n + 1), a) - 1.0) * u + 1.0, 1.0 / a);
  const int64_t rank = std::min<int64_t>(static_cast<int64_t>(x) - 1, n - 1);
  return static_cast<int64_t>((static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull) &
                              static_cast<uint64_t>(n - 1));
}

Table& TableFor(int64_t dim) {
  static Table table;
  if (table.dim == dim) return table;
  table = Table();
  table.dim = dim;
  InMemoryRowStoreOptions o;
  o.num_rows = TableBytes() / (dim * static_cast<int64_t>(sizeof(float)));
  o.dim = dim;
  o.state_dim = RowStateDim(RowOptimizerType::kRowWiseAdagrad, dim);
  o.seed = 1;
  auto store = CreateInMemoryRowStore(o);
  TESSERA_CHECK_OK(store.status());
  table.store = std::move(store).value();
  for (int64_t b = 0; b <= kBags; ++b) table.offsets.push_back(b * kPooling);
  CounterRng rng(7, static_cast<uint64_t>(dim));
  table.ids.resize(kBatches * kBags * kPooling);
  for (int64_t& id : table.ids) id = ZipfRow(rng, o.num_rows);
  table.grad.resize(kBags * dim);
  for (float& g : table.grad) g = rng.NextUniform() - 0.5f;
  return table;
}

double GatherBound(int64_t dim, int threads) {
  const bool two = threads >= 2;
  switch (dim) {
    case 16:
      return two ? hardware::kGatherRowsPerSecDim16_2T : hardware::kGatherRowsPerSecDim16_1T;
    case 64:
      return two ? hardware::kGatherRowsPerSecDim64_2T : hardware::kGatherRowsPerSecDim64_1T;
    case 128:
      return two ? hardware::kGatherRowsPerSecDim128_2T : hardware::kGatherRowsPerSecDim128_1T;
  }
  return 0;
}

void SetCounters(benchmark::State& state, int64_t dim, int threads) {
  const double ids = double(state.iterations()) * kBags * kPooling;
  state.counters["rows/s"] = benchmark::Counter(ids, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(ids * dim * sizeof(float) * 1e-9, benchmark::Counter::kIsRate);
  state.counters["bound_rows/s"] = GatherBound(dim, threads);
}

// Args: dim, threads.
void BM_PooledForward(benchmark::State& state) {
  const int64_t dim = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Table& t = TableFor(dim);
  SetNumThreads(threads);
  std::vector<float> out(kBags * dim);
  PooledLookupArgs a;
  a.weights = t.store->weights();
  a.dim = dim;
  a.offsets = t.offsets.data();
  a.num_bags = kBags;
  a.out = out.data();
  a.out_stride = dim;
  int batch = 0;
  for (auto _ : state) {
    a.indices = t.ids.data() + static_cast<int64_t>(batch) * kBags * kPooling;
    TESSERA_CHECK_OK(PooledLookupForward(DeviceContext::Cpu(), a));
    benchmark::DoNotOptimize(out.data());
    batch = (batch + 1) % kBatches;
  }
  SetCounters(state, dim, threads);
}

void BM_FusedBackwardRowWiseAdagrad(benchmark::State& state) {
  const int64_t dim = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Table& t = TableFor(dim);
  SetNumThreads(threads);
  EmbeddingWorkspace ws;
  RowUpdateArgs args;
  args.weights = t.store->weights();
  args.state = t.store->state();
  args.dim = dim;
  args.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
  args.lr = 0.01f;
  BagGradients g;
  g.offsets = t.offsets.data();
  g.num_bags = kBags;
  g.grad = t.grad.data();
  g.grad_stride = dim;
  int batch = 0;
  int64_t unique = 0;
  for (auto _ : state) {
    g.indices = t.ids.data() + static_cast<int64_t>(batch) * kBags * kPooling;
    TESSERA_CHECK_OK(FusedBackwardUpdate(DeviceContext::Cpu(), {g}, PoolingMode::kSum, args, &ws));
    unique += static_cast<int64_t>(ws.unique_slots.size());
    ++args.step;
    batch = (batch + 1) % kBatches;
  }
  SetCounters(state, dim, threads);
  state.counters["unique_frac"] = double(unique) / (double(state.iterations()) * kBags * kPooling);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t dim : {16, 64, 128}) {
    for (int threads : {1, 2}) b->Args({dim, threads});
  }
  b->ArgNames({"dim", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_PooledForward)->Apply(Args);
BENCHMARK(BM_FusedBackwardRowWiseAdagrad)->Apply(Args);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
