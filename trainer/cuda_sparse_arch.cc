#include "trainer/cuda_sparse_arch.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<CudaSparseArch>> CudaSparseArch::Create(
    const EmbeddingCollectionOptions& options, const DeviceContext& ctx,
    const std::vector<uint64_t>& table_ids,
    std::vector<std::unique_ptr<DeviceRowCache>> caches) {
  // The CUDA collection allocates HBM for every table without a cache, so a table the config
  // puts in the RocksDB tier (or caches) would silently train whole in memory: refuse it.
  for (size_t i = 0; i < options.tables.size(); ++i) {
    const TableConfig& t = options.tables[i];
    const bool has_cache = i < caches.size() && caches[i] != nullptr;
    if (t.storage.device_cached() && !has_cache) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", t.name, "': storage.device_cache_rows is set but no device cache was built "
          "for it (trainer/stores.h CreateDeviceCaches)"));
    }
    if (t.storage.tier != StorageTier::kMemory && !has_cache) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", t.name,
                       "': storage.tier rocksdb with device: cuda needs storage.device_cache_rows "
                       "(an HBM cache over the tier) here; without one the model keeps such "
                       "tables on the host, trainer/split_sparse_arch.h"));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(auto collection, CreateCudaEmbeddingCollection(options, ctx, table_ids,
                                                                          std::move(caches)));
  return std::make_unique<CudaSparseArch>(std::move(collection));
}

}  // namespace tessera
