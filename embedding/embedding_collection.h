// EmbeddingCollection: the model's embedding tables on one process. Each table owns a RowStore
// and serves one or more sparse features; forward writes every feature's pooled vector into the
// sample's row of a dense [batch, sum of feature dims] output (feature order), and backward runs
// the fused update per table. Knows nothing about ranks; the sharded path (sharding/) drives the
// same per-table ops on its local shards.
// Thread-safety: none; the training loop owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/keyed_jagged.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"
#include "embedding/table_config.h"
#include "embedding/tiered_row_store.h"

namespace tessera {

// embedding/dynamic_row_store.h (included by the files that use them).
class DynamicRowStore;
struct DynamicRowStoreOptions;

struct EmbeddingCollectionOptions {
  std::vector<TableConfig> tables;
  int num_features = 0;        // every feature in [0, num_features) served by exactly one table
  RowOptimizerOptions optimizer;
  uint64_t seed = 0;
};

// The in-memory store EmbeddingCollection::Create gives table `t` (global index: its InitRow
// table id) trained by `optimizer` with `seed`: the table's rows, dim, init and storage dtype,
// the optimizer's state dim, and row-wise AdaGrad's initial state (0 for the others). Other
// places that build a table's store over the same rows (the trainer's store factory, a device
// cache's backing) start from it.
InMemoryRowStoreOptions TableRowStoreOptions(const TableConfig& table, int t,
                                             const RowOptimizerOptions& optimizer, uint64_t seed);

// The dynamic store (embedding/dynamic_row_store.h) EmbeddingCollection::Create gives a table
// with dynamic.enabled: capacity num_rows, the rest as TableRowStoreOptions.
DynamicRowStoreOptions DynamicTableStoreOptions(const TableConfig& table, int t,
                                                const RowOptimizerOptions& optimizer,
                                                uint64_t seed);

class EmbeddingCollection {
 public:
  // Creates tables with in-memory stores (table t's rows initialised from (seed, t, row), stored
  // as the table's storage.dtype; 16-bit tables round updates by storage.rounding, keyed by seed;
  // a dynamic table gets a DynamicRowStore of num_rows rows whose ids are raw keys).
  // Returns InvalidArgument naming the table for bad sizes, an empty or repeated name, or a
  // feature out of range, served twice or not at all.
  static absl::StatusOr<std::unique_ptr<EmbeddingCollection>> Create(
      const EmbeddingCollectionOptions& options, const DeviceContext& ctx);
  // Same, with caller-made stores (one per table, e.g. the RocksDB tier); takes ownership.
  // Also InvalidArgument when a store's num_rows, dim, state_dim (RowStateDim of the
  // optimizer) or weight_dtype (the table's storage.dtype) disagrees with its table.
  static absl::StatusOr<std::unique_ptr<EmbeddingCollection>> CreateWithStores(
      const EmbeddingCollectionOptions& options, std::vector<std::unique_ptr<RowStore>> stores,
      const DeviceContext& ctx);

  EmbeddingCollection(const EmbeddingCollection&) = delete;
  EmbeddingCollection& operator=(const EmbeddingCollection&) = delete;

  // Output width per sample: the sum of the dims of all features, and feature f's column offset.
  int64_t output_dim() const { return output_dim_; }
  int64_t feature_column(int f) const { return feature_column_[f]; }

  // Pooled lookup of `batch` into out[b * output_dim() + feature_column(f) ...]. A table with
  // output_dtype bf16 pools into bf16 (its values in `out` are those bf16 values, widened), and
  // BackwardUpdate rounds its columns of d_out to bf16 (nearest even) before its update reads
  // them. Resolves ids
  // to slots (kept, with a copy of the batch's offsets and weights, for BackwardUpdate; `batch`
  // need not outlive the call). A Forward not followed by BackwardUpdate (evaluation) ends the
  // stores' step at the next Forward. Returns InvalidArgument for a batch of the wrong shape or
  // an id out of range (naming the table, feature, sample and id); the stores' errors otherwise.
  absl::Status Forward(const KeyedJagged& batch, float* out);
  // Hints that `next` is the batch of the next Forward: each table's store starts reading the
  // rows it lacks (RowStore::Prefetch; a no-op for in-memory stores). Call it before Forward of
  // the current batch, so the reads overlap that step. Never fails: a malformed batch is
  // ignored here and reported by its own Forward.
  void Prefetch(const KeyedJagged& next);
  // Fused backward + update from d_out (same layout as Forward's out) for the batch of the last
  // Forward; `lr` and 1-based `step` for the optimizer. Ends the stores' step.
  // Returns FailedPrecondition without a preceding Forward.
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step);

