// RunLog: what a training run tells its user while it runs. Metrics go to a JSON-lines file (one
// object per line: "step", "train_loss", "eval_auc", "eval_logloss", "samples_per_sec", ...),
// flushed per line so a crash loses nothing already logged; the same numbers go to a
// TensorBoard event file (trainer/tensorboard.h) when asked; a progress line goes to stderr,
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
#include "trainer/tensorboard.h"

namespace tessera {

// One JSON object built field by field, in insertion order.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, const std::string& value);
  std::string str() const;
  // The numeric fields (key, value) in insertion order, and the string ones.
  const std::vector<std::pair<std::string, double>>& numbers() const { return numbers_; }
  const std::vector<std::pair<std::string, std::string>>& strings() const { return strings_; }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key, JSON text
  std::vector<std::pair<std::string, double>> numbers_;
  std::vector<std::pair<std::string, std::string>> strings_;
};

// The TensorBoard scalars of one metrics line, or none: a line with a numeric "step" and no
// "status" (the final summary repeats earlier values) gives one scalar per other finite number,
// tagged by its key with the prefixes "train_", "eval_", "ms_", "tier_" and "dynamic_" turned
// into the groups "train/", "eval/", "phase_ms/", "tier/<tier_table>/" and
// "dynamic/<dynamic_table>/" (other keys go to "train/"),
// characters other than [A-Za-z0-9_./-] replaced by '_'. E.g. {"step": 5, "train_loss": 0.4,
// "samples_per_sec": 9e4} -> train/loss 0.4, train/samples_per_sec 9e4 at step 5.
std::vector<std::pair<std::string, float>> TensorBoardScalars(const JsonLine& line,
                                                              int64_t* step);

struct RunLogOptions {
  // The JSON-lines file; "" = none. Default: none.
  std::string metrics_path;
  // Keep the file's lines and write after them (a resumed run); false truncates it.
  // Default: false.
  bool append = false;
  // Directory (existing) for a TensorBoard event file of the same metrics; "" = none.
  // Default: none.
  std::string tensorboard_dir;
  // The progress line on stderr. Default: false.
  bool progress = false;
};

class RunLog {
 public:
  // Opens the files `options` names. InvalidArgument naming the path when one cannot be
  // opened or created.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RunLog>> Open(const RunLogOptions& options);
  ~RunLog();
  // Appends `line` to the metrics file and its TensorBoardScalars to the event file, flushing
  // both. Internal naming the path when a write fails.
  [[nodiscard]] absl::Status Write(const JsonLine& line);
  // Shows "step s/total  samples/s  loss  ETA" (total <= 0: unknown).
  void Progress(int64_t step, int64_t total_steps, double samples_per_sec, double loss,
                double elapsed_seconds);
  // Ends an in-place progress line so the next message starts on its own line.
  void EndProgress();
  // Text appended to the progress line from now on (the dynamic tables' fill). Default: none.
  void set_progress_note(std::string note) { note_ = std::move(note); }

 private:
  RunLog() = default;
  std::FILE* file_ = nullptr;
  std::string path_;
  std::unique_ptr<EventFileWriter> events_;
  bool progress_ = false;
  std::string note_;
  bool tty_ = false;
  bool line_open_ = false;
};

}  // namespace tessera
