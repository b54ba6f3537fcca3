// ShardedEmbeddingCollection: Create (the layout and the phase objects) and the orchestration of
// Forward and BackwardUpdate over the phases of sharding/internal/ (input_dist.h, output_dist.h,
// replica_sync.h, shard_update.h, data_parallel.h); the per-element work of the phases is behind
// internal/shard_kernels.h, the transport behind the Communicator.
#include "sharding/sharded_embedding.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/internal/payload_transport.h"
#include "sharding/internal/shard_update.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera {

using internal::LocalShard;
using internal::MakeStore;
using internal::Request;

ShardedEmbeddingCollection::~ShardedEmbeddingCollection() = default;

namespace {

// What CUDA shards do not support yet, refused before any collective (the same verdict on every
// rank): Unimplemented naming the key.
absl::Status CheckCudaOptions(const ShardedEmbeddingOptions& o) {
  for (const TableConfig& t : o.collection.tables) {
    if (t.storage.tier != StorageTier::kMemory && !t.storage.device_cached()) {
      return absl::UnimplementedError(absl::StrCat(
          "table '", t.name,
          "': storage.tier rocksdb with device: cuda shards needs "
          "storage.device_cache_rows (an HBM cache over each shard's tier); without one the "
          "shards of such a model stay in host memory (trainer/world.cc)"));
    }
    if (t.storage.dtype != RowDtype::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", t.name, "': storage.dtype ", RowDtypeName(t.storage.dtype),
          " is not supported on CUDA yet (use storage.dtype fp32 with device cuda, or run on the "
          "CPU)"));
    }
  }
  return absl::OkStatus();
}

