// RowStore: where one embedding table's rows (weights and per-row optimizer state) live. The
// kernels never see the store: they see a flat weight array of `slots` (rows of `dim` floats) and
// a parallel state array (rows of `state_dim` floats), and ids already translated to slots.
//   - InMemoryRowStore: slot == row; the whole table in host (or device) memory.
//   - The RocksDB tier (tiered_row_store.h): slots are cache lines over RocksDB; Resolve
//     brings rows in (fetching misses, lazily initialising rows never written) and pins them.
//
// Step protocol (one training step, one table):
//   1. Prefetch(next batch ids)      optional, may start background I/O
//   2. Resolve(ids) -> slots         rows pinned and resident until EndStep
//   3. lookup/backward kernels read and update weights()/state() at those slots
//   4. EndStep()                     unpins; the tier writes back dirty evicted rows
//      (EndReadOnlyStep() when the step only read its rows: nothing becomes dirty)
// Thread-safety: one caller at a time (the training loop); a store may run its own threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/row_init.h"

namespace tessera {

class RowStore {
 public:
  virtual ~RowStore() = default;

  // Logical rows of the table (may be far more than fit in memory).
  virtual int64_t num_rows() const = 0;
  virtual int64_t dim() const = 0;
  virtual int64_t state_dim() const = 0;

  // Translates `ids` (each in [0, num_rows)) to slots, writing slots[i] for ids[i]. Rows stay
  // resident and their slot stable until EndStep. Duplicate ids map to the same slot.
  // Returns InvalidArgument for an id out of range; the tier may return I/O errors.
  virtual absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) = 0;

  // Base of the slot arrays: slot s has weights at weights() + s * dim() and state at
  // state() + s * state_dim(). Valid until the next Resolve.
  virtual float* weights() = 0;
  virtual float* state() = 0;

  // Hints that `ids` will be resolved next; default: nothing.
  virtual void Prefetch(absl::Span<const int64_t> ids) {}
  // Ends the step: rows updated since Resolve are dirty. Default: nothing.
  virtual absl::Status EndStep() { return absl::OkStatus(); }
  // Ends a step whose rows were only read (evaluation, a forward without backward): unpins
  // without marking them dirty, so the tier writes nothing back for them. Default: EndStep().
  virtual absl::Status EndReadOnlyStep() { return EndStep(); }

  // Copies rows [begin, begin + count) in row order into `weights_out` (count * dim floats) and,
  // when non-null, `state_out` (count * state_dim floats). For export and checkpoints.
  virtual absl::Status ReadRows(int64_t begin, int64_t count, float* weights_out,
                                float* state_out) = 0;
  // Overwrites rows [begin, begin + count); `state` may be null (state left unchanged).
  virtual absl::Status WriteRows(int64_t begin, int64_t count, const float* weights,
                                 const float* state) = 0;
};

struct InMemoryRowStoreOptions {
  int64_t num_rows = 0;
  int64_t dim = 0;
  int64_t state_dim = 0;
  // Initial value of every state float (row-wise AdaGrad's accumulator). Default: 0.
  float state_init = 0.0f;
  RowInit init;
  uint64_t seed = 0;
  uint64_t table_id = 0;
  // Table name used in error messages. Default: empty ("table <table_id>").
  std::string name;
};

// The whole table in host memory (huge pages), initialised eagerly with InitRow in parallel:
// row r holds InitRow(init, seed, table_id, num_rows, r, dim), every state float `state_init`.
// Slots are row ids (Resolve is the identity after a range check; its error names the table,
// the row and its position). state() is null when state_dim is 0.
// Returns InvalidArgument for non-positive num_rows or dim, a negative state_dim or a table
// too large to address, ResourceExhausted when memory is short.
absl::StatusOr<std::unique_ptr<RowStore>> CreateInMemoryRowStore(
    const InMemoryRowStoreOptions& options);

}  // namespace tessera
