// Dense kernels at DLRM shapes: Linear forward + backward (with the raw sgemm work as a ceiling),
// the dot interaction, and whole DenseArch steps. Counters: GFLOP/s (useful multiply-adds x 2),
// samples/s. Threads come from OMP_NUM_THREADS (the "threads" counter echoes it); compare
// 1 and 2 threads side by side in one session, the machines are shared and noisy.
//
// The context line "blas_core" names the kernel set OpenBLAS picked. Debian's OpenBLAS 0.3.21
// does not know some newer CPUs (e.g. the Xeon family 6 model 207 of some build machines) and
// falls back to "Prescott" (SSE3), ~5x slower at these shapes; run with
// OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell (AVX2) there.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "dense/dense_arch.h"
#include "dense/interaction.h"
#include "dense/internal/bf16_rows.h"
#include "dense/internal/blas.h"
#include "dense/mlp.h"

namespace tessera {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) {
  CounterRng rng(seed, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = 2.0f * rng.NextUniform() - 1.0f;
  return v;
}

void SetCounters(benchmark::State& state, double flops_per_iter, int64_t samples_per_iter) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops_per_iter * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(samples_per_iter),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = NumThreads();
}

// Args: batch, in, out, relu (1/0), input gradient (1/0; the first bottom layer has none).
void BM_LinearFwdBwd(benchmark::State& state) {
  const int64_t b = state.range(0), in = state.range(1), out = state.range(2);
  const bool relu = state.range(3) != 0, need_dx = state.range(4) != 0;
  Linear layer("l", in, out, relu ? Activation::kRelu : Activation::kNone, DeviceContext::Cpu());
  layer.Init(1);
  const std::vector<float> x = Random(b * in, 2), dy0 = Random(b * out, 3);
  std::vector<float> dy(b * out), dx(b * in);
  for (auto _ : state) {
    const float* y = nullptr;
    if (!layer.Forward(x.data(), b, &y).ok()) state.SkipWithError("forward failed");
    std::copy(dy0.begin(), dy0.end(), dy.begin());  // Backward overwrites dy
    if (!layer.Backward(dy.data(), need_dx ? dx.data() : nullptr).ok()) {
      state.SkipWithError("backward failed");
    }
    benchmark::DoNotOptimize(dx.data());
  }
  SetCounters(state, (need_dx ? 6.0 : 4.0) * b * in * out, b);
}

// The same products as BM_LinearFwdBwd as bare sgemm calls: the ceiling for the fused layer.
void BM_SgemmOnly(benchmark::State& state) {
  const int64_t b = state.range(0), in = state.range(1), out = state.range(2);
  const bool need_dx = state.range(4) != 0;
  const std::vector<float> x = Random(b * in, 2), w = Random(out * in, 4), dy0 = Random(b * out, 3);
  std::vector<float> y(b * out), dy = dy0, dw(out * in), dx(b * in);
  for (auto _ : state) {
    dense_internal::Sgemm(false, true, b, out, in, 1.0f, x.data(), in, w.data(), in, 0.0f,
                          y.data(), out);
    std::copy(dy0.begin(), dy0.end(), dy.begin());
    dense_internal::Sgemm(true, false, out, in, b, 1.0f, dy.data(), out, x.data(), in, 0.0f,
                          dw.data(), in);
    if (need_dx) {
      dense_internal::Sgemm(false, false, b, in, out, 1.0f, dy.data(), out, w.data(), in, 0.0f,
                            dx.data(), in);
    }
    benchmark::DoNotOptimize(dx.data());
  }
  SetCounters(state, (need_dx ? 6.0 : 4.0) * b * in * out, b);
}

void LinearShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "in", "out", "relu", "dx"});
  b->Args({2048, 13, 512, 1, 0});     // bottom MLP, first layer
  b->Args({2048, 512, 256, 1, 1});    // bottom / top hidden
  b->Args({2048, 256, 64, 1, 1});     // bottom
  b->Args({2048, 479, 512, 1, 1});    // top MLP input (64 + 26*27/2 wide dot output)
  b->Args({2048, 256, 1, 0, 1});      // top MLP logit
  b->Args({2048, 1024, 1024, 1, 1});  // DCNv2 top MLP
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_LinearFwdBwd)->Apply(LinearShapes);
BENCHMARK(BM_SgemmOnly)->Apply(LinearShapes);

