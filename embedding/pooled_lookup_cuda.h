// CUDA twin of pooled_lookup.h, and the id preprocessing of the sharded input dist (dedup,
// bucketisation by owner rank). Every pointer here is device memory of ctx's device unless
// marked "host"; work is queued on ctx.compute_stream and the functions return without waiting,
// except where a result must reach the host (noted per function). Only in builds with the CUDA
// path (TESSERA_HAVE_CUDA); host code that must build everywhere uses the dispatching entry
// points of pooled_lookup.h (which, for a CUDA DeviceContext, take device pointers too).
//
// Determinism: the forward sums each bag in index order in one thread group; the backward sorts
// ids with a stable radix sort and sums each unique row's gradients in (source, bag, position)
// order in one thread group, then applies ApplyRowUpdate (embedding/row_optimizer.h) to each
// row in one warp, with the terms and order of one thread: no float atomics, the same bits on
// every run, and the same order of terms as the CPU twin (results differ from it only by fused
// multiply-adds, and for runs longer than 256 entries by their sum in pieces of 256 cut from the
// run's own start, embedding/internal/run_pieces.h: a row's bits depend only on its own terms,
// not on its slot number or on the other tables of a fused pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "embedding/pooled_lookup.h"

namespace tessera {

// Pooled forward with device pointers (contract of PooledLookupForward). Thread mapping: a group
// of T lanes (T = the power of two covering dim / 4, at most 32; float4 loads when dim % 4 == 0
// and rows and outputs are 16-byte aligned, scalar loads otherwise) owns one bag. Offsets are not
// checked for monotonicity (they are device data); with args.num_slots >= 0 the indices are
// range-checked on the device first, which waits for the stream.
absl::Status PooledLookupForwardCuda(const DeviceContext& ctx, const PooledLookupArgs& args);

// The pooled forward of several features in one launch (CudaEmbeddingCollection::Forward:
// one launch per distinct table dim instead of one per feature). Feature k of the launch owns
// bags [feature[k] * num_bags, feature[k] * num_bags + num_bags) of the shared offsets (the
// KeyedJagged layout, feature-major), reads table weights[k] (all of width dim), pools with
// pooling[k] and writes bag b to out[b * out_stride + out_column[k] .. + dim). Per bag the
// order of terms and the lane mapping are PooledLookupForwardCuda's. Indices are not checked
// (the collection validated them on the host).
constexpr int kMaxFusedFeatures = 48;
struct FusedLookupArgs {
  const int64_t* offsets = nullptr;       // [num KeyedJagged features * num_bags + 1]
  const int64_t* indices = nullptr;
  const float* per_id_weights = nullptr;  // optional, parallel to indices
  int64_t num_bags = 0;                   // per feature (the batch size)
  int64_t dim = 0;
  float* out = nullptr;                   // [num_bags, out_stride]
  int64_t out_stride = 0;
  int num_features = 0;                   // of this launch, at most kMaxFusedFeatures
  int feature[kMaxFusedFeatures] = {};    // KeyedJagged feature index
  const float* weights[kMaxFusedFeatures] = {};
  int64_t out_column[kMaxFusedFeatures] = {};
  PoolingMode pooling[kMaxFusedFeatures] = {};
};
absl::Status PooledLookupForwardFusedCuda(const DeviceContext& ctx, const FusedLookupArgs& args);

// Device scratch of the backward, dedup and bucketisation: grow-only buffers allocated
// stream-ordered on ctx's compute stream and freed there on destruction. After
// AggregateRowGradientsCuda or FusedBackwardUpdateCuda, unique_slots()[0, *num_unique()) hold the
// distinct slots in increasing order and row_grads() their summed gradients ([unique, dim]).
// One workspace per stream of work; not thread-safe.
class CudaEmbeddingWorkspace {
 public:
  explicit CudaEmbeddingWorkspace(const DeviceContext& ctx) : ctx_(ctx) {}
  ~CudaEmbeddingWorkspace();
  CudaEmbeddingWorkspace(const CudaEmbeddingWorkspace&) = delete;
  CudaEmbeddingWorkspace& operator=(const CudaEmbeddingWorkspace&) = delete;

