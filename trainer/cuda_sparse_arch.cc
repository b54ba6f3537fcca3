#include "trainer/cuda_sparse_arch.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<CudaSparseArch>> CudaSparseArch::Create(
    const EmbeddingCollectionOptions& options, const DeviceContext& ctx,
    const std::vector<uint64_t>& table_ids) {
  // The CUDA collection ignores `storage` (it always allocates HBM), so a table the config puts
  // in the RocksDB tier would silently train in memory: refuse it instead.
  for (const TableConfig& t : options.tables) {
    if (t.storage.tier != StorageTier::kMemory) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", t.name,
                       "': storage.tier rocksdb is not supported with device: cuda (tables live "
                       "in GPU memory; the model keeps such tables on the host, "
                       "trainer/split_sparse_arch.h)"));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(auto collection, CreateCudaEmbeddingCollection(options, ctx, table_ids));
  return std::make_unique<CudaSparseArch>(std::move(collection));
}

}  // namespace tessera
