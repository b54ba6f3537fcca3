// The memory ops of a row cache (embedding/device_row_cache.h): gathering rows of the cache's
// slot array into a packed block and scattering a packed block into slots. The entry points
// here check their arguments and dispatch on ctx.device to the CPU twin or the CUDA twin
// (embedding/internal/cache_rows_kernels.h); every pointer is in ctx's memory (host memory for
// a CPU context, device memory for a CUDA one). Rows are opaque bytes (fp32 weights, 16-bit
// weights or fp32 optimizer state), so a row copied out and back is the same bits.
// CUDA: work is queued on ctx.compute_stream and the calls return without waiting.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/device.h"

namespace tessera {

struct CacheRowsArgs {
  void* base = nullptr;           // the slot array: [capacity, row_bytes]
  int64_t row_bytes = 0;          // > 0
  int64_t capacity = 0;           // slots in `base`
  const int64_t* slots = nullptr;  // [n], each in [0, capacity) (unchecked on the device)
  int64_t n = 0;
  void* packed = nullptr;         // [n, row_bytes]
};

// packed[i] = base[slots[i]] for i < n.
// InvalidArgument for row_bytes <= 0, n < 0 or null pointers with n > 0.
absl::Status GatherCacheRows(const DeviceContext& ctx, const CacheRowsArgs& args);
// base[slots[i]] = packed[i] for i < n; slots must be distinct (duplicates race on the device).
// Errors as GatherCacheRows.
absl::Status ScatterCacheRows(const DeviceContext& ctx, const CacheRowsArgs& args);

}  // namespace tessera
