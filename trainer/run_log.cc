#include "trainer/run_log.h"

#include <unistd.h>

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Inf
  return absl::StrFormat("%.9g", v);
}
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}
std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t % 3600) / 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}
}  // namespace

JsonLine& JsonLine::Add(const std::string& key, double value) {
  fields_.emplace_back(key, JsonNumber(value));
  numbers_.emplace_back(key, value);
  return *this;
}
JsonLine& JsonLine::Add(const std::string& key, int64_t value) {
  fields_.emplace_back(key, absl::StrCat(value));
  numbers_.emplace_back(key, static_cast<double>(value));
  return *this;
}
JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, JsonString(value));
  strings_.emplace_back(key, value);
  return *this;
}

std::vector<std::pair<std::string, float>> TensorBoardScalars(const JsonLine& line,
                                                              int64_t* step) {
  std::vector<std::pair<std::string, float>> out;
  bool have_step = false;
  for (const auto& [key, value] : line.numbers()) {
    if (key == "step") {
      *step = static_cast<int64_t>(value);
      have_step = true;
    }
  }
  std::string table;
  for (const auto& [key, value] : line.strings()) {
    if (key == "status") return out;
    if (key == "tier_table" || key == "dynamic_table") table = value;
  }
  if (!have_step) return out;
  for (const auto& [key, value] : line.numbers()) {
    if (key == "step" || !std::isfinite(value)) continue;
    std::string tag;
    if (absl::StartsWith(key, "train_")) {
      tag = absl::StrCat("train/", key.substr(6));
    } else if (absl::StartsWith(key, "eval_")) {
      tag = absl::StrCat("eval/", key.substr(5));
    } else if (absl::StartsWith(key, "ms_")) {
      tag = absl::StrCat("phase_ms/", key.substr(3));
    } else if (absl::StartsWith(key, "tier_")) {
      tag = absl::StrCat("tier/", table.empty() ? "" : table + "/", key.substr(5));
    } else if (absl::StartsWith(key, "dynamic_")) {
      tag = absl::StrCat("dynamic/", table.empty() ? "" : table + "/", key.substr(8));
    } else {
      tag = absl::StrCat("train/", key);
    }
    for (char& c : tag) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' &&
          c != '/' && c != '-')
        c = '_';
    }
    out.emplace_back(std::move(tag), static_cast<float>(value));
  }
  return out;
}
std::string JsonLine::str() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out += ", ";
    out += JsonString(fields_[i].first) + ": " + fields_[i].second;
  }
  return out + "}";
}

absl::StatusOr<std::unique_ptr<RunLog>> RunLog::Open(const RunLogOptions& options) {
  std::unique_ptr<RunLog> log(new RunLog());
  log->path_ = options.metrics_path;
  log->progress_ = options.progress;
  log->tty_ = isatty(STDERR_FILENO) != 0;
  if (!options.metrics_path.empty()) {
    log->file_ = std::fopen(options.metrics_path.c_str(), options.append ? "a" : "w");
    if (log->file_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.metrics_path, ": cannot open the metrics file for writing"));
    }
  }
  if (!options.tensorboard_dir.empty()) {
    TESSERA_ASSIGN_OR_RETURN(log->events_, EventFileWriter::Create(options.tensorboard_dir));
  }
  return log;
}

RunLog::~RunLog() {
  EndProgress();
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status RunLog::Write(const JsonLine& line) {
  if (events_ != nullptr) {
    int64_t step = 0;
    const std::vector<std::pair<std::string, float>> scalars = TensorBoardScalars(line, &step);
    if (!scalars.empty()) TESSERA_RETURN_IF_ERROR(events_->WriteScalars(step, scalars));
  }
  if (file_ == nullptr) return absl::OkStatus();
  std::string s = line.str() + "\n";
  if (std::fwrite(s.data(), 1, s.size(), file_) != s.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed (disk full?)"));
  }
  return absl::OkStatus();
}

void RunLog::Progress(int64_t step, int64_t total_steps, double samples_per_sec, double loss,
                      double elapsed_seconds) {
  if (!progress_) return;
  std::string eta = "?";
  std::string of;
  if (total_steps > 0) {
    of = absl::StrCat("/", total_steps);
    if (step > 0) eta = FormatDuration(elapsed_seconds * (total_steps - step) / step);
  }
  std::string text = absl::StrFormat("step %d%s  %.0f samples/s  loss %.5f  elapsed %s  ETA %s",
                                     step, of, samples_per_sec, loss,
                                     FormatDuration(elapsed_seconds), eta);
  if (!note_.empty()) absl::StrAppend(&text, "  ", note_);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    line_open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void RunLog::EndProgress() {
  if (line_open_) {
    std::fprintf(stderr, "\n");
    line_open_ = false;
  }
}

}  // namespace tessera
