// EmbeddingCollection: the model's embedding tables on one process. Each table owns a RowStore
// and serves one or more sparse features; forward writes every feature's pooled vector into the
// sample's row of a dense [batch, sum of feature dims] output (feature order), and backward runs
// the fused update per table. Knows nothing about ranks; the sharded path (sharding/) drives the
// same per-table ops on its local shards.
// Thread-safety: none; the training loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/keyed_jagged.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"

namespace tessera {

struct TableConfig {
  std::string name;            // exported as embedding.<name>.weight
  int64_t num_rows = 0;
  int64_t dim = 0;
  PoolingMode pooling = PoolingMode::kSum;
  RowInit init;
  std::vector<int> features;   // sparse features (KeyedJagged keys) this table serves
};

struct EmbeddingCollectionOptions {
  std::vector<TableConfig> tables;
  int num_features = 0;        // every feature in [0, num_features) served by exactly one table
  RowOptimizerOptions optimizer;
  uint64_t seed = 0;
};

class EmbeddingCollection {
 public:
  // Creates tables with in-memory stores. Returns InvalidArgument naming the table for bad sizes
  // or a feature served twice / not at all.
  static absl::StatusOr<std::unique_ptr<EmbeddingCollection>> Create(
      const EmbeddingCollectionOptions& options, const DeviceContext& ctx);
  // Same, with caller-made stores (one per table, e.g. the RocksDB tier); takes ownership.
  static absl::StatusOr<std::unique_ptr<EmbeddingCollection>> CreateWithStores(
      const EmbeddingCollectionOptions& options, std::vector<std::unique_ptr<RowStore>> stores,
      const DeviceContext& ctx);

  // Output width per sample: the sum of the dims of all features, and feature f's column offset.
  int64_t output_dim() const;
  int64_t feature_column(int f) const;

  // Pooled lookup of `batch` into out[b * output_dim() + feature_column(f) ...]. Resolves ids
  // to slots (kept for Backward).
  absl::Status Forward(const KeyedJagged& batch, float* out);
  // Fused backward + update from d_out (same layout as Forward's out) for the batch of the last
  // Forward; `lr` and 1-based `step` for the optimizer. Ends the stores' step.
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step);

  int num_tables() const;
  const TableConfig& table(int t) const;
  RowStore& store(int t);
  const EmbeddingCollectionOptions& options() const;

 private:
  EmbeddingCollection() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera
