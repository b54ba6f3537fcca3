#include "trainer/internal/run_fingerprint.h"

#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainer/internal/config_storage.h"
#include "yaml-cpp/yaml.h"

namespace tessera::internal {
namespace {

// A scalar or a sequence of scalars in one line ("[64, 16]").
std::string Inline(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "";
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

void Flatten(const YAML::Node& n, const std::string& prefix,
             std::map<std::string, std::string>* out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string key = kv.first.Scalar();
      Flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  if (n.IsSequence()) {
    bool scalars = true;
    for (const auto& item : n) scalars = scalars && !item.IsMap() && !item.IsSequence();
    if (!scalars) {
      for (size_t i = 0; i < n.size(); ++i) Flatten(n[i], absl::StrCat(prefix, "[", i, "]"), out);
      return;
    }
  }
  (*out)[prefix] = Inline(n);
}

// Storage keys: where a table lives and in which precision, not what it computes.
bool IsPlacementKey(const std::string& key) {
  static const std::set<std::string> kPlacement = {"tier",           "path",
                                                   "cache_rows",     "cache_bytes",
                                                   "policy",         "reader_threads",
                                                   "prefetch",       "device_cache_rows",
                                                   "device_cache_bytes", "dtype",
                                                   "rounding"};
  const size_t at = key.rfind(".storage.");
  return at != std::string::npos && kPlacement.count(key.substr(at + 9)) > 0;
}

bool Relevant(const std::string& key) {
  if (key == "seed" || key == "data.batch_size") return true;
  // How numbers are stored or multiplied, not what the model is: an fp32 checkpoint loads into
  // 16-bit tables (rounded), and dense_dtype keeps fp32 master weights.
  if (key == "model.init_from" || key == "model.embedding_dtype" ||
      key == "model.embedding_rounding" || key == "model.dense_dtype" ||
      key == "model.embedding_output_dtype" || absl::EndsWith(key, ".output_dtype"))
    return false;
  if (absl::StartsWith(key, "model.")) return !IsPlacementKey(key);
  return absl::StartsWith(key, "optimizer.");
}

}  // namespace

std::string TrainingConfigText(const Config& config) {
  std::map<std::string, std::string> all;
  Flatten(YAML::Load(ConfigToYaml(config)), "", &all);
  std::string out;
  for (const auto& [key, value] : all) {
    if (Relevant(key)) absl::StrAppend(&out, key, ": ", value, "\n");
  }
  return out;
}

std::map<std::string, std::string> ParseTrainingConfigText(const std::string& text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t colon = line.find(": ");
    if (colon == line.npos) {
      if (absl::EndsWith(line, ":")) out[std::string(line.substr(0, line.size() - 1))] = "";
      continue;
    }
    out[std::string(line.substr(0, colon))] = std::string(line.substr(colon + 2));
  }
  return out;
}

absl::Status CheckResumeConfig(const Config& config, const std::string& recorded,
                               const std::string& checkpoint) {
  const std::string text = TrainingConfigText(config);
  if (text == recorded) return absl::OkStatus();
  const std::map<std::string, std::string> theirs = ParseTrainingConfigText(recorded);
  const std::map<std::string, std::string> mine = ParseTrainingConfigText(text);
  std::set<std::string> keys;
  for (const auto& kv : theirs) keys.insert(kv.first);
  for (const auto& kv : mine) keys.insert(kv.first);
  std::vector<std::string> diffs;
  for (const std::string& k : keys) {
    auto a = theirs.find(k), b = mine.find(k);
    const std::string was = a == theirs.end() ? "(absent)" : "'" + a->second + "'";
    const std::string now = b == mine.end() ? "(absent)" : "'" + b->second + "'";
    if (was != now) diffs.push_back(absl::StrCat(k, ": ", was, " there, ", now, " here"));
  }
  if (diffs.empty()) return absl::OkStatus();
  std::string listed;
  for (size_t i = 0; i < diffs.size() && i < 8; ++i) absl::StrAppend(&listed, "\n  ", diffs[i]);
  if (diffs.size() > 8) absl::StrAppend(&listed, "\n  ... and ", diffs.size() - 8, " more");
  return absl::FailedPreconditionError(absl::StrCat(
      checkpoint, ": this checkpoint was written by a run with another model or optimizer (",
      diffs.size(), " key(s) differ):", listed,
      "\nResuming would mix two runs. To start a new run, give a new output.dir (--set "
      "output.dir=...) or --set train.resume=false (the old run's files are moved aside); to "
      "continue the old run, use its values (its effective config is config.yaml in "
      "output.dir)."));
}

}  // namespace tessera::internal
