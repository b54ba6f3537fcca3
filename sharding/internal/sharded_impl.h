// The state of ShardedEmbeddingCollection, shared by sharded_embedding.cc (routing, forward,
// backward) and internal/sharded_sync.cc (replica sync, data-parallel tables, column-split
// row-wise AdaGrad). Private to sharding/.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"
#include "sharding/sharded_embedding.h"

namespace tessera::internal {

// One shard of one table as every rank sees it (requester side), in (table, shard) order.
struct Request {
  int table = 0;
  int shard = 0;          // index in the plan's (sorted) shard list of the table
  Shard rect;
  int owner = 0;          // shard rank
  bool col_split = false; // the shard holds part of each row's columns
  int local = -1;         // index in Impl::local when this rank owns it
  // This step (requester): unique ids routed to the shard, and per feature of the table (in
  // TableConfig::features order) bag lengths, positions into `uids` and per-id weights.
  std::vector<int64_t> uids;
  absl::flat_hash_map<int64_t, int32_t> uid_index;
  std::vector<std::vector<int32_t>> lengths, pos;
  std::vector<std::vector<float>> wts;
};

// A shard this rank owns.
struct LocalShard {
  int request = 0;
  int table = 0;
  Shard rect;
  int64_t width = 0;
  bool col_split = false;
  std::unique_ptr<RowStore> store;
  // This step (owner): per sender (shard rank) its batch size and where its data starts.
  std::vector<int64_t> src_batch;
  std::vector<int64_t> urows, uslots;     // unique local rows of all senders, and their slots
  std::vector<int64_t> slots;             // per position (senders, then features, then bags)
  std::vector<float> weights;             // per position, when the batch is weighted
  std::vector<int64_t> offsets;           // per (sender, feature): batch + 1 absolute offsets
  std::vector<int64_t> offsets_start;     // (sender * features + feature) -> start in offsets
  // After aggregation (and replica sync): distinct local rows, increasing, and their gradients.
  std::vector<int64_t> rows;
  std::vector<float> grads;
  // Average mode: rows updated since the last sync (increasing), and the delayed state average.
  std::vector<int64_t> touched;
  std::vector<int64_t> pending_rows;
  std::vector<float> pending_avg, pending_snapshot;
};

struct DpTable {
  int table = 0;
  std::unique_ptr<RowStore> store;
};

// One local batch's input dist, packed for sending (requester side): per destination shard rank
// d, its header (HeaderInts(d) ints: batch size, flags, counts) and its payload bytes.
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
  // Its rows were handed to the local shards' stores (Impl::HintNextRows): once per batch.
  bool hinted = false;
};

// Average mode's next sync, read ahead (Impl::StartSyncAhead / FinishSyncAhead): the Forward of
// a step whose update syncs exchanges each replica's rows touched through that step (the rows
// the sync will average) over the replica group, two nonblocking all-to-alls (counts, then ids)
// under the output dist, so the tiered shards can read the union's misses
// during the dense work instead of in the sync's Resolve.
struct SyncAhead {
  // Per local shard: what this replica sent (touched since the last sync plus the rows of this
  // step's batch, increasing) and, once finished, the union over the replica group.
  std::vector<std::vector<int64_t>> sent, unions;
  std::vector<int64_t> send_counts, recv_counts;  // [m][local shards], replicated per peer
  std::vector<int64_t> send_ids, recv_ids;
  std::unique_ptr<PendingCollective> pending;
  int phase = 0;       // 0 none, 1 counts in flight, 2 ids in flight, 3 unions ready
  int64_t for_update = -1;  // Impl::updates when started: the update whose sync it serves
};

struct TableRoute {
  bool data_parallel = false;
  int dp = -1;                        // index in Impl::dp
  std::vector<int64_t> bounds;        // row-block boundaries, from 0 to num_rows
  std::vector<std::vector<int>> block_requests;  // per row block: requests covering it
  std::vector<int> requests;          // all requests of the table, in shard order
};

}  // namespace tessera::internal

