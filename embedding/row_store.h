// RowStore: where one embedding table's rows (weights and per-row optimizer state) live. The
// kernels never see the store: they see a flat weight array of `slots` (rows of `dim` values of
// the store's weight_dtype(): fp32, fp16 or bf16), a parallel fp32 state array (rows of
// `state_dim` floats), and ids already translated to slots.
//   - InMemoryRowStore: slot == row; the whole table in host (or device) memory.
//   - The RocksDB tier (tiered_row_store.h): slots are cache lines over RocksDB; Resolve
//     brings rows in (fetching misses, lazily initialising rows never written) and pins them.
//
// Step protocol (one training step, one table):
//   1. Prefetch(next batch ids)      optional, may start background I/O
//   2. Resolve(ids) -> slots         rows pinned and resident until EndStep
//   3. lookup/backward kernels read and update weight_data()/state() at those slots
//   4. EndStep()                     unpins; the tier writes back dirty evicted rows
//      (EndReadOnlyStep() when the step only read its rows: nothing becomes dirty)
// Row copies come in two forms: ReadRowBytes/WriteRowBytes move the stored bytes (checkpoints,
// the tier: a 16-bit table round-trips bit for bit), ReadRows/WriteRows move fp32 (export,
// tests, fp32 checkpoints loaded into a 16-bit table: rounded to nearest).
// Thread-safety: one caller at a time (the training loop); a store may run its own threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/row_dtype.h"
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

  // How weights are stored (state is always fp32), and the bytes of one slot's weights:
  // dim() * RowDtypeBytes(weight_dtype()).
  virtual RowDtype weight_dtype() const = 0;
  int64_t weight_row_bytes() const { return dim() * RowDtypeBytes(weight_dtype()); }

  // Base of the slot arrays: slot s has its weights at
  // static_cast<char*>(weight_data()) + s * weight_row_bytes() and its state at
  // state() + s * state_dim(). Valid until the next Resolve.
  virtual void* weight_data() = 0;
  virtual float* state() = 0;
  // weight_data() as floats. REQUIRES weight_dtype() == kF32 (checked: a bug otherwise).
  float* weights();

  // Hints that `ids` will be resolved next; default: nothing.
  virtual void Prefetch(absl::Span<const int64_t> ids) {}
  // Ends the step: rows updated since Resolve are dirty. Default: nothing.
  virtual absl::Status EndStep() { return absl::OkStatus(); }
  // Ends a step whose rows were only read (evaluation, a forward without backward): unpins
  // without marking them dirty, so the tier writes nothing back for them. Default: EndStep().
  virtual absl::Status EndReadOnlyStep() { return EndStep(); }

  // Copies rows [begin, begin + count) in row order into `weights_out` (count *
  // weight_row_bytes() bytes, the stored values) and, when non-null, `state_out` (count *
  // state_dim floats). For checkpoints. InvalidArgument for a range outside the table.
  virtual absl::Status ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
                                    float* state_out) = 0;
  // Overwrites rows [begin, begin + count) with stored values (count * weight_row_bytes()
  // bytes); `state` may be null (state left unchanged).
  virtual absl::Status WriteRowBytes(int64_t begin, int64_t count, const void* weights,
                                     const float* state) = 0;

  // ReadRowBytes with the weights widened to fp32 (`weights_out`: count * dim floats; exact).
  // For export and tests.
  absl::Status ReadRows(int64_t begin, int64_t count, float* weights_out, float* state_out);
  // WriteRowBytes from fp32 weights (count * dim floats), rounded to nearest even into a 16-bit
  // dtype (exact for values a ReadRows of the same dtype returned).
  absl::Status WriteRows(int64_t begin, int64_t count, const float* weights, const float* state);
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
  // How weights are stored; InitRow's fp32 values are rounded to nearest. Default: fp32.
  RowDtype dtype = RowDtype::kF32;
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
