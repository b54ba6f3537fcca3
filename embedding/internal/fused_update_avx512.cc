// The fused backward's inner loop for the common case (AVX-512, dims 16-128, SGD or row-wise
// AdaGrad, fp32 / fp16 / bf16 rows, fp32 or bf16 output gradients): one pass per run that sums the run's gradient rows in
// registers and updates the run's row right away, with no summed row written anywhere.
//
// Why. The update is bound by the row misses (weights + the AdaGrad state line, read then
// written); summing a run is bound by L2 reads of gradient rows. Done in blocks (sum ~32 runs,
// then update them, pooled_lookup_cpu.cc's fallback), the two alternate and the memory system
// idles while the block sums. Here the row of run u + ahead is prefetched while run u sums, so
// the out-of-order core keeps the row misses in flight under the summation.
//
// Thread mapping: the caller's chunks of runs (ForRunChunks), one thread each; within a chunk,
// runs in increasing slot order. Memory: per entry one gradient row (prefetched `ahead` entries
// ahead, its pointer 2 * ahead ahead); per run one weight row and its state (prefetched into L2
// kFarRuns runs ahead, then into L1 with write intent kNearRuns runs ahead).
//
// Bits: the sum starts at +0 and adds scale * g entry by entry (SumRuns), the row update is
// ApplyRowUpdate's (row-wise AdaGrad: RowSumOfSquares' order, v += sum / dim, scale = lr /
// (sqrt(v / c) + eps), w -= scale * g; SGD: w -= lr * g), with separate multiplies and adds
// (-ffp-contract=off, as pooled_lookup_cpu.cc), and 16-bit rows round as UpdateRows16Cpu does.
// So the results are exactly those of the blocked path, for any thread count.
#include <cmath>
#include <cstdint>

#include "embedding/internal/avx512_rows.h"
#include "embedding/internal/cpu_parallel.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#include "embedding/pooled_lookup.h"