namespace tessera {

struct ShardedEmbeddingCollection::Impl {
  ShardedEmbeddingOptions options;
  ShardingPlan plan;
  DeviceContext ctx;
  std::shared_ptr<Communicator> world, group, replica;
  int n = 1, m = 1, me = 0;
  RowOptimizerOptions update_opt;  // the optimizer as applied here (average mode: divisor c)
  std::vector<int> table_of_feature;
  std::vector<int64_t> feature_column;
  int64_t output_dim = 0;
  std::vector<internal::TableRoute> routes;
  std::vector<internal::Request> requests;
  std::vector<std::vector<int>> dst_requests;  // per shard rank: its requests, in order
  std::vector<internal::LocalShard> local;
  std::vector<internal::DpTable> dp;
  PhaseTimes* times = nullptr;
  EmbeddingWorkspace ws;

  // The step between Forward and BackwardUpdate.
  bool pending = false;
  int64_t batch = 0;
  bool weighted = false;
  std::vector<int64_t> offsets;     // the local batch's offsets
  std::vector<float> id_weights;    // the local batch's per-id weights
  std::vector<int64_t> dp_slots;    // slots of data-parallel tables' ids, parallel to values
  std::vector<int64_t> src_batch;   // per shard rank: its batch size this step
  int64_t updates = 0;              // BackwardUpdate calls (average mode's sync clock)

  // Pipelining (options.pipeline_input_dist): the batch given to Prefetch, packed; the one whose
  // payload travels now; and, during Forward, the one in use.
  internal::PackedInput staged;
  bool staged_valid = false;
  std::unique_ptr<internal::InflightInput> inflight, in_use;
  int64_t prefetched_forwards = 0;
  std::vector<std::vector<int64_t>> hint_rows;  // per local shard, HintNextRows' buffer
  // Exact mode, tiered shards: per local shard, the union over the replica group of the next
  // batch's rows (ExactReplicaSync), handed to the stores once this step's update resolved its
  // rows (BackwardUpdate).
  std::vector<std::vector<int64_t>> replica_next;
  internal::SyncAhead sync_ahead;   // average mode: the next sync's rows (StartSyncAhead)
  internal::PackedInput fresh;      // the current batch when it was not prefetched
  internal::ReceivedInput fresh_in;

  // Exchange buffers, reused across steps.
  std::vector<float> send_f, recv_f;
  std::vector<uint16_t> send_h, recv_h;  // 16-bit payloads (options.comm_dtype)
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  // Data-parallel tables' dense [rows, dim + 1] gradient tables (DataParallelBackward), kept
  // across steps and all zero between them (the rows a step wrote are cleared after its update),
  // so a step neither allocates nor page-faults the whole table again.
  std::vector<float> dp_buf;

  // internal/sharded_sync.cc
  absl::Status ExactReplicaSync();
  // The fused update of every local shard from rows/grads (row-wise AdaGrad on column-split
  // shards with the full row's mean squared gradient, exchanged in the sharding group).
  absl::Status ApplyUpdates(float lr, int64_t step);
  absl::Status DataParallelBackward(const float* d_out, float lr, int64_t step);
  absl::Status AverageSync();
  // Average mode with tiered shards that read ahead (ReadsAhead), M > 1: called by Forward once
  // LookupReceived filled the local shards' urows. When this Forward's update will sync (the
  // next BackwardUpdate reaches a multiple of sync_every), sync_rows kTouched starts the
  // exchange of SyncAhead (collective over the replica group, nonblocking); otherwise, and for
  // kAll, nothing. Any earlier SyncAhead (an evaluation Forward's) is dropped first.
  absl::Status StartSyncAhead();
  // Moves the exchange on: waits for the counts and starts the ids (a no-op in other phases).
  absl::Status AdvanceSyncAhead();
  // At the end of that Forward (before HintNextRows, so that the next batch's hint is the later
  // of a store's two staged batches): waits for the ids, forms the unions and hands each tiered
  // shard's union and its delayed-state rows (pending_rows) to RowStore::Prefetch (only with
  // `hint`; Forward passes false when it kept a batch in flight that it did not use, an
  // evaluation's, whose staged rows another hint would drop); kAll hands the whole shard.
  // AverageSync then uses these unions instead of exchanging ids itself.
  absl::Status FinishSyncAhead(bool hint);

