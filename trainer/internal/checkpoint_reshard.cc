// Resharding on load: see checkpoint_reshard.h.
#include "trainer/internal/checkpoint_reshard.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "core/status.h"
#include "embedding/row_init.h"
#include "embedding/row_optimizer.h"
#include "embedding/tiered_row_store.h"
#include "sharding/dynamic_pieces.h"
#include "trainer/internal/checkpoint_files.h"
#include "trainer/internal/dynamic_tables.h"

namespace tessera::internal {
namespace fs = std::filesystem;

namespace {

Shard FullRect(const TableConfig& cfg) {
  Shard s;
  s.row_end = cfg.num_rows;
  s.col_end = cfg.dim;
  return s;
}

// Parses sharded_checkpoint.cc's PlanString: "<type> rows[a,b)cols[c,d)@owner ...".
absl::StatusOr<TablePlan> ParsePlanString(const std::string& checkpoint, const std::string& table,
                                          const std::string& text) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(checkpoint, ": metadata 'plan.", table, "' = '", text,
                                            "': ", why));
  };
  std::vector<std::string> parts = absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (parts.empty()) return bad("empty");
  TablePlan tp;
  tp.table = table;
  absl::StatusOr<ShardingType> type = ParseShardingType(parts[0]);
  if (!type.ok()) return bad(std::string(type.status().message()));
  tp.type = *type;
  for (size_t i = 1; i < parts.size(); ++i) {
    Shard sh;
    long long r0, r1, c0, c1;
    int owner;
    if (std::sscanf(parts[i].c_str(), "rows[%lld,%lld)cols[%lld,%lld)@%d", &r0, &r1, &c0, &c1,
                    &owner) != 5 ||
        r0 < 0 || r1 <= r0 || c0 < 0 || c1 <= c0 || owner < 0) {
      return bad(absl::StrCat("shard '", parts[i], "' is not rows[a,b)cols[c,d)@owner"));
    }
    sh.row_begin = r0;
    sh.row_end = r1;
    sh.col_begin = c0;
    sh.col_end = c1;
    sh.rank = owner;
    tp.shards.push_back(sh);
  }
  return tp;
}

// Where state column c of a piece (or target) `rect` lands in a full row's state
// (EmbeddingCollection's layout; as sharding/sharded_embedding_io.cc): row-wise AdaGrad keeps
// one value per row, equal on every column shard (taken from the one at column 0); Adam keeps
// m then u, `dim` each. -1: the column is not taken.
int64_t FullStateColumn(RowOptimizerType type, const Shard& rect, int64_t dim, int64_t c) {
  if (type == RowOptimizerType::kAdam) {
    const int64_t w = rect.num_cols();
    return c < w ? rect.col_begin + c : dim + rect.col_begin + (c - w);
  }
  return rect.col_begin == 0 ? c : -1;
}
// The inverse for a target: the target's state column holding full state column fc, or -1.
int64_t TargetStateColumn(RowOptimizerType type, const Shard& rect, int64_t dim, int64_t fc) {
  if (type == RowOptimizerType::kAdam) {
    const int64_t part = fc / dim, col = fc % dim;
    if (col < rect.col_begin || col >= rect.col_end) return -1;
    return part * rect.num_cols() + (col - rect.col_begin);
  }
  return type == RowOptimizerType::kRowWiseAdagrad && fc == 0 ? 0 : -1;
}

