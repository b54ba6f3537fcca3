// Row-major GEMM through oneDNN's matmul primitive (Debian's libdnnl, OpenMP runtime: it runs on
// the same libgomp thread pool as our loops and OpenBLAS), for fp32 inputs or bf16 inputs
// (uint16_t holding the upper half of an IEEE float) with fp32 accumulation and output:
//   C[m, n] = op(A) op(B) (+ C when accumulate), op(A) [m, k], op(B) [k, n].
// bf16 uses the CPU's AVX512_BF16 (and AMX where present) kernels; oneDNN picks them at run time.
// Primitives are created once per (shape, strides, types, epilogue, threads) and cached
// (thread-safe); each thread runs them on its own stream and scratchpad, so two threads may run
// products at once (RunPair, core/parallel.h, each seeing one thread). A product runs on fewer
// threads than NumThreads() when it is too small to gain from them (GemmThreads in
// dnnl_gemm.cc); oneDNN's kernels partition statically, so the same thread count gives the same
// bits. Must not be called from inside a ParallelFor (RunPair's jobs are fine). Built only when
// oneDNN is found (TESSERA_HAVE_DNNL); otherwise DnnlGemmAvailable() is false and DnnlGemm
// returns Unimplemented.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/bf16.h"

namespace tessera::dense_internal {

enum class GemmInput { kF32, kBf16 };

// True when this build has oneDNN.
bool DnnlGemmAvailable();
// oneDNN's version at run time ("3.1.1"), "" without oneDNN.
std::string DnnlVersion();
// a, b: GemmInput elements (float or uint16_t bf16) with leading dimensions lda, ldb of their
// row-major storage (A is [k, m] when trans_a, else [m, k]; likewise B). Sizes must fit in 32
// bits. Errors: Unimplemented without oneDNN, Internal when oneDNN rejects the problem.
[[nodiscard]] absl::Status DnnlGemm(GemmInput type, bool trans_a, bool trans_b, int64_t m,
                                    int64_t n, int64_t k, const void* a, int64_t lda,
                                    const void* b, int64_t ldb, bool accumulate, float* c,
                                    int64_t ldc);

// How the matmul stores C: bf16_out = rounded to bf16 (round to nearest even, NaN kept, by
// oneDNN's bf16 destination: no separate pass over C), into uint16_t; else fp32. (No ReLU
// post-op: oneDNN's maps NaN to 0, where torch.relu keeps NaN, and would hide a non-finite loss.)
struct GemmEpilogue {
  bool bf16_out = false;
};
// DnnlGemm with an epilogue (no accumulate); c is float, or uint16_t when ep.bf16_out (Linear's
// bf16 input gradient between two bf16 layers).
[[nodiscard]] absl::Status DnnlGemmEpilogue(GemmInput type, bool trans_a, bool trans_b, int64_t m,
                                            int64_t n, int64_t k, const void* a, int64_t lda,
                                            const void* b, int64_t ldb, const GemmEpilogue& ep,
                                            void* c, int64_t ldc);

// The fewest multiply-adds a product needs to be worth a thread of its own (GemmThreads' unit,
// scaled to the pool's wait: core/parallel.h ScaledMinChunk).
int64_t GemmMinMacsPerThread();

// Rounds n floats to bf16 (round to nearest even; NaN stays NaN), with AVX512_BF16's
// vcvtne2ps2bf16 when the CPU has it. Runs on the calling thread.
void FloatToBf16(const float* x, int64_t n, uint16_t* out);
// The scalar conversions (core/bf16.h), beside the array one above.
using ::tessera::Bf16ToFloat;
using ::tessera::FloatToBf16;

}  // namespace tessera::dense_internal
