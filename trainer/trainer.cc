#include "trainer/trainer.h"

#include <csignal>
#include "core/trace.h"
#include "trainer/trace_writer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "core/status.h"
#include "dense/lr_schedule.h"
#include "trainer/checkpoint.h"
#include "trainer/internal/run_dir.h"
#include "trainer/mllog.h"
#include "trainer/internal/run_fingerprint.h"
#include "trainer/stop_signal.h"

namespace tessera {
namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Config& config,
                                                         const TrainerOptions& options) {
  const double init_start_ms = MlperfLog::NowMs();
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  // The device first: a cuda config without a visible GPU fails before anything is opened or
  // written.
  t->options_ = options;
  TESSERA_ASSIGN_OR_RETURN(t->cuda_, CreateDeviceForConfig(config, options.local_rank));
  t->ctx_ = t->cuda_ != nullptr ? t->cuda_->context() : DeviceContext::Cpu();
  if (config.threads > 0) SetNumThreads(config.threads);
  TESSERA_ASSIGN_OR_RETURN(t->world_, CreateWorld(config));
  if (t->world_.distributed()) SetLogRank(t->world_.rank());
  TESSERA_ASSIGN_OR_RETURN(t->data_,
                           OpenDataSources(config, t->world_.rank(), t->world_.size()));
  TESSERA_ASSIGN_OR_RETURN(t->model_, CreateModelForWorld(config, t->world_, t->ctx_));
  if (options.eval_only) {
    TESSERA_ASSIGN_OR_RETURN(t->log_, RunLog::Open(RunLogOptions()));  // logs nothing
    return t;
  }
  std::error_code ec;
  fs::create_directories(config.output.dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.source, ": output.dir: cannot create '", config.output.dir, "': ", ec.message()));
  }
  std::string metrics =
      config.output.metrics.empty() || !t->world_.chief()
          ? ""
          : (fs::path(config.output.dir) / config.output.metrics).string();
  const std::string events_dir =
      config.output.tensorboard && t->world_.chief() ? config.output.dir : "";
  // Every rank reads what a resume would start from (the same files), so all refuse together
  // a checkpoint of another model or optimizer, before anything in output.dir changes. An
  // unreadable LATEST fails the run at CheckpointedRun::Start (naming the file): keep the logs
  // then.
  absl::StatusOr<internal::ResumePoint> resume = internal::FindResumePoint(config);
  if (resume.ok() && !resume->checkpoint.empty() && !resume->training_config.empty()) {
    TESSERA_RETURN_IF_ERROR(internal::CheckResumeConfig(config, resume->training_config,
                                                        resume->checkpoint));
  }
  const bool resuming = !resume.ok() || !resume->checkpoint.empty();
  if (t->world_.chief()) {
    if (resume.ok() && resuming) {
      // The logs continue from the checkpoint's step: what the interrupted run logged after
      // it is dropped, since the resumed run logs those steps again.
      TESSERA_RETURN_IF_ERROR(internal::RewindRunLogs(metrics, events_dir, resume->step));
    } else if (!resuming) {
      // A fresh run: an earlier run's files in this directory are moved aside, not mixed in.
      TESSERA_ASSIGN_OR_RETURN(std::string aside, internal::MovePreviousRunAside(config));
      if (!aside.empty()) {
        TESSERA_LOG(INFO) << "a fresh run in " << config.output.dir
                          << ": the previous run's files were moved to " << aside;
      }
    }
  }
  RunLogOptions log;
  log.metrics_path = metrics;
  log.append = resuming;
  log.progress = config.output.progress && t->world_.chief();
  log.tensorboard_dir = events_dir;
  TESSERA_ASSIGN_OR_RETURN(t->log_, RunLog::Open(log));
  if (t->world_.chief() && !config.output.mllog.empty()) {
    TESSERA_ASSIGN_OR_RETURN(
        t->mllog_,
        MlperfLog::Open((fs::path(config.output.dir) / config.output.mllog).string(), init_start_ms));
  }
  if (t->world_.chief()) TESSERA_RETURN_IF_ERROR(WriteEffectiveConfig(config));
  return t;
}

absl::Status WriteEffectiveConfig(const Config& config) {
  const fs::path path = fs::path(config.output.dir) / kEffectiveConfigFile;
  const fs::path tmp = fs::path(path.string() + ".tmp");
  const std::string text = ConfigToYaml(config);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": cannot write the effective config (output.dir)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::AllHaveBatch(bool mine) {
  if (!world_.distributed()) return mine;
  int64_t have = mine ? 1 : 0;
  TESSERA_RETURN_IF_ERROR(world_.comm->AllReduce(&have, 1, ReduceOp::kSum));
  return have == world_.size();
}

