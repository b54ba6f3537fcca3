// The MLPerf Training log of a run (output.mllog): one `:::MLLOG {json}` line per event, in the
// format of mlperf_logging's mllog (github.com/mlcommons/logging): {"namespace", "time_ms",
// "event_type" (POINT_IN_TIME, INTERVAL_START, INTERVAL_END), "key", "value", "metadata"
// ({"file", "lineno", ...})}, with the keys the DLRM-DCNv2 rules check
// (mlperf_logging.compliance_checker, training ruleset 6.0.0, the last with dlrm_dcnv2):
//   submission_benchmark dlrm_dcnv2, submission_org/platform/division/status, cache_clear,
//   init_start/init_stop, run_start/run_stop {status}, global_batch_size,
//   gradient_accumulation_steps, seed, opt_name adagrad and its hyperparameters, the LR
//   schedule's warmup and decay steps, train_samples, eval_samples, block_start/block_stop and
//   eval_start/eval_stop around every evaluation {epoch_num, samples_count}, eval_accuracy (the
//   AUC) {epoch_num}, and the precision and parallelism disclosures.
// Tessera logs the open division (it is not the reference implementation); what a closed
// submission would still need is in docs/FORMATS.md ("MLPerf log"). Rank 0 writes it; a
// resumed run starts it over (MLPerf's timing has no resumes). Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/config.h"

namespace tessera {

class MlperfLog {
 public:
  // Creates (truncates) `path`; `init_start_ms` is when the run started (Unix ms), logged as
  // init_start. InvalidArgument naming the path when it cannot be written.
  static absl::StatusOr<std::unique_ptr<MlperfLog>> Open(const std::string& path,
                                                         double init_start_ms);
  ~MlperfLog();

  // The submission, hyperparameter and size keys of `config` on `world_size` ranks with
  // `train_samples` per epoch (0 when unknown), then init_stop and run_start.
  absl::Status Configured(const Config& config, int world_size, int64_t train_samples);
  // A training block starts / an evaluation at `step` (global samples trained: `samples`)
  // starts; EvalDone logs its end, eval_samples (once) and eval_accuracy = `auc`.
  absl::Status BlockStart(int64_t samples);
  absl::Status EvalStart(int64_t samples);
  absl::Status EvalDone(int64_t samples, double auc, int64_t eval_samples);
  // run_stop with status "success" or "aborted".
  absl::Status RunStop(int64_t samples, bool success);

  // Unix time now, in milliseconds.
  static double NowMs();

 private:
  MlperfLog() = default;
  absl::Status Write(const char* event_type, const std::string& key, const std::string& value,
                     const std::string& metadata, double time_ms = -1);
  std::string EpochMeta(int64_t samples) const;

  std::FILE* file_ = nullptr;
  std::string path_;
  int64_t train_samples_ = 0;  // per epoch
  int64_t block_samples_ = 0;  // where the open block started
  bool block_open_ = false;
  bool eval_samples_logged_ = false;
};

}  // namespace tessera
