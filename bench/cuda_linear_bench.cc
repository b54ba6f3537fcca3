// GPU dense benchmarks: Linear forward + backward (three GEMMs, fused bias/ReLU, bias gradient)
// at DLRM layer shapes, in TFLOP/s of GEMM work, next to one large square cuBLAS SGEMM (the
// device's fp32 GEMM ceiling under the same cuBLAS settings: no TF32), and the same steps with
// dense_dtype bf16.
// Needs a CUDA device; without one every benchmark reports "no CUDA device".
#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "dense/mlp.h"

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

Buffer Floats(int64_t n) {
  auto b = Buffer::Allocate(Device::kCuda, DType::kF32, {n});
  if (!b.ok()) std::abort();
  return std::move(b).value();
}

void BM_CublasSgemm(benchmark::State& state) {
  CudaContext* c = Context();
  if (c == nullptr) return state.SkipWithError("no CUDA device");
  const int n = static_cast<int>(state.range(0));
  Buffer a = Floats(int64_t{n} * n), b = Floats(int64_t{n} * n), d = Floats(int64_t{n} * n);
  const float one = 1.0f, zero = 0.0f;
  auto h = static_cast<cublasHandle_t>(c->context().cublas_handle);
  for (auto _ : state) {
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data<float>(), n, b.data<float>(), n,
                &zero, d.data<float>(), n);
    if (!CudaSynchronize(c->context()).ok()) return state.SkipWithError("sgemm failed");
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CublasSgemm)->Arg(8192)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: batch, in, out. Forward + backward with dx: 3 GEMMs of 2 * batch * in * out flops.
void BM_LinearStep(benchmark::State& state) {
  CudaContext* c = Context();
  if (c == nullptr) return state.SkipWithError("no CUDA device");
  const int64_t batch = state.range(0), in = state.range(1), out = state.range(2);
  Buffer x = Floats(batch * in), w = Floats(out * in), b = Floats(out), y = Floats(batch * out),
         dy = Floats(batch * out), dw = Floats(out * in), db = Floats(out), dx = Floats(batch * in);
  const DeviceContext& ctx = c->context();
  for (auto _ : state) {
    absl::Status st = LinearForward(ctx, x.data<float>(), w.data<float>(), b.data<float>(), batch,
                                    in, out, Activation::kRelu, y.data<float>());
    if (st.ok()) {
      st = LinearBackward(ctx, x.data<float>(), w.data<float>(), y.data<float>(), dy.data<float>(),
                          batch, in, out, Activation::kRelu, dw.data<float>(), db.data<float>(),
                          dx.data<float>());
    }
    if (st.ok()) st = CudaSynchronize(ctx);
    if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  }
  state.counters["TFLOP/s"] = benchmark::Counter(3.0 * 2.0 * batch * in * out * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearStep)
    ->Args({65536, 512, 256})
    ->Args({65536, 1024, 1024})
    ->Args({16384, 479, 1024})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The same step with model.dense_dtype bf16 (a Linear layer: x, W and dz rounded to bf16 on the
// device, cuBLAS with bf16 inputs and fp32 accumulation), the same flop count.
void BM_LinearStepBf16(benchmark::State& state) {
  CudaContext* c = Context();
  if (c == nullptr) return state.SkipWithError("no CUDA device");
  const int64_t batch = state.range(0), in = state.range(1), out = state.range(2);
  const DeviceContext& ctx = c->context();
  auto layer = Linear::Create("bench", in, out, Activation::kRelu, ctx, DenseDtype::kBf16);
  if (!layer.ok()) return state.SkipWithError(std::string(layer.status().message()).c_str());
  (*layer)->Init(1);
  Buffer x = Floats(batch * in), dy = Floats(batch * out), dx = Floats(batch * in);
  for (auto _ : state) {
    const float* y = nullptr;
    absl::Status st = (*layer)->Forward(x.data<float>(), batch, &y);
    if (st.ok()) st = (*layer)->Backward(dy.data<float>(), dx.data<float>());
    if (st.ok()) st = CudaSynchronize(ctx);
    if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  }
  state.counters["TFLOP/s"] = benchmark::Counter(3.0 * 2.0 * batch * in * out * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearStepBf16)
    ->Args({65536, 512, 256})
    ->Args({65536, 1024, 1024})
    ->Args({16384, 479, 1024})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
