#include "trainer/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/row_optimizer.h"
#include "trainer/cuda_sparse_arch.h"
#include "trainer/split_sparse_arch.h"
#include "trainer/internal/checkpoint_files.h"
#include "trainer/internal/checkpoint_tables.h"
#include "trainer/internal/run_fingerprint.h"
#include "trainer/internal/dynamic_tables.h"
#include "trainer/internal/sharded_checkpoint.h"
#include "trainer/internal/train_stream.h"
#include "trainer/safetensors.h"
#include "trainer/sharded_sparse_arch.h"

namespace tessera {
namespace fs = std::filesystem;

namespace {

using internal::kCheckpointChunkRows;
using internal::kCheckpointLatest;
using internal::kCheckpointStateFile;
using internal::MetaInt;

constexpr char kFormat[] = "tessera-checkpoint-1";

std::string WeightName(const TableConfig& t) { return "table." + t.name + ".weight"; }
std::string StateName(const TableConfig& t) { return "table." + t.name + ".state"; }

// The tables of a single-process model: on the host, or on one GPU.
absl::StatusOr<std::unique_ptr<internal::CheckpointTables>> LocalTables(SparseArch& sparse) {
  if (auto* local = dynamic_cast<LocalSparseArch*>(&sparse)) {
    return internal::HostCheckpointTables(local->collection());
  }
  if (auto* cuda = dynamic_cast<CudaSparseArch*>(&sparse)) {
    return internal::CudaCheckpointTables(cuda->collection());
  }
  if (auto* split = dynamic_cast<SplitSparseArch*>(&sparse)) {
    std::vector<std::unique_ptr<internal::CheckpointTables>> parts;
    std::vector<std::vector<int>> global;
    for (int p = 0; p < split->num_parts(); ++p) {
      TESSERA_ASSIGN_OR_RETURN(auto part, LocalTables(split->part_arch(p)));
      parts.push_back(std::move(part));
      global.push_back(split->part(p).tables);
    }
    return internal::JoinedCheckpointTables(std::move(parts), std::move(global));
  }
  return absl::UnimplementedError(
      "checkpoints of this model's tables (neither single-process nor sharded) are not "
      "supported");
}

absl::Status WriteState(Model& model, internal::CheckpointTables& c, const TrainPosition& pos,
                        const fs::path& file) {
  std::vector<TensorSpec> specs;
  // Dynamic tables: their rows by key (trainer/internal/dynamic_tables.h).
  std::vector<DynamicTableState> dynamic(c.num_tables());
  for (int t = 0; t < c.num_tables(); ++t) {
    if (DynamicRowStore* d = c.dynamic(t)) {
      TESSERA_RETURN_IF_ERROR(d->SaveState(/*with_state=*/true, &dynamic[t]));
      internal::AppendDynamicCheckpointSpecs(c.table(t).name, dynamic[t], &specs);
    }
  }
  for (int t = 0; t < c.num_tables(); ++t) {
    if (c.tiered(t) != nullptr || c.dynamic(t) != nullptr) continue;
    const TableConfig& tc = c.table(t);
    specs.push_back({WeightName(tc), internal::StoredTensorDtype(c.weight_dtype(t)),
                     {tc.num_rows, tc.dim}});
    if (c.state_dim(t) > 0) {
      specs.push_back({StateName(tc), SafetensorsDtype::kF32, {tc.num_rows, c.state_dim(t)}});
    }
  }
  internal::AppendDenseSpecs(model, &specs);
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"step", std::to_string(pos.step)},
      {"epoch", std::to_string(pos.epoch)},
      {"batches_in_epoch", std::to_string(pos.batches_in_epoch)},
      {"dense_optimizer_steps", std::to_string(model.dense_optimizer().steps_taken())},
      {"seed", std::to_string(model.config().seed)},
      {internal::kTrainingConfigKey, internal::TrainingConfigText(model.config())}};
  TESSERA_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(file.string(), specs, meta));
  std::vector<char> w;
  std::vector<float> s;
  for (int t = 0; t < c.num_tables(); ++t) {
    if (c.dynamic(t) != nullptr) {
      TESSERA_RETURN_IF_ERROR(
          internal::WriteDynamicCheckpointTensors(c.table(t).name, dynamic[t], *writer));
      continue;
    }
    if (c.tiered(t) != nullptr) continue;
    const TableConfig& tc = c.table(t);
    const int64_t sd = c.state_dim(t);
    for (int64_t r = 0; r < tc.num_rows; r += kCheckpointChunkRows) {
      const int64_t n = std::min(kCheckpointChunkRows, tc.num_rows - r);
      w.resize(static_cast<size_t>(n * c.weight_row_bytes(t)));
      s.resize(static_cast<size_t>(n * sd));
      TESSERA_RETURN_IF_ERROR(c.ReadRowBytes(t, r, n, w.data(), sd > 0 ? s.data() : nullptr));
      TESSERA_RETURN_IF_ERROR(writer->WriteRows(WeightName(tc), r, r + n, w.data()));
      if (sd > 0) TESSERA_RETURN_IF_ERROR(writer->WriteRows(StateName(tc), r, r + n, s.data()));
    }
  }
  TESSERA_RETURN_IF_ERROR(internal::WriteDenseTensors(model, *writer));
  return writer->Finish();
}

}  // namespace

