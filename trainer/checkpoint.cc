#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/row_optimizer.h"
#include "trainer/internal/train_stream.h"
#include "trainer/safetensors.h"
#include "trainer/sharded_sparse_arch.h"

namespace tessera {
namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "tessera-checkpoint-1";
constexpr char kStateFile[] = "state.safetensors";
constexpr char kLatest[] = "LATEST";
constexpr int64_t kChunkRows = 1 << 16;

std::string WeightName(const TableConfig& t) { return "table." + t.name + ".weight"; }
std::string StateName(const TableConfig& t) { return "table." + t.name + ".state"; }
std::string DenseName(const Parameter* p) { return "dense." + p->name; }
std::string OptimName(const Parameter* p) { return "dense_optimizer." + p->name; }

absl::StatusOr<EmbeddingCollection*> LocalCollection(Model& model) {
  auto* local = dynamic_cast<LocalSparseArch*>(&model.sparse());
  if (local == nullptr) {
    return absl::UnimplementedError(
        "checkpoints of a sharded model (several ranks) are not supported yet");
  }
  return &local->collection();
}

absl::Status FsyncPath(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", p.string(), ": ", strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync ", p.string(), ": ", strerror(err)));
  return absl::OkStatus();
}

// fsyncs every file and directory under `root` (and root itself): a renamed checkpoint must be
// on disk in full before LATEST may name it.
absl::Status FsyncTree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_symlink()) continue;
    TESSERA_RETURN_IF_ERROR(FsyncPath(it->path(), it->is_directory()));
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", root.string(), ": ", ec.message()));
  return FsyncPath(root, true);
}

// Copies `bytes` between host and the parameter's device.
absl::Status CopyOut(const Parameter* p, std::vector<float>* host) {
  host->resize(p->value.numel());
  if (p->value.device() != Device::kCpu) {
    return CudaMemcpy(host->data(), p->value.raw(), p->value.bytes());
  }
  std::memcpy(host->data(), p->value.raw(), p->value.bytes());
  return absl::OkStatus();
}
absl::Status CopyIn(Parameter* p, const void* src) {
  if (p->value.device() != Device::kCpu) return CudaMemcpy(p->value.raw(), src, p->value.bytes());
  std::memcpy(p->value.raw(), src, p->value.bytes());
  return absl::OkStatus();
}

// Step number of a "ckpt-<step>" or "ckpt-<step>.tmp" entry, or -1.
int64_t CheckpointStep(const std::string& name) {
  if (!absl::StartsWith(name, "ckpt-")) return -1;
  std::string digits = name.substr(5);
  if (absl::EndsWith(digits, ".tmp")) digits.resize(digits.size() - 4);
  int64_t step;
  return !digits.empty() && absl::SimpleAtoi(digits, &step) && step >= 0 ? step : -1;
}

absl::Status WriteState(Model& model, EmbeddingCollection& c, const TrainPosition& pos,
                        const fs::path& file) {
  std::vector<TensorSpec> specs;
  for (int t = 0; t < c.num_tables(); ++t) {
    if (dynamic_cast<TieredRowStore*>(&c.store(t)) != nullptr) continue;
    const TableConfig& tc = c.table(t);
    specs.push_back({WeightName(tc), SafetensorsDtype::kF32, {tc.num_rows, tc.dim}});
    if (c.store(t).state_dim() > 0) {
      specs.push_back({StateName(tc), SafetensorsDtype::kF32, {tc.num_rows, c.store(t).state_dim()}});
    }
  }
  std::vector<Parameter*> params = model.dense_parameters();
  std::vector<Parameter*> optim = model.dense_optimizer().state();
  for (Parameter* p : params) specs.push_back({DenseName(p), SafetensorsDtype::kF32, p->value.shape()});
  for (Parameter* p : optim) specs.push_back({OptimName(p), SafetensorsDtype::kF32, p->value.shape()});
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"step", std::to_string(pos.step)},
      {"epoch", std::to_string(pos.epoch)},
      {"batches_in_epoch", std::to_string(pos.batches_in_epoch)},
      {"dense_optimizer_steps", std::to_string(model.dense_optimizer().steps_taken())},
      {"seed", std::to_string(model.config().seed)}};
  TESSERA_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(file.string(), specs, meta));
  std::vector<float> w, s;
  for (int t = 0; t < c.num_tables(); ++t) {
    RowStore& store = c.store(t);
    if (dynamic_cast<TieredRowStore*>(&store) != nullptr) continue;
    const TableConfig& tc = c.table(t);
    const int64_t sd = store.state_dim();
    for (int64_t r = 0; r < tc.num_rows; r += kChunkRows) {
      const int64_t n = std::min(kChunkRows, tc.num_rows - r);
      w.resize(static_cast<size_t>(n * tc.dim));
      s.resize(static_cast<size_t>(n * sd));
      TESSERA_RETURN_IF_ERROR(store.ReadRows(r, n, w.data(), sd > 0 ? s.data() : nullptr));
      TESSERA_RETURN_IF_ERROR(writer->WriteRows(WeightName(tc), r, r + n, w.data()));
      if (sd > 0) TESSERA_RETURN_IF_ERROR(writer->WriteRows(StateName(tc), r, r + n, s.data()));
    }
  }
  for (const auto& [list, namer] : {std::pair{&params, &DenseName}, std::pair{&optim, &OptimName}}) {
    for (Parameter* p : *list) {
      TESSERA_RETURN_IF_ERROR(CopyOut(p, &w));
      TESSERA_RETURN_IF_ERROR(writer->WriteTensor(namer(p), w.data()));
    }
  }
  return writer->Finish();
}

