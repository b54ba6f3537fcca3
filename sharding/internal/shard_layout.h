// ShardLayout: the static shape of a ShardedEmbeddingCollection on this rank, built once by
// Create and read by every phase (input_dist.h, output_dist.h, replica_sync.h, shard_update.h,
// data_parallel.h): the options, the grid's communicators, the feature columns, each table's
// routing (row blocks to shards), every shard as a requester sees it, and the shards this rank
// owns with their stores. After Create only the stores' contents change. Also the types the
// phases hand each other (RowGrads, LocalStep) and the checks and store factory of setup.
// Private to sharding/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"
#include "sharding/internal/ctx_array.h"
#include "sharding/key_routing.h"
#include "sharding/sharded_embedding.h"

namespace tessera::internal {

// One shard of one table as every rank sees it (requester side), in (table, shard) order.
struct Request {
  int table = 0;
  int shard = 0;  // index in the plan's (sorted) shard list of the table
  Shard rect;
  int owner = 0;           // shard rank
  bool col_split = false;  // the shard holds part of each row's columns
  int local = -1;          // index in ShardLayout::local when this rank owns it
};

// A shard this rank owns, and its store (host memory, or a TieredRowStore for the RocksDB tier).
struct LocalShard {
  int request = 0;
  int table = 0;
  Shard rect;
  int64_t width = 0;
  bool col_split = false;
  std::unique_ptr<RowStore> store;
};

struct TableRoute {
  bool data_parallel = false;
  // A dynamic table: ids are keys, routed by DynamicKeyRow(key, num_rows) (sharding/key_routing.h)
  // through `bounds`, and sent to their owners as keys (its shards are DynamicRowStores).
  bool dynamic = false;
  // A dynamic table whose keys spread over several row blocks (row_wise, table_row_wise, grid):
  // every bag is split, so the owners send the looked-up rows back unpooled and the requester
  // pools each bag in bag order, as one process does (OutputDist), not partial sums.
  bool rows_back = false;
  int dp = -1;                                   // index in DataParallelTables
  std::vector<int64_t> bounds;                   // row-block boundaries, from 0 to num_rows
  std::vector<std::vector<int>> block_requests;  // per row block: requests covering it
  std::vector<int> requests;                     // all requests of the table, in shard order
  // The row block id `id` of this table goes to: its row's (a dynamic table's key: its
  // pseudo-row DynamicKeyRow(id, num_rows)) place in `bounds`. The input dist and the returned
  // rows' pooling (OutputDist) route the same way through it.
  size_t BlockOf(int64_t id, int64_t num_rows) const {
    if (bounds.size() == 2) return 0;
    const int64_t row = dynamic ? DynamicKeyRow(id, num_rows) : id;
    return std::upper_bound(bounds.begin(), bounds.end(), row) - bounds.begin() - 1;
  }
};

struct ShardLayout {
  ShardedEmbeddingOptions options;
  ShardingPlan plan;  // validated
  // Where the shards, the pooled payloads and the step's gradients live (CPU or CUDA), and
  // where the host-side work runs (the input dist's routing, the replica sums): ctx itself for
  // a CPU collection, DeviceContext::Cpu() for a CUDA one.
  DeviceContext ctx, host;
  // Host communicators (MPI): ids, headers, row gradients of the replica sync, data-parallel
  // gradient tables.
  std::shared_ptr<Communicator> world, group, replica;
  // The sharding group's communicator for payloads in ctx's memory (pooled partial sums and
  // their gradients): `group` itself on the CPU; on CUDA a StagedCommunicator over a duplicate
  // of it or an NCCL communicator (ShardedEmbeddingOptions::transport).
  std::shared_ptr<Communicator> payload;
  int n = 1, m = 1, me = 0;  // group size N, sharding groups M, this rank's shard rank
  // The world rank of (sharding group g, shard rank s) at [g * n + s] (ProcessGrid's layout).
  std::vector<int> world_rank_of;
  RowOptimizerOptions update_opt;  // the optimizer as applied here (average mode: divisor c)
  std::vector<int> table_of_feature;
  std::vector<int64_t> feature_column;
  int64_t output_dim = 0;
  std::vector<TableRoute> routes;              // per table
  std::vector<Request> requests;               // every shard of every sharded table
  std::vector<std::vector<int>> dst_requests;  // per shard rank: its requests, in order
  std::vector<LocalShard> local;               // this rank's shards, in request order

