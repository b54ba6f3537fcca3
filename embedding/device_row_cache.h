// DeviceRowCache: a RowStore whose slots are a cache of hot rows (weights and optimizer state)
// in device memory over a backing RowStore that keeps every other row -- host memory
// (CreateInMemoryRowStore) or the RocksDB tier (TieredRowStore, itself caching in host memory):
// what FBGEMM calls UVM caching and its SSD TBE. For tables larger than HBM on `device: cuda`
// (CudaEmbeddingCollection runs its kernels on the cache's slots); with a CPU DeviceContext the
// slots are host memory and the same code runs with the CPU twins, which is how the CPU tests
// check it.
//
// Step protocol (row_store.h):
//   Prefetch(next ids)  the next batch's rows not cached now are handed to the backing's
//                       Prefetch, so a RocksDB backing reads them on its threads during this
//                       step (the tier's prefetch; nothing is evicted, no row of the current
//                       step is touched).
//   Resolve(ids)        RowCacheIndex assigns slots (hits pinned first, then misses into free
//                       slots or LRU/LFU victims); dirty victims are gathered from the device
//                       and written to the backing (Resolve + copy + EndStep there), then the
//                       misses are read from the backing (Resolve + copy + EndReadOnlyStep) and
//                       scattered into their slots. Kernels then run on the slots.
//   EndStep()           the step's rows become dirty (updated on the device) and unpinned;
//                       EndReadOnlyStep() unpins without dirtying.
// Bits: rows move as stored bytes and the kernels see the same rows at other slot numbers, so a
// table trained through the cache has exactly the rows of the table trained in the backing
// alone (and in memory: the backing tiers are bit-identical to memory).
//
// Reads of rows (ReadRowBytes: export, checkpoints) first write every dirty slot back (Flush),
// then read the backing. WriteRowBytes writes the backing and the cached copies of the rows.
// Memory: cache_rows * (weight_row_bytes + 4 * state_dim) bytes of device memory, plus staging
// for one step's misses (device scratch and host staging, pinned for CUDA).
// Errors: a failure of the backing or of a device copy inside Resolve/Flush leaves the cache
// unusable: every later call returns that error (naming the table).
// Thread-safety: one caller at a time, as for every RowStore.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "embedding/row_store.h"
#include "embedding/table_config.h"

namespace tessera {

struct DeviceRowCacheOptions {
  // Where the slots live: a CUDA context (HBM), or CPU (host memory: the CPU twin).
  DeviceContext ctx;
  // Cache size in rows; when 0, derived from cache_bytes (whole rows of weights + state). One is
  // required; clamped to the table's rows. Must hold one step's distinct rows.
  int64_t cache_rows = 0;
  int64_t cache_bytes = 0;
  CachePolicy policy = CachePolicy::kLru;
  // Table name for errors. Default: "" ("the table").
  std::string name;
  // When > 0, the device memory the cache may use (slots; the staging comes on top):
  // ResourceExhausted naming the table and both byte counts beyond it. Default: 0 (no limit but
  // the allocation itself, whose failure is the same ResourceExhausted).
  int64_t memory_limit_bytes = 0;
};

struct DeviceRowCacheMetrics {
  int64_t steps = 0;
  int64_t hits = 0;          // distinct rows per step found in the cache
  int64_t misses = 0;        // distinct rows per step fetched from the backing
  int64_t evictions = 0;
  int64_t writebacks = 0;    // dirty rows written to the backing (evictions and flushes)
  int64_t prefetch_hints = 0;  // rows handed to the backing's Prefetch
  int64_t cache_rows = 0;    // gauge
  int64_t resident_rows = 0;  // gauge
  int64_t dirty_rows = 0;    // gauge
};

class DeviceRowCache : public RowStore {
 public:
  // The cache over `backing` (owned). InvalidArgument naming the table for a cache of no rows
  // or a null backing; ResourceExhausted naming the table and the bytes when the device cannot
  // hold the cache (or memory_limit_bytes is exceeded); Unimplemented for a CUDA context in a
  // build without the CUDA path.
  static absl::StatusOr<std::unique_ptr<DeviceRowCache>> Create(
      const DeviceRowCacheOptions& options, std::unique_ptr<RowStore> backing);

  // Writes every dirty cached row to the backing (rows stay cached, now clean).
  virtual absl::Status Flush() = 0;
  virtual RowStore& backing() = 0;
  virtual int64_t cache_rows() const = 0;
  // Device bytes of the slot arrays.
  virtual int64_t cache_memory_bytes() const = 0;
  virtual DeviceRowCacheMetrics metrics() const = 0;
  virtual const DeviceRowCacheOptions& options() const = 0;

 protected:
  DeviceRowCache() = default;
};

// Bytes of one cached row: its stored weights and its fp32 state.
inline int64_t DeviceCacheRowBytes(int64_t weight_row_bytes, int64_t state_dim) {
  return weight_row_bytes + state_dim * static_cast<int64_t>(sizeof(float));
}

}  // namespace tessera
