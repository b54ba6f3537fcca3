#include "trainer/stores.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/embedding_collection.h"
#include "embedding/row_optimizer.h"
#include "trainer/model.h"
#include "trainer/sharded_sparse_arch.h"
#include "trainer/split_sparse_arch.h"

namespace tessera {

namespace {

// A run on several ranks keeps its working databases of a table at <path>/rank<r>-shard<k>
// (sharding/sharded_embedding.h); one process keeps its own at <path>. They are scratch
// (discarded on open, a resume restores from the checkpoint), so before one process opens
// <path>, a directory holding only such shard databases (a run resumed on one process after
// several ranks) is emptied; anything else there is left for TieredRowStore::Open to refuse.
void DiscardShardWorkingDbs(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "CURRENT", ec)) return;
  static const std::regex shard("rank[0-9]+-shard[0-9]+");
  std::vector<fs::path> dbs;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!entry.is_directory() || !std::regex_match(entry.path().filename().string(), shard) ||
        !fs::exists(entry.path() / "CURRENT", ec)) {
      return;
    }
    dbs.push_back(entry.path());
  }
  if (ec) return;
  for (const fs::path& db : dbs) fs::remove_all(db, ec);
}

// What a table's `storage` (tier rocksdb) says of its RocksDB store: where (scratch: discarded
// on open, a resume restores from the checkpoint) and its row cache, policy, readers, prefetch.
void SetTierStorage(const Config& config, int t, TieredRowStoreOptions* so) {
  const TableStorage& st = config.model.tables[t].storage;
  so->path = TableStoragePath(config, t);
  so->discard_existing = true;
  so->cache_rows = st.cache_rows;
  so->cache_bytes = st.cache_bytes;
  so->policy = st.policy;
  so->reader_threads = st.reader_threads;
  so->prefetch = st.prefetch;
}

}  // namespace

DynamicRowStoreOptions DynamicStoreOptions(const Config& config, int t) {
  const TableConfig& table = config.model.tables[t];
  DynamicRowStoreOptions o =
      DynamicTableStoreOptions(table, t, config.optimizer.embedding, config.seed);
  // Over the tier, scratch as a static table's store (a resume loads its keys).
  if (table.storage.tier == StorageTier::kRocksDb) SetTierStorage(config, t, &o.tier);
  return o;
}

std::vector<DynamicRowStore*> DynamicTieredStores(Model& model) {
  std::vector<DynamicRowStore*> out;
  for (int t = 0; t < model.sparse().num_tables(); ++t) {
    DynamicRowStore* d = model.sparse().dynamic_store(t);
    if (d != nullptr && d->tier() != nullptr) out.push_back(d);
  }
  return out;
}

absl::StatusOr<std::vector<std::unique_ptr<RowStore>>> CreateTableStores(
    const Config& config, const DeviceContext& cache_ctx) {
  std::vector<int> all(config.model.tables.size());
  for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int>(t);
  return CreateTableStores(config, all, cache_ctx);
}

