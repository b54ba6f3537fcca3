// ShardLayout's helpers: shard stores initialised as slices of the full table, batch checks and
// the header size of the input dist.
#include "sharding/internal/shard_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/device_row_cache.h"
#include "embedding/device_row_store.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/row_init.h"
#include "embedding/tiered_row_store.h"

namespace tessera::internal {

// Writes rows [begin, end) x columns [c0, c1) of table t's initial values into `out`
// (row-major, c1 - c0 wide): the slice of what one rank's InMemoryRowStore would hold.
void InitSlice(const TableConfig& cfg, uint64_t seed, int t, int64_t begin, int64_t end, int64_t c0,
               int64_t c1, float* out) {
  std::vector<float> row(cfg.dim);
  for (int64_t r = begin; r < end; ++r) {
    InitRow(cfg.init, seed, static_cast<uint64_t>(t), cfg.num_rows, r, cfg.dim, row.data());
    std::memcpy(out + (r - begin) * (c1 - c0), row.data() + c0, (c1 - c0) * sizeof(float));
  }
}

namespace {

// The storage side of one local shard's RocksDB tier: its working database at
// "<storage.path>/rank<world rank>-shard<k>" (scratch, emptied on open, as the single-process
// factory's in trainer/stores.cc), its share of the table's cache budget (rows for cache_rows,
// rows x columns for cache_bytes, rounded up), the policy, reader threads and prefetch. Shared
// by static shards (a TieredRowStore) and dynamic ones (a DynamicRowStore over the tier).
absl::Status SetShardTierStorage(const TableConfig& cfg, int64_t r0, int64_t r1, int64_t c0,
                                 int64_t c1, int world_rank, int shard, TieredRowStoreOptions* so) {
  const TableStorage& st = cfg.storage;
  if (st.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", cfg.name, "': storage.tier rocksdb needs storage.path on the sharded path"));
  }
  so->path = absl::StrCat(st.path, "/rank", world_rank, "-shard", shard);
  so->discard_existing = true;
  const double row_frac = static_cast<double>(r1 - r0) / static_cast<double>(cfg.num_rows);
  const double cell_frac = row_frac * static_cast<double>(c1 - c0) / static_cast<double>(cfg.dim);
  if (st.cache_rows > 0) {
    so->cache_rows =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.cache_rows * row_frac)));
  } else {
    so->cache_bytes =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.cache_bytes * cell_frac)));
  }
  so->policy = st.policy;
  so->reader_threads = st.reader_threads;
  so->prefetch = st.prefetch;
  return absl::OkStatus();
}

// The RocksDB tier for one local shard: a TieredRowStore over the shard's own rows whose lazy
// init is the full table's slice (row_offset, init columns, and the full table's default scale
// resolved here, since InitRow would otherwise take it from the shard's row count).
absl::StatusOr<std::unique_ptr<RowStore>> MakeTieredShardStore(const EmbeddingCollectionOptions& o,
                                                               int t, int64_t r0, int64_t r1,
                                                               int64_t c0, int64_t c1,
                                                               int world_rank, int shard) {
  const TableConfig& cfg = o.tables[t];
  TieredRowStoreOptions so;
  TESSERA_RETURN_IF_ERROR(SetShardTierStorage(cfg, r0, r1, c0, c1, world_rank, shard, &so));
  so.num_rows = r1 - r0;
  so.dim = c1 - c0;
  so.state_dim = RowStateDim(o.optimizer.type, c1 - c0);
  so.state_init =
      o.optimizer.type == RowOptimizerType::kRowWiseAdagrad ? o.optimizer.adagrad_initial : 0.0f;
  so.init = ResolvedInit(cfg.init, cfg.num_rows);
  so.seed = o.seed;
  so.table_id = static_cast<uint64_t>(t);
  so.name = absl::StrCat(cfg.name, " shard ", shard);
  so.dtype = cfg.storage.dtype;
  so.row_offset = r0;
  if (c1 - c0 != cfg.dim) {
    so.init_dim = cfg.dim;
    so.init_col_begin = c0;
  }
  TESSERA_ASSIGN_OR_RETURN(auto store, TieredRowStore::Open(so));
  return std::unique_ptr<RowStore>(std::move(store));
}

}  // namespace