namespace tessera::embedding_internal {

#if TESSERA_HAVE_AVX512_PATH
namespace {

// Prefetch distances of a run's row, in runs (measured: BM_EmbeddingUpdate, docs/PERFORMANCE.md).
constexpr int64_t kFarRuns = 16;
constexpr int64_t kNearRuns = 2;

template <int kDim, RowDtype kD, bool kAdagrad, bool kBf16Grads>
TESSERA_AVX512 void SumAndUpdate(const SumRunsArgs& r, const int64_t* slots,
                                 const RowUpdateArgs& a, int64_t u0, int64_t u1) {
  constexpr int kVecs = kDim / 16;
  constexpr int64_t kRowBytes = kDim * RowDtypeBytes(kD);
  constexpr int64_t kGradBytes = kDim * static_cast<int64_t>(kBf16Grads ? 2 : sizeof(float));
  const int64_t ahead = PrefetchRowsAhead(kGradBytes);
  const int64_t e_last = r.run_starts[u1];
  const int64_t mask = r.pos_mask;
  const int64_t* keys = r.keys;
  char* weights = static_cast<char*>(a.weights);
  float* state = a.state;
  const uint32_t key = row_dtype::StochasticKey(a.rounding_seed, a.step);
  const float lr = a.lr, divisor = a.optimizer.adagrad_divisor, eps = a.optimizer.eps;
  // Each run's row and state line are prefetched twice: into L2 kFarRuns runs ahead, then into
  // L1 with write intent kNearRuns runs ahead. Measured against one L1 prefetch 7 runs ahead:
  // the fp32 update 17-30% less CPU time per batch (BM_Phases16), of_limit 0.43-0.45 against
  // 0.40-0.47. The loop still waits for lines in flight: perf puts its samples on the L2
  // prefetch now.
  for (int64_t u = u0; u < u1 && u < u0 + kFarRuns; ++u) {
    PrefetchBytesL2(weights + slots[u] * kRowBytes, kRowBytes);
    if (kAdagrad) PrefetchBytesL2(state + slots[u], sizeof(float));
  }
  for (int64_t u = u0; u < u1 && u < u0 + kNearRuns; ++u) {
    PrefetchBytes(weights + slots[u] * kRowBytes, kRowBytes, true);
    if (kAdagrad) __builtin_prefetch(state + slots[u], 1, 3);
  }
  for (int64_t u = u0; u < u1; ++u) {
    if (u + kFarRuns < u1) {
      const int64_t next = slots[u + kFarRuns];
      PrefetchBytesL2(weights + next * kRowBytes, kRowBytes);
      if (kAdagrad) PrefetchBytesL2(state + next, sizeof(float));
    }
    if (u + kNearRuns < u1) {
      const int64_t next = slots[u + kNearRuns];
      PrefetchBytes(weights + next * kRowBytes, kRowBytes, true);
      if (kAdagrad) __builtin_prefetch(state + next, 1, 3);
    }
    // The run's gradient: SumRuns' terms in its order.
    __m512 g[kVecs];
    for (int c = 0; c < kVecs; ++c) g[c] = _mm512_setzero_ps();
    const int64_t eb = r.run_starts[u], ee = r.run_starts[u + 1];
    for (int64_t e = eb; e < ee; ++e) {
      if (e + 2 * ahead < e_last) {
        const int64_t p2 = keys[e + 2 * ahead] & mask;
        __builtin_prefetch(r.grad_rows + p2, 0, 3);
        __builtin_prefetch(r.scales + p2, 0, 3);
      }
      if (e + ahead < e_last) PrefetchBytes(r.grad_rows[keys[e + ahead] & mask], kGradBytes, false);
      const int64_t p = keys[e] & mask;
      const __m512 s = _mm512_set1_ps(r.scales[p]);
      if constexpr (kBf16Grads) {
        const uint16_t* src = static_cast<const uint16_t*>(r.grad_rows[p]);
        for (int c = 0; c < kVecs; ++c) {
          g[c] = _mm512_add_ps(g[c], _mm512_mul_ps(s, Load16<RowDtype::kBf16>(src + 16 * c)));
        }
      } else {
        const float* src = static_cast<const float*>(r.grad_rows[p]);
        for (int c = 0; c < kVecs; ++c) {
          g[c] = _mm512_add_ps(g[c], _mm512_mul_ps(s, _mm512_loadu_ps(src + 16 * c)));
        }
      }
    }
    // The row's update.
    const int64_t slot = slots[u];
    float scale = lr;
    if constexpr (kAdagrad) {
      float* v = state + slot;
      v[0] += SumOfSquares<kVecs>(g) / static_cast<float>(kDim);
      scale = lr / (sqrtf(v[0] / divisor) + eps);
    }
    const __m512 sc = _mm512_set1_ps(scale);
    if constexpr (kD == RowDtype::kF32) {
      float* w = reinterpret_cast<float*>(weights + slot * kRowBytes);
      for (int c = 0; c < kVecs; ++c) {
        _mm512_storeu_ps(w + 16 * c,
                         _mm512_sub_ps(_mm512_loadu_ps(w + 16 * c), _mm512_mul_ps(sc, g[c])));
      }
    } else {
      uint16_t* w = reinterpret_cast<uint16_t*>(weights + slot * kRowBytes);
      for (int c = 0; c < kVecs; ++c) {
        const __m512 x = _mm512_sub_ps(Load16<kD>(w + 16 * c), _mm512_mul_ps(sc, g[c]));
        StoreRounded16<kD>(a.rounding, key, x, w + 16 * c);
      }
    }
  }
}

template <int kDim, RowDtype kD, bool kBf16Grads>
void ForOptimizerGrads(const SumRunsArgs& r, const int64_t* slots, const RowUpdateArgs& a,
                       int64_t u0, int64_t u1) {
  if (a.optimizer.type == RowOptimizerType::kRowWiseAdagrad) {
    SumAndUpdate<kDim, kD, true, kBf16Grads>(r, slots, a, u0, u1);
  } else {
    SumAndUpdate<kDim, kD, false, kBf16Grads>(r, slots, a, u0, u1);
  }
}

template <int kDim, RowDtype kD>
void ForOptimizer(const SumRunsArgs& r, const int64_t* slots, const RowUpdateArgs& a, int64_t u0,
                  int64_t u1) {
  if (r.bf16_grads) {
    ForOptimizerGrads<kDim, kD, true>(r, slots, a, u0, u1);
  } else {
    ForOptimizerGrads<kDim, kD, false>(r, slots, a, u0, u1);
  }
}

template <int kDim>
void ForDtype(const SumRunsArgs& r, const int64_t* slots, const RowUpdateArgs& a, int64_t u0,
              int64_t u1) {
  switch (a.weight_dtype) {
    case RowDtype::kF32: ForOptimizer<kDim, RowDtype::kF32>(r, slots, a, u0, u1); return;
    case RowDtype::kF16: ForOptimizer<kDim, RowDtype::kF16>(r, slots, a, u0, u1); return;
    case RowDtype::kBf16: ForOptimizer<kDim, RowDtype::kBf16>(r, slots, a, u0, u1); return;
  }
}

}  // namespace

bool CanSumAndUpdateInRegisters(const RowUpdateArgs& a) {
  return HaveAvx512() && (a.dim == 16 || a.dim == 32 || a.dim == 64 || a.dim == 128) &&
         (a.optimizer.type == RowOptimizerType::kSgd ||
          a.optimizer.type == RowOptimizerType::kRowWiseAdagrad);
}

void SumAndUpdateRunsCpu(const SumRunsArgs& r, const int64_t* slots, const RowUpdateArgs& a,
                         int64_t u0, int64_t u1) {
  switch (a.dim) {
    case 16: ForDtype<16>(r, slots, a, u0, u1); return;
    case 32: ForDtype<32>(r, slots, a, u0, u1); return;
    case 64: ForDtype<64>(r, slots, a, u0, u1); return;
    case 128: ForDtype<128>(r, slots, a, u0, u1); return;
    default: return;  // excluded by CanSumAndUpdateInRegisters
  }
}

#else  // no AVX-512 path in this build

bool CanSumAndUpdateInRegisters(const RowUpdateArgs&) { return false; }
void SumAndUpdateRunsCpu(const SumRunsArgs&, const int64_t*, const RowUpdateArgs&, int64_t,
                         int64_t) {}

#endif

}  // namespace tessera::embedding_internal