namespace {

absl::StatusOr<std::unique_ptr<DeviceRowCache>> WrapInDeviceCache(const Config& config, int t,
                                                                  std::unique_ptr<RowStore> store,
                                                                  const DeviceContext& ctx) {
  const TableConfig& table = config.model.tables[t];
  DeviceRowCacheOptions o;
  o.ctx = ctx;
  o.cache_rows = table.storage.device_cache_rows;
  o.cache_bytes = table.storage.device_cache_bytes;
  // One policy per table: the tier's storage.policy serves the HBM cache too.
  o.policy = table.storage.policy;
  o.name = table.name;
  return DeviceRowCache::Create(o, std::move(store));
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<DeviceRowCache>>> CreateDeviceCaches(
    const Config& config, const std::vector<int>& tables, const DeviceContext& cache_ctx) {
  std::vector<std::unique_ptr<DeviceRowCache>> out;
  for (int t : tables) {
    if (t < 0 || t >= static_cast<int>(config.model.tables.size()) ||
        !config.model.tables[t].storage.device_cached()) {
      out.push_back(nullptr);
      continue;
    }
    // device_cached(): CreateTableStores wraps the table's store in its DeviceRowCache.
    TESSERA_ASSIGN_OR_RETURN(auto stores, CreateTableStores(config, {t}, cache_ctx));
    out.emplace_back(static_cast<DeviceRowCache*>(stores[0].release()));
  }
  return out;
}

absl::StatusOr<std::vector<std::unique_ptr<RowStore>>> CreateTableStores(
    const Config& config, const std::vector<int>& tables, const DeviceContext& cache_ctx) {
  const RowOptimizerOptions& opt = config.optimizer.embedding;
  // The same initial state EmbeddingCollection::Create gives its in-memory tables.
  const float state_init =
      opt.type == RowOptimizerType::kRowWiseAdagrad ? opt.adagrad_initial : 0.0f;
  std::vector<std::unique_ptr<RowStore>> stores;
  for (int t : tables) {
    if (t < 0 || t >= static_cast<int>(config.model.tables.size())) {
      return absl::InvalidArgumentError(absl::StrCat("CreateTableStores: no table ", t));
    }
    const TableConfig& table = config.model.tables[t];
    const int64_t state_dim = RowStateDim(opt.type, table.dim);
    if (table.dynamic.enabled) {
      // A table without a size: raw keys through a DynamicRowStore, its rows in memory or over
      // the RocksDB tier (the config refuses device caches for it).
      DynamicRowStoreOptions o = DynamicStoreOptions(config, t);
      if (!o.tier.path.empty()) DiscardShardWorkingDbs(o.tier.path);
      TESSERA_ASSIGN_OR_RETURN(auto store, DynamicRowStore::Create(o));
      stores.push_back(std::move(store));
      continue;
    }
    if (table.storage.tier == StorageTier::kMemory) {
      TESSERA_ASSIGN_OR_RETURN(
          auto store, CreateInMemoryRowStore(TableRowStoreOptions(table, t, opt, config.seed)));
      if (table.storage.device_cached()) {
        TESSERA_ASSIGN_OR_RETURN(store, WrapInDeviceCache(config, t, std::move(store), cache_ctx));
      }
      stores.push_back(std::move(store));
      continue;
    }
    TieredRowStoreOptions so;
    SetTierStorage(config, t, &so);
    DiscardShardWorkingDbs(so.path);
    so.num_rows = table.num_rows;
    so.dim = table.dim;
    so.state_dim = state_dim;
    so.state_init = state_init;
    so.init = table.init;
    so.seed = config.seed;
    so.table_id = static_cast<uint64_t>(t);
    so.name = table.name;
    so.dtype = table.storage.dtype;
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store, TieredRowStore::Open(so));
    if (table.storage.device_cached()) {
      TESSERA_ASSIGN_OR_RETURN(store, WrapInDeviceCache(config, t, std::move(store), cache_ctx));
    }
    stores.push_back(std::move(store));
  }
  return stores;
}

std::vector<TieredRowStore*> TieredStores(Model& model, std::vector<int>* table_index) {
  // (global table index, store) of the tiered tables of each single-process collection.
  std::vector<std::pair<int, TieredRowStore*>> found;
  auto add = [&](SparseArch& arch, const std::vector<int>* global) {
    auto* local = dynamic_cast<LocalSparseArch*>(&arch);
    if (local == nullptr) return;
    EmbeddingCollection& c = local->collection();
    for (int t = 0; t < c.num_tables(); ++t) {
      RowStore* s = &c.store(t);
      if (auto* cached = dynamic_cast<DeviceRowCache*>(s)) s = &cached->backing();
      if (auto* tiered = dynamic_cast<TieredRowStore*>(s)) {
        found.push_back({global != nullptr ? (*global)[t] : t, tiered});
      }
    }
  };
  if (auto* split = dynamic_cast<SplitSparseArch*>(&model.sparse())) {
    for (int p = 0; p < split->num_parts(); ++p) {
      add(split->part_arch(p), &split->part(p).tables);
    }
  } else {
    add(model.sparse(), nullptr);
  }
  std::sort(found.begin(), found.end());
  std::vector<TieredRowStore*> out;
  for (const auto& [t, store] : found) {
    out.push_back(store);
    if (table_index != nullptr) table_index->push_back(t);
  }
  return out;
}

std::vector<TierTableMetrics> CollectTierMetrics(Model& model) {
  std::vector<int> index;
  std::vector<TieredRowStore*> stores = TieredStores(model, &index);
  std::vector<TierTableMetrics> out;
  for (size_t i = 0; i < stores.size(); ++i) {
    out.push_back({index[i], model.sparse().table(index[i]).name, stores[i]->metrics()});
  }
  // Dynamic tables over the tier (their TieredRowStore holds the slot rows).
  for (int t = 0; t < model.sparse().num_tables(); ++t) {
    DynamicRowStore* d = model.sparse().dynamic_store(t);
    if (d != nullptr && d->tier() != nullptr) {
      out.push_back({t, model.sparse().table(t).name, d->tier()->metrics()});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const TierTableMetrics& a, const TierTableMetrics& b) { return a.table < b.table; });
  return out;
}

std::vector<TierTableMetrics> CollectShardTierMetrics(Model& model) {
  std::vector<TierTableMetrics> out;
  auto* sharded = dynamic_cast<ShardedSparseArch*>(&model.sparse());
  if (sharded == nullptr) return out;
  ShardedEmbeddingCollection& c = sharded->collection();
  std::vector<int> entry(c.num_tables(), -1);
  for (int t = 0; t < c.num_tables(); ++t) {
    if (c.table(t).storage.tier != StorageTier::kRocksDb) continue;
    entry[t] = static_cast<int>(out.size());
    out.push_back({t, c.table(t).name, {}});
  }
  for (const auto& ls : c.local_shards()) {
    auto* tiered = dynamic_cast<TieredRowStore*>(ls.store);
    // A dynamic shard over the tier: its TieredRowStore holds the slot rows.
    if (auto* d = dynamic_cast<DynamicRowStore*>(ls.store)) tiered = d->tier();
    if (tiered == nullptr || entry[ls.table] < 0) continue;
    AddTierMetrics(tiered->metrics(), &out[entry[ls.table]].metrics);
  }
  return out;
}

void AddTierMetrics(const TieredRowStoreMetrics& b, TieredRowStoreMetrics* a) {
  a->steps += b.steps;
  a->hits += b.hits;
  a->misses += b.misses;
  a->prefetched_rows += b.prefetched_rows;
  a->prefetch_used += b.prefetch_used;
  a->sync_reads += b.sync_reads;
  a->rows_read += b.rows_read;
  a->rows_initialized += b.rows_initialized;
  a->rows_written += b.rows_written;
  a->evictions += b.evictions;
  a->rows_deleted += b.rows_deleted;
  a->read_seconds += b.read_seconds;
  a->prefetch_stall_seconds += b.prefetch_stall_seconds;
  a->write_stall_seconds += b.write_stall_seconds;
  a->write_seconds += b.write_seconds;
  a->cache_rows += b.cache_rows;
  a->resident_rows += b.resident_rows;
  a->sst_bytes += b.sst_bytes;
  a->memtable_bytes += b.memtable_bytes;
}

TierRates TierRatesBetween(const TieredRowStoreMetrics& a, const TieredRowStoreMetrics& b,
                           int64_t steps) {
  TierRates r;
  const double n = steps > 0 ? static_cast<double>(steps) : 1.0;
  const int64_t hits = b.hits - a.hits, misses = b.misses - a.misses;
  r.hit_rate = hits + misses > 0 ? static_cast<double>(hits) / (hits + misses) : 0;
  r.rows_read_per_step = (b.rows_read - a.rows_read) / n;
  r.rows_written_per_step = (b.rows_written - a.rows_written) / n;
  r.misses_per_step = misses / n;
  r.prefetch_stall_ms_per_step = 1e3 * (b.prefetch_stall_seconds - a.prefetch_stall_seconds) / n;
  r.read_ms_per_step = 1e3 * (b.read_seconds - a.read_seconds) / n;
  r.sync_reads_per_step = (b.sync_reads - a.sync_reads) / n;
  r.prefetch_used_per_step = (b.prefetch_used - a.prefetch_used) / n;
  r.write_stall_ms_per_step = 1e3 * (b.write_stall_seconds - a.write_stall_seconds) / n;
  r.disk_bytes = b.sst_bytes;
  return r;
}

}  // namespace tessera
