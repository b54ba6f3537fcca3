// InputDist: the first phase of ShardedEmbeddingCollection::Forward. Routes this rank's ids to
// the shards owning their rows, deduplicated per (table, destination shard), and unpacks what
// the other ranks of the sharding group routed to this rank's shards. With pipelining it also
// carries the next batch (Prefetch) and the tier's read-ahead of the rows that batch will bring
// (HintNextRows).
//
// Wire format, per (sender, receiver) pair of the sharding group:
//   header   HeaderInts(receiver) int64: batch size, flags (kWeightedFlag, kErrorFlag,
//            kPrefetchedFlag / kStagedFlag), then per request of the receiver its unique-id
//            count and per feature its position count. With pipelining two sections travel: A
//            for the current batch, B for the batch Prefetch packed.
//   payload  Align8 bytes: per request [unique ids (int64)], then per request and feature
//            [bag lengths, positions into the unique ids (int32)], then, weighted, per request
//            and feature [per-id weights (float)].
// A bad batch sends kErrorFlag and zero counts, so the whole group returns an error from the
// same call and nobody hangs.
//
// Owns: the requester's per-request buckets (unique ids, lengths, positions, weights), the
// packed batches (current, staged for prefetch, in flight), the received headers and payloads,
// the owner's unpacked ids per local shard (OwnerIds) and the next batch's hinted rows. Reads
// the layout; writes nothing but its own buffers and, in HintNextRows, the stores' prefetch
// queues. The per-element work goes through shard_kernels.h (PackSegments, UnpackIds,
// UnpackBags, MapIndices, FillFloats); the bucketing (hash dedup) is host code.
// Collective calls: Exchange (the group's all-to-alls; the next batch's payload all-to-all is
// started nonblocking there). Thread-safety: none.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "core/keyed_jagged.h"
#include "sharding/communicator.h"
#include "sharding/internal/ctx_array.h"
#include "sharding/internal/shard_kernels.h"
#include "sharding/internal/shard_layout.h"

namespace tessera::internal {

inline constexpr int64_t kWeightedFlag = 1;
inline constexpr int64_t kErrorFlag = 2;
inline constexpr int64_t kPrefetchedFlag = 4;  // header A: my batch is the one in flight
inline constexpr int64_t kStagedFlag = 8;      // header B: I have a next batch packed

// One local batch's input dist, packed for sending (requester side): per destination shard rank
// d, its header (HeaderInts(d) ints) and its payload bytes.
struct PackedInput {
  absl::Status bad;  // CheckBatch's verdict; a bad batch sends kErrorFlag and zero counts
  int64_t batch = 0;
  bool weighted = false;
  std::vector<int64_t> header, hdispl;
  std::vector<char> payload;
  std::vector<int64_t> pbytes, pdispl;
  // A prefetched batch keeps a copy of itself, so Forward can recognise it.
  std::vector<int64_t> offsets, values;
  std::vector<float> weights;
};

// The input dist as an owner receives it: per source shard rank, its header (HeaderInts(me)
// ints at src * HeaderInts(me)) and its payload.
struct ReceivedInput {
  std::vector<int64_t> header;
  std::vector<char> payload;
  std::vector<int64_t> qbytes, qdispl;
};

// A prefetched batch whose payload all-to-all is in flight (the group's nonblocking channel).
struct InflightInput {
  PackedInput packed;
  ReceivedInput received;
  std::unique_ptr<PendingCollective> pending;
  bool hinted = false;  // its rows were handed to the local shards' stores (once per batch)
};

// The owner's view of one local shard's ids this step, all senders (shard rank order) together.
struct OwnerIds {
  std::vector<int64_t> urows, uslots;  // unique local rows of all senders, and their slots
  std::vector<int64_t> slots;          // per position (senders, then features, then bags)
  std::vector<float> weights;          // per position, when some sender's batch is weighted
  std::vector<int64_t> offsets;        // per (sender, feature): batch + 1 absolute offsets
  std::vector<int64_t> offsets_start;  // (sender * features + feature) -> start in offsets
  // slots, offsets and weights in the shards' memory (layout.ctx), what the lookup and the
  // update read: the vectors' own data on a CPU context, device copies (the mirrors) on CUDA.
  // Set by Unpack, valid until the next Unpack; ctx_weights is null when `weights` is empty.
  const int64_t* ctx_slots = nullptr;
  const int64_t* ctx_offsets = nullptr;
  const float* ctx_weights = nullptr;
  CtxArray<int64_t> slots_mirror, offsets_mirror;
  CtxArray<float> weights_mirror;
};

class InputDist {
 public:
  // REQUIRES: `layout` is complete (Create built it) and outlives this.
  explicit InputDist(const ShardLayout& layout);
  InputDist(const InputDist&) = delete;
  InputDist& operator=(const InputDist&) = delete;

