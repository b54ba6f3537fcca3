// The store factory: builds each embedding table's RowStore as its config says
// (model.tables[t].storage), and reads the RocksDB tier's counters for logs and benchmarks.
//   tier memory   CreateInMemoryRowStore (the whole table in host memory)
//   tier rocksdb  TieredRowStore at TableStoragePath(config, t), cache/policy/threads/prefetch
//                 from the config; the working database is scratch: it is emptied on open
//                 (discard_existing), and a resumed run restores it from a checkpoint
//                 (trainer/checkpoint.h).
//   device cache  (storage.device_cache_rows / device_cache_bytes, either tier) the store above
//                 becomes the backing of a DeviceRowCache (embedding/device_row_cache.h) whose
//                 slots live in `cache_ctx`'s memory: HBM for a CUDA context, host memory for the
//                 CPU one (the CPU twin, which trains the same bits and is what the CPU tests
//                 run; it saves nothing).
// Either way table t's rows are initialised lazily or eagerly from (config.seed, t, row) with
// the table's init rule, and the row optimizer's state from its initial value, so the tier
// never changes the trained model's bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "embedding/device_row_cache.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/row_store.h"
#include "embedding/tiered_row_store.h"
#include "trainer/config.h"

namespace tessera {

class Model;

// The RowStore of every table of config.model.tables, in order. Errors: the stores' own
// (InvalidArgument naming the table for bad sizes, PermissionDenied naming a RocksDB path that
// cannot be written, ResourceExhausted when memory is short; for a device cache, naming the
// table and the bytes).
absl::StatusOr<std::vector<std::unique_ptr<RowStore>>> CreateTableStores(
    const Config& config, const DeviceContext& cache_ctx = DeviceContext::Cpu());
// The stores of tables `tables` (indices into config.model.tables), in that order, each with its
// global table id (so its rows start as in the full model).
absl::StatusOr<std::vector<std::unique_ptr<RowStore>>> CreateTableStores(
    const Config& config, const std::vector<int>& tables,
    const DeviceContext& cache_ctx = DeviceContext::Cpu());
// For tables `tables`: the DeviceRowCache on `cache_ctx` of each table with a device cache (over
// its store as above), null for the others; errors as CreateTableStores.
absl::StatusOr<std::vector<std::unique_ptr<DeviceRowCache>>> CreateDeviceCaches(
    const Config& config, const std::vector<int>& tables, const DeviceContext& cache_ctx);

// The DynamicRowStore options of dynamic table t: DynamicTableStoreOptions, and with
// storage.tier rocksdb its tier (path TableStoragePath, discarded on open, cache / policy /
// threads / prefetch from storage).
DynamicRowStoreOptions DynamicStoreOptions(const Config& config, int t);
// The dynamic tables of `model` in this process whose rows live over the RocksDB tier.
std::vector<DynamicRowStore*> DynamicTieredStores(Model& model);

// Counters of one RocksDB-tier table.
struct TierTableMetrics {
  int table = 0;
  std::string name;
  TieredRowStoreMetrics metrics;
};

// The tiered tables of a single-process model (none for in-memory tables or a sharded model),
// also those of a SplitSparseArch's host part, in table order.
std::vector<TieredRowStore*> TieredStores(Model& model, std::vector<int>* table_index = nullptr);

// Counters of every tiered table of `model` (dynamic tables over the tier too), in table order.
std::vector<TierTableMetrics> CollectTierMetrics(Model& model);

// A sharded model: one entry per RocksDB-tier table of the config, in table order, on every rank
// (a rank owning no shard of a table gets zeros), each the sum of this rank's shard stores of
// that table (counters and the cache_rows / resident_rows / sst_bytes / memtable_bytes gauges;
// a dynamic table's shards their tiers). Empty for a single-process model. Not collective; sum
// over ranks for the whole table.
std::vector<TierTableMetrics> CollectShardTierMetrics(Model& model);

// Adds `b`'s counters and gauges into `a`.
void AddTierMetrics(const TieredRowStoreMetrics& b, TieredRowStoreMetrics* a);

// Per-step rates between two snapshots of the same table (after - before over `steps` steps).
struct TierRates {
  double hit_rate = 0;               // hits / (hits + misses) in the interval
  double rows_read_per_step = 0;     // rows read from RocksDB (sync + prefetch)
  double rows_written_per_step = 0;  // rows written to RocksDB (write-back, flush)
  double misses_per_step = 0;
  double prefetch_stall_ms_per_step = 0;
  double read_ms_per_step = 0;        // synchronous miss reads in Resolve
  double sync_reads_per_step = 0;     // misses Resolve read from RocksDB itself (stalls)
  double prefetch_used_per_step = 0;  // misses served from prefetch staging
  double write_stall_ms_per_step = 0;
  int64_t disk_bytes = 0;  // SST files now (rocksdb.total-sst-files-size)
};
TierRates TierRatesBetween(const TieredRowStoreMetrics& before, const TieredRowStoreMetrics& after,
                           int64_t steps);

}  // namespace tessera