// Reads rows of one piece: a mapped safetensors tensor pair or a RocksDB shard's checkpoint.
class PieceReader {
 public:
  static absl::StatusOr<std::unique_ptr<PieceReader>> Open(
      const CheckpointPiece& p, int table, const EmbeddingCollectionOptions& o,
      const std::string& scratch_path) {
    std::unique_ptr<PieceReader> r(new PieceReader());
    r->piece_ = p;
    const TableConfig& cfg = o.tables[table];
    const int64_t rows = p.rect.num_rows(), cols = p.rect.num_cols();
    r->sd_ = RowStateDim(o.optimizer.type, cols);
    if (!p.file.empty()) {
      TESSERA_ASSIGN_OR_RETURN(r->file_, SafetensorsFile::Open(p.file));
      TESSERA_ASSIGN_OR_RETURN(r->w_, GetTableWeights(*r->file_, p.weight_tensor,
                                                       cfg.storage.dtype, {rows, cols}));
      r->dtype_ = r->w_->dtype == SafetensorsDtype::kF32 ? RowDtype::kF32 : cfg.storage.dtype;
      if (r->sd_ > 0) {
        TESSERA_ASSIGN_OR_RETURN(r->s_, r->file_->Get(p.state_tensor, SafetensorsDtype::kF32,
                                                      {rows, r->sd_}));
      }
      return r;
    }
    // The layout the writing run's store recorded (sharding/internal/shard_layout.cc for a
    // shard, trainer/stores.cc for one process); TieredRowStore::Open checks it.
    TieredRowStoreOptions so;
    so.path = scratch_path;
    so.restore_from = p.db;
    so.num_rows = rows;
    so.dim = cols;
    so.state_dim = r->sd_;
    so.state_init = o.optimizer.type == RowOptimizerType::kRowWiseAdagrad
                        ? o.optimizer.adagrad_initial
                        : 0.0f;
    so.init = cfg.init;
    so.seed = o.seed;
    so.table_id = static_cast<uint64_t>(table);
    so.name = absl::StrCat(cfg.name, " (checkpoint piece ", p.db, ")");
    so.dtype = cfg.storage.dtype;
    if (p.sharded_db_layout) {
      so.init = ResolvedInit(so.init, cfg.num_rows);
      so.row_offset = p.rect.row_begin;
      if (cols != cfg.dim) {
        so.init_dim = cfg.dim;
        so.init_col_begin = p.rect.col_begin;
      }
    }
    so.cache_rows = 16;  // ReadRows scans RocksDB; the cache only needs to exist
    so.prefetch = false;
    so.reader_threads = 1;
    so.block_cache_bytes = int64_t{8} << 20;
    so.write_buffer_bytes = int64_t{4} << 20;
    TESSERA_ASSIGN_OR_RETURN(r->db_, TieredRowStore::Open(so));
    return r;
  }

  const CheckpointPiece& piece() const { return piece_; }
  int64_t state_dim() const { return sd_; }

  // Rows [b, e) of the table (inside the piece): weights [e - b, cols], state [e - b, sd].
  absl::Status Read(int64_t b, int64_t e, std::vector<float>* w, std::vector<float>* s) {
    const int64_t cols = piece_.rect.num_cols(), n = e - b, at = b - piece_.rect.row_begin;
    w->resize(static_cast<size_t>(n * cols));
    s->resize(static_cast<size_t>(n * sd_));
    if (db_ != nullptr) return db_->ReadRows(at, n, w->data(), sd_ > 0 ? s->data() : nullptr);
    // Widened exactly; the target store's WriteRows rounds them back to the same bits.
    RowValuesToFloat(dtype_,
                     static_cast<const char*>(w_->data) + at * cols * RowDtypeBytes(dtype_),
                     n * cols, w->data());
    if (sd_ > 0) std::memcpy(s->data(), s_->f32() + at * sd_, n * sd_ * sizeof(float));
    return absl::OkStatus();
  }

 private:
  PieceReader() = default;
  CheckpointPiece piece_;
  int64_t sd_ = 0;
  RowDtype dtype_ = RowDtype::kF32;  // the file tensor's dtype
  std::unique_ptr<SafetensorsFile> file_;
  const TensorView* w_ = nullptr;
  const TensorView* s_ = nullptr;
  std::unique_ptr<TieredRowStore> db_;
};

bool Overlaps(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max(a0, b0) < std::min(a1, b1);
}

