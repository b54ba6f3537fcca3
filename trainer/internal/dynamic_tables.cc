#include "trainer/internal/dynamic_tables.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/embedding_collection.h"
#include "trainer/internal/checkpoint_files.h"
#include "trainer/stores.h"

namespace tessera::internal {
namespace {

std::string Pre(const std::string& name) { return "table." + name + "."; }
constexpr int64_t kStats = 7;

}  // namespace

absl::Status CheckDynamicMemory(const Config& config, const HostMemory& available) {
  if (available.bytes < 0) return absl::OkStatus();
  int64_t total = 0, largest = -1, largest_bytes = 0;
  for (size_t t = 0; t < config.model.tables.size(); ++t) {
    const TableConfig& table = config.model.tables[t];
    if (!table.dynamic.enabled) continue;
    const int64_t bytes =
        DynamicRowStore::MemoryBytes(DynamicStoreOptions(config, static_cast<int>(t)));
    total += bytes;
    if (bytes > largest_bytes) {
      largest = static_cast<int64_t>(t);
      largest_bytes = bytes;
    }
  }
  if (largest < 0 || total <= available.bytes) return absl::OkStatus();
  const TableConfig& table = config.model.tables[largest];
  return absl::ResourceExhaustedError(absl::StrCat(
      config.source.empty() ? "" : config.source + ": ", "model.tables[", largest,
      "].dynamic.capacity_rows: table '", table.name, "' needs ", largest_bytes, " bytes (",
      total, " for all dynamic tables: rows (or the RocksDB tier's row cache), optimizer state, "
      "key index, admission counters) "
      "but ", available.bytes, " bytes are available (", available.source, ")"));
}

void AppendDynamicCheckpointSpecs(const std::string& name, const DynamicTableState& s,
                                  std::vector<TensorSpec>* specs) {
  AppendDynamicSpecsAt(Pre(name), s, specs);
}

void AppendDynamicSpecsAt(const std::string& p, const DynamicTableState& s,
                          std::vector<TensorSpec>* specs) {
  const int64_t n = static_cast<int64_t>(s.keys.size());
  specs->push_back({p + "keys", SafetensorsDtype::kU64, {n}});
  specs->push_back({p + "weight", StoredTensorDtype(s.dtype), {n, s.dim}});
  if (s.state_dim > 0) specs->push_back({p + "state", SafetensorsDtype::kF32, {n, s.state_dim}});
  specs->push_back({p + "lookups", SafetensorsDtype::kI64, {n}});
  specs->push_back({p + "last_step", SafetensorsDtype::kI64, {n}});
  if (!s.sketch.empty()) {
    specs->push_back({p + "admission_counters", SafetensorsDtype::kU16,
                      {static_cast<int64_t>(s.sketch.size())}});
  }
  specs->push_back({p + "dynamic_stats", SafetensorsDtype::kI64, {kStats}});
}

absl::Status WriteDynamicCheckpointTensors(const std::string& name, const DynamicTableState& s,
                                           SafetensorsWriter& w) {
  return WriteDynamicTensorsAt(Pre(name), s, w);
}

absl::Status WriteDynamicTensorsAt(const std::string& p, const DynamicTableState& s,
                                   SafetensorsWriter& w) {
  TESSERA_RETURN_IF_ERROR(w.WriteTensor(p + "keys", s.keys.data()));
  TESSERA_RETURN_IF_ERROR(w.WriteTensor(p + "weight", s.weights.data()));
  if (s.state_dim > 0) TESSERA_RETURN_IF_ERROR(w.WriteTensor(p + "state", s.state.data()));
  std::vector<int64_t> lookups(s.lookups.begin(), s.lookups.end());
  TESSERA_RETURN_IF_ERROR(w.WriteTensor(p + "lookups", lookups.data()));
  TESSERA_RETURN_IF_ERROR(w.WriteTensor(p + "last_step", s.last_step.data()));
  if (!s.sketch.empty()) {
    TESSERA_RETURN_IF_ERROR(w.WriteTensor(p + "admission_counters", s.sketch.data()));
  }
  const DynamicTableStats& st = s.stats;
  const int64_t stats[kStats] = {st.steps,   st.admissions,         st.evictions, st.refused,
                                 st.lookups, st.unadmitted_lookups, st.probes};
  return w.WriteTensor(p + "dynamic_stats", stats);
}

bool CheckpointHasDynamicTable(const SafetensorsFile& file, const std::string& name) {
  return file.Find(Pre(name) + "keys") != nullptr;
}

absl::Status ReadDynamicCheckpointTable(const SafetensorsFile& file, const std::string& name,
                                        DynamicRowStore& store, size_t* expected) {
  const std::string p = Pre(name);
  const TensorView* keys = file.Find(p + "keys");
  if (keys == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": table '", name, "' is dynamic (model.tables[].dynamic) but the "
        "checkpoint holds it as a static table (no tensor ", p, "keys): a static table's rows "
        "are not keys; train it as dynamic from the start or drop the dynamic block"));
  }
  TESSERA_ASSIGN_OR_RETURN(
      DynamicTableState s,
      ReadDynamicStateAt(file, p, store.dim(), store.state_dim(), store.weight_dtype(), expected));
  absl::Status loaded = store.LoadState(s);
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", loaded.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<DynamicTableState> ReadDynamicStateAt(const SafetensorsFile& file,
                                                     const std::string& p, int64_t dim,
                                                     int64_t state_dim, RowDtype dtype,
                                                     size_t* expected) {
  const TensorView* keys = file.Find(p + "keys");
  if (keys == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": no tensor ", p, "keys (a dynamic table's keys)"));
  }
  const int64_t n = keys->num_elements();
  TESSERA_ASSIGN_OR_RETURN(keys, file.Get(p + "keys", SafetensorsDtype::kU64, {n}));
  DynamicTableState s;
  s.dim = dim;
  s.state_dim = state_dim;
  s.dtype = dtype;
  s.keys.resize(n);
  std::memcpy(s.keys.data(), keys->data, static_cast<size_t>(n) * 8);
  TESSERA_ASSIGN_OR_RETURN(const TensorView* w,
                           GetTableWeights(file, p + "weight", s.dtype, {n, s.dim}));
  s.weights.resize(static_cast<size_t>(n * dim * RowDtypeBytes(dtype)));
  if (w->dtype == StoredTensorDtype(s.dtype)) {
    std::memcpy(s.weights.data(), w->data, s.weights.size());
  } else {  // an fp32 checkpoint into a 16-bit table: rounded to nearest
    RowValuesFromFloat(s.dtype, w->f32(), n * s.dim, s.weights.data());
  }
  *expected += 3;  // keys, weight, dynamic_stats
  if (s.state_dim > 0) {
    TESSERA_ASSIGN_OR_RETURN(const TensorView* st,
                             file.Get(p + "state", SafetensorsDtype::kF32, {n, s.state_dim}));
    s.state.assign(st->f32(), st->f32() + n * s.state_dim);
    ++*expected;
  }
  TESSERA_ASSIGN_OR_RETURN(const TensorView* lookups,
                           file.Get(p + "lookups", SafetensorsDtype::kI64, {n}));
  TESSERA_ASSIGN_OR_RETURN(const TensorView* last,
                           file.Get(p + "last_step", SafetensorsDtype::kI64, {n}));
  *expected += 2;
  const int64_t* lk = static_cast<const int64_t*>(lookups->data);
  s.lookups.assign(lk, lk + n);
  const int64_t* ls = static_cast<const int64_t*>(last->data);
  s.last_step.assign(ls, ls + n);
  if (const TensorView* c = file.Find(p + "admission_counters")) {
    TESSERA_ASSIGN_OR_RETURN(c, file.Get(p + "admission_counters", SafetensorsDtype::kU16,
                                         {c->num_elements()}));
    const uint16_t* cv = static_cast<const uint16_t*>(c->data);
    s.sketch.assign(cv, cv + c->num_elements());
    ++*expected;
  }
  TESSERA_ASSIGN_OR_RETURN(const TensorView* stats,
                           file.Get(p + "dynamic_stats", SafetensorsDtype::kI64, {kStats}));
  const int64_t* sv = static_cast<const int64_t*>(stats->data);
  s.stats.steps = sv[0];
  s.stats.admissions = sv[1];
  s.stats.evictions = sv[2];
  s.stats.refused = sv[3];
  s.stats.lookups = sv[4];
  s.stats.unadmitted_lookups = sv[5];
  s.stats.probes = sv[6];
  return s;
}