absl::StatusOr<std::string> WriteCheckpoint(Model& model, const TrainPosition& position,
                                            const std::string& checkpoint_dir, int keep) {
  if (auto* sharded = dynamic_cast<ShardedSparseArch*>(&model.sparse())) {
    return internal::WriteShardedCheckpoint(model, sharded->collection(), position,
                                            checkpoint_dir, keep);
  }
  TESSERA_ASSIGN_OR_RETURN(auto c, LocalTables(model.sparse()));
  const fs::path dir(checkpoint_dir);
  const std::string name = absl::StrCat("ckpt-", position.step);
  const fs::path tmp = dir / (name + ".tmp");
  TESSERA_RETURN_IF_ERROR(internal::PrepareCheckpointTmp(dir, tmp));
  TESSERA_RETURN_IF_ERROR(WriteState(model, *c, position, tmp / kCheckpointStateFile));
  for (int t = 0; t < c->num_tables(); ++t) {
    TieredRowStore* tiered = c->tiered(t);
    if (tiered == nullptr) continue;
    internal::CheckpointEvent("tier_checkpoint");
    TESSERA_RETURN_IF_ERROR(tiered->Checkpoint((tmp / "tables" / c->table(t).name).string()));
  }
  TESSERA_RETURN_IF_ERROR(internal::FsyncTree(tmp));
  return internal::PublishCheckpoint(dir, name, tmp, keep);
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& checkpoint_dir) {
  TESSERA_ASSIGN_OR_RETURN(std::string name, internal::ReadLatestName(checkpoint_dir));
  if (name.empty()) return name;
  fs::path p = fs::path(checkpoint_dir) / name;
  std::error_code ec;
  if (!fs::exists(p / kCheckpointStateFile, ec)) {
    return absl::DataLossError(absl::StrCat(checkpoint_dir, "/", kCheckpointLatest, " names ",
                                            name, " but ", (p / kCheckpointStateFile).string(),
                                            " is missing"));
  }
  return p.string();
}

