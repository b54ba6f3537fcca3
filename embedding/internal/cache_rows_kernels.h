// The twins behind embedding/cache_rows.h: GatherCacheRows / ScatterCacheRows on the CPU
// (embedding/internal/cache_rows_cpu.cc, the reference) and on CUDA
// (embedding/internal/cache_rows_cuda.cu, built only with the CUDA path), with the same
// signature; embedding/cache_rows.cc dispatches and checks arguments. Pointers are in ctx's
// memory; the CUDA twins queue on ctx.compute_stream and return without waiting.
#pragma once

#include "absl/status/status.h"
#include "core/device.h"
#include "embedding/cache_rows.h"

namespace tessera::embedding_internal {

absl::Status GatherCacheRowsCpu(const DeviceContext& ctx, const CacheRowsArgs& args);
absl::Status ScatterCacheRowsCpu(const DeviceContext& ctx, const CacheRowsArgs& args);
absl::Status GatherCacheRowsCuda(const DeviceContext& ctx, const CacheRowsArgs& args);
absl::Status ScatterCacheRowsCuda(const DeviceContext& ctx, const CacheRowsArgs& args);

}  // namespace tessera::embedding_internal