namespace {

// The shard's store without a device cache: the tier, or the rows in ctx's memory (host, or
// HBM for CUDA shards), holding the full table's slice.
absl::StatusOr<std::unique_ptr<RowStore>> MakeBackingStore(const EmbeddingCollectionOptions& o,
                                                           int t, int64_t r0, int64_t r1,
                                                           int64_t c0, int64_t c1, int world_rank,
                                                           int shard, const DeviceContext& ctx) {
  const TableConfig& cfg = o.tables[t];
  if (cfg.storage.tier == StorageTier::kRocksDb) {
    return MakeTieredShardStore(o, t, r0, r1, c0, c1, world_rank, shard);
  }
  InMemoryRowStoreOptions so;
  so.num_rows = r1 - r0;
  so.dim = c1 - c0;
  so.state_dim = RowStateDim(o.optimizer.type, c1 - c0);
  so.state_init =
      o.optimizer.type == RowOptimizerType::kRowWiseAdagrad ? o.optimizer.adagrad_initial : 0.0f;
  so.init.type = RowInitType::kZero;  // overwritten below with the full table's slice
  so.seed = o.seed;
  so.table_id = static_cast<uint64_t>(t);
  so.name = cfg.name;
  so.dtype = cfg.storage.dtype;
  TESSERA_ASSIGN_OR_RETURN(auto store, CreateDeviceRowStore(ctx, so));
  constexpr int64_t kChunk = 4096;
  std::vector<float> buf;
  for (int64_t b = r0; b < r1; b += kChunk) {
    const int64_t e = std::min(r1, b + kChunk);
    buf.resize((e - b) * (c1 - c0));
    InitSlice(cfg, o.seed, t, b, e, c0, c1, buf.data());
    TESSERA_RETURN_IF_ERROR(store->WriteRows(b - r0, e - b, buf.data(), nullptr));
  }
  return store;
}

}  // namespace

namespace {

// A dynamic table's shard: a DynamicRowStore of the shard's share of the capacity
// (sharding/key_routing.h routes the keys to it); with storage.tier rocksdb its slot rows are in
// the shard's own working database, as a static shard's rows are.
absl::StatusOr<std::unique_ptr<RowStore>> MakeDynamicShardStore(const EmbeddingCollectionOptions& o,
                                                                int t, int64_t r0, int64_t r1,
                                                                int64_t c0, int64_t c1,
                                                                int world_rank, int shard) {
  const TableConfig& cfg = o.tables[t];
  DynamicRowStoreOptions d = DynamicTableStoreOptions(cfg, t, o.optimizer, o.seed);
  // The shard's share of the capacity and of the admission counters; the init of the whole
  // table's rows (its scale from the full capacity, the shard's columns of the full row).
  d.capacity = r1 - r0;
  d.init = ResolvedInit(d.init, cfg.num_rows);
  d.dim = c1 - c0;
  d.state_dim = RowStateDim(o.optimizer.type, c1 - c0);
  if (c1 - c0 != cfg.dim) {
    d.init_dim = cfg.dim;
    d.init_col_begin = c0;
  }
  if (d.dynamic.counter_slots > 0) {
    d.dynamic.counter_slots = std::max<int64_t>(
        64, static_cast<int64_t>(std::ceil(static_cast<double>(d.dynamic.counter_slots) *
                                           static_cast<double>(r1 - r0) /
                                           static_cast<double>(cfg.num_rows))));
  }
  d.name = cfg.name;
  if (cfg.storage.tier == StorageTier::kRocksDb) {
    TESSERA_RETURN_IF_ERROR(SetShardTierStorage(cfg, r0, r1, c0, c1, world_rank, shard, &d.tier));
  }
  TESSERA_ASSIGN_OR_RETURN(auto store, DynamicRowStore::Create(d));
  return std::unique_ptr<RowStore>(std::move(store));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowStore>> MakeStore(const EmbeddingCollectionOptions& o, int t,
                                                    int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                                    int world_rank, int shard,
                                                    const DeviceContext& ctx) {
  const TableConfig& cfg = o.tables[t];
  const TableStorage& st = cfg.storage;
  if (cfg.dynamic.enabled) return MakeDynamicShardStore(o, t, r0, r1, c0, c1, world_rank, shard);
  if (!st.device_cached()) return MakeBackingStore(o, t, r0, r1, c0, c1, world_rank, shard, ctx);
  // A device cache over the shard's rows in host memory or the tier. The table's budget is for
  // the whole table: each shard gets its share (rows for device_cache_rows, rows x columns for
  // device_cache_bytes), rounded up, as the tier's host cache does.
  TESSERA_ASSIGN_OR_RETURN(auto backing, MakeBackingStore(o, t, r0, r1, c0, c1, world_rank, shard,
                                                          DeviceContext::Cpu()));
  const double row_frac = static_cast<double>(r1 - r0) / static_cast<double>(cfg.num_rows);
  const double cell_frac = row_frac * static_cast<double>(c1 - c0) / static_cast<double>(cfg.dim);
  DeviceRowCacheOptions co;
  co.ctx = ctx;
  if (st.device_cache_rows > 0) {
    co.cache_rows =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.device_cache_rows * row_frac)));
  } else {
    co.cache_bytes =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.device_cache_bytes * cell_frac)));
  }
  co.policy = st.policy;
  co.name = absl::StrCat(cfg.name, " shard ", shard);
  TESSERA_ASSIGN_OR_RETURN(auto cache, DeviceRowCache::Create(co, std::move(backing)));
  return std::unique_ptr<RowStore>(std::move(cache));
}

