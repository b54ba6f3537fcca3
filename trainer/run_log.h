// RunLog: what a training run tells its user while it runs. Metrics go to a JSON-lines file (one
// object per line: "step", "train_loss", "eval_auc", "eval_logloss", "samples_per_sec", ...),
// flushed per line so a crash loses nothing already logged; a progress line goes to stderr,
// redrawn in place on a terminal and printed every log interval otherwise.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// One JSON object built field by field, in insertion order.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, const std::string& value);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

class RunLog {
 public:
  // Opens (truncates) `metrics_path` for writing; "" logs to no file. `progress` enables the
  // progress line.
  static absl::StatusOr<std::unique_ptr<RunLog>> Open(const std::string& metrics_path,
                                                     bool progress);
  ~RunLog();
  absl::Status Write(const JsonLine& line);
  // Shows "step s/total  samples/s  loss  ETA" (total <= 0: unknown).
  void Progress(int64_t step, int64_t total_steps, double samples_per_sec, double loss,
                double elapsed_seconds);
  // Ends an in-place progress line so the next message starts on its own line.
  void EndProgress();

 private:
  RunLog() = default;
  std::FILE* file_ = nullptr;
  std::string path_;
  bool progress_ = false;
  bool tty_ = false;
  bool line_open_ = false;
};

}  // namespace tessera