absl::Status WriteLatest(const fs::path& dir, const std::string& name) {
  const fs::path tmp = dir / (std::string(kLatest) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << name << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("writing ", tmp.string()));
  }
  TESSERA_RETURN_IF_ERROR(FsyncPath(tmp, false));
  std::error_code ec;
  fs::rename(tmp, dir / kLatest, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("renaming ", tmp.string(), " to ", kLatest, ": ", ec.message()));
  }
  return FsyncPath(dir, true);
}

absl::StatusOr<std::string> ReadLatestName(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kLatest, ec)) return std::string();
  std::ifstream in(dir / kLatest);
  std::string name;
  std::getline(in, name);
  if (CheckpointStep(name) < 0 || absl::EndsWith(name, ".tmp")) {
    return absl::DataLossError(absl::StrCat((dir / kLatest).string(), ": expected 'ckpt-<step>', got '",
                                            name, "'"));
  }
  return name;
}

absl::StatusOr<int64_t> MetaInt(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  int64_t v;
  if (it == f.metadata().end() || !absl::SimpleAtoi(it->second, &v) || v < 0) {
    return absl::DataLossError(
        absl::StrCat(f.path(), ": metadata '", key, "' missing or not a non-negative integer"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::string> WriteCheckpoint(Model& model, const TrainPosition& position,
                                            const std::string& checkpoint_dir, int keep) {
  TESSERA_ASSIGN_OR_RETURN(EmbeddingCollection * c, LocalCollection(model));
  const fs::path dir(checkpoint_dir);
  const std::string name = absl::StrCat("ckpt-", position.step);
  const fs::path final_dir = dir / name;
  const fs::path tmp = dir / (name + ".tmp");
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp / "tables", ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint: cannot create ", tmp.string(), ": ", ec.message()));
  }
  TESSERA_RETURN_IF_ERROR(WriteState(model, *c, position, tmp / kStateFile));
  for (int t = 0; t < c->num_tables(); ++t) {
    auto* tiered = dynamic_cast<TieredRowStore*>(&c->store(t));
    if (tiered == nullptr) continue;
    TESSERA_RETURN_IF_ERROR(tiered->Checkpoint((tmp / "tables" / c->table(t).name).string()));
  }
  TESSERA_RETURN_IF_ERROR(FsyncTree(tmp));
  TESSERA_ASSIGN_OR_RETURN(std::string previous, ReadLatestName(dir));
  if (previous == name) {
    // LATEST names a checkpoint of this step from a run that was not resumed (train.resume:
    // false): it is being replaced, so stop naming it first.
    fs::remove(dir / kLatest, ec);
    TESSERA_RETURN_IF_ERROR(FsyncPath(dir, true));
    previous.clear();
  }
  // A directory of this name that LATEST does not name comes from a run killed between its
  // rename and the LATEST update, or from an older run: replace it.
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("checkpoint: renaming ", tmp.string(), " to ",
                                            final_dir.string(), ": ", ec.message()));
  }
  TESSERA_RETURN_IF_ERROR(FsyncPath(dir, true));
  TESSERA_RETURN_IF_ERROR(WriteLatest(dir, name));
  // Keep the new checkpoint and (keep >= 2) the one LATEST named before; drop the rest.
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (CheckpointStep(n) < 0 || n == name || (keep >= 2 && n == previous)) continue;
    doomed.push_back(entry.path());
  }
  for (const fs::path& p : doomed) {
    std::error_code rm_ec;
    fs::remove_all(p, rm_ec);
    if (rm_ec) TESSERA_LOG(WARNING) << "checkpoint: cannot remove " << p << ": " << rm_ec.message();
  }
  return final_dir.string();
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& checkpoint_dir) {
  TESSERA_ASSIGN_OR_RETURN(std::string name, ReadLatestName(checkpoint_dir));
  if (name.empty()) return name;
  fs::path p = fs::path(checkpoint_dir) / name;
  std::error_code ec;
  if (!fs::exists(p / kStateFile, ec)) {
    return absl::DataLossError(absl::StrCat(checkpoint_dir, "/", kLatest, " names ", name,
                                            " but ", (p / kStateFile).string(), " is missing"));
  }
  return p.string();
}