// A dynamic table (sharding/key_routing.h) in what the sharded path supports of it.
absl::Status CheckDynamicTable(const TableConfig& cfg, const TablePlan& tp,
                               const ShardedEmbeddingOptions& options, int m,
                               const DeviceContext& ctx) {
  const std::string where =
      absl::StrCat("table '", cfg.name, "' is dynamic (model.tables[].dynamic)");
  if (tp.type == ShardingType::kDataParallel) {
    // Each replica would admit the keys of its own batch: the replicas would hold other keys.
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": sharding type data_parallel cannot hold it (every rank would admit the keys "
        "of its own batch); shard it table_wise, row_wise, column_wise or grid"));
  }
  if (ctx.is_cuda()) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": dynamic tables train on the CPU for now (device: cpu)"));
  }
  if (cfg.storage.device_cached()) {
    return absl::UnimplementedError(absl::StrCat(
        where,
        ": a sharded dynamic table has no device cache yet (storage.device_cache_rows / "
        "device_cache_bytes)"));
  }
  if (cfg.storage.tier == StorageTier::kRocksDb) {
    // Over the tier a shard's slots are cache slots: the paths that map slots back to keys
    // (replicas' sums and syncs, a column-split row-wise AdaGrad update) are in-memory only.
    bool col_split = false;
    for (const Shard& sh : tp.shards) col_split |= sh.num_cols() != cfg.dim;
    const char* why = nullptr;
    if (m > 1) {
      why =
          "over the RocksDB tier it has no replicas yet (sharding.group_size = the world "
          "size, one sharding group)";
    } else if (col_split &&
               options.collection.optimizer.type == RowOptimizerType::kRowWiseAdagrad) {
      why =
          "over the RocksDB tier it is not split by columns under rowwise_adagrad yet (use "
          "table_wise, row_wise or table_row_wise, or storage.tier memory)";
    }
    if (why != nullptr) return absl::UnimplementedError(absl::StrCat(where, ": ", why));
  }
  if (m > 1 && options.replica_sync == ReplicaSync::kAverage &&
      options.sync_rows == SyncRows::kAll) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": sharding.sync_rows all has no row range to send for it; use sync_rows "
                     "touched"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedEmbeddingCollection>> ShardedEmbeddingCollection::Create(
    const ShardedEmbeddingOptions& options, const ProcessGrid& grid, const DeviceContext& ctx) {
  const auto& co = options.collection;
  if (ctx.is_cuda()) TESSERA_RETURN_IF_ERROR(CheckCudaOptions(options));
  // The single-process collection validates tables and features; building one over empty stores
  // would cost memory, so repeat its checks on a tiny copy of the options instead.
  {
    EmbeddingCollectionOptions probe = co;
    for (auto& t : probe.tables) {
      if (t.num_rows <= 0 || t.dim <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("table '", t.name,
                                                       "': num_rows and dim must be positive (got ",
                                                       t.num_rows, " x ", t.dim, ")"));
      }
      t.num_rows = 1;
    }
    TESSERA_RETURN_IF_ERROR(EmbeddingCollection::Create(probe, DeviceContext::Cpu()).status());
  }
  if (options.sync_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharding.sync_every must be >= 1, got ", options.sync_every));
  }
  std::unique_ptr<ShardedEmbeddingCollection> c(new ShardedEmbeddingCollection());
  c->impl_ = std::make_unique<Impl>();
  Impl& impl = *c->impl_;
  internal::ShardLayout& s = impl.layout;
  s.options = options;
  s.ctx = ctx;
  s.host = ctx.is_cuda() ? DeviceContext::Cpu() : ctx;
  s.world = grid.world_ptr();
  s.group = grid.sharding_group_ptr();
  s.replica = grid.replica_group_ptr();
  s.n = grid.group_size();
  s.m = grid.num_groups();
  s.me = grid.shard_rank();
  s.world_rank_of.resize(s.m * s.n);
  for (int g = 0; g < s.m; ++g) {
    for (int r = 0; r < s.n; ++r) s.world_rank_of[g * s.n + r] = grid.shape().WorldRank(g, r);
  }
  if (options.plan.tables.empty()) {
    TESSERA_ASSIGN_OR_RETURN(s.plan, ValidateShardingPlan(DefaultShardingPlan(co.tables, s.n),
                                                          co.tables, s.n, "default plan"));
  } else {
    TESSERA_ASSIGN_OR_RETURN(s.plan,
                             ValidateShardingPlan(options.plan, co.tables, s.n, "sharding plan"));
  }
  // 16-bit tables (storage.dtype fp16 / bf16) run the row update of embedding/pooled_lookup.h;
  // the two paths that update rows themselves take fp32 tables only for now.
  for (const TableConfig& cfg : co.tables) {
    if (cfg.output_dtype != RowDtype::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", cfg.name, "': output_dtype ", RowDtypeName(cfg.output_dtype),
          " runs on one process only for now (sharded tables send fp32 pooled outputs; use "
          "output_dtype fp32)"));
    }
    if (cfg.storage.dtype == RowDtype::kF32) continue;
    if (options.replica_sync == ReplicaSync::kAverage && s.m > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", cfg.name, "': storage.dtype ", RowDtypeName(cfg.storage.dtype),
          " is not supported with sharding.replica_sync average yet (use exact, or fp32)"));
    }
  }
  s.update_opt = co.optimizer;
  if (options.replica_sync == ReplicaSync::kAverage) {
    s.update_opt.adagrad_divisor =
        options.adagrad_divisor > 0 ? options.adagrad_divisor : static_cast<float>(s.m);
  }

  TESSERA_RETURN_IF_ERROR(internal::BuildRouting(&s));
  // A store that fails to open (a RocksDB path not writable, memory short) must fail Create on
  // every rank, or the others would wait in the first collective: the first error is kept and
  // the ranks agree below.
  absl::Status store_error;
  for (int t = 0; t < static_cast<int>(co.tables.size()); ++t) {
    const TableConfig& cfg = co.tables[t];
    const TablePlan& tp = s.plan.tables[t];
    auto& route = s.routes[t];
    if (route.dynamic) TESSERA_RETURN_IF_ERROR(CheckDynamicTable(cfg, tp, options, s.m, ctx));
    if (!route.data_parallel) continue;
    if (cfg.storage.tier == StorageTier::kRocksDb) {
      // The data-parallel update indexes the all-reduced gradient table by slot (slot == row
      // in memory), and a replicated table gains nothing from a per-rank database.
      return absl::InvalidArgumentError(
          absl::StrCat("table '", cfg.name,
                       "': storage.tier rocksdb is not supported for a data_parallel "
                       "table (replicated on every rank); use storage.tier memory or shard it"));
    }
    if (cfg.storage.device_cached()) {
      // The data-parallel update indexes its all-reduced gradient table by slot == row.
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", cfg.name,
          "': storage.device_cache_rows is not supported for a "
          "data_parallel table (replicated on every rank); shard it, or hold it whole"));
    }
    auto store = MakeStore(co, t, 0, cfg.num_rows, 0, cfg.dim, s.world->rank(), 0, ctx);
    if (!store.ok()) {
      if (store_error.ok()) store_error = store.status();
      continue;
    }
    route.dp = impl.dp.Add(t, std::move(store).value());
  }
  // This rank's shards and their stores, in request order.
  for (int index = 0; index < static_cast<int>(s.requests.size()); ++index) {
    internal::Request& r = s.requests[index];
    if (r.owner != s.me) continue;
    const Shard& sh = r.rect;
    internal::LocalShard ls;
    ls.request = index;
    ls.table = r.table;
    ls.rect = sh;
    ls.width = sh.num_cols();
    ls.col_split = r.col_split;
    auto store = MakeStore(co, r.table, sh.row_begin, sh.row_end, sh.col_begin, sh.col_end,
                           s.world->rank(), r.shard, ctx);
    if (!store.ok()) {
      if (store_error.ok()) store_error = store.status();
    } else {
      ls.store = std::move(store).value();
    }
    r.local = static_cast<int>(s.local.size());
    s.local.push_back(std::move(ls));
  }
  // Only with a RocksDB-tier table or device memory (the same on every rank: a rank whose
  // shard does not fit its GPU must not leave the others waiting), so the all-in-memory CPU
  // Create keeps its collectives (and communicator stats) unchanged.
  bool any_tiered = false;
  for (const TableConfig& cfg : co.tables) {
    // A dynamic shard's memory is allocated here too (ResourceExhausted on one rank).
    any_tiered |= cfg.storage.tier == StorageTier::kRocksDb || cfg.dynamic.enabled;
  }
  if (any_tiered || ctx.is_cuda()) {
    int64_t failed = store_error.ok() ? 0 : 1;
    TESSERA_RETURN_IF_ERROR(s.world->AllReduce(&failed, 1, ReduceOp::kSum));
    if (failed > 0) {
      if (!store_error.ok()) return store_error;
      return absl::FailedPreconditionError(
          absl::StrCat("ShardedEmbeddingCollection::Create: ", failed,
                       " rank(s) could not open their shard stores (see their errors)"));
    }
  } else if (!store_error.ok()) {
    return store_error;
  }
  TESSERA_ASSIGN_OR_RETURN(
      s.payload, internal::CreatePayloadCommunicator(ctx, options.transport, *s.world, s.group));
  impl.input = std::make_unique<internal::InputDist>(s);
  impl.output = std::make_unique<internal::OutputDist>(s);
  impl.sync = std::make_unique<internal::ReplicaSyncPhase>(s);
  impl.grads.resize(s.local.size());
  return c;
}