  const int64_t* unique_slots() const { return unique_slots_; }
  const float* row_grads() const { return row_grads_; }
  // Device scalar: the number of distinct slots of the last aggregation.
  const int64_t* num_unique() const { return counters_; }
  // Host copy of *num_unique() (waits for the stream).
  absl::StatusOr<int64_t> NumUniqueOnHost();
  // Ids of the last aggregation (host): an upper bound of *num_unique() known without waiting.
  int64_t last_num_ids() const { return last_num_ids_; }

  // Internal to pooled_lookup_cuda.cu: grows every buffer for n ids of width dim.
  absl::Status Reserve(int64_t n, int64_t dim, size_t sort_temp_bytes, size_t scan_temp_bytes);

 private:
  friend struct CudaWorkspaceAccess;
  absl::Status Grow(void** ptr, size_t* capacity, size_t bytes);

  DeviceContext ctx_;
  int64_t last_num_ids_ = 0;
  size_t cap_ids_ = 0, cap_floats_ = 0, cap_sort_ = 0, cap_scan_ = 0;
  // CUB temp-storage bytes for temp_sized_for_ ids (cached: host-side queries).
  int64_t temp_sized_for_ = 0;
  size_t sort_bytes_ = 0, scan_bytes_ = 0;
  unsigned long long* keys_ = nullptr;      // [n] sort ping
  unsigned long long* keys_alt_ = nullptr;  // [n] sort pong
  int* heads_ = nullptr;                    // [n] run-start flags, then each run's extra pieces
  int* piece_scan_ = nullptr;               // [n] inclusive scan of those (run_pieces.h)
  int* run_ids_ = nullptr;                  // [n]
  const float** grad_rows_ = nullptr;       // [n] per position: its bag's gradient row
  float* scales_ = nullptr;                 // [n] per position: id weight / bag length
  int64_t* unique_slots_ = nullptr;         // [n]
  int64_t* run_starts_ = nullptr;           // [n + 1]
  float* row_grads_ = nullptr;              // [n * dim]
  void* sort_temp_ = nullptr;
  void* scan_temp_ = nullptr;
  // [0] num_unique, [1] max slot, [2] first bad position (INT64_MAX: none)
  int64_t* counters_ = nullptr;
};

// Sums the gradient of every slot touched by `sources` (host array of BagGradients holding device
// pointers) into ws (unique_slots, row_grads, num_unique). `num_ids` (host) gives each source's
// id count (offsets[num_bags] - offsets[0]); when empty it is read from the device (a wait).
// `slot_bits` > 0 promises every slot lies in [0, 2^slot_bits) (no check, no wait; the sort
// covers only those bits); 0 makes the function check slots on the device and wait for the
// result, returning InvalidArgument naming the source, index and slot for a negative one.
absl::Status AggregateRowGradientsCuda(const DeviceContext& ctx,
                                       absl::Span<const BagGradients> sources,
                                       absl::Span<const int64_t> num_ids, int64_t dim,
                                       PoolingMode pooling, int slot_bits,
                                       CudaEmbeddingWorkspace* ws);

// ApplyRowUpdate on rows slots[u] for u < *num_unique (device scalar; at most max_rows, host),
// with gradient row_grads[u]. One warp per row, lanes over the columns (coalesced; the split
// is embedding/internal/row_update_lanes.h). Slots must be distinct.
absl::Status ApplyRowUpdatesCuda(const DeviceContext& ctx, const int64_t* slots,
                                 const int64_t* num_unique, int64_t max_rows,
                                 const float* row_grads, const RowUpdateArgs& args);

// AggregateRowGradientsCuda then ApplyRowUpdatesCuda: the fused backward of one table.
absl::Status FusedBackwardUpdateCuda(const DeviceContext& ctx,
                                     absl::Span<const BagGradients> sources,
                                     absl::Span<const int64_t> num_ids, PoolingMode pooling,
                                     int slot_bits, const RowUpdateArgs& args,
                                     CudaEmbeddingWorkspace* ws);

// FusedBackwardUpdateCuda for several tables of one dim in one pass (CudaEmbeddingCollection:
// one sort and one update launch for the group instead of ~13 launches per table). Source s
// belongs to table info[s].table of the group and pools with info[s].pooling; table t's slots
// become t << slot_bits | slot in the sort key, so a row of table t is summed from table t's
// sources alone, in the order FusedBackwardUpdateCuda would use. Every slot of every table must
// lie in [0, 2^slot_bits) (not checked: the collection range-checked the ids) and
// MultiTableKeysFit must hold. num_ids (host) gives each source's id count. group.args gives
// dim, optimizer, lr and step; its weights/state are ignored for group.weights/state[t].
struct TableSourceInfo {
  int table = 0;
  PoolingMode pooling = PoolingMode::kSum;
};
struct TableGroupUpdate {
  RowUpdateArgs args;
  int num_tables = 0;  // at most kMaxFusedFeatures
  int slot_bits = 0;   // every table's rows < 2^slot_bits
  float* weights[kMaxFusedFeatures] = {};
  float* state[kMaxFusedFeatures] = {};
};
// Whether n ids of num_tables tables of slot_bits bits fit the 64-bit sort key.
inline bool MultiTableKeysFit(int64_t n, int num_tables, int slot_bits) {
  int pos_bits = 0, table_bits = 0;
  for (uint64_t x = n > 1 ? static_cast<uint64_t>(n - 1) : 0; x != 0; x >>= 1) ++pos_bits;
  for (uint64_t x = num_tables > 1 ? static_cast<uint64_t>(num_tables - 1) : 0; x != 0; x >>= 1)
    ++table_bits;
  return n < (int64_t{1} << 31) && slot_bits >= 1 && slot_bits + table_bits <= 62 &&
         pos_bits + slot_bits + table_bits <= 64;
}
absl::Status FusedBackwardUpdateTablesCuda(const DeviceContext& ctx,
                                           absl::Span<const BagGradients> sources,
                                           absl::Span<const int64_t> num_ids,
                                           absl::Span<const TableSourceInfo> info,
                                           const TableGroupUpdate& group,
                                           CudaEmbeddingWorkspace* ws);

// Deduplication: unique[0, *num_unique) = the distinct values of ids[0, n) in increasing order
// and inverse[i] = the index of ids[i] in unique, so unique[inverse[i]] == ids[i]. `id_bits` as
// slot_bits above (0: ids are checked to be >= 0, with a wait). unique and inverse hold n
// entries; num_unique is a device scalar.
absl::Status DedupIdsCuda(const DeviceContext& ctx, const int64_t* ids, int64_t n, int id_bits,
                          CudaEmbeddingWorkspace* ws, int64_t* unique, int64_t* inverse,
                          int64_t* num_unique);

// Bucketisation by owner rank for the input dist, row-wise sharding: id r belongs to bucket
// r / rows_per_bucket (block layout; the last bucket may be short) and becomes local id
// r - bucket * rows_per_bucket; with `modulo`, bucket r % num_buckets and local id
// r / num_buckets. Output is stable (ids keep their order within a bucket):
// local_ids[k] and positions[k] (the index into ids) for k in [bucket_offsets[b],
// bucket_offsets[b + 1]); bucket_offsets has num_buckets + 1 entries. Ids must lie in
// [0, num_buckets * rows_per_bucket) (block) or be >= 0 (modulo); not checked.
struct BucketizeArgs {
  const int64_t* ids = nullptr;
  int64_t n = 0;
  int num_buckets = 1;
  int64_t rows_per_bucket = 0;  // block layout; ignored with modulo
  bool modulo = false;
  int64_t* local_ids = nullptr;       // [n]
  int64_t* positions = nullptr;       // [n]
  int64_t* bucket_offsets = nullptr;  // [num_buckets + 1]
};
absl::Status BucketizeIdsCuda(const DeviceContext& ctx, const BucketizeArgs& args,
                              CudaEmbeddingWorkspace* ws);

}  // namespace tessera
