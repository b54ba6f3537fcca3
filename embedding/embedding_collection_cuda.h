// CudaEmbeddingCollection: EmbeddingCollection's twin with every table (weights and per-row
// optimizer state) in device memory, for training on one GPU. It takes the same options and the
// same host KeyedJagged batch, validates it on the host exactly as EmbeddingCollection does
// (errors name the table, feature, sample and id), stages offsets, ids and per-id weights through
// pinned memory onto the device, and runs the CUDA twins of pooled_lookup.h: the pooled forward
// per feature and the fused backward + update per table (ids are slots: slot == row).
// Rows start as InitRow(init, seed, table, row) computed on the device (the CPU store's values,
// up to the last bit of the normal init's transcendental functions).
//
// A table may instead be an HBM cache over host memory or the RocksDB tier
// (embedding/device_row_cache.h, passed to Create): its ids are resolved to cache slots on the
// host before the batch is uploaded (misses fetched, dirty victims written back), the same
// kernels run over the slots, and the step's EndStep marks them dirty. Prefetch hands the next
// batch's misses to the backing's prefetch. Such a table trains bit-identically to the same
// table held whole in HBM: the kernels see the same rows at other slot numbers, and the backward
// sums a row's terms in pieces cut from the start of the row's own run
// (embedding/internal/run_pieces.h), so neither the slot numbers nor the tables sharing a fused
// pass change its bits.
//
// Memory: out and d_out are device memory [batch, output_dim()]. Work is queued on
// ctx.compute_stream; Forward returns once its copies and kernels are queued (it waits only for
// the previous batch's upload, whose pinned staging it reuses). ReadRows/WriteRows take host
// memory and wait. The DeviceContext's CudaContext must outlive the collection.
// Thread-safety: none; the training loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/keyed_jagged.h"
#include "embedding/device_row_cache.h"
#include "embedding/embedding_collection.h"

namespace tessera {

class CudaEmbeddingCollection {
 public:
  virtual ~CudaEmbeddingCollection() = default;

  // Output width per sample and feature f's column offset (as EmbeddingCollection).
  virtual int64_t output_dim() const = 0;
  virtual int64_t feature_column(int f) const = 0;
  virtual int num_tables() const = 0;
  virtual const TableConfig& table(int t) const = 0;
  virtual const EmbeddingCollectionOptions& options() const = 0;

  // Pooled lookup of the host `batch` into device `out`. Errors as EmbeddingCollection::Forward;
  // Internal for a CUDA failure.
  virtual absl::Status Forward(const KeyedJagged& batch, float* out) = 0;
  // Fused backward + update from device d_out for the batch of the last Forward (the staged copy
  // is kept on the device). FailedPrecondition without a preceding Forward.
  virtual absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) = 0;
  // Hints that `next` is the batch of the next Forward: each cached table's backing starts
  // reading the rows the cache lacks. Never fails (a malformed batch is ignored here).
  virtual void Prefetch(const KeyedJagged& next) = 0;

  // Host copies of rows [begin, begin + count) of table t (weights: count * dim floats; state:
  // count * state_dim floats, skipped when null). InvalidArgument for a bad range or table.
  virtual absl::Status ReadRows(int t, int64_t begin, int64_t count, float* weights_out,
                                float* state_out) = 0;
  virtual absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* weights,
                                 const float* state) = 0;
  // Device base pointers of table t's weights [num_rows, dim] and state [num_rows, state_dim]
  // (null when state_dim is 0); for a cached table, its cache slots [cache_rows, ...].
  virtual float* device_weights(int t) = 0;
  virtual float* device_state(int t) = 0;
  // Table t's HBM cache, or null when the whole table is in device memory.
  virtual DeviceRowCache* cache(int t) = 0;
};

// Validates `options` as EmbeddingCollection::Create does (InvalidArgument naming the table),
// allocates and initialises the tables on ctx's device. ResourceExhausted when device memory is
// short; InvalidArgument for a non-CUDA context; Unimplemented without the CUDA path.
// `table_ids`: the id each table's initial rows are drawn with (InitRow's table_id), one per table;
// empty: the table's index (a collection holding a subset of a model's tables keeps the model's
// ids, so its rows start as they would in one collection). InvalidArgument for a wrong count.
// `caches`: empty, or one entry per table: null (the table in device memory) or the table's
// DeviceRowCache on ctx's device (owned; nothing is allocated for the table). InvalidArgument
// naming the table when a cache does not match it (rows, dim, state_dim, fp32, CUDA context).
absl::StatusOr<std::unique_ptr<CudaEmbeddingCollection>> CreateCudaEmbeddingCollection(
    const EmbeddingCollectionOptions& options, const DeviceContext& ctx,
    const std::vector<uint64_t>& table_ids = {},
    std::vector<std::unique_ptr<DeviceRowCache>> caches = {});

}  // namespace tessera