int64_t ShardedEmbeddingCollection::output_dim() const { return impl_->layout.output_dim; }
int64_t ShardedEmbeddingCollection::feature_column(int f) const {
  return impl_->layout.feature_column[f];
}
int ShardedEmbeddingCollection::num_tables() const {
  return static_cast<int>(impl_->layout.options.collection.tables.size());
}
const TableConfig& ShardedEmbeddingCollection::table(int t) const {
  return impl_->layout.options.collection.tables[t];
}
const ShardingPlan& ShardedEmbeddingCollection::plan() const { return impl_->layout.plan; }
bool ShardedEmbeddingCollection::on_device() const { return impl_->layout.ctx.is_cuda(); }
std::string ShardedEmbeddingCollection::payload_backend() const {
  return impl_->layout.payload->backend();
}
void ShardedEmbeddingCollection::set_phase_times(PhaseTimes* times) { impl_->times = times; }

int64_t ShardedEmbeddingCollection::prefetched_forwards() const {
  return impl_->input->prefetched_forwards();
}

void ShardedEmbeddingCollection::Prefetch(const KeyedJagged& next) {
  if (!impl_->layout.options.pipeline_input_dist) return;
  impl_->input->Prefetch(next);
}

absl::Status ShardedEmbeddingCollection::Forward(const KeyedJagged& batch, float* out) {
  Impl& s = *impl_;
  internal::InputDist& input = *s.input;
  internal::OutputDist& output = *s.output;
  internal::ReplicaSyncPhase& sync = *s.sync;
  internal::InputDist::Result got;
  {
    ScopedPhase phase(s.times, "input_dist");
    if (s.step.pending) {
      // The last Forward had no BackwardUpdate (evaluation): its rows were only read. End that
      // step so a tiered shard unpins them (without marking them dirty); otherwise every forward
      // of an evaluation would pin more rows until the cache is full.
      for (auto& ls : s.layout.local) TESSERA_RETURN_IF_ERROR(ls.store->EndReadOnlyStep());
      TESSERA_RETURN_IF_ERROR(s.dp.EndReadOnlyStep());
    }
    s.step.pending = false;
    // Headers and ids to the owners (or the prefetched payload, waited for); the next batch's
    // payload starts travelling.
    TESSERA_RETURN_IF_ERROR(input.Exchange(batch, out, &got));
  }
  s.step.batch = got.batch;
  s.step.weighted = got.weighted;
  s.step.offsets.assign(batch.offsets.begin(), batch.offsets.end());
  s.step.id_weights.assign(batch.weights.begin(), batch.weights.end());
  {
    // The local batch's offsets and weights where the kernels run (no copy on the CPU).
    const DeviceContext& ctx = s.layout.ctx;
    TESSERA_ASSIGN_OR_RETURN(
        s.step.ctx_offsets,
        internal::Mirror(ctx, s.step.offsets, &s.step.offsets_mirror, "the batch's offsets"));
    TESSERA_ASSIGN_OR_RETURN(s.step.ctx_id_weights,
                             internal::Mirror(ctx, s.step.id_weights, &s.step.id_weights_mirror,
                                              "the batch's per-id weights"));
    if (s.step.id_weights.empty()) s.step.ctx_id_weights = nullptr;
  }
  {
    // Owner: unpack, resolve once per shard, pool each (sender, feature) into the reply.
    ScopedPhase phase(s.times, "lookup");
    TESSERA_RETURN_IF_ERROR(input.Unpack());
    TESSERA_RETURN_IF_ERROR(output.PoolLocal(input.owners(), input.src_batch(), batch, got.batch));
  }
  // Average mode: the next sync's rows are known now when this step's update syncs.
  TESSERA_RETURN_IF_ERROR(sync.StartAhead(input));

  ScopedPhase phase_out(s.times, "output_dist");
  // Partial sums back to the requesters, reduced in shard order.
  TESSERA_RETURN_IF_ERROR(output.ExchangeForward());
  TESSERA_RETURN_IF_ERROR(sync.AdvanceAhead());
  TESSERA_RETURN_IF_ERROR(output.Reduce(batch, s.step.ctx_offsets, out));
  TESSERA_RETURN_IF_ERROR(s.dp.Forward(batch, s.step, got.weighted, out));
  // The sync's rows first, then the next batch's: a store stages its two latest hints, and the
  // sync hands over the next batch's rows again (AverageSync) after resolving its own. Not while
  // a batch in flight was kept: its rows, staged already, must stay staged for its Forward.
  TESSERA_RETURN_IF_ERROR(sync.FinishAhead(/*hint=*/!got.keeps_inflight));
  // The next batch's payload has usually landed during this step's all-to-alls: hand its rows
  // to the tiered shards now, so their reads overlap the dense work (else BackwardUpdate waits).
  TESSERA_RETURN_IF_ERROR(input.HintNextRows(/*wait=*/false));
  s.step.pending = true;
  return absl::OkStatus();
}

