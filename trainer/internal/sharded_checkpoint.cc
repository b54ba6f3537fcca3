// Sharded checkpoints: see sharded_checkpoint.h for the layout and the protocol. Why the
// protocol has three agreements: a rank must never see LATEST name a checkpoint another rank has
// not finished (so publishing waits for every rank's verdict), and every rank must return the
// same outcome, or the next collective of the training loop would hang on the ranks that
// stopped.
#include "trainer/internal/sharded_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/tiered_row_store.h"
#include "trainer/internal/checkpoint_files.h"
#include "trainer/internal/checkpoint_reshard.h"
#include "trainer/internal/dynamic_tables.h"
#include "trainer/internal/run_fingerprint.h"
#include "trainer/safetensors.h"

namespace tessera::internal {
namespace fs = std::filesystem;

namespace {

using Tables = ShardedEmbeddingCollection;

// Every rank's verdict on its part of a step: OK when all succeeded; otherwise this rank's own
// error, or Aborted naming the ranks that failed.
absl::Status Agree(Communicator& world, const absl::Status& mine, const std::string& what) {
  std::vector<int64_t> failed(world.size());
  TESSERA_RETURN_IF_ERROR(world.AllGatherCounts(mine.ok() ? 0 : 1, absl::MakeSpan(failed)));
  std::vector<int> bad;
  for (int r = 0; r < world.size(); ++r) {
    if (failed[r] != 0) bad.push_back(r);
  }
  if (bad.empty()) return absl::OkStatus();
  if (!mine.ok()) return mine;
  return absl::AbortedError(absl::StrCat(what, ": rank(s) ", absl::StrJoin(bad, ", "),
                                         " failed (see their errors)"));
}

std::string RankFile(int rank) { return absl::StrCat("rank", rank, ".safetensors"); }
std::string ShardPrefix(const TableConfig& t, int k) {
  return absl::StrCat("shard.", t.name, ".", k, ".");
}
fs::path ShardDb(const fs::path& ckpt, const TableConfig& t, int rank, int k) {
  return ckpt / "tables" / t.name / absl::StrCat("rank", rank, "-shard", k);
}
bool IsTiered(RowStore* s) { return dynamic_cast<TieredRowStore*>(s) != nullptr; }

std::string PlanString(const TablePlan& tp) {
  std::string out = ShardingTypeName(tp.type);
  for (const Shard& sh : tp.shards) {
    absl::StrAppend(&out, " rows[", sh.row_begin, ",", sh.row_end, ")cols[", sh.col_begin, ",",
                    sh.col_end, ")@", sh.rank);
  }
  return out;
}

std::string ReplicaSyncString(const ShardedEmbeddingOptions& o) {
  if (o.replica_sync == ReplicaSync::kExact) return "exact";
  return absl::StrCat("average sync_every=", o.sync_every,
                      " sync_rows=", o.sync_rows == SyncRows::kAll ? "all" : "touched",
                      " adagrad_divisor=", o.adagrad_divisor);
}

// The keys that must match for any resume (resharding cannot change them).
std::map<std::string, std::string> FixedMetadata(const EmbeddingCollectionOptions& o,
                                                 uint64_t seed) {
  std::map<std::string, std::string> m;
  m["row_optimizer"] = std::to_string(static_cast<int>(o.optimizer.type));
  std::vector<std::string> names;
  for (const TableConfig& t : o.tables) names.push_back(t.name);
  m["tables"] = absl::StrJoin(names, ",");
  m["seed"] = std::to_string(seed);
  return m;
}

// What the writing run's shape was; a resume on another shape reshards.
std::map<std::string, std::string> ShapeMetadata(Model& model, Tables& tables) {
  std::map<std::string, std::string> m =
      FixedMetadata(tables.options().collection, model.config().seed);
  m["world_size"] = std::to_string(tables.world().size());
  m["grid"] = absl::StrCat(tables.num_groups(), "x", tables.group_size());
  m["replica_sync"] = ReplicaSyncString(tables.options());
  for (int t = 0; t < tables.num_tables(); ++t) {
    m["plan." + tables.table(t).name] = PlanString(tables.plan().tables[t]);
  }
  return m;
}

std::string Describe(const std::string& key) {
  if (key == "world_size") return "world size (ranks)";
  if (key == "grid") return "process grid (sharding groups x group size)";
  if (key == "replica_sync") return "replica sync";
  if (key == "row_optimizer") return "row optimizer (type id)";
  if (key == "tables") return "tables";
  if (key == "seed") return "seed";
  return "sharding plan of table '" + key.substr(5) + "'";
}

// The first key of `keys` whose value in `state` differs from `mine`, or "".
std::string FirstDifference(const SafetensorsFile& state,
                            const std::map<std::string, std::string>& mine,
                            std::vector<std::string> keys, std::string* theirs) {
  for (const std::string& k : keys) {
    auto it = state.metadata().find(k);
    *theirs = it == state.metadata().end() ? "(not recorded)" : it->second;
    if (*theirs != mine.at(k)) return k;
  }
  return "";
}

// InvalidArgument when tables, row optimizer or seed differ: no resume can honour that.
absl::Status CheckFixed(const std::string& checkpoint, const SafetensorsFile& state,
                        const std::map<std::string, std::string>& mine) {
  std::string theirs;
  const std::string k = FirstDifference(state, mine, {"tables", "row_optimizer", "seed"}, &theirs);
  if (k.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      checkpoint, ": written with ", Describe(k), " '", theirs, "', this run has '", mine.at(k),
      "'; a checkpoint resumes only into the same tables, row optimizer and seed"));
}

// "" when world size, grid, replica sync and plan are the writing run's; else what differs.
std::string ShapeDifference(const SafetensorsFile& state,
                            const std::map<std::string, std::string>& mine) {
  std::vector<std::string> keys = {"world_size", "grid", "replica_sync"};
  for (const auto& [k, v] : mine) {
    if (k.rfind("plan.", 0) == 0) keys.push_back(k);
  }
  std::string theirs;
  const std::string k = FirstDifference(state, mine, keys, &theirs);
  if (k.empty()) return "";
  return absl::StrCat(Describe(k), " '", theirs, "' -> '", mine.at(k), "'");
}

// This rank's rank<r>.safetensors (and its RocksDB shards' checkpoints).
absl::Status WriteRankPart(Tables& tables, const TrainPosition& pos, const fs::path& tmp) {
  const bool average = tables.options().replica_sync == ReplicaSync::kAverage;
  const int rank = tables.world().rank();
  std::vector<Tables::LocalShardRef> shards = tables.local_shards();
  std::vector<Tables::ReplicaSyncState> sync(shards.size());
  std::vector<TensorSpec> specs;
  // Dynamic shards by key (trainer/internal/dynamic_tables.h, under "shard.<table>.<k>.").
  std::vector<DynamicTableState> dynamic(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tables::LocalShardRef& sh = shards[i];
    const TableConfig& tc = tables.table(sh.table);
    const std::string pre = ShardPrefix(tc, sh.shard);
    const int64_t sd = sh.store->state_dim();
    if (auto* d = dynamic_cast<DynamicRowStore*>(sh.store)) {
      TESSERA_RETURN_IF_ERROR(d->SaveState(/*with_state=*/true, &dynamic[i]));
      AppendDynamicSpecsAt(pre, dynamic[i], &specs);
    } else if (!IsTiered(sh.store)) {
      const int64_t rows = sh.rect.num_rows();
      specs.push_back({pre + "weight", StoredTensorDtype(sh.store->weight_dtype()),
                       {rows, sh.rect.num_cols()}});
      if (sd > 0) specs.push_back({pre + "state", SafetensorsDtype::kF32, {rows, sd}});
    }
    if (!average) continue;
    sync[i] = tables.replica_sync_state(static_cast<int>(i));
    const int64_t p = static_cast<int64_t>(sync[i].pending_rows.size());
    specs.push_back({pre + "touched", SafetensorsDtype::kI64,
                     {static_cast<int64_t>(sync[i].touched.size())}});
    specs.push_back({pre + "pending_rows", SafetensorsDtype::kI64, {p}});
    specs.push_back({pre + "pending_avg", SafetensorsDtype::kF32, {p, sd}});
    specs.push_back({pre + "pending_snapshot", SafetensorsDtype::kF32, {p, sd}});
  }
  for (int t = 0; t < tables.num_tables(); ++t) {
    RowStore* dp = tables.data_parallel_store(t);
    if (dp == nullptr) continue;
    const TableConfig& tc = tables.table(t);
    specs.push_back({"table." + tc.name + ".weight", StoredTensorDtype(dp->weight_dtype()),
                     {tc.num_rows, tc.dim}});
    if (dp->state_dim() > 0) {
      specs.push_back({"table." + tc.name + ".state", SafetensorsDtype::kF32,
                       {tc.num_rows, dp->state_dim()}});
    }
  }
  std::map<std::string, std::string> meta = {
      {"format", kShardedCheckpointFormat},
      {"rank", std::to_string(rank)},
      {"group", std::to_string(tables.group_index())},
      {"shard_rank", std::to_string(tables.shard_rank())},
      {"step", std::to_string(pos.step)},
      {"epoch", std::to_string(pos.epoch)},
      {"batches_in_epoch", std::to_string(pos.batches_in_epoch)},
      {"sync_clock", std::to_string(tables.sync_clock())}};
  const fs::path file = tmp / RankFile(rank);
  TESSERA_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(file.string(), specs, meta));
  std::vector<char> w;
  std::vector<float> s;
  auto copy_rows = [&](RowStore& store, const std::string& wname, const std::string& sname,
                       int64_t rows, int64_t width) -> absl::Status {
    const int64_t sd = store.state_dim();
    for (int64_t r = 0; r < rows; r += kCheckpointChunkRows) {
      const int64_t n = std::min(kCheckpointChunkRows, rows - r);
      w.resize(static_cast<size_t>(n * width * RowDtypeBytes(store.weight_dtype())));
      s.resize(static_cast<size_t>(n * sd));
      TESSERA_RETURN_IF_ERROR(store.ReadRowBytes(r, n, w.data(), sd > 0 ? s.data() : nullptr));
      TESSERA_RETURN_IF_ERROR(writer->WriteRows(wname, r, r + n, w.data()));
      if (sd > 0) TESSERA_RETURN_IF_ERROR(writer->WriteRows(sname, r, r + n, s.data()));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tables::LocalShardRef& sh = shards[i];
    const TableConfig& tc = tables.table(sh.table);
    const std::string pre = ShardPrefix(tc, sh.shard);
    if (tc.dynamic.enabled) {
      TESSERA_RETURN_IF_ERROR(WriteDynamicTensorsAt(pre, dynamic[i], *writer));
    } else if (!IsTiered(sh.store)) {
      TESSERA_RETURN_IF_ERROR(copy_rows(*sh.store, pre + "weight", pre + "state",
                                        sh.rect.num_rows(), sh.rect.num_cols()));
    }
    if (!average) continue;
    TESSERA_RETURN_IF_ERROR(writer->WriteTensor(pre + "touched", sync[i].touched.data()));
    TESSERA_RETURN_IF_ERROR(writer->WriteTensor(pre + "pending_rows", sync[i].pending_rows.data()));
    TESSERA_RETURN_IF_ERROR(writer->WriteTensor(pre + "pending_avg", sync[i].pending_avg.data()));
    TESSERA_RETURN_IF_ERROR(
        writer->WriteTensor(pre + "pending_snapshot", sync[i].pending_snapshot.data()));
  }
  for (int t = 0; t < tables.num_tables(); ++t) {
    RowStore* dp = tables.data_parallel_store(t);
    if (dp == nullptr) continue;
    const TableConfig& tc = tables.table(t);
    TESSERA_RETURN_IF_ERROR(copy_rows(*dp, "table." + tc.name + ".weight",
                                      "table." + tc.name + ".state", tc.num_rows, tc.dim));
  }
  TESSERA_RETURN_IF_ERROR(writer->Finish());
  TESSERA_RETURN_IF_ERROR(FsyncPath(file, false));
  for (const Tables::LocalShardRef& sh : shards) {
    auto* tiered = dynamic_cast<TieredRowStore*>(sh.store);
    if (tiered == nullptr) continue;
    const fs::path db = ShardDb(tmp, tables.table(sh.table), rank, sh.shard);
    CheckpointEvent("tier_checkpoint");
    TESSERA_RETURN_IF_ERROR(tiered->Checkpoint(db.string()));
    TESSERA_RETURN_IF_ERROR(FsyncTree(db));
  }
  return absl::OkStatus();
}

// Rank 0's state.safetensors: the dense model and the run's shape.
absl::Status WriteStateFile(Model& model, Tables& tables, const TrainPosition& pos,
                            const fs::path& tmp) {
  std::vector<TensorSpec> specs;
  AppendDenseSpecs(model, &specs);
  std::map<std::string, std::string> meta = ShapeMetadata(model, tables);
  meta["format"] = kShardedCheckpointFormat;
  meta["step"] = std::to_string(pos.step);
  meta["epoch"] = std::to_string(pos.epoch);
  meta["batches_in_epoch"] = std::to_string(pos.batches_in_epoch);
  meta["dense_optimizer_steps"] = std::to_string(model.dense_optimizer().steps_taken());
  meta[kTrainingConfigKey] = TrainingConfigText(model.config());
  const fs::path file = tmp / kCheckpointStateFile;
  TESSERA_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(file.string(), specs, meta));
  TESSERA_RETURN_IF_ERROR(WriteDenseTensors(model, *writer));
  TESSERA_RETURN_IF_ERROR(writer->Finish());
  return FsyncPath(file, false);
}