absl::StatusOr<EvalMetrics> Trainer::Evaluate(int64_t max_batches, std::vector<float>* scores) {
  if (scores != nullptr) scores->clear();
  if (data_.eval == nullptr) return EvalMetrics{};
  TESSERA_RETURN_IF_ERROR(data_.eval->Rewind());
  EvalAccumulator acc;
  Batch batch;
  std::vector<float> probs;
  for (int64_t n = 0; max_batches <= 0 || n < max_batches; ++n) {
    TESSERA_ASSIGN_OR_RETURN(bool more, data_.eval->Next(&batch));
    if (world_.distributed()) {
      // Ranks' slices may end a batch apart: a rank that is done takes part in the sharded
      // lookup with an empty batch until every rank is done, so no prediction is dropped.
      int64_t active = more ? 1 : 0;
      TESSERA_RETURN_IF_ERROR(world_.comm->AllReduce(&active, 1, ReduceOp::kSum));
      if (active == 0) break;
      if (!more) {
        batch.batch_size = 0;
        batch.dense.clear();
        batch.labels.clear();
        batch.sparse.batch_size = 0;
        batch.sparse.Clear();
      }
    } else if (!more) {
      break;
    }
    probs.clear();
    TESSERA_RETURN_IF_ERROR(model_->Predict(batch, &probs));
    acc.Add(probs, batch.labels);
  }
  if (!world_.distributed()) {
    if (scores != nullptr) *scores = acc.probs();
    return acc.Compute();
  }
  // Exact AUC needs every prediction: gather them all (every rank computes the same metrics).
  std::vector<int64_t> counts(world_.size()), bytes(world_.size()), displs(world_.size());
  TESSERA_RETURN_IF_ERROR(world_.comm->AllGatherCounts(acc.count(), absl::MakeSpan(counts)));
  int64_t total = 0;
  for (int r = 0; r < world_.size(); ++r) {
    bytes[r] = counts[r] * static_cast<int64_t>(sizeof(float));
    displs[r] = total * static_cast<int64_t>(sizeof(float));
    total += counts[r];
  }
  std::vector<float> all_probs(total), all_labels(total);
  TESSERA_RETURN_IF_ERROR(world_.comm->AllGatherV(acc.probs().data(), bytes[world_.rank()],
                                                  all_probs.data(), bytes, displs));
  TESSERA_RETURN_IF_ERROR(world_.comm->AllGatherV(acc.labels().data(), bytes[world_.rank()],
                                                  all_labels.data(), bytes, displs));
  EvalMetrics m = ComputeEvalMetrics(all_probs, all_labels);
  if (scores != nullptr) *scores = std::move(all_probs);
  return m;
}

