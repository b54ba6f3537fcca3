// Deterministic column sums for the dense CUDA twins (bias gradients). .cu files only.
//
// A column sum over the batch must not depend on the launch or the GPU: the rows are cut into
// fixed chunks of kColumnChunkRows; within a chunk, thread (x, y) of a (32, 8) block owns column
// x of the tile and rows y, y + 8, ... (in order, in double); the 8 partials are added in y
// order, giving one double per (chunk, column); a second kernel adds the chunks in order and
// rounds to float once. No atomics, so every run gives the same bits. (The CPU twin sums each
// column row by row in double; both round one double to float, so they agree to ~1 ulp.)
#pragma once

#include <cstdint>

#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"

namespace tessera::dense_internal {

inline constexpr int kColumnChunkRows = 256;
inline constexpr int kColumnTileCols = 32;
inline constexpr int kColumnRowLanes = 8;

// Adds the chunk partials [chunks, cols] in chunk order: out[c] = float(sum_k partial[k, c]).
// One thread per column; reads are coalesced across the columns of a chunk. (Internal linkage:
// each .cu file gets its own copy, as the build uses no relocatable device code.)
static __global__ void SumChunkPartialsKernel(const double* __restrict__ partial, int64_t chunks,
                                              int64_t cols, float* __restrict__ out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double total = 0.0;
    for (int64_t k = 0; k < chunks; ++k) total += partial[k * cols + c];
    out[c] = static_cast<float>(total);
  }
}

// Runs `chunk_kernel` (grid (ceil(cols / 32), chunks), block (32, 8)), which must write
// partial[chunk * cols + c] for every column of its tile, then the ordered chunk sum into `out`.
// The partials are stream-ordered scratch.
template <typename LaunchChunks>
absl::Status DeterministicColumnSums(const DeviceContext& ctx, int64_t rows, int64_t cols,
                                     float* out, LaunchChunks launch_chunks) {
  // No rows: the sums are zeros (and a grid with gridDim.y = 0 would be an invalid launch).
  // Unreachable from the entry points today (CheckSize wants batch >= 1), kept for safety.
  if (cols <= 0) return absl::OkStatus();
  if (rows <= 0) return CudaMemsetAsync(ctx, out, 0, sizeof(float) * cols);
  const int64_t chunks = (rows + kColumnChunkRows - 1) / kColumnChunkRows;
  if (chunks > 65535) {  // gridDim.y
    return absl::InvalidArgumentError(
        "column sum over more than 16776960 rows: split the batch for the CUDA path");
  }
  TESSERA_ASSIGN_OR_RETURN(void* scratch, CudaMallocAsync(ctx, sizeof(double) * chunks * cols));
  double* partial = static_cast<double*>(scratch);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTileCols - 1) / kColumnTileCols),
                  static_cast<unsigned>(chunks));
  const dim3 block(kColumnTileCols, kColumnRowLanes);
  launch_chunks(grid, block, partial);
  absl::Status st = CudaLaunchStatus("column-sum chunk kernel");
  if (st.ok()) {
    SumChunkPartialsKernel<<<GridFor(cols, 256), 256, 0, ComputeStream(ctx)>>>(partial, chunks,
                                                                               cols, out);
    st = CudaLaunchStatus("SumChunkPartialsKernel");
  }
  TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx, scratch));
  return st;
}

// Inside a chunk kernel: adds this thread's double `v` into the block's per-column total in a
// fixed order and lets thread y == 0 store it to partial[blockIdx.y * cols + col].
__device__ __forceinline__ void StoreChunkPartial(double v, int64_t col, int64_t cols,
                                                  double* __restrict__ partial) {
  __shared__ double lanes[kColumnRowLanes][kColumnTileCols];
  lanes[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    double total = 0.0;
    for (int y = 0; y < kColumnRowLanes; ++y) total += lanes[y][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + col] = total;
  }
}

}  // namespace tessera::dense_internal