template <typename T>
absl::Status ReadVector(const SafetensorsFile& f, const std::string& name, SafetensorsDtype dtype,
                        int64_t cols, std::vector<T>* out) {
  const TensorView* v = f.Find(name);
  if (v == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor '", name, "' missing"));
  }
  const int64_t rows = v->shape.empty() ? 0 : v->shape[0];
  std::vector<int64_t> shape = {rows};
  if (cols >= 0) shape.push_back(cols);
  TESSERA_ASSIGN_OR_RETURN(v, f.Get(name, dtype, shape));
  out->resize(static_cast<size_t>(v->num_bytes / sizeof(T)));
  if (!out->empty()) std::memcpy(out->data(), v->data, v->num_bytes);
  return absl::OkStatus();
}

// This rank's part of `checkpoint`: its rank file, shards and data-parallel replicas, the dense
// model from state.safetensors. Returns the rank's data position.
absl::StatusOr<TrainPosition> RestoreRankPart(Model& model, Tables& tables,
                                              const std::string& checkpoint) {
  const fs::path dir(checkpoint);
  const int rank = tables.world().rank();
  TESSERA_ASSIGN_OR_RETURN(auto state,
                           SafetensorsFile::Open((dir / kCheckpointStateFile).string()));
  auto fmt = state->metadata().find("format");
  const std::string format = fmt == state->metadata().end() ? "" : fmt->second;
  if (format == "tessera-checkpoint-1") {
    TESSERA_ASSIGN_OR_RETURN(int64_t seed, MetaInt(*state, "seed"));
    if (static_cast<uint64_t>(seed) != model.config().seed) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint, ": written by a run with seed ", seed, ", this config has seed ",
          model.config().seed, " (tables would mix two initialisations)"));
    }
    return ReshardRestoreSharded(model, tables, checkpoint, *state,
                                 absl::StrCat("one process -> ", tables.world().size(), " ranks"));
  }
  if (format != kShardedCheckpointFormat) {
    return absl::DataLossError(absl::StrCat(state->path(), ": not a ", kShardedCheckpointFormat,
                                            " file (metadata 'format')"));
  }
  const std::map<std::string, std::string> mine = ShapeMetadata(model, tables);
  TESSERA_RETURN_IF_ERROR(CheckFixed(checkpoint, *state, mine));
  const std::string changed = ShapeDifference(*state, mine);
  if (!changed.empty()) return ReshardRestoreSharded(model, tables, checkpoint, *state, changed);
  TESSERA_ASSIGN_OR_RETURN(int64_t step, MetaInt(*state, "step"));
  TESSERA_ASSIGN_OR_RETURN(int64_t optim_steps, MetaInt(*state, "dense_optimizer_steps"));
  size_t dense_count = 0;
  TESSERA_RETURN_IF_ERROR(ReadDenseTensors(model, *state, &dense_count));
  if (state->tensors().size() != dense_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        state->path(), ": holds ", state->tensors().size(), " tensors but this model's dense "
        "part has ", dense_count, " (another dense model or optimizer)"));
  }
  model.dense_optimizer().set_steps_taken(optim_steps);

  const fs::path rank_path = dir / RankFile(rank);
  std::error_code ec;
  if (!fs::exists(rank_path, ec)) {
    return absl::DataLossError(absl::StrCat(
        checkpoint, " is incomplete: ", rank_path.string(), " (rank ", rank,
        "'s shards) is missing; refusing to resume from it"));
  }
  TESSERA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(rank_path.string()));
  fmt = file->metadata().find("format");
  if (fmt == file->metadata().end() || fmt->second != kShardedCheckpointFormat) {
    return absl::DataLossError(absl::StrCat(file->path(), ": not a ", kShardedCheckpointFormat,
                                            " file (metadata 'format')"));
  }
  TESSERA_ASSIGN_OR_RETURN(int64_t file_rank, MetaInt(*file, "rank"));
  TESSERA_ASSIGN_OR_RETURN(int64_t group, MetaInt(*file, "group"));
  TESSERA_ASSIGN_OR_RETURN(int64_t shard_rank, MetaInt(*file, "shard_rank"));
  TESSERA_ASSIGN_OR_RETURN(int64_t file_step, MetaInt(*file, "step"));
  if (file_rank != rank || file_step != step) {
    return absl::DataLossError(absl::StrCat(file->path(), ": written by rank ", file_rank,
                                            " at step ", file_step, ", expected rank ", rank,
                                            " at step ", step));
  }
  if (group != tables.group_index() || shard_rank != tables.shard_rank()) {
    // sharding.layout changed: the same grid, ranks in other places.
    return ReshardRestoreSharded(
        model, tables, checkpoint, *state,
        absl::StrCat("world rank ", rank, " was shard rank ", shard_rank, " of group ", group,
                     ", now shard rank ", tables.shard_rank(), " of group ",
                     tables.group_index()));
  }
  TrainPosition pos;
  pos.step = step;
  TESSERA_ASSIGN_OR_RETURN(pos.epoch, MetaInt(*file, "epoch"));
  TESSERA_ASSIGN_OR_RETURN(pos.batches_in_epoch, MetaInt(*file, "batches_in_epoch"));
  TESSERA_ASSIGN_OR_RETURN(int64_t clock, MetaInt(*file, "sync_clock"));

  const bool average = tables.options().replica_sync == ReplicaSync::kAverage;
  size_t expected = 0;
  auto load_rows = [&](RowStore& store, const std::string& wname, const std::string& sname,
                       int64_t rows, int64_t width) -> absl::Status {
    const int64_t sd = store.state_dim();
    TESSERA_ASSIGN_OR_RETURN(const TensorView* w,
                             GetTableWeights(*file, wname, store.weight_dtype(), {rows, width}));
    const TensorView* s = nullptr;
    ++expected;
    if (sd > 0) {
      TESSERA_ASSIGN_OR_RETURN(s, file->Get(sname, SafetensorsDtype::kF32, {rows, sd}));
      ++expected;
    }
    for (int64_t r = 0; r < rows; r += kCheckpointChunkRows) {
      const int64_t n = std::min(kCheckpointChunkRows, rows - r);
      TESSERA_RETURN_IF_ERROR(
          WriteTableRows(store, *w, r, r, n, s ? s->f32() + r * sd : nullptr));
    }
    return absl::OkStatus();
  };
  std::vector<Tables::LocalShardRef> shards = tables.local_shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tables::LocalShardRef& sh = shards[i];
    const TableConfig& tc = tables.table(sh.table);
    const std::string pre = ShardPrefix(tc, sh.shard);
    const fs::path db = ShardDb(dir, tc, rank, sh.shard);
    const bool has_db = fs::exists(db, ec);
    if (auto* d = dynamic_cast<DynamicRowStore*>(sh.store)) {
      absl::StatusOr<DynamicTableState> st = ReadDynamicStateAt(
          *file, pre, d->dim(), d->state_dim(), d->weight_dtype(), &expected);
      if (!st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint, ": table '", tc.name, "' is dynamic: ", st.status().message(),
            " (a checkpoint of a static table does not load into a dynamic one)"));
      }
      absl::Status loaded = d->LoadState(*st);
      if (!loaded.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(file->path(), ": ", loaded.message()));
      }
    } else if (auto* tiered = dynamic_cast<TieredRowStore*>(sh.store)) {
      if (!has_db) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint, ": table '", tc.name, "' is in the RocksDB tier but the checkpoint has "
            "no RocksDB copy of shard ", sh.shard, " (", db.string(), "); was it in memory?"));
      }
      TESSERA_RETURN_IF_ERROR(tiered->Restore(db.string()));
    } else {
      if (has_db) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint, ": table '", tc.name, "' was in the RocksDB tier when checkpointed; "
            "this config keeps it in memory"));
      }
      TESSERA_RETURN_IF_ERROR(load_rows(*sh.store, pre + "weight", pre + "state",
                                        sh.rect.num_rows(), sh.rect.num_cols()));
    }
    if (!average) continue;
    Tables::ReplicaSyncState st;
    const int64_t sd = sh.store->state_dim();
    TESSERA_RETURN_IF_ERROR(ReadVector(*file, pre + "touched", SafetensorsDtype::kI64, -1,
                                       &st.touched));
    TESSERA_RETURN_IF_ERROR(ReadVector(*file, pre + "pending_rows", SafetensorsDtype::kI64, -1,
                                       &st.pending_rows));
    TESSERA_RETURN_IF_ERROR(ReadVector(*file, pre + "pending_avg", SafetensorsDtype::kF32, sd,
                                       &st.pending_avg));
    TESSERA_RETURN_IF_ERROR(ReadVector(*file, pre + "pending_snapshot", SafetensorsDtype::kF32,
                                       sd, &st.pending_snapshot));
    expected += 4;
    absl::Status set = tables.set_replica_sync_state(static_cast<int>(i), std::move(st));
    if (!set.ok()) return absl::DataLossError(absl::StrCat(file->path(), ": ", set.message()));
  }
  for (int t = 0; t < tables.num_tables(); ++t) {
    RowStore* dp = tables.data_parallel_store(t);
    if (dp == nullptr) continue;
    const TableConfig& tc = tables.table(t);
    TESSERA_RETURN_IF_ERROR(load_rows(*dp, "table." + tc.name + ".weight",
                                      "table." + tc.name + ".state", tc.num_rows, tc.dim));
  }
  if (file->tensors().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": holds ", file->tensors().size(), " tensors but this rank expects ",
        expected, " (a checkpoint of another model, optimizer or storage)"));
  }
  tables.set_sync_clock(clock);
  return pos;
}

}  // namespace