absl::StatusOr<TrainPosition> RestoreCheckpoint(Model& model, const std::string& checkpoint) {
  TESSERA_ASSIGN_OR_RETURN(EmbeddingCollection * c, LocalCollection(model));
  const fs::path dir(checkpoint);
  TESSERA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((dir / kStateFile).string()));
  auto fmt = file->metadata().find("format");
  if (fmt == file->metadata().end() || fmt->second != kFormat) {
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
    RowStore& store = c->store(t);
    const TableConfig& tc = c->table(t);
    const fs::path db = dir / "tables" / tc.name;
    std::error_code ec;
    const bool has_db = fs::exists(db, ec);
    if (auto* tiered = dynamic_cast<TieredRowStore*>(&store)) {
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
    const int64_t sd = store.state_dim();
    TESSERA_ASSIGN_OR_RETURN(const TensorView* w,
                             file->Get(WeightName(tc), SafetensorsDtype::kF32, {tc.num_rows, tc.dim}));
    const TensorView* s = nullptr;
    ++expected;
    if (sd > 0) {
      TESSERA_ASSIGN_OR_RETURN(s, file->Get(StateName(tc), SafetensorsDtype::kF32, {tc.num_rows, sd}));
      ++expected;
    }
    for (int64_t r = 0; r < tc.num_rows; r += kChunkRows) {
      const int64_t n = std::min(kChunkRows, tc.num_rows - r);
      TESSERA_RETURN_IF_ERROR(
          store.WriteRows(r, n, w->f32() + r * tc.dim, s ? s->f32() + r * sd : nullptr));
    }
  }
  for (Parameter* p : model.dense_parameters()) {
    TESSERA_ASSIGN_OR_RETURN(const TensorView* v,
                             file->Get(DenseName(p), SafetensorsDtype::kF32, p->value.shape()));
    TESSERA_RETURN_IF_ERROR(CopyIn(p, v->data));
    ++expected;
  }
  for (Parameter* p : model.dense_optimizer().state()) {
    TESSERA_ASSIGN_OR_RETURN(const TensorView* v,
                             file->Get(OptimName(p), SafetensorsDtype::kF32, p->value.shape()));
    TESSERA_RETURN_IF_ERROR(CopyIn(p, v->data));
    ++expected;
  }
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
    TESSERA_ASSIGN_OR_RETURN(run->resumed_from_, LatestCheckpoint(CheckpointDir(config)));
  }
  if (!run->resumed_from_.empty()) {
    TESSERA_ASSIGN_OR_RETURN(run->start_, RestoreCheckpoint(*model, run->resumed_from_));
    TESSERA_LOG(INFO) << "resumed from " << run->resumed_from_ << " at step "
                      << run->start_.step << " (epoch " << run->start_.epoch << ", batch "
                      << run->start_.batches_in_epoch << ")";
    if (log != nullptr) {
      TESSERA_RETURN_IF_ERROR(log->Write(JsonLine()
                                             .Add("step", run->start_.step)
                                             .Add("resumed_from", run->resumed_from_)));
    }
  }
  // Read one batch ahead only when the tables can use the hint: the RocksDB tier fetches the
  // next batch's misses, the sharded tables start its input dist under this step.
  const bool tiered = !TieredStores(*model).empty();
  const bool sharded = dynamic_cast<ShardedSparseArch*>(&model->sparse()) != nullptr;
  auto stream = std::make_unique<internal::TrainStream>(std::move(*train),
                                                        tiered || sharded ? model : nullptr);
  for (int64_t e = 0; e < run->start_.epoch; ++e) TESSERA_RETURN_IF_ERROR(stream->Rewind());
  TESSERA_RETURN_IF_ERROR(stream->Skip(run->start_.batches_in_epoch));
  run->stream_ = stream.get();
  *train = std::move(stream);
  run->last_tier_ = CollectTierMetrics(*model);
  run->last_tier_step_ = run->start_.step;
  return run;
}

absl::Status CheckpointedRun::AfterStep(int64_t step) {
  const int64_t log_every = std::max<int64_t>(1, config_.train.log_every);
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
  if (every <= 0 || step % every != 0) return absl::OkStatus();
  TrainPosition pos{step, stream_->epoch(), stream_->batches_in_epoch()};
  Stopwatch watch;
  TESSERA_ASSIGN_OR_RETURN(std::string path, WriteCheckpoint(*model_, pos, CheckpointDir(config_)));
  if (log_ != nullptr) {
    TESSERA_RETURN_IF_ERROR(log_->Write(JsonLine()
                                            .Add("step", step)
                                            .Add("checkpoint", path)
                                            .Add("checkpoint_seconds", watch.ElapsedSeconds())));
  }
  return absl::OkStatus();
}

}  // namespace tessera