  // internal/sharded_input_dist.cc
  // The owner's half of Forward: unpacks `in`, resolves ids once per local shard and pools each
  // (sender, feature) into send_f; sets src_batch and the reply counts/displacements per sender.
  absl::Status LookupReceived(const internal::ReceivedInput& in, std::vector<int64_t>* reply_counts,
                              std::vector<int64_t>* reply_displs);
  // Pipelining's tier prefetch: once the payload of the batch in flight has landed on this rank
  // (Test(); with `wait`, Wait()), hands each local shard that reads ahead (ReadsAhead) the
  // local rows the next Forward will resolve (RowStore::Prefetch, the union over the senders),
  // so the owner's tier reads its misses in the background as one process does. Once per batch
  // in flight; nothing when none is or no local shard reads ahead. Values are never changed,
  // only where Resolve finds them. Errors: the collective's (the payload did not arrive).
  absl::Status HintNextRows(bool wait);
  // The group all-to-all of float payloads (counts in floats), as options.comm_dtype says: fp32
  // as is, fp16/bf16 rounded to nearest even on the way out and widened on the way in.
  absl::Status ExchangeFloats(const float* send, const std::vector<int64_t>& sc,
                              const std::vector<int64_t>& sd, float* recv,
                              const std::vector<int64_t>& rc, const std::vector<int64_t>& rd);
};

}  // namespace tessera

namespace tessera::internal {

// The store for rows [r0, r1) x columns [c0, c1) of table t, holding the slice of the full
// table's InitRow values (so a shard holds what one rank would hold). Storage tier memory: an
// in-memory store initialised eagerly. Tier rocksdb: a TieredRowStore at
// "<storage.path>/rank<world_rank>-shard<shard>" (emptied on open), lazily initialised to the
// same values, with the table's cache budget scaled by the shard's share of the table.
absl::StatusOr<std::unique_ptr<RowStore>> MakeStore(const EmbeddingCollectionOptions& o, int t,
                                                    int64_t r0, int64_t r1, int64_t c0,
                                                    int64_t c1, int world_rank, int shard);
// InvalidArgument naming the table, feature, sample and id for a malformed batch.
absl::Status CheckBatch(const ShardedEmbeddingCollection::Impl& s, const KeyedJagged& batch);
// Fills every request's unique ids, bag lengths, positions and weights from the local batch.
void BucketIds(ShardedEmbeddingCollection::Impl& s, const KeyedJagged& batch);
// Features served by `table`.
int64_t NumFeatures(const ShardedEmbeddingCollection::Impl& s, int table);
// Header ints per (sender, receiver) pair: batch size, flags, then per request of the receiver
// its unique-id count and per feature its position count.
int64_t HeaderInts(const ShardedEmbeddingCollection::Impl& s, int dst);
// Packs `batch` for the input dist (CheckBatch, BucketIds, headers, payloads); with
// `keep_batch` a copy of the batch goes along (SameBatch).
void PackInput(ShardedEmbeddingCollection::Impl& s, const KeyedJagged& batch, bool keep_batch,
               PackedInput* out);
// True when `batch` is the one `p` was packed from with keep_batch.
bool SameBatch(const PackedInput& p, const KeyedJagged& batch);
// Sizes in->qbytes/qdispl/payload from the received headers.
void SizeReceived(const ShardedEmbeddingCollection::Impl& s, ReceivedInput* in);
inline int64_t Align8(int64_t x) { return (x + 7) & ~int64_t{7}; }
// True when local shard `ls` reads ahead: its table is in the RocksDB tier with
// storage.prefetch on (HintNextRows and the replica union send it the next batch's rows).
inline bool ReadsAhead(const ShardedEmbeddingCollection::Impl& s, const LocalShard& ls) {
  const TableStorage& st = s.options.collection.tables[ls.table].storage;
  return st.tier == StorageTier::kRocksDb && st.prefetch;
}
inline constexpr int64_t kWeightedFlag = 1;
inline constexpr int64_t kErrorFlag = 2;
inline constexpr int64_t kPrefetchedFlag = 4;  // header A: my batch is the one in flight
inline constexpr int64_t kStagedFlag = 8;      // header B: I have a next batch packed

}  // namespace tessera::internal
