// The run directory (output.dir) between runs: what a rerun resumes, refusing a resume into
// another model or optimizer, the logs of a resumed run continued without duplicates, and the
// files of an earlier run moved aside when a fresh run starts in the same directory.
// Private to trainer/ (Trainer::Create calls these, rank 0 alone for the file moves).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/config.h"

namespace tessera::internal {

// The checkpoint a rerun of `config` would resume from.
struct ResumePoint {
  std::string checkpoint;       // its path; "" when the run starts fresh
  int64_t step = 0;             // its step
  std::string training_config;  // what it recorded (TrainingConfigText); "" for old checkpoints
};

// With train.resume and a checkpoint LATEST names: that checkpoint's step and recorded
// training config; else an empty ResumePoint. DataLoss naming the file when LATEST or the
// checkpoint's state file cannot be read.
absl::StatusOr<ResumePoint> FindResumePoint(const Config& config);

// Drops the lines of the metrics file (JSON lines) whose "step" is above `step`, and the events
// above `step` from every TensorBoard event file in `events_dir` ("" = none), so a resumed run
// continues its logs without repeating the steps after its checkpoint. Each file is rewritten
// atomically (written beside, renamed); missing files are fine. Internal naming the file when
// one cannot be rewritten.
absl::Status RewindRunLogs(const std::string& metrics_path, const std::string& events_dir,
                           int64_t step);

// Before a fresh run in a directory an earlier run used: moves that run's metrics file, event
// files, effective config, exported model and checkpoint directory (when inside output.dir)
// into <output.dir>/previous-<UTC yyyymmdd-hhmmss>/ and returns that path ("" when there was
// nothing to move). A checkpoint directory outside output.dir is left in place. Internal naming
// the file that could not be moved.
absl::StatusOr<std::string> MovePreviousRunAside(const Config& config);

}  // namespace tessera::internal