absl::StatusOr<TrainPosition> RestoreCheckpoint(Model& model, const std::string& checkpoint) {
  if (auto* sharded = dynamic_cast<ShardedSparseArch*>(&model.sparse())) {
    return internal::RestoreShardedCheckpoint(model, sharded->collection(), checkpoint);
  }
  TESSERA_ASSIGN_OR_RETURN(auto c, LocalTables(model.sparse()));
  const fs::path dir(checkpoint);
  TESSERA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((dir / kCheckpointStateFile).string()));
  auto fmt = file->metadata().find("format");
  if (fmt == file->metadata().end() || fmt->second != kFormat) {
    if (fmt != file->metadata().end() && fmt->second == internal::kShardedCheckpointFormat) {
      // Written by several ranks: gather it into this process's tables (host or device).
      return internal::RestoreShardedCheckpointLocally(model, *c, checkpoint, *file);
    }
    return absl::DataLossError(
        absl::StrCat(file->path(), ": not a ", kFormat, " file (metadata 'format')"));
  }
  TrainPosition pos;
  TESSERA_ASSIGN_OR_RETURN(pos.step, MetaInt(*file, "step"));
  TESSERA_ASSIGN_OR_RETURN(pos.epoch, MetaInt(*file, "epoch"));
  TESSERA_ASSIGN_OR_RETURN(pos.batches_in_epoch, MetaInt(*file, "batches_in_epoch"));
  TESSERA_ASSIGN_OR_RETURN(int64_t optim_steps, MetaInt(*file, "dense_optimizer_steps"));
  TESSERA_ASSIGN_OR_RETURN(int64_t seed, MetaInt(*file, "seed"));
  if (static_cast<uint64_t>(seed) != model.config().seed) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint, ": written by a run with seed ", seed, ", this config has seed ",
        model.config().seed, " (tables would mix two initialisations)"));
  }
  size_t expected = 0;
  for (int t = 0; t < c->num_tables(); ++t) {
    const TableConfig& tc = c->table(t);
    if (DynamicRowStore* d = c->dynamic(t)) {
      TESSERA_RETURN_IF_ERROR(
          internal::ReadDynamicCheckpointTable(*file, tc.name, *d, &expected));
      continue;
    }
    if (internal::CheckpointHasDynamicTable(*file, tc.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint, ": table '", tc.name, "' was dynamic when checkpointed (its rows are "
          "keys); this config has it static (add its model.tables[].dynamic block)"));
    }
    const fs::path db = dir / "tables" / tc.name;
    std::error_code ec;
    const bool has_db = fs::exists(db, ec);
    if (TieredRowStore* tiered = c->tiered(t)) {
      if (!has_db) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint, ": table '", tc.name, "' is in the RocksDB tier but the checkpoint has "
            "no RocksDB copy of it (", db.string(), "); was it trained in memory?"));
      }
      TESSERA_RETURN_IF_ERROR(tiered->Restore(db.string()));
      continue;
    }
    if (has_db) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint, ": table '", tc.name, "' was in the RocksDB tier when checkpointed; "
          "this config keeps it in memory"));
    }
    const int64_t sd = c->state_dim(t);
    TESSERA_ASSIGN_OR_RETURN(const TensorView* w,
                             internal::GetTableWeights(*file, WeightName(tc), c->weight_dtype(t),
                                                       {tc.num_rows, tc.dim}));
    const TensorView* s = nullptr;
    ++expected;
    if (sd > 0) {
      TESSERA_ASSIGN_OR_RETURN(s, file->Get(StateName(tc), SafetensorsDtype::kF32, {tc.num_rows, sd}));
      ++expected;
    }
    for (int64_t r = 0; r < tc.num_rows; r += kCheckpointChunkRows) {
      const int64_t n = std::min(kCheckpointChunkRows, tc.num_rows - r);
      TESSERA_RETURN_IF_ERROR(c->WriteRows(t, *w, r, r, n, s ? s->f32() + r * sd : nullptr));
    }
  }
  TESSERA_RETURN_IF_ERROR(internal::ReadDenseTensors(model, *file, &expected));
  if (file->tensors().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": holds ", file->tensors().size(), " tensors but this model expects ",
        expected, " (a checkpoint of another model or optimizer)"));
  }
  model.dense_optimizer().set_steps_taken(optim_steps);
  return pos;
}

CheckpointedRun::~CheckpointedRun() = default;

absl::StatusOr<std::unique_ptr<CheckpointedRun>> CheckpointedRun::Start(
    const Config& config, Model* model, std::unique_ptr<BatchReader>* train, RunLog* log) {
  std::unique_ptr<CheckpointedRun> run(new CheckpointedRun());
  run->config_ = config;
  run->model_ = model;
  run->log_ = log;
  if (config.train.resume) {
    absl::StatusOr<std::string> latest = LatestCheckpoint(CheckpointDir(config));
    if (auto* sharded = dynamic_cast<ShardedSparseArch*>(&model->sparse())) {
      // Every rank must resume from the same checkpoint (or none), or their collectives part.
      latest = internal::AgreeOnLatestCheckpoint(sharded->collection(), CheckpointDir(config),
                                                 latest);
    }
    TESSERA_ASSIGN_OR_RETURN(run->resumed_from_, latest);
  }
  if (!run->resumed_from_.empty()) {
    TESSERA_ASSIGN_OR_RETURN(run->start_, RestoreCheckpoint(*model, run->resumed_from_));
    run->last_checkpoint_step_ = run->start_.step;
    run->last_checkpoint_ = run->resumed_from_;
    TESSERA_LOG(INFO) << "resumed from " << run->resumed_from_ << " at step "
                      << run->start_.step << " (epoch " << run->start_.epoch << ", batch "
                      << run->start_.batches_in_epoch
                      << "); train.resume: false or a new output.dir starts over";
    if (log != nullptr) {
      TESSERA_RETURN_IF_ERROR(log->Write(JsonLine()
                                             .Add("step", run->start_.step)
                                             .Add("resumed_from", run->resumed_from_)));
    }
  }
  // Read one batch ahead only when the tables can use the hint: the RocksDB tier fetches the
  // next batch's misses, the sharded tables start its input dist under this step.
  const bool tiered = !TieredStores(*model).empty() || !DynamicTieredStores(*model).empty();
  const bool sharded = dynamic_cast<ShardedSparseArch*>(&model->sparse()) != nullptr;
  auto stream = std::make_unique<internal::TrainStream>(std::move(*train),
                                                        tiered || sharded ? model : nullptr);
  for (int64_t e = 0; e < run->start_.epoch; ++e) TESSERA_RETURN_IF_ERROR(stream->Rewind());
  TESSERA_RETURN_IF_ERROR(stream->Skip(run->start_.batches_in_epoch));
  run->stream_ = stream.get();
  *train = std::move(stream);
  run->last_tier_ = CollectTierMetrics(*model);
  run->last_dynamic_ = internal::CollectDynamicStats(model->sparse());
  run->last_tier_step_ = run->start_.step;
  return run;
}