absl::StatusOr<std::string> WriteShardedCheckpoint(Model& model, Tables& tables,
                                                   const TrainPosition& position,
                                                   const std::string& checkpoint_dir, int keep) {
  Communicator& world = tables.world();
  const int rank = world.rank();
  const fs::path dir(checkpoint_dir);
  const std::string name = absl::StrCat("ckpt-", position.step);
  const fs::path tmp = dir / (name + ".tmp");
  const std::string what = absl::StrCat("checkpoint ", (dir / name).string());

  // The dense model is written once (rank 0): check first that every rank holds the same bits.
  absl::StatusOr<uint64_t> fp = DenseFingerprint(model);
  TESSERA_RETURN_IF_ERROR(Agree(world, fp.status(), what));
  std::vector<int64_t> fps(world.size());
  TESSERA_RETURN_IF_ERROR(world.AllGatherCounts(static_cast<int64_t>(*fp), absl::MakeSpan(fps)));
  for (int r = 1; r < world.size(); ++r) {
    if (fps[r] != fps[0]) {
      return absl::InternalError(absl::StrCat(
          what, ": the dense parameters differ between rank 0 and rank ", r,
          " (they must be identical after the gradient all-reduce); not writing it"));
    }
  }

  // 1. Rank 0 prepares the directory (and one per RocksDB-tier table for the shards).
  absl::Status prepared;
  if (rank == 0) {
    prepared = PrepareCheckpointTmp(dir, tmp);
    for (int t = 0; t < tables.num_tables() && prepared.ok(); ++t) {
      const TableConfig& tc = tables.table(t);
      if (tc.storage.tier != StorageTier::kRocksDb) continue;
      std::error_code ec;
      fs::create_directories(tmp / "tables" / tc.name, ec);
      if (ec) {
        prepared = absl::PermissionDeniedError(absl::StrCat(
            what, ": cannot create ", (tmp / "tables" / tc.name).string(), ": ", ec.message()));
      }
    }
  }
  TESSERA_RETURN_IF_ERROR(Agree(world, prepared, what));

  // 2. Every rank writes and fsyncs its part; rank 0 also the dense model.
  absl::Status wrote = WriteRankPart(tables, position, tmp);
  if (wrote.ok() && rank == 0) wrote = WriteStateFile(model, tables, position, tmp);
  TESSERA_RETURN_IF_ERROR(Agree(world, wrote, what));

  // 3. All parts are on disk: rank 0 syncs the directories and publishes.
  absl::StatusOr<std::string> published = (dir / name).string();
  if (rank == 0) {
    absl::Status synced;
    for (int t = 0; t < tables.num_tables() && synced.ok(); ++t) {
      const TableConfig& tc = tables.table(t);
      if (tc.storage.tier == StorageTier::kRocksDb) {
        synced = FsyncPath(tmp / "tables" / tc.name, true);
      }
    }
    if (synced.ok()) synced = FsyncPath(tmp / "tables", true);
    if (synced.ok()) synced = FsyncPath(tmp, true);
    published = synced.ok() ? PublishCheckpoint(dir, name, tmp, keep)
                            : absl::StatusOr<std::string>(synced);
  }
  TESSERA_RETURN_IF_ERROR(Agree(world, published.status(), what));
  return (dir / name).string();
}

