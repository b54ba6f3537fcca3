// The GEMMs of one training step of each bench config's MLPs (configs/bench/*.yaml), run bare:
// per Linear layer the forward x W^T, the weight gradient dz^T x and (all but the first bottom
// layer) the input gradient dz W, at the config's batch. Three implementations at the same shapes:
//   Sgemm      OpenBLAS cblas_sgemm (what the fp32 Linear calls)
//   DnnlF32    oneDNN fp32 matmul
//   DnnlBf16   oneDNN matmul, bf16 inputs already converted, fp32 accumulation and output
//   DnnlBf16Convert  the same plus rounding x, W and dz to bf16 each step (what a bf16 layer pays)
// Counters: GFLOP/s (2 x multiply-adds), ms/step. Threads from OMP_NUM_THREADS (the thresholds
// of GemmThreads from the pool's wait, see main); compare 1 and 2 threads side by side in one
// session (the machines are shared and noisy). The bare Sgemm rate is the ceiling
// bench/cpu_compare.sh holds tessera-bench's whole step against.
//   OMP_NUM_THREADS=1 build/bin/dense_gemm_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "dense/interaction.h"
#include "dense/internal/blas.h"
#include "dense/internal/dnnl_gemm.h"
#include "tools/omp_wait.h"

namespace tessera {
namespace {

using dense_internal::GemmInput;

struct Layer {
  int64_t in, out;
  bool need_dx;
};

struct StepShapes {
  const char* name;
  int64_t batch;
  std::vector<Layer> layers;
};

// Bottom (13 -> ...) then top (dim + F(F-1)/2 ... -> 1), as DenseArch builds them.
StepShapes Shapes(const char* name, int64_t batch, int64_t features, int64_t dim,
                  std::vector<int64_t> bottom, std::vector<int64_t> top) {
  StepShapes s{name, batch, {}};
  int64_t in = 13;
  for (size_t i = 0; i < bottom.size(); ++i) {
    s.layers.push_back({in, bottom[i], i > 0});
    in = bottom[i];
  }
  in = DotInteractionOutputDim(features, dim);
  for (int64_t o : top) {
    s.layers.push_back({in, o, true});
    in = o;
  }
  return s;
}

const std::vector<StepShapes>& Configs() {
  static const auto* c = new std::vector<StepShapes>{
      Shapes("small", 2048, 8, 64, {512, 256, 64}, {512, 256, 1}),
      Shapes("kaggle", 2048, 26, 16, {512, 256, 16}, {512, 256, 1}),
      Shapes("mlperf-mini", 1024, 26, 128, {512, 256, 128}, {1024, 1024, 512, 256, 1}),
      Shapes("skewed", 2048, 3, 64, {64, 64}, {64, 1}),
  };
  return *c;
}

std::vector<float> Random(int64_t n, uint64_t seed) {
  CounterRng rng(seed, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = 2.0f * rng.NextUniform() - 1.0f;
  return v;
}

struct LayerBuffers {
  std::vector<float> x, w, dy, y, dw, dx;
  std::vector<uint16_t> xb, wb, dyb;
};

enum Impl { kSgemm, kDnnlF32, kDnnlBf16, kDnnlBf16Convert };

void BM_StepGemms(benchmark::State& state, Impl impl) {
  const StepShapes& s = Configs()[state.range(0)];
  state.SetLabel(s.name);
  if (impl != kSgemm && !dense_internal::DnnlGemmAvailable()) {
    state.SkipWithError("built without oneDNN");
    return;
  }
  const int64_t b = s.batch;
  std::vector<LayerBuffers> bufs(s.layers.size());
  double flops = 0;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const Layer& l = s.layers[i];
    LayerBuffers& lb = bufs[i];
    lb.x = Random(b * l.in, 2 + i);
    lb.w = Random(l.out * l.in, 100 + i);
    lb.dy = Random(b * l.out, 200 + i);
    lb.y.resize(b * l.out);
    lb.dw.resize(l.out * l.in);
    lb.dx.resize(b * l.in);
    lb.xb.resize(lb.x.size());
    lb.wb.resize(lb.w.size());
    lb.dyb.resize(lb.dy.size());
    dense_internal::FloatToBf16(lb.x.data(), lb.x.size(), lb.xb.data());
    dense_internal::FloatToBf16(lb.w.data(), lb.w.size(), lb.wb.data());
    dense_internal::FloatToBf16(lb.dy.data(), lb.dy.size(), lb.dyb.data());
    flops += (l.need_dx ? 6.0 : 4.0) * b * l.in * l.out;
  }
  bool ok = true;
  for (auto _ : state) {
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const Layer& l = s.layers[i];
      LayerBuffers& lb = bufs[i];
      if (impl == kSgemm) {
        dense_internal::Sgemm(false, true, b, l.out, l.in, 1.0f, lb.x.data(), l.in, lb.w.data(),
                              l.in, 0.0f, lb.y.data(), l.out);
        dense_internal::Sgemm(true, false, l.out, l.in, b, 1.0f, lb.dy.data(), l.out,
                              lb.x.data(), l.in, 0.0f, lb.dw.data(), l.in);
        if (l.need_dx) {
          dense_internal::Sgemm(false, false, b, l.in, l.out, 1.0f, lb.dy.data(), l.out,
                                lb.w.data(), l.in, 0.0f, lb.dx.data(), l.in);
        }
        continue;
      }
      const bool f32 = impl == kDnnlF32;
      const GemmInput t = f32 ? GemmInput::kF32 : GemmInput::kBf16;
      if (impl == kDnnlBf16Convert) {
        dense_internal::FloatToBf16(lb.x.data(), lb.x.size(), lb.xb.data());
        dense_internal::FloatToBf16(lb.w.data(), lb.w.size(), lb.wb.data());
      }
      const void* x = f32 ? static_cast<const void*>(lb.x.data()) : lb.xb.data();
      const void* w = f32 ? static_cast<const void*>(lb.w.data()) : lb.wb.data();
      const void* dy = f32 ? static_cast<const void*>(lb.dy.data()) : lb.dyb.data();
      ok &= dense_internal::DnnlGemm(t, false, true, b, l.out, l.in, x, l.in, w, l.in, false,
                                     lb.y.data(), l.out).ok();
      if (impl == kDnnlBf16Convert) {
        dense_internal::FloatToBf16(lb.dy.data(), lb.dy.size(), lb.dyb.data());
      }
      ok &= dense_internal::DnnlGemm(t, true, false, l.out, l.in, b, dy, l.out, x, l.in, false,
                                     lb.dw.data(), l.in).ok();
      if (l.need_dx) {
        ok &= dense_internal::DnnlGemm(t, false, false, b, l.in, l.out, dy, l.out, w, l.in,
                                       false, lb.dx.data(), l.in).ok();
      }
    }
    benchmark::ClobberMemory();
  }
  if (!ok) state.SkipWithError("oneDNN matmul failed");
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ms/step"] = benchmark::Counter(
      1e-3, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["threads"] = NumThreads();
}

BENCHMARK_CAPTURE(BM_StepGemms, Sgemm, kSgemm)->DenseRange(0, 3)->UseRealTime();
BENCHMARK_CAPTURE(BM_StepGemms, DnnlF32, kDnnlF32)->DenseRange(0, 3)->UseRealTime();
BENCHMARK_CAPTURE(BM_StepGemms, DnnlBf16, kDnnlBf16)->DenseRange(0, 3)->UseRealTime();
BENCHMARK_CAPTURE(BM_StepGemms, DnnlBf16Convert, kDnnlBf16Convert)
    ->DenseRange(0, 3)
    ->UseRealTime();

}  // namespace
}  // namespace tessera

// The products' thread counts (dnnl_gemm.cc GemmThreads) follow the pool's wait as libgomp read
// it (OmpPoolSpins): OMP_WAIT_POLICY=PASSIVE gives the sleeping thresholds, a positive
// GOMP_SPINCOUNT or nothing set (libgomp's default spins) the spinning ones.
int main(int argc, char** argv) {
  tessera::SetParallelForkCheap(tessera::OmpPoolSpins());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
