// TableConfig: one embedding table as the config describes it (name, shape, pooling, initial
// values, the features it serves, where its rows live), and the small enums it uses. Plain data,
// header-only, depending on core/ only, so the plan types (sharding/plan.h) and the planner
// (planner/) can name tables without linking the embedding collection, its kernels or RocksDB.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/enum_names.h"
#include "embedding/dynamic_table_config.h"
#include "embedding/row_dtype.h"
#include "embedding/row_init.h"

namespace tessera {

// How a bag's rows are combined (embedding/pooled_lookup.h runs it).
enum class PoolingMode { kSum, kMean };
inline constexpr EnumName<PoolingMode> kPoolingModeNames[] = {{PoolingMode::kSum, "sum"},
                                                              {PoolingMode::kMean, "mean"}};
// "sum" / "mean" (model.tables[].pooling); Parse: InvalidArgument naming the value otherwise.
inline const char* PoolingModeName(PoolingMode p) { return NameIn(kPoolingModeNames, p); }
inline absl::StatusOr<PoolingMode> ParsePoolingMode(const std::string& name) {
  return ParseIn(kPoolingModeNames, name, "pooling");
}

// The RocksDB tier's cache replacement (embedding/tiered_row_store.h runs it).
enum class CachePolicy {
  kLru,  // evict the row least recently used (by step)
  kLfu,  // evict the row used in the fewest steps since it was cached; ties: least recent
};
inline constexpr EnumName<CachePolicy> kCachePolicyNames[] = {{CachePolicy::kLru, "lru"},
                                                              {CachePolicy::kLfu, "lfu"}};
// "lru" / "lfu" (the config's storage.policy); Parse: InvalidArgument naming the value otherwise.
inline const char* CachePolicyName(CachePolicy policy) {
  return NameIn(kCachePolicyNames, policy);
}
inline absl::StatusOr<CachePolicy> ParseCachePolicy(const std::string& name) {
  return ParseIn(kCachePolicyNames, name, "cache policy");
}

// Where a table's rows live (the config's `model.tables[i].storage`). EmbeddingCollection::Create
// ignores it (always in memory); the trainer's store factory (trainer/stores.h) reads it and
// hands the stores to CreateWithStores.
enum class StorageTier {
  kMemory,   // the whole table in host memory (CreateInMemoryRowStore)
  kRocksDb,  // rows in RocksDB, hot rows cached (TieredRowStore, embedding/tiered_row_store.h)
};
inline constexpr EnumName<StorageTier> kStorageTierNames[] = {{StorageTier::kMemory, "memory"},
                                                              {StorageTier::kRocksDb, "rocksdb"}};
// "memory" / "rocksdb" (storage.tier); Parse: InvalidArgument naming the value otherwise.
inline const char* StorageTierName(StorageTier t) { return NameIn(kStorageTierNames, t); }
inline absl::StatusOr<StorageTier> ParseStorageTier(const std::string& name) {
  return ParseIn(kStorageTierNames, name, "storage tier");
}

struct TableStorage {
  StorageTier tier = StorageTier::kMemory;  // Default: memory
  // kRocksDb only: the working database directory (absolute once the config is read).
  std::string path;
  // kRocksDb only: cache size in rows, or in bytes when cache_rows is 0 (one is required).
  int64_t cache_rows = 0;
  int64_t cache_bytes = 0;
  CachePolicy policy = CachePolicy::kLru;  // Default: LRU
  int reader_threads = 8;                  // Default: 8 (MultiGets in flight for misses)
  bool prefetch = true;                    // Default: true (read the next batch's misses ahead)
  // How the weights are stored (any tier): fp32, or 16 bits (fp16 / bf16) pooled and updated in
  // fp32 and rounded on write (embedding/row_dtype.h). Optimizer state stays fp32.
  RowDtype dtype = RowDtype::kF32;                 // Default: fp32
  RowRounding rounding = RowRounding::kStochastic;  // Default: stochastic (16-bit tables only)
  // Any tier: an HBM cache of this many rows (or, when device_cache_rows is 0, this many bytes
  // of weights + optimizer state) over the table's store (embedding/device_row_cache.h): the
  // table trains on the GPU with its hot rows in device memory and the rest in host memory or
  // the RocksDB tier. 0 and 0: no cache (device: cuda keeps a memory table whole in HBM and a
  // RocksDB table on the host). Defaults: 0, 0.
  int64_t device_cache_rows = 0;
  int64_t device_cache_bytes = 0;
  bool device_cached() const { return device_cache_rows > 0 || device_cache_bytes > 0; }
};

struct TableConfig {
  std::string name;            // exported as embedding.<name>.weight
  int64_t num_rows = 0;
  int64_t dim = 0;
  PoolingMode pooling = PoolingMode::kSum;
  RowInit init;
  std::vector<int> features;   // sparse features (KeyedJagged keys) this table serves
  TableStorage storage;        // Default: in memory
  // The dtype of the pooled outputs and of their gradients (FBGEMM's output_dtype): kF32, or
  // kBf16 for a 16-bit table (storage.dtype fp16 / bf16), whose lookup rounds each pooled value
  // to bf16 and whose update reads bf16 output gradients (half the bytes). CPU, one process.
  RowDtype output_dtype = RowDtype::kF32;  // Default: fp32
  // A table without a size (dynamic.enabled): ids are raw 64-bit keys admitted into at most
  // dynamic.capacity_rows rows, and num_rows is that capacity (embedding/dynamic_row_store.h).
  DynamicTableConfig dynamic;  // Default: static (ids are rows in [0, num_rows))
};

}  // namespace tessera