absl::StatusOr<DynamicExport> ExportDynamicTable(const std::string& name,
                                                 const DynamicRowStore& store) {
  DynamicTableState s;
  TESSERA_RETURN_IF_ERROR(store.SaveState(/*with_state=*/false, &s));
  return ExportDynamicState(name, std::move(s));
}

DynamicExport ExportDynamicState(const std::string& name, DynamicTableState s) {
  DynamicExport e;
  e.name = name;
  e.dim = s.dim;
  e.keys = std::move(s.keys);
  e.weights.resize(e.keys.size() * static_cast<size_t>(s.dim));
  RowValuesToFloat(s.dtype, s.weights.data(), static_cast<int64_t>(e.weights.size()),
                   e.weights.data());
  return e;
}

absl::Status ImportDynamicTable(const SafetensorsFile& file, const std::string& name,
                                DynamicRowStore& store) {
  const std::string kn = "embedding." + name + ".keys", wn = "embedding." + name + ".weight";
  const TensorView* keys = file.Find(kn);
  if (keys == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": table '", name, "' is dynamic but the file has no ", kn,
        " (exported from a static table?)"));
  }
  const int64_t n = keys->num_elements();
  TESSERA_ASSIGN_OR_RETURN(keys, file.Get(kn, SafetensorsDtype::kU64, {n}));
  TESSERA_ASSIGN_OR_RETURN(const TensorView* w,
                           file.Get(wn, SafetensorsDtype::kF32, {n, store.dim()}));
  DynamicTableState s;
  s.dim = store.dim();
  s.state_dim = store.state_dim();
  s.dtype = store.weight_dtype();
  s.keys.resize(n);
  std::memcpy(s.keys.data(), keys->data, static_cast<size_t>(n) * 8);
  s.weights.resize(static_cast<size_t>(n * store.weight_row_bytes()));
  RowValuesFromFloat(s.dtype, w->f32(), n * s.dim, s.weights.data());
  s.lookups.assign(n, 0);
  s.last_step.assign(n, 0);
  s.stats = store.stats();
  absl::Status loaded = store.LoadState(s);
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", loaded.message()));
  }
  return absl::OkStatus();
}