  // The bf16 hand-off, for a collection whose every table has output_dtype bf16
  // (bf16_outputs()): ForwardBf16 pools straight into out [batch, output_dim()] bf16 (the layout
  // of Forward's out; each value the fp32 pool rounded to nearest even: the values Forward would
  // widen), and BackwardUpdateBf16 updates straight from a bf16 d_out in that layout (the bits
  // of BackwardUpdate given d_out widened). No pass over the whole output or gradient besides
  // the lookup and the update. Forward's and BackwardUpdate's errors, and InvalidArgument naming
  // the first table whose output_dtype is not bf16. A step may mix the two APIs (ForwardBf16,
  // then BackwardUpdate rounding its fp32 d_out; or the reverse).
  absl::Status ForwardBf16(const KeyedJagged& batch, uint16_t* out);
  absl::Status BackwardUpdateBf16(const uint16_t* d_out, float lr, int64_t step);
  // Whether every table has output_dtype bf16 (the *Bf16 calls are allowed).
  bool bf16_outputs() const;

  // false: the following Forwards are evaluation, so dynamic tables admit no key (an unseen
  // key pools the zero row). Default: true (training).
  void set_training(bool training);

  int num_tables() const { return static_cast<int>(options_.tables.size()); }
  const TableConfig& table(int t) const { return options_.tables[t]; }
  RowStore& store(int t) { return *stores_[t]; }
  const EmbeddingCollectionOptions& options() const { return options_; }
  // The table serving feature f.
  int table_of_feature(int f) const { return table_of_feature_[f]; }

 private:
  EmbeddingCollection() = default;
  // Ends the step begun by Forward, if any: EndStep on every store when its rows were updated
  // (BackwardUpdate), EndReadOnlyStep otherwise.
  absl::Status EndPendingStep(bool rows_updated);
  // Runs fn(t) for every table (concurrently across tables when some store is tiered) and
  // returns the first error in table order.
  absl::Status ForEachTable(const std::function<absl::Status(int)>& fn);
  // The lookup's and the update's per-table work: fn(t, thread) for every table, whole tables per
  // thread (costliest first, table_order_) for host-memory stores on several threads, except that
  // a table with more than 1 / threads of the ids runs alone first, its kernels split across the
  // threads; else one after the other on thread 0. Returns the first error in table order.
  absl::Status RunTables(const std::function<absl::Status(int, int)>& fn);
  // Forward into out (fp32) or, when out16 is non-null, out16 (bf16, every table's
  // output_dtype bf16); `who` names the public call in errors.
  absl::Status ForwardInto(const char* who, const KeyedJagged& batch, float* out,
                           uint16_t* out16);
  // BackwardUpdate from d_out (fp32) or, when d_out16 is non-null, d_out16 (bf16, as
  // ForwardInto).
  absl::Status UpdateFrom(const char* who, const float* d_out, const uint16_t* d_out16, float lr,
                          int64_t step);
  // OK when every table's output_dtype is bf16, else InvalidArgument naming the first that is
  // not (`who`: the calling function).
  absl::Status CheckBf16Outputs(const char* who) const;
  // The fp32 API's out_bf16_ (its bf16 tables' pooled columns, then their d_out columns
  // rounded) grown to batch_size_ rows when some table's output_dtype is bf16.
  void GrowBf16Scratch();

  EmbeddingCollectionOptions options_;
  DeviceContext ctx_;
  std::vector<std::unique_ptr<RowStore>> stores_;
  std::vector<int> table_of_feature_;
  std::vector<int64_t> feature_column_;
  int64_t output_dim_ = 0;

  // The last Forward's batch, for BackwardUpdate: slots_[i] is the slot of batch.values[i].
  bool pending_step_ = false;
  int64_t batch_size_ = 0;
  std::vector<int64_t> offsets_;
  std::vector<float> id_weights_;
  std::vector<int64_t> slots_;
  // Scratch reused every step (grown only).
  // Per table: the ids of a table with several features, and their slots.
  std::vector<std::vector<int64_t>> table_ids_;
  std::vector<std::vector<int64_t>> table_slots_;
  std::vector<std::vector<int64_t>> prefetch_ids_;
  std::vector<absl::Status> table_status_;
  bool any_tiered_ = false;  // some store is a TieredRowStore (ForEachTable runs tables in parallel)
  // Per thread of RunTables: the update's sources and workspace.
  struct ThreadScratch {
    std::vector<BagGradients> sources;
    EmbeddingWorkspace ws;
  };
  std::vector<ThreadScratch> thread_ws_;
  std::vector<int64_t> table_cost_;  // the last Forward's ids per table
  // The fp32 API's tables with output_dtype bf16: their columns of the outputs and of d_out,
  // [batch, output_dim] bf16 (the other columns unused). Unused by the bf16 hand-off.
  std::vector<uint16_t> out_bf16_;
  std::vector<int> table_order_;     // tables by decreasing cost (stable)
};

}  // namespace tessera
