// DynamicRowStore: a table without a size. Ids are raw 64-bit keys (any int64 value, read as
// uint64); a KeySlotIndex (embedding/key_index.h) maps the keys that have a row to slots of an
// in-memory RowStore of capacity + 1 rows, which the lookup and update kernels use exactly as a
// static table's. Slot 0 is the zero row: every id without a row resolves to it, so its lookup
// reads zeros, and EndStep puts the zeros back after the update, so it never learns.
//
// Life of a key (all of it deterministic: it depends on the keys, counts and steps only, never
// on slot numbers, thread counts or hash seeds):
//   Resolve    a key with a row resolves to it. A key without one is counted and, when
//              admission lets it in (DynamicTableConfig: min_count, probability), gets a free
//              slot initialised as InitRow(init, seed, table_id, capacity, key, dim) (the
//              counter-based init of a static row with the key in place of the row) and state
//              `state_init`, and trains in this very step. Keys are admitted in increasing key
//              order. When no slot is free the key waits (reads the zero row this step).
//   EndStep    under an eviction policy the step's lookups count (lfu: per row its lookups
//              and the last step used; lru / ttl: the last step used; without eviction no
//              per-row counts are kept, so a step end does no per-id work); then
//              eviction: ttl removes the rows unused for ttl_steps steps; lfu / lru, when keys
//              wait, remove max(waiting - free, capacity / 64) rows not used in this step, the
//              least used first (lfu: fewest lookups, then least recent, then smallest key;
//              lru: least recent, then smallest key). Then the waiting keys get the free slots
//              in increasing key order (initialised as above, their lookups of this step
//              counted); the ones left over are refused (counted). An evicted row's weights and
//              optimizer state are gone: if its key comes back it is admitted afresh.
//   EndReadOnlyStep (a forward without update: a skipped step): the step's admissions and
//              counts are undone. An evaluation also calls set_admitting(false), so its unseen
//              keys read the zero row and count nothing: evaluating never changes the table.
// Training on N shards of a table (sharding/: keys routed by hash, each shard a DynamicRowStore of
// its share of the capacity) makes the same decisions as 1 rank when no capacity is reached:
// admission and ttl are per key; capacity decisions (lfu / lru, refusals) are per shard.
//
// Over the RocksDB tier (options.tier.path set): the slot rows live in a TieredRowStore of
// capacity + 1 rows (row = slot; a row never written reads as zeros) with the hot rows cached,
// so the table's memory is its key index, per-slot bookkeeping and the row cache, and its disk
// the rows of the keys it holds. Resolve translates keys to rows, then rows to cache slots
// (the tier pins them); a key admitted in EndStep gets its initial value written when a step
// first resolves its row; an evicted key's row is dropped from the tier (deleted from RocksDB,
// never written back); Prefetch hands the next batch's rows of keys held to the tier. The
// decisions and values are those of the table in memory, bit for bit, whatever the cache.
//
// ReadRowBytes / WriteRowBytes (row ranges) do not apply to a table whose rows are keyed: they
// return FailedPrecondition; SaveState / LoadState move the whole table (checkpoints, export).
// Thread-safety: one caller at a time, as every RowStore; stats() from that caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/admission_sketch.h"
#include "embedding/dynamic_table_config.h"
#include "embedding/key_index.h"
#include "embedding/row_store.h"
#include "embedding/tiered_row_store.h"