std::vector<DynamicTableEntry> CollectDynamicStats(SparseArch& sparse) {
  std::vector<DynamicTableEntry> out;
  for (int t = 0; t < sparse.num_tables(); ++t) {
    if (!sparse.table(t).dynamic.enabled) continue;
    absl::StatusOr<DynamicTableStats> s = sparse.DynamicStats(t);  // collective when sharded
    if (s.ok()) out.push_back({t, sparse.table(t).name, *s});
  }
  return out;
}

namespace {
double Frac(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / b : 0.0; }
}  // namespace

JsonLine DynamicStatsLine(int64_t step, const DynamicTableEntry& now,
                          const DynamicTableStats& before) {
  const DynamicTableStats& s = now.stats;
  const int64_t lookups = s.lookups - before.lookups;
  return JsonLine()
      .Add("step", step)
      .Add("dynamic_table", now.name)
      .Add("dynamic_occupancy", s.occupancy)
      .Add("dynamic_occupancy_frac", Frac(s.occupancy, s.capacity))
      .Add("dynamic_admissions", s.admissions - before.admissions)
      .Add("dynamic_evictions", s.evictions - before.evictions)
      .Add("dynamic_refused", s.refused - before.refused)
      .Add("dynamic_unadmitted_frac", Frac(s.unadmitted_lookups - before.unadmitted_lookups,
                                           lookups))
      .Add("dynamic_probe_length", Frac(s.probes - before.probes, lookups));
}

std::string DynamicProgressNote(const std::vector<DynamicTableEntry>& now,
                                const std::vector<DynamicTableEntry>& before) {
  std::string note;
  for (size_t i = 0; i < now.size(); ++i) {
    const DynamicTableStats& s = now[i].stats;
    const DynamicTableStats b = i < before.size() ? before[i].stats : DynamicTableStats();
    absl::StrAppend(&note, note.empty() ? "" : ", ", now[i].name, " ",
                    static_cast<int>(100.0 * Frac(s.occupancy, s.capacity)), "% full ",
                    static_cast<int>(100.0 * Frac(s.unadmitted_lookups - b.unadmitted_lookups,
                                                  s.lookups - b.lookups)),
                    "% unadmitted");
  }
  return note;
}

}  // namespace tessera::internal
