// CPU twin of the dense optimizer steps: elementwise loops split across threads, each element
// updated by one thread with the shared rule (dense/internal/optimizer_rules.h), so the bits do
// not depend on the thread count. A chunk carries at least kParallelMinBytes of traffic.
#include "core/parallel.h"
#include "dense/internal/kernels.h"
#include "dense/internal/optimizer_rules.h"
#include "dense/internal/simd.h"

namespace tessera::dense_internal {
namespace {


TESSERA_VECTOR_CLONES
void SgdRange(const DenseStepScalars& s, int64_t i0, int64_t i1, float* __restrict w,
              const float* __restrict g) {
  for (int64_t i = i0; i < i1; ++i) SgdUpdate(s, &w[i], g[i]);
}

TESSERA_VECTOR_CLONES
void AdagradRange(const DenseStepScalars& s, int64_t i0, int64_t i1, float* __restrict w,
                  const float* __restrict g, float* __restrict sum) {
  for (int64_t i = i0; i < i1; ++i) AdagradUpdate(s, &w[i], g[i], &sum[i]);
}

TESSERA_VECTOR_CLONES
void AdamRange(const DenseStepScalars& s, int64_t i0, int64_t i1, float* __restrict w,
               const float* __restrict g, float* __restrict m, float* __restrict v) {
  for (int64_t i = i0; i < i1; ++i) AdamUpdate(s, &w[i], g[i], &m[i], &v[i]);
}

}  // namespace

absl::Status SgdStepCpu(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                        const float* g) {
  ParallelFor(n, MinChunkForBytes(12), [&](int64_t i0, int64_t i1, int) { SgdRange(s, i0, i1, w, g); });
  return absl::OkStatus();
}

absl::Status AdagradStepCpu(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                            float* w, const float* g, float* sum) {
  ParallelFor(n, MinChunkForBytes(20), [&](int64_t i0, int64_t i1, int) {
    AdagradRange(s, i0, i1, w, g, sum); });
  return absl::OkStatus();
}

absl::Status AdamStepCpu(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                         float* w, const float* g, float* m, float* v) {
  ParallelFor(n, MinChunkForBytes(28), [&](int64_t i0, int64_t i1, int) {
    AdamRange(s, i0, i1, w, g, m, v); });
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