namespace tessera {

struct DynamicRowStoreOptions {
  int64_t capacity = 0;  // most rows held (the table's num_rows), > 0
  int64_t dim = 0;
  int64_t state_dim = 0;
  float state_init = 0.0f;  // every state float of a new row (row-wise AdaGrad's initial value)
  RowInit init;             // the default scale is sqrt(1 / capacity)
  uint64_t seed = 0;
  uint64_t table_id = 0;
  std::string name;  // for messages ("table '<name>'"; "table <table_id>" when empty)
  RowDtype dtype = RowDtype::kF32;
  DynamicTableConfig dynamic;  // admission and eviction (`enabled` is not read)
  // The slot rows over the RocksDB tier when tier.path is non-empty: path, discard_existing,
  // cache_rows / cache_bytes, policy, prefetch, reader_threads and the RocksDB knobs are read;
  // the layout fields (num_rows = capacity + 1, dim, state_dim, dtype, state_init, zero init,
  // seed, table_id, name) are set from the fields above. Default: path empty (in memory).
  TieredRowStoreOptions tier;
  // A column shard (sharding/): a row's init is columns [init_col_begin, init_col_begin + dim)
  // of the full row of init_dim values. Default 0: init_dim = dim.
  int64_t init_dim = 0;
  int64_t init_col_begin = 0;
};

// Counters since the table was created (carried through checkpoints). A lookup is one id of a
// batch (training or evaluation).
struct DynamicTableStats {
  int64_t capacity = 0;
  int64_t occupancy = 0;           // rows held now
  int64_t steps = 0;               // training steps ended (EndStep)
  int64_t admissions = 0;          // rows created in training steps
  int64_t evictions = 0;           // rows removed by the eviction policy
  int64_t refused = 0;             // admitted keys that found no room at their step's end
  int64_t lookups = 0;             // ids resolved
  int64_t unadmitted_lookups = 0;  // of them: ids that read the zero row (no row)
  int64_t probes = 0;              // index buckets those lookups examined
  double mean_probe_length() const {
    return lookups > 0 ? static_cast<double>(probes) / static_cast<double>(lookups) : 0.0;
  }
};

// A whole dynamic table between steps: the rows sorted by key, and what admission and
// eviction remember. For checkpoints (everything) and export (keys and weights).
struct DynamicTableState {
  int64_t dim = 0;
  int64_t state_dim = 0;
  RowDtype dtype = RowDtype::kF32;
  std::vector<uint64_t> keys;         // ascending, distinct
  std::vector<uint8_t> weights;       // keys.size() rows of dim values of dtype, as stored
  std::vector<float> state;           // keys.size() * state_dim (empty when not asked for)
  std::vector<uint32_t> lookups;      // per key: training lookups while it had its row
  std::vector<int64_t> last_step;     // per key: the last training step (1-based) that used it
  std::vector<uint16_t> sketch;       // the admission counters (empty without min_count > 1)
  DynamicTableStats stats;
};

class DynamicRowStore final : public RowStore {
 public:
  // InvalidArgument naming the table for a non-positive capacity or dim, a negative
  // state_dim, min_count outside [1, 65535], probability outside [0, 1], both min_count > 1
  // and probability set, or ttl without ttl_steps > 0; ResourceExhausted naming the table and
  // the bytes when memory is short or (over the tier) when the file system at tier.path has
  // less free space than DiskBytes; the tier's own errors (naming the path) otherwise.
  static absl::StatusOr<std::unique_ptr<DynamicRowStore>> Create(
      const DynamicRowStoreOptions& options);
  // Bytes a table of these options holds in memory: rows, state, the index, per-row metadata
  // and the admission sketch (what Create allocates; the planner prices a table by it).
  // Over the tier: the index, bookkeeping, sketch and the row cache.
  static int64_t MemoryBytes(const DynamicRowStoreOptions& options);
  // Over the tier: the most bytes its working database holds (capacity rows of weights and
  // state, each with its 16-byte key and ~16 bytes of SST overhead); 0 in memory.
  static int64_t DiskBytes(const DynamicRowStoreOptions& options);

  int64_t num_rows() const override { return options_.capacity; }
  int64_t dim() const override { return options_.dim; }
  int64_t state_dim() const override { return options_.state_dim; }
  RowDtype weight_dtype() const override { return options_.dtype; }
  void* weight_data() override { return rows_->weight_data(); }
  float* state() override { return rows_->state(); }

  // Whether Resolve may admit keys: false for evaluation (unseen keys read the zero row and are
  // not counted towards admission). Default: true.
  void set_admitting(bool admitting) { admitting_ = admitting; }
  bool admitting() const { return admitting_; }

  // `ids` are keys (any value). Never fails for a key; InvalidArgument for mismatched sizes;
  // over the tier, its errors (ResourceExhausted when a step's rows exceed the cache, I/O).
  absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) override;
  // Over the tier: the rows of the keys of `ids` held now are read ahead (RowStore::Prefetch);
  // in memory: nothing.
  void Prefetch(absl::Span<const int64_t> ids) override;
  // The slot of each key holding a row, -1 for the others: no counting, no admission (the
  // sharded update and replica sync map rows Resolve already saw).
  void FindSlots(absl::Span<const int64_t> keys, absl::Span<int64_t> slots) const;
  absl::Status EndStep() override;
  absl::Status EndReadOnlyStep() override;