  // Features served by `table`.
  int64_t NumFeatures(int table) const {
    return static_cast<int64_t>(options.collection.tables[table].features.size());
  }
  // Header ints per (sender, receiver) pair of the input dist: batch size, flags, then per
  // request of the receiver its unique-id count and per feature its position count.
  int64_t HeaderInts(int dst) const;
  // True when local shard `ls` reads ahead: its table is in the RocksDB tier with
  // storage.prefetch on (the input dist's hint and the replica unions send it rows to read).
  bool ReadsAhead(const LocalShard& ls) const {
    const TableStorage& st = options.collection.tables[ls.table].storage;
    return st.tier == StorageTier::kRocksDb && st.prefetch;
  }
  // ReadsAhead of any local shard.
  bool AnyReadsAhead() const;
  // True when local shard `ls` may update fused (RowGrads::bags): no replicas to sum or average
  // the row gradients with (m == 1), and not a column-split shard under row-wise AdaGrad (whose
  // rows need their siblings' squared-gradient sums first). The store must also map rows to
  // slots as the identity (in memory), which OutputDist::Aggregate checks per step.
  // True when local shard `ls` is a DynamicRowStore (its rows are keys).
  bool IsDynamic(const LocalShard& ls) const { return routes[ls.table].dynamic; }
  // Floats per bag of request r's output-gradient slice (OutputDist::ExchangeBackward): its
  // columns, and for a dynamic mean table one more, the bag's 1 / length, so that the owner
  // scales each id as one process does (per-id weight times 1 / length, then times the
  // gradient) rather than the gradient scaled first.
  int64_t GradStride(const Request& r) const {
    const bool scale_travels =
        routes[r.table].dynamic && options.collection.tables[r.table].pooling == PoolingMode::kMean;
    return r.rect.num_cols() + (scale_travels ? 1 : 0);
  }
  bool UpdatesFused(const LocalShard& ls) const {
    return m == 1 && !(ls.col_split && update_opt.type == RowOptimizerType::kRowWiseAdagrad);
  }
};

// Per local shard, after the backward's aggregation (and replica sync): its distinct local rows,
// increasing, and their gradients ([rows, width]). Produced by OutputDist::Aggregate, summed by
// ReplicaSync, consumed by ApplyShardUpdates and average mode's touched set.
// A shard that updates fused (ShardLayout::UpdatesFused, in-memory store) gets `bags` instead:
// the received gradients as bags (pointing into OutputDist's receive buffer and the InputDist's
// owner ids, valid until the next exchange), which ApplyShardUpdates pools and applies in one
// pass (FusedBackwardUpdate: the bits of aggregate-then-apply without the [rows, width]
// gradient table, which on a hot shard evicts the rows the update is about to read); it fills
// `rows` then, and `grads` stays empty.
// A dynamic shard with replicas in exact mode gets `sources` instead of rows and gradients: its
// received gradients per (feature, sender) at [feature * n + sender] (num_bags 0 for none), for
// ReplicaSyncPhase to sum with the other replicas' in the global batch's order; it fills `rows`
// and `grads` then.
struct RowGrads {
  std::vector<int64_t> rows;
  std::vector<float> grads;
  std::vector<BagGradients> bags;
  std::vector<BagGradients> sources;
};

// The local batch between Forward and BackwardUpdate: what the backward needs of it.
struct LocalStep {
  bool pending = false;  // a Forward ran and no BackwardUpdate since
  int64_t batch = 0;     // its size (0 after a bad batch)
  bool weighted = false;
  std::vector<int64_t> offsets;   // the local batch's offsets
  std::vector<float> id_weights;  // the local batch's per-id weights
  // The same in the shards' memory (ctx): the vectors' data on the CPU, mirrors on CUDA
  // (ctx_id_weights null when unweighted). Set by Forward.
  const int64_t* ctx_offsets = nullptr;
  const float* ctx_id_weights = nullptr;
  CtxArray<int64_t> offsets_mirror;
  CtxArray<float> id_weights_mirror;
};

// The routing part of the layout from s->options.collection, s->plan (validated), s->n and
// s->me: table_of_feature, feature_column, output_dim, routes (every table's: data_parallel,
// dynamic, rows_back, bounds, block_requests, requests) and every shard as a request, with its
// owner's dst_requests (Request::local stays -1: Create adds the local shards and their stores).
// InvalidArgument naming the table for a shard layout the stores cannot take (a 16-bit table
// split by columns under rowwise_adagrad).
absl::Status BuildRouting(ShardLayout* s);

// The store for rows [r0, r1) x columns [c0, c1) of table t, holding the slice of the full
// table's InitRow values (so a shard holds what one rank would hold). Storage tier memory: an
// in-memory store initialised eagerly. Tier rocksdb: a TieredRowStore at
// "<storage.path>/rank<world_rank>-shard<shard>" (emptied on open), lazily initialised to the
// same values, with the table's cache budget scaled by the shard's share of the table.
// On a CUDA ctx the in-memory store is in device memory (embedding/device_row_store.h). With
// storage.device_cache_rows / device_cache_bytes the store is a DeviceRowCache in ctx's memory
// (HBM, or host memory as the CPU twin) over the shard's rows in host memory or the tier, its
// budget the table's times the shard's share (rows, or cells for bytes), rounded up.
absl::StatusOr<std::unique_ptr<RowStore>> MakeStore(const EmbeddingCollectionOptions& o, int t,
                                                    int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                                    int world_rank, int shard,
                                                    const DeviceContext& ctx);
// The slots of local shard `ls`'s rows after this step's Resolve: RowStore::Resolve, or for a
// dynamic shard (rows are keys) DynamicRowStore::FindSlots, which counts and admits nothing
// again; every row must hold a slot (Internal naming the table and key otherwise).
absl::Status ResolveRows(const ShardLayout& l, const LocalShard& ls, absl::Span<const int64_t> rows,
                         absl::Span<int64_t> slots);
// InvalidArgument naming the table, feature, sample and id for a malformed batch.
absl::Status CheckBatch(const ShardLayout& l, const KeyedJagged& batch);

inline int64_t Align8(int64_t x) { return (x + 7) & ~int64_t{7}; }

}  // namespace tessera::internal