absl::Status Trainer::OnNonFiniteStep(const NonFiniteStep& nonfinite, double loss, int64_t step,
                                      int64_t epoch, int64_t batch_index,
                                      const std::string& origin) {
  // Every rank whose own batch was not finite describes it; all ranks see all descriptions
  // (a gather of a few bytes, on this rare step only) so each reports and acts alike.
  std::string mine;
  if (nonfinite.this_rank) {
    mine = absl::StrCat(world_.distributed() ? absl::StrCat("rank ", world_.rank(), ": ") : "",
                        "epoch ", epoch, ", batch ", batch_index,
                        world_.distributed() ? " of the rank's slice" : "", " (first sample: ",
                        origin.empty() ? "unknown" : origin, ")");
  }
  std::string culprits = mine;
  if (world_.distributed()) {
    const int n = world_.size();
    std::vector<int64_t> bytes(n), displs(n);
    TESSERA_RETURN_IF_ERROR(world_.comm->AllGatherCounts(static_cast<int64_t>(mine.size()),
                                                         absl::MakeSpan(bytes)));
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      displs[r] = total;
      total += bytes[r];
    }
    std::string all(total, '\0');
    TESSERA_RETURN_IF_ERROR(
        world_.comm->AllGatherV(mine.data(), bytes[world_.rank()], all.data(), bytes, displs));
    culprits.clear();
    for (int r = 0; r < n; ++r) {
      if (bytes[r] == 0) continue;
      absl::StrAppend(&culprits, culprits.empty() ? "" : "; ", all.substr(displs[r], bytes[r]));
    }
  }
  const bool skip = config_.train.nonfinite == NonFinitePolicy::kSkip;
  const std::string what = nonfinite.what == NonFiniteStep::kLoss
                               ? absl::StrCat("the loss is not finite (", loss, ")")
                               : absl::StrCat("the gradients are not finite (loss ", loss, ")");
  const std::string message =
      absl::StrCat("step ", step + 1, ": ", what, "; batch: ", culprits.empty() ? "unknown" : culprits);
  log_->EndProgress();
  TESSERA_RETURN_IF_ERROR(log_->Write(
      JsonLine()
          .Add("step", step + 1)
          .Add("nonfinite", std::string(nonfinite.what == NonFiniteStep::kLoss ? "loss"
                                                                               : "gradients"))
          .Add("action", std::string(skip ? "skipped" : "stopped"))
          .Add("batch", culprits)));
  if (!skip) {
    return absl::FailedPreconditionError(absl::StrCat(
        message, ". The model was not updated by this step; train.nonfinite: skip skips such "
        "steps instead (or lower the learning rate)"));
  }
  if (world_.chief()) {
    TESSERA_LOG(WARNING) << message << ": skipped (train.nonfinite: skip), the model is unchanged";
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::Run() {
  absl::StatusOr<TrainSummary> result = RunLoop();
  if (!result.ok() && mllog_ != nullptr) (void)mllog_->RunStop(GlobalSamples(last_step_), false);
  if (!result.ok() && !absl::IsCancelled(result.status())) {  // a stop logged itself
    log_->EndProgress();
    // A failed run says so last, so its metrics never read as a finished run.
    (void)log_->Write(JsonLine()
                          .Add("status", std::string("failed"))
                          .Add("error", std::string(result.status().message())));
  }
  return result;
}

absl::StatusOr<TrainSummary> Trainer::RunLoop() {
  TrainSummary s;
  s.planted_auc = data_.planted_auc;
  const TrainConfig& tc = config_.train;
  int64_t total_steps = tc.steps;
  if (total_steps <= 0 && data_.train_batches_per_epoch > 0) {
    total_steps = tc.epochs * data_.train_batches_per_epoch;
  }
  const int64_t log_every = std::max<int64_t>(1, tc.log_every);
  Batch batch;
  int64_t epoch = 0, step = 0;
  // Resume from the latest checkpoint (train.resume) and track the data position for
  // checkpoints (train.checkpoint_every): trainer/checkpoint.h.
  TESSERA_ASSIGN_OR_RETURN(auto checkpoints,
                           CheckpointedRun::Start(config_, model_.get(), &data_.train, log_.get()));
  step = checkpoints->start().step;
  epoch = checkpoints->start().epoch;
  int64_t batch_in_epoch = checkpoints->start().batches_in_epoch;  // this rank's, for reports
  last_step_ = step;
  if (mllog_ != nullptr) {
    const int64_t per_epoch =
        data_.train_batches_per_epoch > 0
            ? data_.train_batches_per_epoch * config_.data.batch_size * world_.size()
            : 0;
    TESSERA_RETURN_IF_ERROR(mllog_->Configured(config_, world_.size(), per_epoch));
    TESSERA_RETURN_IF_ERROR(mllog_->BlockStart(GlobalSamples(step)));
  }
  double interval_loss = 0;
  int64_t interval_steps = 0, interval_samples = 0;
  PhaseTimes logged_phases;  // s.phases at the last metrics line
  Stopwatch total_watch, interval_watch;
  double eval_seconds = 0, interval_eval_seconds = 0;

  auto eval_and_log = [&](bool final_eval) -> absl::Status {
    if (data_.eval == nullptr) return absl::OkStatus();
    Stopwatch w;
    if (mllog_ != nullptr) TESSERA_RETURN_IF_ERROR(mllog_->EvalStart(GlobalSamples(step)));
    TESSERA_ASSIGN_OR_RETURN(EvalMetrics m, Evaluate(final_eval ? 0 : tc.eval_batches));
    if (mllog_ != nullptr) {
      TESSERA_RETURN_IF_ERROR(mllog_->EvalDone(GlobalSamples(step), m.auc, m.count));
      if (!final_eval) TESSERA_RETURN_IF_ERROR(mllog_->BlockStart(GlobalSamples(step)));
    }
    double secs = w.ElapsedSeconds();
    eval_seconds += secs;
    interval_eval_seconds += secs;
    log_->EndProgress();
    if (world_.chief()) {
      TESSERA_LOG(INFO) << "step " << step << ": eval AUC " << m.auc << ", log loss " << m.logloss
                        << ", NE " << m.ne << " over " << m.count << " samples";
      if (m.ne > 1) {
        TESSERA_LOG(WARNING) << "eval NE " << m.ne << " > 1: the model predicts worse than the "
                             << "eval set's base rate would (overfitting, or a learning rate "
                             << "too high: try fewer epochs, a lower rate or more data)";
      }
    }
    if (final_eval) s.eval = m;
    return log_->Write(JsonLine()
                           .Add("step", step)
                           .Add("eval_auc", m.auc)
                           .Add("eval_logloss", m.logloss)
                           .Add("eval_ne", m.ne)
                           .Add("eval_samples", m.count));
  };

  // The step trace window (options_.trace_*), counted in this run's steps.
  int64_t traced = 0;
  bool trace_open = false;
  Communicator* trace_comm = world_.distributed() ? world_.comm.get() : nullptr;
  auto write_trace = [&]() -> absl::Status {
    trace_open = false;
    TESSERA_ASSIGN_OR_RETURN(
        std::string text,
        GatherStepTrace(trace_comm,
                        absl::StrCat("\"tool\": \"tessera-train\", \"config\": \"",
                                     config_.source, "\", \"steps\": ",
                                     traced - options_.trace_first_step, ", \"world_size\": ",
                                     world_.size())));
    if (world_.chief()) TESSERA_RETURN_IF_ERROR(WriteTraceFile(options_.trace_path, text));
    return absl::OkStatus();
  };
  while (total_steps <= 0 || step < total_steps) {
    Stopwatch data_watch;
    TESSERA_ASSIGN_OR_RETURN(bool more, data_.train->Next(&batch));
    TESSERA_ASSIGN_OR_RETURN(more, AllHaveBatch(more));
    if (!more) {
      ++epoch;
      if (step == 0 && epoch == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_.source, ": data.train: the training data has no records"));
      }
      if (tc.steps <= 0 && epoch >= tc.epochs) break;
      TESSERA_RETURN_IF_ERROR(data_.train->Rewind());
      batch_in_epoch = 0;
      continue;
    }
    s.phases.Add("data", data_watch.ElapsedSeconds());
    if (!options_.trace_path.empty() && traced == options_.trace_first_step) {
      TESSERA_RETURN_IF_ERROR(StartStepTrace(trace_comm));
      trace_open = true;
    }
    std::optional<trace::Span> step_span(std::in_place, "step", "iteration");
    step_span->Arg("step", step);
    NonFiniteStep nonfinite;
    TESSERA_ASSIGN_OR_RETURN(double loss,
                             model_->TrainStep(batch, step, &s.phases, &nonfinite));
    const int64_t batch_index = batch_in_epoch++;
    const bool skipped = nonfinite.what != NonFiniteStep::kNone;
    if (skipped) {
      // Stops the run (train.nonfinite: stop) or reports the skipped step.
      TESSERA_RETURN_IF_ERROR(
          OnNonFiniteStep(nonfinite, loss, step, epoch, batch_index, batch.origin));
      ++s.nonfinite_skipped;
    }
    ++step;
    last_step_ = step;
    ++traced;
    step_span.reset();  // the step's span ends here, before the window may be written
    if (trace_open && traced == options_.trace_first_step + options_.trace_steps) {
      TESSERA_RETURN_IF_ERROR(write_trace());
    }
    // A stop signal (SIGINT, SIGTERM) on any rank, and rank 0's clock for the time cadence:
    // every rank acts on the same step.
    const int sig = StopSignalReceived();
    int64_t flags[3] = {sig == SIGINT ? 1 : 0, sig != 0 && sig != SIGINT ? 1 : 0,
                        world_.chief() && checkpoints->DueByTime() ? 1 : 0};
    if (world_.distributed()) {
      TESSERA_RETURN_IF_ERROR(world_.comm->AllReduce(flags, 3, ReduceOp::kSum));
    }
    // The signal every rank reports: SIGINT when any rank got one, else SIGTERM.
    if (flags[0] + flags[1] > 0) stop_signal_ = flags[0] > 0 ? SIGINT : SIGTERM;
    TESSERA_RETURN_IF_ERROR(checkpoints->AfterStep(step, flags[2] > 0));
    if (!skipped) {
      s.samples += batch.batch_size;
      interval_loss += loss;
      ++interval_steps;
      interval_samples += batch.batch_size * world_.size();  // approximate: equal local batches
      s.last_train_loss = interval_loss / interval_steps;
    }
    if ((step % log_every == 0 || step == total_steps) && interval_steps > 0) {
      double secs = interval_watch.ElapsedSeconds() - interval_eval_seconds;
      double sps = secs > 0 ? interval_samples / secs : 0;
      double elapsed = total_watch.ElapsedSeconds() - eval_seconds;
      log_->Progress(step, total_steps, sps, s.last_train_loss, elapsed);
      JsonLine line;
      line.Add("step", step)
          .Add("train_loss", s.last_train_loss)
          .Add("samples_per_sec", sps)
          .Add("lr_scale", static_cast<double>(LearningRate(config_.optimizer.schedule, step - 1)));
      // Milliseconds per step of each phase over the interval.
      for (const auto& [phase, secs] : s.phases.phases()) {
        line.Add("ms_" + phase, 1e3 * (secs - logged_phases.Get(phase)) / interval_steps);
      }
      logged_phases = s.phases;
      TESSERA_RETURN_IF_ERROR(log_->Write(line));
      interval_loss = 0;
      interval_steps = 0;
      interval_samples = 0;
      interval_eval_seconds = 0;
      interval_watch.Reset();
    }
    if (stop_signal_ != 0) return Stop(*checkpoints, step, total_steps);
    if (tc.eval_every > 0 && step % tc.eval_every == 0 && step != total_steps) {
      TESSERA_RETURN_IF_ERROR(eval_and_log(false));
    }
  }
  if (trace_open) TESSERA_RETURN_IF_ERROR(write_trace());
  s.steps = step;
  if (world_.distributed()) {
    TESSERA_RETURN_IF_ERROR(world_.comm->AllReduce(&s.samples, 1, ReduceOp::kSum));
  }
  s.seconds = total_watch.ElapsedSeconds() - eval_seconds;
  s.samples_per_sec = s.seconds > 0 ? s.samples / s.seconds : 0;
  log_->EndProgress();
  TESSERA_RETURN_IF_ERROR(eval_and_log(true));
  if (!config_.output.export_path.empty()) {
    s.export_path = (fs::path(config_.output.dir) / config_.output.export_path).string();
    TESSERA_RETURN_IF_ERROR(model_->Export(s.export_path, step));
  }
  JsonLine done;
  done.Add("status", std::string("done"))
      .Add("step", step)
      .Add("samples", s.samples)
      .Add("samples_per_sec", s.samples_per_sec)
      .Add("train_loss", s.last_train_loss);
  if (s.nonfinite_skipped > 0) done.Add("nonfinite_skipped", s.nonfinite_skipped);
  if (data_.eval != nullptr) {
    done.Add("eval_auc", s.eval.auc).Add("eval_logloss", s.eval.logloss).Add("eval_ne", s.eval.ne);
  }
  if (std::isfinite(s.planted_auc)) done.Add("planted_auc", s.planted_auc);
  TESSERA_RETURN_IF_ERROR(log_->Write(done));
  if (mllog_ != nullptr) TESSERA_RETURN_IF_ERROR(mllog_->RunStop(GlobalSamples(step), true));
  return s;
}

absl::Status Trainer::Stop(CheckpointedRun& checkpoints, int64_t step, int64_t total_steps) {
  log_->EndProgress();
  const std::string why = StopSignalName(stop_signal_);
  TESSERA_ASSIGN_OR_RETURN(std::string checkpoint, checkpoints.CheckpointNow(step));
  std::string exported;
  if (!config_.output.export_path.empty()) {
    exported = (fs::path(config_.output.dir) / config_.output.export_path).string();
    TESSERA_RETURN_IF_ERROR(model_->Export(exported, step));
  }
  TESSERA_RETURN_IF_ERROR(log_->Write(JsonLine()
                                          .Add("status", std::string("interrupted"))
                                          .Add("step", step)
                                          .Add("signal", why)
                                          .Add("checkpoint", checkpoint)));
  return absl::CancelledError(absl::StrCat(
      "stopped by ", why, " after step ", step,
      total_steps > 0 ? absl::StrCat(" of ", total_steps) : std::string(), "; checkpoint ",
      checkpoint, exported.empty() ? "" : absl::StrCat(", model (at this step) exported to ", exported),
      ". Rerun the same command to resume from step ", step));
}

}  // namespace tessera