  // FailedPrecondition: rows of a dynamic table are keyed (use SaveState / LoadState).
  absl::Status ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
                            float* state_out) override;
  absl::Status WriteRowBytes(int64_t begin, int64_t count, const void* weights,
                             const float* state) override;

  // The table between steps or during an evaluation forward (FailedPrecondition inside a
  // training step that admitted keys), optimizer state when `with_state`.
  absl::Status SaveState(bool with_state, DynamicTableState* out) const;
  // Replaces the whole table by `in` (as SaveState wrote it, possibly by another store of the
  // same table: another shard count); the stats are taken from `in` except capacity and
  // occupancy. An empty `in.state` initialises every row's state to state_init; an empty
  // `in.sketch` leaves the counters at 0 (a sketch of another size is rejected).
  // InvalidArgument naming the table for a different dim / dtype / state_dim, more keys than
  // the capacity, keys not ascending and distinct, or arrays of the wrong sizes; nothing is
  // changed then.
  absl::Status LoadState(const DynamicTableState& in);

  DynamicTableStats stats() const;
  const std::string& label() const { return label_; }
  // The RocksDB tier holding the slot rows, or null in memory (for its metrics, Flush).
  TieredRowStore* tier() { return tier_; }
  const DynamicRowStoreOptions& options() const { return options_; }

 private:
  explicit DynamicRowStore(const DynamicRowStoreOptions& options);
  // Whether `count` lookups of `key` in the step being run admit it.
  bool Admits(uint64_t key, uint32_t count);
  // Gives `key` the free slot on top of the free list, initialised (over the tier: marked to
  // be initialised when first resolved); returns it.
  int64_t Place(uint64_t key);
  // Writes `key`'s initial row (InitRow) to `w` (weight_row_bytes()) and state_init to `st`.
  void InitialValue(uint64_t key, char* w, float* st);
  void Evict(int64_t slot);
  void ResetZeroRow();
  // Eviction at the end of step `step`; `waiting`: keys that want a row.
  void EvictAtStepEnd(int64_t step, int64_t waiting);

  DynamicRowStoreOptions options_;
  std::string label_;
  std::unique_ptr<RowStore> rows_;  // capacity + 1 slots; slot 0 is the zero row
  KeySlotIndex index_;
  AdmissionSketch sketch_;
  bool use_sketch_ = false;
  bool admitting_ = true;
  // Per slot (capacity + 1; slot 0 unused), 16 bytes: one cache miss per touched row.
  struct SlotMeta {
    uint64_t key = 0;
    uint32_t lookups = 0;   // training lookups while the key held this slot (saturating)
    int32_t last_step = -1;  // the last training step that used it; -1: free
  };
  std::vector<SlotMeta> meta_;
  std::vector<int64_t> free_;       // free slots; the next one is free_.back()
  std::vector<float> init_row_;     // scratch for one row

  // The step being run (between Resolve and EndStep).
  std::vector<int64_t> step_slots_;                        // every id's slot, in order
  std::vector<uint64_t> admitted_;                         // keys admitted in Resolve
  std::vector<std::pair<uint64_t, int64_t>> misses_;       // (key, position) scratch
  std::vector<std::pair<uint64_t, uint32_t>> waiting_;     // keys admitted without room
  bool zero_row_used_ = false;
  std::vector<int64_t> candidates_;                        // eviction scratch
  DynamicTableStats stats_;

  // Over the tier (null / empty in memory). rows_ owns tier_.
  TieredRowStore* tier_ = nullptr;
  // Per slot: 0, or 1 = its key's initial value is not written yet (placed in EndStep or
  // never resolved since), 2 = written by this step's Resolve (back to 1 if the step is
  // read-only: the tier does not keep a row only read).
  std::vector<uint8_t> fresh_;
  std::vector<int64_t> fresh_written_;  // slots set to 2 in this step
  std::vector<int64_t> id_rows_;        // Resolve scratch: the ids' slots (tier rows)
  std::vector<int64_t> dropped_;        // slots evicted at this step's end (to drop)
  std::vector<int64_t> prefetch_rows_;  // Prefetch scratch
  std::vector<int64_t> skip_rows_;      // Resolve scratch: fresh rows (no read needed)
  int64_t zero_cache_slot_ = -1;        // the tier's cache slot of row 0 in this step
};

}  // namespace tessera