// Args: batch, F, d, bf16 (1: bf16 embeddings and d_emb, the bf16 hand-off's
// DotInteraction*Bf16). Forward + backward; flops count the lower triangle only.
void BM_DotInteractionFwdBwd(benchmark::State& state) {
  const int64_t b = state.range(0), nf = state.range(1), d = state.range(2);
  const bool bf16 = state.range(3) == 1;
  const int64_t w = DotInteractionOutputDim(nf, d);
  const std::vector<float> bottom = Random(b * d, 1), emb = Random(b * nf * d, 2);
  const std::vector<float> d_out = Random(b * w, 3);
  std::vector<float> out(b * w), d_bottom(b * d), d_emb(b * nf * d);
  std::vector<uint16_t> emb16(emb.size()), d_emb16(d_emb.size());
  for (size_t i = 0; i < emb.size(); ++i) emb16[i] = FloatToBf16(emb[i]);
  const DeviceContext ctx = DeviceContext::Cpu();
  for (auto _ : state) {
    const bool ok =
        bf16 ? DotInteractionForwardBf16(ctx, bottom.data(), emb16.data(), b, nf, d, out.data())
                       .ok() &&
                   DotInteractionBackwardBf16(ctx, bottom.data(), emb16.data(), d_out.data(), b,
                                              nf, d, d_bottom.data(), d_emb16.data())
                       .ok()
             : DotInteractionForward(ctx, bottom.data(), emb.data(), b, nf, d, out.data()).ok() &&
                   DotInteractionBackward(ctx, bottom.data(), emb.data(), d_out.data(), b, nf, d,
                                          d_bottom.data(), d_emb.data())
                       .ok();
    if (!ok) state.SkipWithError("interaction failed");
    benchmark::DoNotOptimize(d_emb.data());
    benchmark::DoNotOptimize(d_emb16.data());
  }
  const double pairs = nf * (nf + 1) / 2.0;
  SetCounters(state, 3 * 2.0 * b * pairs * d, b);  // forward 1x, backward 2x the pair work
}
BENCHMARK(BM_DotInteractionFwdBwd)
    ->ArgNames({"batch", "F", "d", "bf16"})
    ->ArgsProduct({{2048}, {26}, {16, 128}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Whole dense step (forward + backward, no optimizer). Arg 0: DLRM Criteo Kaggle shape
// (bottom 512-256-64-16, d 16, dot, top 512-256-1); 1: MLPerf DLRM-DCNv2 shape (bottom
// 512-256-128, d 128, DCN 3 layers rank 512, top 1024-1024-512-256-1; ~100 GFLOP per 1000
// samples, so a smaller batch keeps the run short).
void BM_DenseArchFwdBwd(benchmark::State& state) {
  DenseArchOptions o;
  o.num_dense = 13;
  o.num_embeddings = 26;
  if (state.range(0) == 0) {
    o.embedding_dim = 16;
    o.bottom_mlp = {512, 256, 64, 16};
    o.top_mlp = {512, 256, 1};
    o.interaction = InteractionType::kDot;
  } else {
    o.embedding_dim = 128;
    o.bottom_mlp = {512, 256, 128};
    o.top_mlp = {1024, 1024, 512, 256, 1};
    o.interaction = InteractionType::kDcn;
    o.dcn_num_layers = 3;
    o.dcn_low_rank = 512;
  }
  const int64_t b = state.range(1);
  auto arch = DenseArch::Create(o, DeviceContext::Cpu());
  if (!arch.ok()) {
    state.SkipWithError(arch.status().ToString().c_str());
    return;
  }
  (*arch)->Init(1);
  const int64_t ew = o.num_embeddings * o.embedding_dim;
  const std::vector<float> dense = Random(b * o.num_dense, 1), emb = Random(b * ew, 2);
  const std::vector<float> d_logits = Random(b, 3);
  std::vector<float> d_emb(b * ew);
  double macs = 0;  // multiply-adds of the GEMMs per sample, forward
  for (Parameter* p : (*arch)->parameters()) {
    if (p->value.shape().size() == 2) macs += static_cast<double>(p->value.numel());
  }
  for (auto _ : state) {
    const float* logits = nullptr;
    if (!(*arch)->Forward(dense.data(), emb.data(), b, &logits).ok() ||
        !(*arch)->Backward(d_logits.data(), d_emb.data()).ok()) {
      state.SkipWithError("step failed");
    }
    benchmark::DoNotOptimize(d_emb.data());
  }
  SetCounters(state, 6.0 * macs * b, b);  // GEMM flops only (forward + two backward products)
}
BENCHMARK(BM_DenseArchFwdBwd)
    ->ArgNames({"dcn", "batch"})
    ->Args({0, 2048})
    ->Args({1, 512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tessera

extern "C" char* openblas_get_corename();

int main(int argc, char** argv) {
  const std::string core = openblas_get_corename();
  benchmark::AddCustomContext("blas_core", core);
  if (core == "Prescott" || core == "Core2" || core == "Penryn" || core == "Nehalem") {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
      std::fprintf(stderr,
                   "WARNING: OpenBLAS chose the %s kernels on a CPU with AVX2; set "
                   "OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell for meaningful numbers\n",
                   core.c_str());
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