// Fills one target from the readers of its table.
absl::Status FillTarget(const CheckpointContents& from, const ReshardTarget& target,
                        const EmbeddingCollectionOptions& o,
                        std::vector<std::unique_ptr<PieceReader>>& readers) {
  const TableConfig& cfg = o.tables[target.table];
  const RowOptimizerType type = o.optimizer.type;
  const Shard& T = target.rect;
  const int64_t tw = T.num_cols(), tsd = RowStateDim(type, tw), dim = cfg.dim;
  // Averaging the state over the old replicas (average mode at a sync); else group 0 only.
  const int state_groups = from.average ? from.num_groups : 1;
  std::vector<float> w, s, pw, ps;
  for (int64_t b = T.row_begin; b < T.row_end; b += kCheckpointChunkRows) {
    const int64_t e = std::min(T.row_end, b + kCheckpointChunkRows), n = e - b;
    w.assign(static_cast<size_t>(n * tw), 0.0f);
    s.assign(static_cast<size_t>(n * tsd), 0.0f);
    int64_t w_cells = 0, s_cells = 0;
    for (auto& reader : readers) {
      const CheckpointPiece& p = reader->piece();
      if (p.group >= state_groups && p.group != 0) continue;
      const int64_t pb = std::max(b, p.rect.row_begin), pe = std::min(e, p.rect.row_end);
      if (pb >= pe) continue;
      const bool weights = p.group == 0 && Overlaps(p.rect.col_begin, p.rect.col_end,
                                                    T.col_begin, T.col_end);
      // The state columns this piece gives the target.
      std::vector<std::pair<int64_t, int64_t>> cols;  // (piece column, target column)
      for (int64_t c = 0; c < reader->state_dim(); ++c) {
        const int64_t fc = FullStateColumn(type, p.rect, dim, c);
        const int64_t tc = fc < 0 ? -1 : TargetStateColumn(type, T, dim, fc);
        if (tc >= 0) cols.push_back({c, tc});
      }
      if (!weights && cols.empty()) continue;
      absl::Status read = reader->Read(pb, pe, &pw, &ps);
      if (!read.ok()) {
        return absl::Status(read.code(), absl::StrCat(from.checkpoint, ": reading table '",
                                                      cfg.name, "' rows [", pb, ", ", pe,
                                                      "): ", read.message()));
      }
      const int64_t pwid = p.rect.num_cols(), psd = reader->state_dim();
      const int64_t c0 = std::max(p.rect.col_begin, T.col_begin);
      const int64_t c1 = std::min(p.rect.col_end, T.col_end);
      for (int64_t x = pb; x < pe; ++x) {
        if (weights) {
          std::memcpy(w.data() + (x - b) * tw + (c0 - T.col_begin),
                      pw.data() + (x - pb) * pwid + (c0 - p.rect.col_begin),
                      (c1 - c0) * sizeof(float));
        }
        for (const auto& [pc, tc] : cols) s[(x - b) * tsd + tc] += ps[(x - pb) * psd + pc];
      }
      if (weights) w_cells += (pe - pb) * (c1 - c0);
      s_cells += (pe - pb) * static_cast<int64_t>(cols.size());
    }
    if (w_cells != n * tw || s_cells != n * tsd * state_groups) {
      return absl::DataLossError(absl::StrCat(
          from.checkpoint, ": its pieces of table '", cfg.name, "' cover ", w_cells, " of the ",
          n * tw, " weights and ", s_cells, " of the ", n * tsd * state_groups,
          " state values of rows [", b, ", ", e, ") x columns [", T.col_begin, ", ", T.col_end,
          ") (a checkpoint whose plan does not tile the table)"));
    }
    if (state_groups > 1) {
      for (float& v : s) v /= static_cast<float>(state_groups);
    }
    TESSERA_RETURN_IF_ERROR(
        target.write(b - T.row_begin, n, w.data(), tsd > 0 ? s.data() : nullptr));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointContents> SingleProcessCheckpointContents(
    const std::string& checkpoint, const SafetensorsFile& state,
    const EmbeddingCollectionOptions& tables) {
  CheckpointContents out;
  out.checkpoint = checkpoint;
  out.pieces.resize(tables.tables.size());
  for (int t = 0; t < static_cast<int>(tables.tables.size()); ++t) {
    const TableConfig& cfg = tables.tables[t];
    CheckpointPiece p;
    p.rect = FullRect(cfg);
    const fs::path db = fs::path(checkpoint) / "tables" / cfg.name;
    std::error_code ec;
    if (state.Find("table." + cfg.name + ".weight") != nullptr) {
      p.file = state.path();
      p.weight_tensor = "table." + cfg.name + ".weight";
      p.state_tensor = "table." + cfg.name + ".state";
    } else if (fs::exists(db, ec)) {
      p.db = db.string();
      p.sharded_db_layout = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint, ": holds no rows of table '", cfg.name, "' (neither tensor table.", cfg.name,
          ".weight nor ", db.string(), ")"));
    }
    out.pieces[t].push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<CheckpointContents> ShardedCheckpointContents(const std::string& checkpoint,
                                                         const SafetensorsFile& state,
                                                         const EmbeddingCollectionOptions& tables) {
  CheckpointContents out;
  out.checkpoint = checkpoint;
  const fs::path dir(checkpoint);
  TESSERA_ASSIGN_OR_RETURN(int64_t world_size, MetaInt(state, "world_size"));
  auto meta = [&](const std::string& key) -> absl::StatusOr<std::string> {
    auto it = state.metadata().find(key);
    if (it == state.metadata().end()) {
      return absl::DataLossError(absl::StrCat(state.path(), ": metadata '", key, "' missing"));
    }
    return it->second;
  };
  TESSERA_ASSIGN_OR_RETURN(std::string grid, meta("grid"));
  int m = 0, n = 0;
  std::vector<std::string> mn = absl::StrSplit(grid, 'x');
  if (mn.size() != 2 || !absl::SimpleAtoi(mn[0], &m) || !absl::SimpleAtoi(mn[1], &n) || m < 1 ||
      n < 1 || static_cast<int64_t>(m) * n != world_size) {
    return absl::DataLossError(absl::StrCat(state.path(), ": metadata 'grid' = '", grid,
                                            "' is not <M>x<N> with M*N = world_size ", world_size));
  }
  out.num_groups = m;
  TESSERA_ASSIGN_OR_RETURN(std::string sync, meta("replica_sync"));
  if (sync != "exact") {
    out.average = true;
    const size_t at = sync.find("sync_every=");
    if (at == std::string::npos ||
        !absl::SimpleAtoi(sync.substr(at + 11, sync.find(' ', at) - at - 11), &out.sync_every) ||
        out.sync_every < 1) {
      return absl::DataLossError(absl::StrCat(state.path(), ": metadata 'replica_sync' = '", sync,
                                              "' has no sync_every=<k>"));
    }
  }
  // Which world rank was (group, shard rank), from the rank files.
  std::vector<int> rank_of(static_cast<size_t>(m) * n, -1);
  for (int r = 0; r < world_size; ++r) {
    const fs::path file = dir / absl::StrCat("rank", r, ".safetensors");
    std::error_code ec;
    if (!fs::exists(file, ec)) {
      return absl::DataLossError(absl::StrCat(checkpoint, " is incomplete: ", file.string(),
                                              " (rank ", r, "'s shards) is missing"));
    }
    TESSERA_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(file.string()));
    TESSERA_ASSIGN_OR_RETURN(int64_t g, MetaInt(*f, "group"));
    TESSERA_ASSIGN_OR_RETURN(int64_t s, MetaInt(*f, "shard_rank"));
    if (g >= m || s >= n || rank_of[g * n + s] >= 0) {
      return absl::DataLossError(absl::StrCat(file.string(), ": group ", g, " shard rank ", s,
                                              " does not fit grid ", grid, " (or is taken twice)"));
    }
    rank_of[g * n + s] = r;
    if (r == 0) {
      TESSERA_ASSIGN_OR_RETURN(out.sync_clock, MetaInt(*f, "sync_clock"));
    }
  }
  out.pieces.resize(tables.tables.size());
  for (int t = 0; t < static_cast<int>(tables.tables.size()); ++t) {
    const TableConfig& cfg = tables.tables[t];
    TESSERA_ASSIGN_OR_RETURN(std::string text, meta("plan." + cfg.name));
    TESSERA_ASSIGN_OR_RETURN(TablePlan tp, ParsePlanString(checkpoint, cfg.name, text));
    if (tp.type == ShardingType::kDataParallel) {
      CheckpointPiece p;
      p.rect = FullRect(cfg);
      p.file = (dir / "rank0.safetensors").string();
      p.weight_tensor = "table." + cfg.name + ".weight";
      p.state_tensor = "table." + cfg.name + ".state";
      out.pieces[t].push_back(std::move(p));
      continue;
    }
    int64_t rows = 0, cols = 0;
    for (const Shard& sh : tp.shards) {
      rows = std::max(rows, sh.row_end);
      cols = std::max(cols, sh.col_end);
      if (sh.rank >= n) {
        return absl::DataLossError(absl::StrCat(checkpoint, ": plan of table '", cfg.name,
                                                "' names shard rank ", sh.rank, " of grid ", grid));
      }
    }
    if (rows != cfg.num_rows || cols != cfg.dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint, ": table '", cfg.name, "' had ", rows, " rows x ", cols,
          " columns when written, this run has ", cfg.num_rows, " x ", cfg.dim));
    }
    for (int g = 0; g < m; ++g) {
      for (int k = 0; k < static_cast<int>(tp.shards.size()); ++k) {
        const Shard& sh = tp.shards[k];
        const int r = rank_of[g * n + sh.rank];
        CheckpointPiece p;
        p.rect = sh;
        p.group = g;
        const fs::path db = dir / "tables" / cfg.name / absl::StrCat("rank", r, "-shard", k);
        std::error_code ec;
        if (fs::exists(db, ec)) {
          p.db = db.string();
        } else {
          const std::string pre = absl::StrCat("shard.", cfg.name, ".", k, ".");
          p.file = (dir / absl::StrCat("rank", r, ".safetensors")).string();
          p.weight_tensor = pre + "weight";
          p.state_tensor = pre + "state";
        }
        out.pieces[t].push_back(std::move(p));
      }
    }
  }
  return out;
}

