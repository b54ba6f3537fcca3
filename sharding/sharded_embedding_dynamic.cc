// ShardedEmbeddingCollection's dynamic tables: training / evaluation, the whole table gathered
// by key (export), and the table's counters (stats).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "sharding/dynamic_pieces.h"
#include "sharding/internal/sharded_impl.h"

namespace tessera {
namespace {

template <typename T>
void Put(std::vector<char>* b, const T* p, size_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  b->insert(b->end(), c, c + n * sizeof(T));
}
template <typename T>
void Take(const char** p, T* out, size_t n) {
  std::memcpy(out, *p, n * sizeof(T));
  *p += n * sizeof(T);
}

// One shard's state as bytes: rect, sizes, then the arrays.
void Serialize(const Shard& rect, const DynamicTableState& s, std::vector<char>* b) {
  const int64_t head[8] = {rect.row_begin,
                           rect.row_end,
                           rect.col_begin,
                           rect.col_end,
                           static_cast<int64_t>(s.keys.size()),
                           static_cast<int64_t>(s.state.size()),
                           static_cast<int64_t>(s.weights.size()),
                           static_cast<int64_t>(s.dtype)};
  Put(b, head, 8);
  const int64_t stats[7] = {s.stats.steps,   s.stats.admissions, s.stats.evictions,
                            s.stats.refused, s.stats.lookups,    s.stats.unadmitted_lookups,
                            s.stats.probes};
  Put(b, stats, 7);
  Put(b, s.keys.data(), s.keys.size());
  Put(b, s.weights.data(), s.weights.size());
  Put(b, s.state.data(), s.state.size());
  Put(b, s.lookups.data(), s.lookups.size());
  Put(b, s.last_step.data(), s.last_step.size());
}

void Deserialize(const char** p, int64_t state_dim, Shard* rect, DynamicTableState* s) {
  int64_t head[8], stats[7];
  Take(p, head, 8);
  Take(p, stats, 7);
  rect->row_begin = head[0];
  rect->row_end = head[1];
  rect->col_begin = head[2];
  rect->col_end = head[3];
  const int64_t n = head[4];
  s->dim = rect->num_cols();
  s->dtype = static_cast<RowDtype>(head[7]);
  s->state_dim = state_dim;
  s->keys.resize(n);
  s->weights.resize(head[6]);
  s->state.resize(head[5]);
  s->lookups.resize(n);
  s->last_step.resize(n);
  s->stats = {0, 0, stats[0], stats[1], stats[2], stats[3], stats[4], stats[5], stats[6]};
  Take(p, s->keys.data(), n);
  Take(p, s->weights.data(), s->weights.size());
  Take(p, s->state.data(), s->state.size());
  Take(p, s->lookups.data(), n);
  Take(p, s->last_step.data(), n);
}

}  // namespace

void ShardedEmbeddingCollection::SetTraining(bool training) {
  for (auto& ls : impl_->layout.local) {
    if (impl_->layout.IsDynamic(ls))
      static_cast<DynamicRowStore*>(ls.store.get())->set_admitting(training);
  }
}

absl::StatusOr<DynamicTableState> ShardedEmbeddingCollection::GatherDynamicTable(int t,
                                                                                 bool with_state) {
  const internal::ShardLayout& s = impl_->layout;
  const auto& tables = s.options.collection.tables;
  if (t < 0 || t >= static_cast<int>(tables.size()) || !s.routes[t].dynamic) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherDynamicTable: table ", t, " is not a dynamic table"));
  }
  const TableConfig& cfg = tables[t];
  const RowOptimizerType type = s.options.collection.optimizer.type;
  std::vector<char> mine;
  int64_t count = 0;
  if (group_index() == 0) {
    for (const auto& ls : s.local) {
      if (ls.table != t) continue;
      DynamicTableState st;
      TESSERA_RETURN_IF_ERROR(
          static_cast<const DynamicRowStore*>(ls.store.get())->SaveState(with_state, &st));
      Serialize(ls.rect, st, &mine);
      ++count;
    }
  }
  std::vector<char> block;
  Put(&block, &count, 1);
  block.insert(block.end(), mine.begin(), mine.end());
  Communicator& world = *s.world;
  const int size = world.size();
  std::vector<int64_t> bytes(size), displs(size);
  TESSERA_RETURN_IF_ERROR(
      world.AllGatherCounts(static_cast<int64_t>(block.size()), absl::MakeSpan(bytes)));
  for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + bytes[r - 1];
  std::vector<char> all(displs[size - 1] + bytes[size - 1]);
  TESSERA_RETURN_IF_ERROR(world.AllGatherV(block.data(), static_cast<int64_t>(block.size()),
                                           all.data(), bytes, displs));
  std::vector<Shard> rects;
  std::vector<DynamicTableState> states;
  for (int r = 0; r < size; ++r) {
    const char* p = all.data() + displs[r];
    int64_t k;
    Take(&p, &k, 1);
    for (int64_t i = 0; i < k; ++i) {
      rects.emplace_back();
      states.emplace_back();
      Deserialize(&p, 0, &rects.back(), &states.back());
      states.back().state_dim = RowStateDim(type, rects.back().num_cols());
    }
  }
  std::vector<DynamicPiece> pieces;
  for (size_t i = 0; i < states.size(); ++i) pieces.push_back({rects[i], &states[i]});
  return MergeDynamicPieces(pieces, cfg.name, cfg.dim, type);
}

absl::StatusOr<DynamicTableStats> ShardedEmbeddingCollection::DynamicStats(int t) {
  const internal::ShardLayout& s = impl_->layout;
  const auto& tables = s.options.collection.tables;
  if (t < 0 || t >= static_cast<int>(tables.size()) || !s.routes[t].dynamic) {
    return absl::InvalidArgumentError(
        absl::StrCat("DynamicStats: table ", t, " is not a dynamic table"));
  }
  // capacity, occupancy, admissions, evictions, refused, lookups, unadmitted, probes; steps and
  // the number of shards counted, for the step count.
  int64_t v[10] = {};
  if (group_index() == 0) {
    for (const auto& ls : s.local) {
      if (ls.table != t || ls.rect.col_begin != 0) continue;
      const DynamicTableStats st = static_cast<const DynamicRowStore*>(ls.store.get())->stats();
      const int64_t add[10] = {
          st.capacity, st.occupancy,          st.admissions, st.evictions, st.refused,
          st.lookups,  st.unadmitted_lookups, st.probes,     st.steps,     1};
      for (int i = 0; i < 10; ++i) v[i] += add[i];
    }
  }
  TESSERA_RETURN_IF_ERROR(s.world->AllReduce(v, 10, ReduceOp::kSum));
  DynamicTableStats out;
  out.capacity = v[0];
  out.occupancy = v[1];
  out.admissions = v[2];
  out.evictions = v[3];
  out.refused = v[4];
  out.lookups = v[5];
  out.unadmitted_lookups = v[6];
  out.probes = v[7];
  out.steps = v[9] > 0 ? v[8] / v[9] : 0;
  return out;
}

}  // namespace tessera
