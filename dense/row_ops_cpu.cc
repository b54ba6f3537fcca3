// CPU twin of the row plumbing DenseArch needs around the interaction: concatenating the bottom
// output with the embeddings (DCN input; the embeddings fp32 or bf16), splitting the gradient
// back, and elementwise add/copy.
// Memory-bound passes, split by rows across threads when worth it (kParallelMinBytes); no
// reductions.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "dense/internal/bf16_rows.h"
#include "dense/internal/kernels.h"
#include "dense/internal/simd.h"

namespace tessera::dense_internal {

absl::Status ConcatColumnsCpu(const DeviceContext& ctx, const float* a, int64_t a_cols,
                              const float* c, int64_t c_cols, int64_t batch, float* out) {
  const int64_t w = a_cols + c_cols;
  ParallelFor(batch, MinChunkForBytes(8 * w), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      std::memcpy(out + r * w, a + r * a_cols, sizeof(float) * a_cols);
      std::memcpy(out + r * w + a_cols, c + r * c_cols, sizeof(float) * c_cols);
    }
  });
  return absl::OkStatus();
}

absl::Status SplitColumnsCpu(const DeviceContext& ctx, const float* in, int64_t a_cols,
                             int64_t c_cols, int64_t batch, float* a, float* c) {
  const int64_t w = a_cols + c_cols;
  ParallelFor(batch, MinChunkForBytes(8 * w), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      std::memcpy(a + r * a_cols, in + r * w, sizeof(float) * a_cols);
      std::memcpy(c + r * c_cols, in + r * w + a_cols, sizeof(float) * c_cols);
    }
  });
  return absl::OkStatus();
}

namespace {

// Rows [r0, r1) of ConcatColumnsBf16Cpu / SplitColumnsBf16Cpu (w = a_cols + c_cols): cloned for
// the machine's widest vectors, which the bf16 conversions need (the memcpys do not).
TESSERA_VECTOR_CLONES
void ConcatRowsBf16(const float* a, int64_t a_cols, const uint16_t* c, int64_t c_cols,
                    int64_t r0, int64_t r1, float* out) {
  const int64_t w = a_cols + c_cols;
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(out + r * w, a + r * a_cols, sizeof(float) * a_cols);
    WidenBf16Row(c + r * c_cols, c_cols, out + r * w + a_cols);
  }
}

TESSERA_VECTOR_CLONES
void SplitRowsBf16(const float* in, int64_t a_cols, int64_t c_cols, int64_t r0, int64_t r1,
                   float* a, uint16_t* c) {
  const int64_t w = a_cols + c_cols;
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(a + r * a_cols, in + r * w, sizeof(float) * a_cols);
    RoundBf16Row(in + r * w + a_cols, c_cols, c + r * c_cols);
  }
}

}  // namespace

absl::Status ConcatColumnsBf16Cpu(const DeviceContext& ctx, const float* a, int64_t a_cols,
                                  const uint16_t* c, int64_t c_cols, int64_t batch, float* out) {
  ParallelFor(batch, MinChunkForBytes(4 * a_cols + 6 * c_cols), [&](int64_t r0, int64_t r1, int) {
    ConcatRowsBf16(a, a_cols, c, c_cols, r0, r1, out);
  });
  return absl::OkStatus();
}

absl::Status SplitColumnsBf16Cpu(const DeviceContext& ctx, const float* in, int64_t a_cols,
                                 int64_t c_cols, int64_t batch, float* a, uint16_t* c) {
  ParallelFor(batch, MinChunkForBytes(4 * a_cols + 6 * c_cols), [&](int64_t r0, int64_t r1, int) {
    SplitRowsBf16(in, a_cols, c_cols, r0, r1, a, c);
  });
  return absl::OkStatus();
}

absl::Status AddInPlaceCpu(const DeviceContext& ctx, const float* x, int64_t n, float* y) {
  ParallelFor(n, MinChunkForBytes(12), [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
  });
  return absl::OkStatus();
}

absl::Status CopyFloatsCpu(const DeviceContext& ctx, const float* src, int64_t n, float* dst) {
  ParallelFor(n, MinChunkForBytes(8), [&](int64_t i0, int64_t i1, int) {
    std::memcpy(dst + i0, src + i0, sizeof(float) * (i1 - i0));
  });
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