  // Not collective: packs `next` for the next Exchange (a later call replaces it).
  void Prefetch(const KeyedJagged& next);
  // Not collective: CheckBatch, BucketIds, headers, payloads into `out`; with `keep_batch` a copy
  // of the batch goes along. Prefetch and Exchange pack through it; InputPacker
  // (sharding/input_packer.h) calls it alone.
  void Pack(const KeyedJagged& batch, bool keep_batch, PackedInput* out);

  struct Result {
    int64_t batch = 0;  // this rank's batch size (0 when bad)
    bool weighted = false;
    // A batch in flight that this Exchange did not use (an evaluation's) stays for a later one;
    // its rows, staged already, must stay staged (FinishAhead's `hint`).
    bool keeps_inflight = false;
  };
  // Collective over the sharding group: the header all-to-all, then the payload (waited for when
  // every rank of the group has this batch in flight, else the blocking all-to-all), and starts
  // the next batch's payload when every rank has one packed. `out` only to refuse a null output
  // for a non-empty batch. Returns this rank's batch error, or InvalidArgument naming the rank of
  // the group whose batch was bad; the collective's errors.
  absl::Status Exchange(const KeyedJagged& batch, const float* out, Result* result);
  // Owner side of the Exchange just done: unpacks every sender's ids into owners(), resolves
  // the unique rows of each local shard once (RowStore::Resolve) and maps positions to slots.
  // Collective over the replica group when this rank holds a dynamic shard and M > 1.
  absl::Status Unpack();
  // Pipelining's tier prefetch: once the payload of the batch in flight has landed on this rank
  // (Test(); with `wait`, Wait()), hands each local shard that reads ahead the local rows the
  // next Forward will resolve (RowStore::Prefetch), once per batch in flight; nothing when none
  // is in flight or no local shard reads ahead. Errors: the collective's.
  absl::Status HintNextRows(bool wait);

  // Per local shard (layout order), filled by Unpack.
  const std::vector<OwnerIds>& owners() const { return owners_; }
  // Per shard rank: its batch size this step (Unpack).
  const std::vector<int64_t>& src_batch() const { return src_batch_; }
  // Local shard q's rows of the batch in flight when HintNextRows handed them over, else null.
  const std::vector<int64_t>* hinted_rows(size_t q) const {
    return inflight_ != nullptr && inflight_->hinted ? &hint_rows_[q] : nullptr;
  }
  // Exchanges whose payload was prefetched (waited for only).
  int64_t prefetched_forwards() const { return prefetched_forwards_; }

 private:
  // Per request, this step's requester buckets: unique ids routed to the shard, and per feature
  // of the table (TableConfig::features order) bag lengths, positions into `uids`, weights.
  struct RequestIds {
    std::vector<int64_t> uids;
    absl::flat_hash_map<int64_t, int32_t> uid_index;
    std::vector<std::vector<int32_t>> lengths, pos;
    std::vector<std::vector<float>> wts;
  };

  void BucketIds(const KeyedJagged& batch);
  // A dynamic shard's Resolve (Unpack): every lookup's key (each position, as one rank's Resolve
  // sees them, so admission counts and LFU counts are one rank's), and with replicas (M > 1)
  // the lookups of every replica of the shard in group order (an all-gather over the replica
  // group), so all replicas admit and evict the same keys; then each unique row's slot.
  absl::Status ResolveDynamic(size_t li, OwnerIds* o);
  // Payload bytes of one (sender, receiver) pair from its header h.
  int64_t PayloadBytes(const int64_t* h, const std::vector<int>& reqs) const;
  // Sizes in->qbytes/qdispl/payload from the received headers.
  void SizeReceived(ReceivedInput* in) const;

  const ShardLayout& l_;
  std::vector<RequestIds> ids_;
  PackedInput staged_;  // Prefetch's batch
  bool staged_valid_ = false;
  std::unique_ptr<InflightInput> inflight_, in_use_;
  PackedInput fresh_;  // the current batch when it was not prefetched
  ReceivedInput fresh_in_;
  const ReceivedInput* current_ = nullptr;  // what Unpack reads
  int64_t prefetched_forwards_ = 0;
  std::vector<std::vector<int64_t>> hint_rows_;  // per local shard, HintNextRows' buffer
  std::vector<OwnerIds> owners_;
  std::vector<int64_t> src_batch_;
  std::vector<ByteSegment> segs_;  // Pack's scratch
  std::vector<int64_t> dyn_keys_, dyn_all_, dyn_slots_;  // ResolveDynamic's scratch
};

}  // namespace tessera::internal