absl::Status CheckpointedRun::AfterStep(int64_t step, bool by_time) {
  const int64_t log_every = std::max<int64_t>(1, config_.train.log_every);
  if (step % log_every == 0) {
    // Dynamic tables: one metrics line each, and their fill on the progress line. Every rank
    // collects them (collective when sharded); the rank with the log writes them.
    std::vector<internal::DynamicTableEntry> now = internal::CollectDynamicStats(model_->sparse());
    if (log_ == nullptr) now.clear();
    for (size_t i = 0; i < now.size(); ++i) {
      const DynamicTableStats before =
          i < last_dynamic_.size() ? last_dynamic_[i].stats : DynamicTableStats();
      TESSERA_RETURN_IF_ERROR(log_->Write(internal::DynamicStatsLine(step, now[i], before)));
    }
    if (!now.empty()) log_->set_progress_note(internal::DynamicProgressNote(now, last_dynamic_));
    last_dynamic_ = std::move(now);
  }
  if (log_ != nullptr && !last_tier_.empty() && step % log_every == 0) {
    std::vector<TierTableMetrics> now = CollectTierMetrics(*model_);
    for (size_t i = 0; i < now.size() && i < last_tier_.size(); ++i) {
      TierRates r = TierRatesBetween(last_tier_[i].metrics, now[i].metrics, step - last_tier_step_);
      TESSERA_RETURN_IF_ERROR(log_->Write(JsonLine()
                                              .Add("step", step)
                                              .Add("tier_table", now[i].name)
                                              .Add("tier_hit_rate", r.hit_rate)
                                              .Add("tier_rows_read_per_step", r.rows_read_per_step)
                                              .Add("tier_rows_written_per_step",
                                                   r.rows_written_per_step)
                                              .Add("tier_misses_per_step", r.misses_per_step)
                                              .Add("tier_prefetch_stall_ms_per_step",
                                                   r.prefetch_stall_ms_per_step)
                                              .Add("tier_read_ms_per_step", r.read_ms_per_step)
                                              .Add("tier_disk_bytes", r.disk_bytes)));
    }
    last_tier_ = std::move(now);
    last_tier_step_ = step;
  }
  const int64_t every = config_.train.checkpoint_every;
  if (!by_time && (every <= 0 || step % every != 0)) return absl::OkStatus();
  return CheckpointNow(step).status();
}

bool CheckpointedRun::DueByTime() const {
  const double minutes = config_.train.checkpoint_minutes;
  return minutes > 0 && since_checkpoint_.ElapsedSeconds() >= 60.0 * minutes;
}

absl::StatusOr<std::string> CheckpointedRun::CheckpointNow(int64_t step) {
  if (step == last_checkpoint_step_) return last_checkpoint_;
  TrainPosition pos{step, stream_->epoch(), stream_->batches_in_epoch()};
  Stopwatch watch;
  TESSERA_ASSIGN_OR_RETURN(std::string path, WriteCheckpoint(*model_, pos, CheckpointDir(config_)));
  last_checkpoint_step_ = step;
  last_checkpoint_ = path;
  since_checkpoint_.Reset();
  if (log_ != nullptr) {
    TESSERA_RETURN_IF_ERROR(log_->Write(JsonLine()
                                            .Add("step", step)
                                            .Add("checkpoint", path)
                                            .Add("checkpoint_seconds", watch.ElapsedSeconds())));
  }
  return path;
}

}  // namespace tessera