absl::Status ShardedEmbeddingCollection::BackwardUpdate(const float* d_out, float lr,
                                                        int64_t step) {
  Impl& s = *impl_;
  internal::InputDist& input = *s.input;
  internal::OutputDist& output = *s.output;
  internal::ReplicaSyncPhase& sync = *s.sync;
  if (!s.step.pending) {
    return absl::FailedPreconditionError(
        "ShardedEmbeddingCollection::BackwardUpdate: no Forward since the last update");
  }
  s.step.pending = false;
  if (d_out == nullptr && s.step.batch > 0) {
    // Other ranks are already heading into the gradient all-to-all: this is a caller bug.
    return absl::InvalidArgumentError("ShardedEmbeddingCollection::BackwardUpdate: null d_out");
  }
  {
    ScopedPhase phase(s.times, "backward_dist");
    TESSERA_RETURN_IF_ERROR(output.ExchangeBackward(s.step, input.src_batch(), d_out));
    // The next batch's rows, if Forward could not hint them yet: its payload is due at the next
    // Forward anyway, so waiting here costs nothing there and the reads overlap the update.
    TESSERA_RETURN_IF_ERROR(input.HintNextRows(/*wait=*/true));
  }
  {
    ScopedPhase phase(s.times, "aggregate");
    TESSERA_RETURN_IF_ERROR(output.Aggregate(input.owners(), input.src_batch(), &s.grads));
  }
  {
    ScopedPhase phase(s.times, "replica_sync");
    TESSERA_RETURN_IF_ERROR(sync.ReduceGradients(input, &s.grads));
  }
  {
    ScopedPhase phase(s.times, "update");
    TESSERA_RETURN_IF_ERROR(internal::ApplyShardUpdates(s.layout, &s.grads, lr, step, &s.update));
    sync.PrefetchReplicaRows();
    TESSERA_RETURN_IF_ERROR(s.dp.BackwardUpdate(s.step, d_out, lr, step));
    for (auto& ls : s.layout.local) TESSERA_RETURN_IF_ERROR(ls.store->EndStep());
    TESSERA_RETURN_IF_ERROR(s.dp.EndStep());
  }
  // The clock, and average mode's touched rows and periodic sync.
  std::optional<ScopedPhase> phase;
  if (s.layout.options.replica_sync == ReplicaSync::kAverage) {
    phase.emplace(s.times, "replica_sync");
  }
  return sync.AfterUpdate(input, s.grads);
}

}  // namespace tessera
