// CheckpointTables: the tables of a single-process model as a checkpoint sees them, on the host
// (EmbeddingCollection's RowStores: memory or the RocksDB tier, fp32 or 16-bit rows) or on one GPU
// (CudaEmbeddingCollection: fp32 tables in device memory, copied through the host in chunks). One
// checkpoint layout for both (trainer/checkpoint.h): a checkpoint written on the GPU resumes on
// the CPU and back, with the same bytes in the file.
// Thread-safety: none; the training loop owns the model.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "embedding/embedding_collection.h"
#include "embedding/embedding_collection_cuda.h"
#include "embedding/tiered_row_store.h"
#include "trainer/safetensors.h"

namespace tessera::internal {

class CheckpointTables {
 public:
  virtual ~CheckpointTables() = default;
  virtual int num_tables() const = 0;
  virtual const TableConfig& table(int t) const = 0;
  // Table t's RocksDB-tier store (checkpointed as a database copy), or null (its rows and state
  // go into the state file).
  virtual TieredRowStore* tiered(int t) = 0;
  // Table t's dynamic store (checkpointed by key: trainer/internal/dynamic_tables.h), or null.
  virtual DynamicRowStore* dynamic(int t) { return nullptr; }
  virtual RowDtype weight_dtype(int t) const = 0;
  virtual int64_t state_dim(int t) const = 0;
  int64_t weight_row_bytes(int t) const { return table(t).dim * RowDtypeBytes(weight_dtype(t)); }
  // Rows [begin, begin + n) of table t into host memory: the stored weight bytes
  // (n * weight_row_bytes(t)) and the fp32 state (n * state_dim(t) floats; skipped when null).
  virtual absl::Status ReadRowBytes(int t, int64_t begin, int64_t n, void* weights,
                                    float* state) = 0;
  // Rows [src, src + n) of the checkpoint tensor `w` (GetTableWeights of this table) into rows
  // [dst, dst + n) of table t, with `state` (n * state_dim(t) floats, or null).
  virtual absl::Status WriteRows(int t, const TensorView& w, int64_t src, int64_t dst, int64_t n,
                                 const float* state) = 0;
  // Rows [begin, begin + n) of table t from fp32 weights (n * dim floats; a 16-bit table rounds
  // them to nearest, exact for values it stored) and `state` (n * state_dim(t) floats, or null:
  // unchanged): how a checkpoint written by several ranks is gathered into these tables.
  virtual absl::Status WriteFloatRows(int t, int64_t begin, int64_t n, const float* weights,
                                      const float* state) = 0;
};

std::unique_ptr<CheckpointTables> HostCheckpointTables(EmbeddingCollection& c);
std::unique_ptr<CheckpointTables> CudaCheckpointTables(CudaEmbeddingCollection& c);
// Several parts as one model's tables: part p's table i is the model's table global[p][i]
// (SplitSparseArch). host() is null.
std::unique_ptr<CheckpointTables> JoinedCheckpointTables(
    std::vector<std::unique_ptr<CheckpointTables>> parts, std::vector<std::vector<int>> global);

}  // namespace tessera::internal