absl::Status AverageModeReshardError(const CheckpointContents& from, const std::string& why) {
  if (!from.average || from.num_groups == 1 || from.sync_clock % from.sync_every == 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      from.checkpoint, ": written in average mode ", from.sync_clock % from.sync_every,
      " step(s) after a replica sync (sync clock ", from.sync_clock, ", sync_every ",
      from.sync_every, "): its ", from.num_groups, " replicas differ and hold between-sync "
      "state that ", why, " cannot take over. Resume it with the same grid, plan and replica "
      "sync, or reshard a checkpoint taken at a sync (train.checkpoint_every a multiple of "
      "sharding.sync_every)"));
}

namespace {

// A dynamic table's targets: the whole table joined from group 0's pieces (their tensors under
// the prefix of their weight tensor), then each target's slice.
absl::Status FillDynamicTargets(const CheckpointContents& from, int t,
                                const std::vector<const ReshardTarget*>& mine,
                                const EmbeddingCollectionOptions& tables) {
  const TableConfig& cfg = tables.tables[t];
  const RowOptimizerType type = tables.optimizer.type;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<DynamicTableState> states;
  std::vector<Shard> rects;
  for (const CheckpointPiece& p : from.pieces[t]) {
    if (p.group != 0) continue;
    const std::string suffix = "weight";
    if (p.file.empty() || p.weight_tensor.size() < suffix.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          from.checkpoint, ": table '", cfg.name, "' is dynamic but a piece of it is not"));
    }
    const std::string prefix = p.weight_tensor.substr(0, p.weight_tensor.size() - suffix.size());
    TESSERA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p.file));
    size_t expected = 0;
    absl::StatusOr<DynamicTableState> st =
        ReadDynamicStateAt(*file, prefix, p.rect.num_cols(), RowStateDim(type, p.rect.num_cols()),
                           cfg.storage.dtype, &expected);
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          from.checkpoint, ": table '", cfg.name, "' is dynamic: ", st.status().message(),
          " (a checkpoint of a static table does not load into a dynamic one)"));
    }
    states.push_back(std::move(*st));
    rects.push_back(p.rect);
    files.push_back(std::move(file));
  }
  std::vector<DynamicPiece> pieces;
  for (size_t i = 0; i < states.size(); ++i) pieces.push_back({rects[i], &states[i]});
  TESSERA_ASSIGN_OR_RETURN(DynamicTableState full,
                           MergeDynamicPieces(pieces, cfg.name, cfg.dim, type));
  for (const ReshardTarget* target : mine) {
    if (target->dynamic == nullptr) {
      return absl::InternalError(absl::StrCat("table '", cfg.name, "': no dynamic store"));
    }
    absl::Status loaded = target->dynamic->LoadState(
        SliceDynamicState(full, target->rect, cfg.num_rows, type));
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(from.checkpoint, ": ", loaded.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReshardInto(const CheckpointContents& from, const std::vector<ReshardTarget>& targets,
                         const EmbeddingCollectionOptions& tables, const std::string& scratch) {
  std::error_code ec;
  fs::remove_all(scratch, ec);
  // One table at a time, so only its pieces' readers (and RocksDB copies) are open.
  absl::Status status;
  for (int t = 0; t < static_cast<int>(tables.tables.size()) && status.ok(); ++t) {
    std::vector<const ReshardTarget*> mine;
    for (const ReshardTarget& target : targets) {
      if (target.table == t) mine.push_back(&target);
    }
    if (mine.empty()) continue;
    if (tables.tables[t].dynamic.enabled) {
      status = FillDynamicTargets(from, t, mine, tables);
      continue;
    }
    const int state_groups = from.average ? from.num_groups : 1;
    std::vector<std::unique_ptr<PieceReader>> readers;
    for (size_t i = 0; i < from.pieces[t].size() && status.ok(); ++i) {
      const CheckpointPiece& p = from.pieces[t][i];
      if (p.group != 0 && p.group >= state_groups) continue;
      bool needed = false;
      for (const ReshardTarget* target : mine) {
        needed = needed || Overlaps(p.rect.row_begin, p.rect.row_end, target->rect.row_begin,
                                    target->rect.row_end);
      }
      if (!needed) continue;
      const std::string path = (fs::path(scratch) / absl::StrCat("t", t, "-piece", i)).string();
      if (!p.db.empty()) {
        fs::create_directories(scratch, ec);
        if (ec) {
          status = absl::PermissionDeniedError(
              absl::StrCat("resharding ", from.checkpoint, ": cannot create ", scratch, ": ",
                           ec.message()));
          break;
        }
      }
      absl::StatusOr<std::unique_ptr<PieceReader>> reader =
          PieceReader::Open(p, t, tables, path);
      if (!reader.ok()) {
        status = absl::Status(reader.status().code(),
                              absl::StrCat(from.checkpoint, ": table '", tables.tables[t].name,
                                           "': ", reader.status().message()));
        break;
      }
      readers.push_back(std::move(*reader));
    }
    for (const ReshardTarget* target : mine) {
      if (status.ok()) status = FillTarget(from, *target, tables, readers);
    }
    readers.clear();
  }
  fs::remove_all(scratch, ec);
  return status;
}

namespace {

bool IsSingleProcess(const SafetensorsFile& state) {
  auto it = state.metadata().find("format");
  return it != state.metadata().end() && it->second == "tessera-checkpoint-1";
}

// The dense model, its optimizer's step count and the data position (the chief's) from `state`.
absl::StatusOr<TrainPosition> RestoreDenseAndPosition(Model& model, const SafetensorsFile& state) {
  TrainPosition pos;
  TESSERA_ASSIGN_OR_RETURN(pos.step, MetaInt(state, "step"));
  TESSERA_ASSIGN_OR_RETURN(pos.epoch, MetaInt(state, "epoch"));
  TESSERA_ASSIGN_OR_RETURN(pos.batches_in_epoch, MetaInt(state, "batches_in_epoch"));
  TESSERA_ASSIGN_OR_RETURN(int64_t optim_steps, MetaInt(state, "dense_optimizer_steps"));
  size_t dense_count = 0;
  TESSERA_RETURN_IF_ERROR(ReadDenseTensors(model, state, &dense_count));
  model.dense_optimizer().set_steps_taken(optim_steps);
  return pos;
}

absl::StatusOr<CheckpointContents> TablesOf(const std::string& checkpoint,
                                          const SafetensorsFile& state,
                                          const EmbeddingCollectionOptions& o, int64_t step) {
  if (!IsSingleProcess(state)) return ShardedCheckpointContents(checkpoint, state, o);
  TESSERA_ASSIGN_OR_RETURN(CheckpointContents from,
                           SingleProcessCheckpointContents(checkpoint, state, o));
  from.sync_clock = step;  // one BackwardUpdate per step, as a sharded run counts them
  return from;
}

// Next to the checkpoint (so the RocksDB pieces' SST files hard-link), one per process: the
// ranks, and one-process restores of the same checkpoint, may reshard at the same time.
std::string ScratchDir(const std::string& checkpoint, int rank) {
  return (fs::path(checkpoint).parent_path() /
          absl::StrCat("reshard-scratch-rank", rank, "-pid", ::getpid()))
      .string();
}

}  // namespace

absl::StatusOr<TrainPosition> ReshardRestoreSharded(Model& model,
                                                    ShardedEmbeddingCollection& tables,
                                                    const std::string& checkpoint,
                                                    const SafetensorsFile& state,
                                                    const std::string& changed) {
  const EmbeddingCollectionOptions& o = tables.options().collection;
  TESSERA_ASSIGN_OR_RETURN(TrainPosition pos, RestoreDenseAndPosition(model, state));
  TESSERA_ASSIGN_OR_RETURN(CheckpointContents from, TablesOf(checkpoint, state, o, pos.step));
  TESSERA_RETURN_IF_ERROR(AverageModeReshardError(from, absl::StrCat("this run (", changed, ")")));
  std::vector<ReshardTarget> targets;
  for (const auto& sh : tables.local_shards()) {
    targets.push_back({sh.table, sh.rect, StoreWriter(sh.store),
                       dynamic_cast<DynamicRowStore*>(sh.store)});
  }
  for (int t = 0; t < tables.num_tables(); ++t) {
    if (RowStore* dp = tables.data_parallel_store(t)) {
      targets.push_back({t, FullRect(o.tables[t]), StoreWriter(dp)});
    }
  }
  const int rank = tables.world().rank();
  TESSERA_RETURN_IF_ERROR(ReshardInto(from, targets, o, ScratchDir(checkpoint, rank)));
  const int num_local = static_cast<int>(tables.local_shards().size());
  for (int i = 0; i < num_local; ++i) {
    TESSERA_RETURN_IF_ERROR(tables.set_replica_sync_state(i, {}));
  }
  tables.set_sync_clock(from.sync_clock);
  if (rank == 0) {
    TESSERA_LOG(INFO) << "resharded " << checkpoint << " onto " << tables.world().size()
                      << " ranks, grid " << tables.num_groups() << "x" << tables.group_size()
                      << " (" << changed << ")";
  }
  return pos;
}

RowWriter StoreWriter(RowStore* store) {
  return [store](int64_t begin, int64_t count, const float* weights, const float* state) {
    return store->WriteRows(begin, count, weights, state);
  };
}

absl::StatusOr<TrainPosition> ReshardRestoreLocal(Model& model, CheckpointTables& tables,
                                                  const std::string& checkpoint,
                                                  const SafetensorsFile& state) {
  const EmbeddingCollectionOptions o = EmbeddingOptionsFromConfig(model.config());
  TESSERA_ASSIGN_OR_RETURN(TrainPosition pos, RestoreDenseAndPosition(model, state));
  TESSERA_ASSIGN_OR_RETURN(CheckpointContents from, TablesOf(checkpoint, state, o, pos.step));
  TESSERA_RETURN_IF_ERROR(AverageModeReshardError(from, "one process"));
  std::vector<ReshardTarget> targets;
  for (int t = 0; t < tables.num_tables(); ++t) {
    targets.push_back({t, FullRect(o.tables[t]),
                       [&tables, t](int64_t begin, int64_t count, const float* w,
                                    const float* s) {
                         return tables.WriteFloatRows(t, begin, count, w, s);
                       },
                       tables.dynamic(t)});
  }
  TESSERA_RETURN_IF_ERROR(ReshardInto(from, targets, o, ScratchDir(checkpoint, 0)));
  TESSERA_LOG(INFO) << "resharded " << checkpoint << " into one process";
  return pos;
}

}  // namespace tessera::internal
