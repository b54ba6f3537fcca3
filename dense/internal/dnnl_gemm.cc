#include "dense/internal/dnnl_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "dense/internal/bf16_rows.h"

#ifdef TESSERA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tessera::dense_internal {
namespace {

__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void FloatToBf16Avx512(
    const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
    _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; i < n; ++i) out[i] = ::tessera::FloatToBf16(x[i]);
}

}  // namespace

void FloatToBf16(const float* x, int64_t n, uint16_t* out) {
  static const bool avx512bf16 = __builtin_cpu_supports("avx512bf16");
  if (avx512bf16) {
    FloatToBf16Avx512(x, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = ::tessera::FloatToBf16(x[i]);
}

namespace {
// GemmThreads' unit for a sleeping pool (dnnl_gemm.h GemmMinMacsPerThread).
constexpr int64_t kGemmMinMacsPerThread = int64_t{8} << 20;
}  // namespace

int64_t GemmMinMacsPerThread() { return ScaledMinChunk(kGemmMinMacsPerThread); }

#ifdef TESSERA_HAVE_DNNL
namespace {

// (input type, trans_a, trans_b, m, n, k, lda, ldb, accumulate, ldc, threads, bf16 output).
using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t,
                       int, bool>;

// The threads a product of m x n x k multiply-adds runs on: one per kGemmMinMacsPerThread, at
// most NumThreads(). oneDNN fixes its partition when a primitive is created (its brgemm kernels
// fork as many threads as they were made for), so the primitive is created and run under that
// count and cached per count. Measured with bench/dense_gemm_bench.cc at the skewed config's
// 2048 x 64 x 64 products: 2 threads were slower than 1 on 2 Zen 4 cores (a sleeping pool;
// ScaledMinChunk when it spins, core/parallel.h).
int GemmThreads(int64_t m, int64_t n, int64_t k) {
  const int64_t by_size = std::max<int64_t>(1, m * n * k / GemmMinMacsPerThread());
  return static_cast<int>(std::min<int64_t>(NumThreads(), by_size));
}

struct Cached {
  dnnl::memory::desc a, b, c;
  dnnl::matmul prim;
  dnnl::memory::desc scratch;  // the primitive's scratchpad (user mode)
  // bf16 inputs on a CPU where oneDNN has no bf16 matmul: the operands are widened to fp32 (exact)
  // and go through the fp32 primitive `prim`.
  bool widen = false;
};

// The number of elements a row-major operand of logical shape [rows, cols] with leading
// dimension ld spans (transposed: stored [cols, rows]).
int64_t Extent(bool trans, int64_t rows, int64_t cols, int64_t ld) {
  return trans ? (cols - 1) * ld + rows : (rows - 1) * ld + cols;
}

void WidenBf16(const void* src, int64_t n, std::vector<float>* out) {
  out->resize(static_cast<size_t>(n));
  WidenBf16Row(static_cast<const uint16_t*>(src), n, out->data());
}

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mu;
  std::map<Key, std::unique_ptr<Cached>> cache;
  std::vector<float> wide_a, wide_b;  // the widened operands of a `widen` primitive
  bool warned = false;
};

Engine& GetEngine() {
  static Engine* e = new Engine();
  return *e;
}

}  // namespace

bool DnnlGemmAvailable() { return true; }

std::string DnnlVersion() {
  const dnnl_version_t* v = dnnl_version();
  return v == nullptr ? std::string("unknown")
                      : absl::StrCat(v->major, ".", v->minor, ".", v->patch);
}

namespace {

absl::Status Run(GemmInput type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate,
                 const GemmEpilogue& ep, void* c, int64_t ldc) {
  using dt = dnnl::memory::data_type;
  Engine& e = GetEngine();
  const int threads = GemmThreads(m, n, k);
  // Below NumThreads(): oneDNN (OpenMP runtime) reads omp_get_max_threads() when it creates and
  // runs the primitive.
  std::optional<ScopedNumThreads> fewer;
  if (threads < NumThreads()) fewer.emplace(threads);
  const Key key{static_cast<int>(type), trans_a, trans_b, m, n, k, lda, ldb, accumulate, ldc,
                threads, ep.bf16_out};
  Cached* p;
  try {
    // The cache under the lock; the product itself outside it, on this thread's stream and
    // scratchpad, so that two threads may run products at once (RunPair, core/parallel.h).
    std::unique_lock<std::mutex> lock(e.mu);
    auto it = e.cache.find(key);
    if (it == e.cache.end()) {
      const dt in = type == GemmInput::kBf16 ? dt::bf16 : dt::f32;
      auto make = [&](dt t) {
        auto entry = std::make_unique<Cached>();
        // Logical A [m, k] and B [k, n] with the strides of their row-major storage.
        entry->a = dnnl::memory::desc(
            {m, k}, t, trans_a ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
        entry->b = dnnl::memory::desc(
            {k, n}, t, trans_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
        entry->c = dnnl::memory::desc({m, n}, ep.bf16_out ? dt::bf16 : dt::f32,
                                      dnnl::memory::dims{ldc, 1});
        dnnl::primitive_attr attr;
        // The caller's scratchpad (a per-thread buffer below), not oneDNN's shared one.
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::post_ops ops;
        if (accumulate) ops.append_sum(1.0f);
        if (accumulate) attr.set_post_ops(ops);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(entry->a, entry->b, entry->c), attr,
                                        e.engine);
        entry->scratch = pd.scratchpad_desc();
        entry->prim = dnnl::matmul(pd);
        return entry;
      };
      std::unique_ptr<Cached> entry;
      try {
        entry = make(in);
      } catch (const dnnl::error& err) {
        // oneDNN 2.6 has bf16 matmul only on CPUs with AVX-512 (native with AVX512_BF16 or AMX,
        // emulated on AVX512_CORE). Elsewhere the same rounded operands are multiplied in fp32:
        // a product of two bf16 values is exact in fp32, the accumulation is fp32 either way, so
        // the numerical contract holds; only the speed of bf16 is lost.
        if (in != dt::bf16 || err.status != dnnl_unimplemented) throw;
        if (!e.warned) {
          e.warned = true;
          TESSERA_LOG(WARNING) << "oneDNN has no bf16 matmul on this CPU (" << err.what()
                               << "): bf16 dense math multiplies its bf16-rounded operands in "
                                  "fp32 (same rounding, fp32 speed)";
        }
        entry = make(dt::f32);
        entry->widen = true;
      }
      it = e.cache.emplace(key, std::move(entry)).first;
    }
    p = it->second.get();
    if (p->widen) {
      // The widened buffers are shared: this path keeps the lock through the product.
      WidenBf16(a, Extent(trans_a, m, k, lda), &e.wide_a);
      WidenBf16(b, Extent(trans_b, k, n, ldb), &e.wide_b);
      a = e.wide_a.data();
      b = e.wide_b.data();
    } else {
      lock.unlock();
    }
    thread_local dnnl::stream stream(e.engine);
    thread_local std::vector<char> scratch;
    if (scratch.size() < p->scratch.get_size()) scratch.resize(p->scratch.get_size());
    dnnl::memory am(p->a, e.engine, const_cast<void*>(a));
    dnnl::memory bm(p->b, e.engine, const_cast<void*>(b));
    dnnl::memory cm(p->c, e.engine, c);
    dnnl::memory sm(p->scratch, e.engine, scratch.data());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am},
                                               {DNNL_ARG_WEIGHTS, bm},
                                               {DNNL_ARG_DST, cm},
                                               {DNNL_ARG_SCRATCHPAD, sm}};
    p->prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    return absl::InternalError(absl::StrCat("oneDNN matmul ", m, "x", n, "x", k, ": ", err.what()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DnnlGemm(GemmInput type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate,
                      float* c, int64_t ldc) {
  return Run(type, trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, GemmEpilogue{}, c, ldc);
}

absl::Status DnnlGemmEpilogue(GemmInput type, bool trans_a, bool trans_b, int64_t m, int64_t n,
                              int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb,
                              const GemmEpilogue& ep, void* c, int64_t ldc) {
  return Run(type, trans_a, trans_b, m, n, k, a, lda, b, ldb, false, ep, c, ldc);
}

#else

bool DnnlGemmAvailable() { return false; }

std::string DnnlVersion() { return ""; }

absl::Status DnnlGemm(GemmInput, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t,
                      const void*, int64_t, bool, float*, int64_t) {
  return absl::UnimplementedError("this build has no oneDNN (libdnnl-dev): bf16 dense math needs it");
}

absl::Status DnnlGemmEpilogue(GemmInput, bool, bool, int64_t, int64_t, int64_t, const void*,
                              int64_t, const void*, int64_t, const GemmEpilogue&, void*,
                              int64_t) {
  return absl::UnimplementedError("this build has no oneDNN (libdnnl-dev): bf16 dense math needs it");
}

#endif

}  // namespace tessera::dense_internal
