// ShardedEmbeddingCollection's checkpoint accessors: what trainer/checkpoint.cc saves and
// restores per rank (local shards, data-parallel replicas, average mode's between-sync state).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera {

std::vector<ShardedEmbeddingCollection::LocalShardRef>
ShardedEmbeddingCollection::local_shards() {
  std::vector<LocalShardRef> out;
  for (auto& ls : impl_->layout.local) {
    LocalShardRef r;
    r.table = ls.table;
    r.shard = impl_->layout.requests[ls.request].shard;
    r.rect = ls.rect;
    r.store = ls.store.get();
    out.push_back(r);
  }
  return out;
}

RowStore* ShardedEmbeddingCollection::data_parallel_store(int t) {
  if (t < 0 || t >= static_cast<int>(impl_->layout.routes.size())) return nullptr;
  const auto& route = impl_->layout.routes[t];
  return route.data_parallel ? impl_->dp.store(route.dp) : nullptr;
}

ShardedEmbeddingCollection::ReplicaSyncState ShardedEmbeddingCollection::replica_sync_state(
    int i) const {
  const internal::ShardSyncState& st = impl_->sync->state(i);
  return {st.touched, st.pending_rows, st.pending_avg, st.pending_snapshot};
}

absl::Status ShardedEmbeddingCollection::set_replica_sync_state(int i, ReplicaSyncState state) {
  const internal::ShardLayout& l = impl_->layout;
  if (i < 0 || i >= static_cast<int>(l.local.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_replica_sync_state: local shard ", i, " outside [0, ",
                     l.local.size(), ")"));
  }
  const internal::LocalShard& ls = l.local[i];
  const int64_t rows = ls.rect.num_rows();
  const int64_t sd = ls.store->state_dim();
  const std::string where = absl::StrCat("table '", l.options.collection.tables[ls.table].name,
                                         "' shard ", l.requests[ls.request].shard);
  for (const auto* list : {&state.touched, &state.pending_rows}) {
    for (size_t k = 0; k < list->size(); ++k) {
      // A dynamic shard's rows are keys (any int64, increasing).
      const bool in_range = l.routes[ls.table].dynamic || ((*list)[k] >= 0 && (*list)[k] < rows);
      if (!in_range || (k > 0 && (*list)[k] <= (*list)[k - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": replica sync rows must be increasing local rows in [0, ", rows,
            "), got ", (*list)[k], " at ", k));
      }
    }
  }
  const size_t want = state.pending_rows.size() * static_cast<size_t>(sd);
  if (state.pending_avg.size() != want || state.pending_snapshot.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": pending state average/snapshot hold ", state.pending_avg.size(), "/",
        state.pending_snapshot.size(), " floats, expected ", want, " (", state.pending_rows.size(),
        " rows x state_dim ", sd, ")"));
  }
  internal::ShardSyncState& st = impl_->sync->mutable_state(i);
  st.touched = std::move(state.touched);
  st.pending_rows = std::move(state.pending_rows);
  st.pending_avg = std::move(state.pending_avg);
  st.pending_snapshot = std::move(state.pending_snapshot);
  return absl::OkStatus();
}

int64_t ShardedEmbeddingCollection::sync_clock() const { return impl_->sync->clock(); }
void ShardedEmbeddingCollection::set_sync_clock(int64_t updates) {
  impl_->sync->set_clock(updates);
}
const ShardedEmbeddingOptions& ShardedEmbeddingCollection::options() const {
  return impl_->layout.options;
}
Communicator& ShardedEmbeddingCollection::world() { return *impl_->layout.world; }
// The replica group is split with the sharding group index as key (sharding/process_grid.cc).
int ShardedEmbeddingCollection::group_index() const { return impl_->layout.replica->rank(); }
int ShardedEmbeddingCollection::shard_rank() const { return impl_->layout.me; }
int ShardedEmbeddingCollection::num_groups() const { return impl_->layout.m; }
int ShardedEmbeddingCollection::group_size() const { return impl_->layout.n; }

}  // namespace tessera
