#include "trainer/internal/run_dir.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "trainer/checkpoint.h"
#include "trainer/internal/checkpoint_files.h"
#include "trainer/internal/run_fingerprint.h"
#include "trainer/safetensors.h"
#include "trainer/tensorboard.h"
#include "trainer/trainer.h"

namespace tessera::internal {
namespace fs = std::filesystem;
namespace {

constexpr char kEventsPrefix[] = "events.out.tfevents.";

absl::StatusOr<std::string> ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat(path.string(), ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status ReplaceFile(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat(path.string(), ": cannot rewrite (disk full?)"));
  }
  return absl::OkStatus();
}

// The value of a JSON line's top-level "step" key (JsonLine writes `"step": N` after '{' or
// ", "), or false when it has none.
bool LineStep(absl::string_view line, int64_t* step) {
  for (absl::string_view lead : {"{\"step\": ", ", \"step\": "}) {
    const size_t at = line.find(lead);
    if (at == line.npos) continue;
    absl::string_view rest = line.substr(at + lead.size());
    size_t n = 0;
    while (n < rest.size() && (rest[n] == '-' || (rest[n] >= '0' && rest[n] <= '9'))) ++n;
    if (absl::SimpleAtoi(rest.substr(0, n), step)) return true;
  }
  return false;
}

std::vector<fs::path> EventFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (absl::StartsWith(name, kEventsPrefix) && !absl::EndsWith(name, ".tmp")) {
      out.push_back(it->path());
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ResumePoint> FindResumePoint(const Config& config) {
  ResumePoint p;
  if (!config.train.resume) return p;
  TESSERA_ASSIGN_OR_RETURN(p.checkpoint, LatestCheckpoint(CheckpointDir(config)));
  if (p.checkpoint.empty()) return p;
  TESSERA_ASSIGN_OR_RETURN(auto state, SafetensorsFile::Open(
                                           (fs::path(p.checkpoint) / kCheckpointStateFile).string()));
  TESSERA_ASSIGN_OR_RETURN(p.step, MetaInt(*state, "step"));
  auto it = state->metadata().find(kTrainingConfigKey);
  if (it != state->metadata().end()) p.training_config = it->second;
  return p;
}

absl::Status RewindRunLogs(const std::string& metrics_path, const std::string& events_dir,
                           int64_t step) {
  std::error_code ec;
  if (!metrics_path.empty() && fs::exists(metrics_path, ec)) {
    TESSERA_ASSIGN_OR_RETURN(std::string text, ReadAll(metrics_path));
    std::string kept;
    bool dropped = false;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      int64_t s = 0;
      if (LineStep(line, &s) && s > step) {
        dropped = true;
        continue;
      }
      absl::StrAppend(&kept, line, "\n");
    }
    if (dropped) TESSERA_RETURN_IF_ERROR(ReplaceFile(metrics_path, kept));
  }
  if (events_dir.empty()) return absl::OkStatus();
  for (const fs::path& file : EventFiles(events_dir)) {
    TESSERA_ASSIGN_OR_RETURN(std::string bytes, ReadAll(file));
    // A torn last record (a kill mid-write) is dropped with the rest of the tail.
    absl::StatusOr<std::vector<std::string>> records = ParseTfRecords(bytes, file.string());
    if (!records.ok()) continue;  // not ours to repair: leave it as it is
    std::string kept;
    bool dropped = false;
    for (const std::string& record : *records) {
      absl::StatusOr<DecodedEvent> event = DecodeEvent(record);
      if (event.ok() && event->file_version.empty() && event->step > step) {
        dropped = true;
        continue;
      }
      kept += FrameTfRecord(record);
    }
    if (dropped) TESSERA_RETURN_IF_ERROR(ReplaceFile(file, kept));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MovePreviousRunAside(const Config& config) {
  const fs::path dir(config.output.dir);
  std::vector<fs::path> move;
  std::error_code ec;
  auto add = [&](const fs::path& p) {
    if (fs::exists(p, ec)) move.push_back(p);
  };
  if (!config.output.metrics.empty()) add(dir / config.output.metrics);
  if (!config.output.export_path.empty()) add(dir / config.output.export_path);
  if (!config.output.mllog.empty()) add(dir / config.output.mllog);
  for (const fs::path& f : EventFiles(dir)) move.push_back(f);
  const fs::path ckpt = fs::weakly_canonical(CheckpointDir(config), ec);
  const fs::path canon_dir = fs::weakly_canonical(dir, ec);
  const bool ckpt_inside =
      !ec && absl::StartsWith(ckpt.string(), canon_dir.string() + "/") && fs::exists(ckpt, ec) &&
      !fs::is_empty(ckpt, ec);
  if (ckpt_inside) move.push_back(CheckpointDir(config));
  if (move.empty()) return std::string();
  add(dir / kEffectiveConfigFile);
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  fs::path aside = dir / absl::StrCat("previous-", stamp);
  for (int n = 2; fs::exists(aside, ec); ++n) aside = dir / absl::StrCat("previous-", stamp, "-", n);
  fs::create_directories(aside, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat(aside.string(), ": cannot create it to move the previous run's files into: ",
                     ec.message()));
  }
  for (const fs::path& p : move) {
    fs::path rel = p.lexically_relative(dir);
    if (rel.empty() || rel.begin()->string() == "..") rel = p.filename();
    fs::create_directories((aside / rel).parent_path(), ec);
    fs::rename(p, aside / rel, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot move the previous run's ", p.string(),
                                              " to ", (aside / rel).string(), ": ", ec.message()));
    }
  }
  return aside.string();
}

}  // namespace tessera::internal
