// GPU embedding benchmarks: the pooled lookup's effective bandwidth (bytes of rows gathered plus
// outputs written, per second) next to a device-to-device copy (bytes read plus written), the
// bound a gather can approach; and the fused backward + row-wise AdaGrad update in rows/s.
// Needs a CUDA device; without one every benchmark reports "no CUDA device" and exits cleanly.
//   build-gpu/bench/cuda_lookup_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "embedding/pooled_lookup.h"
#include "embedding/pooled_lookup_cuda.h"

namespace tessera {
namespace {

CudaContext* Context() {
  static std::unique_ptr<CudaContext> ctx = [] {
    std::unique_ptr<CudaContext> c;
    if (CudaDeviceCount() == 0) return c;
    auto made = CudaContext::Create(CudaContextOptions{});
    if (made.ok()) c = std::move(made).value();
    return c;
  }();
  return ctx.get();
}

template <typename T>
Buffer Upload(const std::vector<T>& v, DType dt) {
  auto b = Buffer::Allocate(Device::kCuda, dt, {static_cast<int64_t>(v.size())});
  if (!b.ok() || !CudaMemcpy(b->raw(), v.data(), sizeof(T) * v.size()).ok()) std::abort();
  return std::move(b).value();
}

// Zipf-like ids (a hot head over a uniform tail), scrambled over the table.
std::vector<int64_t> Ids(int64_t n, int64_t rows, uint64_t seed) {
  CounterRng rng(seed, 1);
  std::vector<int64_t> ids(n);
  for (auto& id : ids) {
    const double u = rng.NextUniformDouble();
    const int64_t rank = static_cast<int64_t>(std::pow(static_cast<double>(rows), u)) - 1;
    id = static_cast<int64_t>((static_cast<uint64_t>(rank) * 2654435761ull) % rows);
  }
  return ids;
}

void BM_DeviceCopy(benchmark::State& state) {
  CudaContext* c = Context();
  if (c == nullptr) return state.SkipWithError("no CUDA device");
  const size_t bytes = size_t{1} << 30;
  auto a = CudaMallocAsync(c->context(), bytes), b = CudaMallocAsync(c->context(), bytes);
  if (!a.ok() || !b.ok()) return state.SkipWithError("cudaMallocAsync failed");
  for (auto _ : state) {
    if (!CudaCopyDeviceToDevice(c->context(), *b, *a, bytes).ok() ||
        !CudaSynchronize(c->context()).ok()) {
      return state.SkipWithError("copy failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * bytes);
  (void)CudaFreeAsync(c->context(), *a);
  (void)CudaFreeAsync(c->context(), *b);
}
BENCHMARK(BM_DeviceCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: dim, pooling. 10M-row table (5 GB at dim 128), 65536 bags.
void BM_PooledLookup(benchmark::State& state) {
  CudaContext* c = Context();
  if (c == nullptr) return state.SkipWithError("no CUDA device");
  const int64_t dim = state.range(0), pooling = state.range(1);
  const int64_t rows = 10'000'000, bags = 65536, n = bags * pooling;
  auto table = Buffer::Allocate(Device::kCuda, DType::kF32, {rows, dim});
  auto out = Buffer::Allocate(Device::kCuda, DType::kF32, {bags, dim});
  if (!table.ok() || !out.ok()) return state.SkipWithError("device allocation failed");
  std::vector<int64_t> offsets(bags + 1);
  for (int64_t b = 0; b <= bags; ++b) offsets[b] = b * pooling;
  Buffer d_off = Upload(offsets, DType::kI64), d_ids = Upload(Ids(n, rows, 7), DType::kI64);
  PooledLookupArgs a;
  a.weights = table->data<float>();
  a.dim = dim;
  a.offsets = d_off.data<int64_t>();
  a.indices = d_ids.data<int64_t>();
  a.num_bags = bags;
  a.out = out->data<float>();
  a.out_stride = dim;
  for (auto _ : state) {
    if (!PooledLookupForwardCuda(c->context(), a).ok() || !CudaSynchronize(c->context()).ok()) {
      return state.SkipWithError("lookup failed");
    }
  }
  // Rows gathered + ids + outputs written.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          (n * dim * 4 + n * 8 + bags * dim * 4));
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PooledLookup)
    ->Args({64, 20})
    ->Args({128, 20})
    ->Args({128, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Fused backward + row-wise AdaGrad, one table, 65536 bags x pooling 20, dim arg.
void BM_FusedBackward(benchmark::State& state) {
  CudaContext* c = Context();
  if (c == nullptr) return state.SkipWithError("no CUDA device");
  const int64_t dim = state.range(0), pooling = 20;
  const int64_t rows = 10'000'000, bags = 65536, n = bags * pooling;
  auto table = Buffer::Allocate(Device::kCuda, DType::kF32, {rows, dim});
  auto st = Buffer::Allocate(Device::kCuda, DType::kF32, {rows, 1});
  auto grad = Buffer::Allocate(Device::kCuda, DType::kF32, {bags, dim});
  if (!table.ok() || !st.ok() || !grad.ok()) return state.SkipWithError("allocation failed");
  std::vector<int64_t> offsets(bags + 1);
  for (int64_t b = 0; b <= bags; ++b) offsets[b] = b * pooling;
  Buffer d_off = Upload(offsets, DType::kI64), d_ids = Upload(Ids(n, rows, 9), DType::kI64);
  const std::vector<BagGradients> src = {
      {d_off.data<int64_t>(), d_ids.data<int64_t>(), nullptr, bags, grad->data<float>(), dim}};
  const std::vector<int64_t> counts = {n};
  RowUpdateArgs args;
  args.weights = table->data<float>();
  args.state = st->data<float>();
  args.dim = dim;
  args.lr = 1e-3f;
  CudaEmbeddingWorkspace ws(c->context());
  for (auto _ : state) {
    if (!FusedBackwardUpdateCuda(c->context(), src, counts, PoolingMode::kSum, 24, args, &ws)
             .ok() ||
        !CudaSynchronize(c->context()).ok()) {
      return state.SkipWithError("backward failed");
    }
  }
  state.counters["ids/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FusedBackward)->Arg(64)->Arg(128)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
