#include "trainer/mllog.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace tessera {
namespace {

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}
// A float config value as the config wrote it (1e-08, not 9.99999994e-09).
std::string Flt(float v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.7g", v);
}
std::string Str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

double MlperfLog::NowMs() {
  using namespace std::chrono;
  return static_cast<double>(
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

absl::StatusOr<std::unique_ptr<MlperfLog>> MlperfLog::Open(const std::string& path,
                                                           double init_start_ms) {
  std::unique_ptr<MlperfLog> log(new MlperfLog());
  log->path_ = path;
  log->file_ = std::fopen(path.c_str(), "w");
  if (log->file_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open the MLPerf log (output.mllog) for writing"));
  }
  TESSERA_RETURN_IF_ERROR(log->Write("POINT_IN_TIME", "cache_clear", "true", "{}", init_start_ms));
  TESSERA_RETURN_IF_ERROR(log->Write("INTERVAL_START", "init_start", "null", "{}", init_start_ms));
  return log;
}

MlperfLog::~MlperfLog() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MlperfLog::Write(const char* event_type, const std::string& key,
                              const std::string& value, const std::string& metadata,
                              double time_ms) {
  if (time_ms < 0) time_ms = NowMs();
  // metadata: a JSON object; file and lineno are mllog's own fields.
  std::string meta = "{\"file\": \"trainer/trainer.cc\", \"lineno\": 0";
  if (metadata.size() > 2) absl::StrAppend(&meta, ", ", metadata.substr(1, metadata.size() - 2));
  meta += "}";
  const std::string line = absl::StrCat(
      ":::MLLOG {\"namespace\": \"\", \"time_ms\": ", absl::StrFormat("%.0f", time_ms),
      ", \"event_type\": \"", event_type, "\", \"key\": \"", key, "\", \"value\": ", value,
      ", \"metadata\": ", meta, "}\n");
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed (disk full?)"));
  }
  return absl::OkStatus();
}

std::string MlperfLog::EpochMeta(int64_t samples) const {
  const double epoch = train_samples_ > 0 ? static_cast<double>(samples) / train_samples_ : 0.0;
  return absl::StrCat("{\"epoch_num\": ", Num(epoch), ", \"samples_count\": ", samples, "}");
}

absl::Status MlperfLog::Configured(const Config& config, int world_size, int64_t train_samples) {
  train_samples_ = train_samples;
  auto point = [&](const std::string& key, const std::string& value) {
    return Write("POINT_IN_TIME", key, value, "{}");
  };
  const OptimizerConfig& o = config.optimizer;
  const LrScheduleOptions& s = o.schedule;
  const bool adagrad = o.embedding.type == RowOptimizerType::kRowWiseAdagrad;
  const std::string platform = absl::StrCat(
      world_size, "x", config.device == Device::kCuda ? "cuda" : "cpu");
  const std::string precision =
      config.model.dense_dtype == DenseDtype::kBf16 ? "bfloat16" : "fp32";
  const std::string comm = config.sharding.comm_dtype == PayloadDType::kF16    ? "fp16"
                           : config.sharding.comm_dtype == PayloadDType::kBF16 ? "bfloat16"
                                                                               : "fp32";
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"submission_benchmark", Str("dlrm_dcnv2")},
           {"submission_org", Str("Tessera")},
           {"submission_division", Str("open")},
           {"submission_status", Str("research")},
           {"submission_platform", Str(platform)},
           {"config_filename", Str(config.source)},
           {"global_batch_size", absl::StrCat(config.data.batch_size * world_size)},
           {"micro_batch_size", absl::StrCat(config.data.batch_size)},
           {"gradient_accumulation_steps", "1"},
           {"seed", absl::StrCat(config.seed)},
           {"opt_name", Str(adagrad ? "adagrad" : RowOptimizerTypeName(o.embedding.type))},
           {"opt_base_learning_rate", Flt(o.embedding_lr)},
           {"opt_adagrad_learning_rate_decay", "0"},
           {"opt_weight_decay", Flt(o.dense.weight_decay)},
           {"opt_adagrad_initial_accumulator_value", Flt(o.embedding.adagrad_initial)},
           {"opt_adagrad_epsilon", Flt(o.embedding.eps)},
           {"opt_learning_rate_warmup_steps", absl::StrCat(s.warmup_steps)},
           {"opt_learning_rate_decay_start_step", absl::StrCat(std::max<int64_t>(0, s.decay_start))},
           {"opt_learning_rate_decay_steps", absl::StrCat(s.decay_steps)},
           {"train_samples", absl::StrCat(train_samples)},
           {"lowest_numerical_precision_in_linear", Str(precision)},
           {"lowest_numerical_precision_in_attn", Str("fp32")},
           {"lowest_numerical_precision_in_comm", Str(comm)},
           {"tensor_parallelism", "1"},
           {"pipeline_parallelism", "1"},
           {"context_parallelism", "1"},
           {"expert_parallelism", "1"}}) {
    TESSERA_RETURN_IF_ERROR(point(key, value));
  }
  TESSERA_RETURN_IF_ERROR(Write("INTERVAL_END", "init_stop", "null", "{}"));
  return Write("INTERVAL_START", "run_start", "null", "{}");
}

absl::Status MlperfLog::BlockStart(int64_t samples) {
  block_samples_ = samples;
  block_open_ = true;
  const double epoch = train_samples_ > 0 ? static_cast<double>(samples) / train_samples_ : 0.0;
  return Write("INTERVAL_START", "block_start", "null",
               absl::StrCat("{\"first_epoch_num\": ", Num(epoch), ", \"samples_count\": ",
                            samples, "}"));
}

absl::Status MlperfLog::EvalStart(int64_t samples) {
  if (block_open_) {
    const double epoch =
        train_samples_ > 0 ? static_cast<double>(block_samples_) / train_samples_ : 0.0;
    TESSERA_RETURN_IF_ERROR(Write("INTERVAL_END", "block_stop", "null",
                                  absl::StrCat("{\"first_epoch_num\": ", Num(epoch),
                                               ", \"samples_count\": ", samples, "}")));
    block_open_ = false;
  }
  return Write("INTERVAL_START", "eval_start", "null", EpochMeta(samples));
}

absl::Status MlperfLog::EvalDone(int64_t samples, double auc, int64_t eval_samples) {
  TESSERA_RETURN_IF_ERROR(Write("INTERVAL_END", "eval_stop", "null", EpochMeta(samples)));
  if (!eval_samples_logged_) {
    TESSERA_RETURN_IF_ERROR(
        Write("POINT_IN_TIME", "eval_samples", absl::StrCat(eval_samples), "{}"));
    eval_samples_logged_ = true;
  }
  return Write("POINT_IN_TIME", "eval_accuracy", Num(auc), EpochMeta(samples));
}

absl::Status MlperfLog::RunStop(int64_t samples, bool success) {
  if (block_open_) {
    const double epoch =
        train_samples_ > 0 ? static_cast<double>(block_samples_) / train_samples_ : 0.0;
    TESSERA_RETURN_IF_ERROR(Write("INTERVAL_END", "block_stop", "null",
                                  absl::StrCat("{\"first_epoch_num\": ", Num(epoch),
                                               ", \"samples_count\": ", samples, "}")));
    block_open_ = false;
  }
  return Write("INTERVAL_END", "run_stop", "null",
               absl::StrCat("{\"status\": ", Str(success ? "success" : "aborted"),
                            ", \"samples_count\": ", samples, "}"));
}

}  // namespace tessera