absl::Status ResolveRows(const ShardLayout& l, const LocalShard& ls, absl::Span<const int64_t> rows,
                         absl::Span<int64_t> slots) {
  if (!l.IsDynamic(ls)) return ls.store->Resolve(rows, slots);
  static_cast<const DynamicRowStore*>(ls.store.get())->FindSlots(rows, slots);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (slots[i] < 0) {
      return absl::InternalError(absl::StrCat("table '", l.options.collection.tables[ls.table].name,
                                              "': key ", rows[i], " has no row on its shard"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBatch(const ShardLayout& s, const KeyedJagged& batch) {
  const auto& co = s.options.collection;
  const int64_t b = batch.batch_size;
  if (batch.num_features != co.num_features || b < 0 ||
      static_cast<int64_t>(batch.offsets.size()) != batch.num_bags() + 1 ||
      batch.offsets.front() != 0 ||
      batch.offsets.back() != static_cast<int64_t>(batch.values.size()) ||
      (!batch.weights.empty() && batch.weights.size() != batch.values.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShardedEmbeddingCollection::Forward: batch of ", batch.num_features, " features (want ",
        co.num_features, "), ", b, " samples, ", batch.offsets.size(), " offsets (want ",
        batch.num_bags() + 1, ", from 0 to values.size() = ", batch.values.size(), "), ",
        batch.weights.size(), " weights (want 0 or values.size())"));
  }
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(batch.offsets.size()); ++i) {
    if (batch.offsets[i + 1] < batch.offsets[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardedEmbeddingCollection::Forward: offsets decrease at bag ", i));
    }
  }
  for (int f = 0; f < co.num_features; ++f) {
    const TableConfig& cfg = co.tables[s.table_of_feature[f]];
    if (cfg.dynamic.enabled) continue;  // any int64 is a key
    for (int64_t j = batch.feature_begin(f); j < batch.feature_end(f); ++j) {
      if (static_cast<uint64_t>(batch.values[j]) >= static_cast<uint64_t>(cfg.num_rows)) {
        const int64_t* offs = batch.feature_offsets(f);
        const int64_t sample = std::upper_bound(offs, offs + b + 1, j) - offs - 1;
        return absl::InvalidArgumentError(
            absl::StrCat("table '", cfg.name, "': feature ", f, " sample ", sample, " has id ",
                         batch.values[j], " outside [0, ", cfg.num_rows, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status BuildRouting(ShardLayout* s) {
  const auto& co = s->options.collection;
  s->table_of_feature.assign(co.num_features, -1);
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    for (int f : co.tables[t].features) s->table_of_feature[f] = t;
  }
  s->feature_column.resize(co.num_features);
  s->output_dim = 0;
  for (int f = 0; f < co.num_features; ++f) {
    s->feature_column[f] = s->output_dim;
    s->output_dim += co.tables[s->table_of_feature[f]].dim;
  }
  s->routes.assign(co.tables.size(), TableRoute{});
  s->requests.clear();
  s->dst_requests.assign(s->n, {});
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const TableConfig& cfg = co.tables[t];
    const TablePlan& tp = s->plan.tables[t];
    TableRoute& route = s->routes[t];
    route.dynamic = cfg.dynamic.enabled;
    if (tp.type == ShardingType::kDataParallel) {
      route.data_parallel = true;
      continue;
    }
    std::vector<int64_t> bounds = {0, cfg.num_rows};
    for (const Shard& sh : tp.shards) {
      bounds.push_back(sh.row_begin);
      bounds.push_back(sh.row_end);
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    route.bounds = bounds;
    route.rows_back = route.dynamic && bounds.size() > 2;
    route.block_requests.assign(bounds.size() - 1, {});
    for (int k = 0; k < static_cast<int>(tp.shards.size()); ++k) {
      const Shard& sh = tp.shards[k];
      Request r;
      r.table = t;
      r.shard = k;
      r.rect = sh;
      r.owner = sh.rank;
      r.col_split = sh.num_cols() != cfg.dim;
      if (r.col_split && cfg.storage.dtype != RowDtype::kF32 &&
          co.optimizer.type == RowOptimizerType::kRowWiseAdagrad) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table '", cfg.name, "': storage.dtype ", RowDtypeName(cfg.storage.dtype),
            " with a column split (column_wise / grid sharding) and rowwise_adagrad is not "
            "supported yet; shard it by rows or tables, or use fp32"));
      }
      const int index = static_cast<int>(s->requests.size());
      for (size_t b = 0; b + 1 < bounds.size(); ++b) {
        if (bounds[b] >= sh.row_begin && bounds[b] < sh.row_end) {
          route.block_requests[b].push_back(index);
        }
      }
      route.requests.push_back(index);
      s->dst_requests[sh.rank].push_back(index);
      s->requests.push_back(std::move(r));
    }
  }
  return absl::OkStatus();
}

int64_t ShardLayout::HeaderInts(int dst) const {
  int64_t h = 2;
  for (int ri : dst_requests[dst]) h += 1 + NumFeatures(requests[ri].table);
  return h;
}

bool ShardLayout::AnyReadsAhead() const {
  for (const LocalShard& ls : local) {
    if (ReadsAhead(ls)) return true;
  }
  return false;
}

}  // namespace tessera::internal
