// CreateCudaEmbeddingCollection for builds without the CUDA path (embedding_collection_cuda.h).
#include "embedding/embedding_collection_cuda.h"

#if !TESSERA_HAVE_CUDA
namespace tessera {

absl::StatusOr<std::unique_ptr<CudaEmbeddingCollection>> CreateCudaEmbeddingCollection(
    const EmbeddingCollectionOptions&, const DeviceContext&, const std::vector<uint64_t>&,
    std::vector<std::unique_ptr<DeviceRowCache>>) {
  return absl::UnimplementedError(
      "CreateCudaEmbeddingCollection: this build of Tessera has no CUDA path (configure with "
      "-DTESSERA_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace tessera
#endif