absl::StatusOr<TrainPosition> RestoreShardedCheckpoint(Model& model, Tables& tables,
                                                       const std::string& checkpoint) {
  absl::StatusOr<TrainPosition> pos = RestoreRankPart(model, tables, checkpoint);
  TESSERA_RETURN_IF_ERROR(
      Agree(tables.world(), pos.status(), absl::StrCat("restoring ", checkpoint)));
  return pos;
}

absl::StatusOr<TrainPosition> RestoreShardedCheckpointLocally(Model& model,
                                                              CheckpointTables& tables,
                                                              const std::string& checkpoint,
                                                              const SafetensorsFile& state) {
  TESSERA_RETURN_IF_ERROR(CheckFixed(
      checkpoint, state, FixedMetadata(EmbeddingOptionsFromConfig(model.config()),
                                       model.config().seed)));
  size_t dense = 0;
  for (const TensorView& v : state.tensors()) dense += v.name.rfind("dense", 0) == 0 ? 1 : 0;
  if (dense != state.tensors().size()) {
    return absl::DataLossError(absl::StrCat(state.path(), ": holds tensors other than the dense "
                                            "model's (not a sharded checkpoint's state file)"));
  }
  return ReshardRestoreLocal(model, tables, checkpoint, state);
}

absl::StatusOr<std::string> AgreeOnLatestCheckpoint(Tables& tables,
                                                    const std::string& checkpoint_dir,
                                                    const absl::StatusOr<std::string>& latest) {
  Communicator& world = tables.world();
  TESSERA_RETURN_IF_ERROR(Agree(world, latest.status(),
                                absl::StrCat("finding the latest checkpoint in ", checkpoint_dir)));
  // The step of the checkpoint each rank found (-1: none).
  const int64_t mine =
      latest->empty() ? -1 : CheckpointStep(fs::path(*latest).filename().string());
  std::vector<int64_t> steps(world.size());
  TESSERA_RETURN_IF_ERROR(world.AllGatherCounts(mine, absl::MakeSpan(steps)));
  for (int r = 1; r < world.size(); ++r) {
    if (steps[r] != steps[0]) {
      auto seen = [](int64_t s) { return s < 0 ? std::string("none") : absl::StrCat("ckpt-", s); };
      return absl::FailedPreconditionError(absl::StrCat(
          checkpoint_dir, ": the ranks see different latest checkpoints (rank 0: ",
          seen(steps[0]), ", rank ", r, ": ", seen(steps[r]),
          "); train.checkpoint_dir must be one directory shared by every rank"));
    }
  }
  return *latest;
}

}  // namespace tessera::internal
