// ParseConfig reads the YAML tree in one pass, section by section, with internal::ConfigReader
// doing the typed, located reads; cross-field rules (interaction shapes, feature coverage, data
// files) run after all sections are read so that each can name the key it blames.
#include "trainer/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/escape.h"
#include "core/status.h"
#include "trainer/internal/config_reader.h"
#include "trainer/internal/config_storage.h"
#include "trainer/internal/config_dynamic.h"
#include "trainer/internal/config_override.h"
#include "trainer/internal/config_tables.h"
#include "trainer/presets.h"

namespace tessera {
namespace {

using internal::Child;
using internal::ConfigReader;
using internal::SchemaSection;

}  // namespace

const std::vector<SchemaSection>& internal::ConfigSchema() {
  static const auto* schema = new std::vector<SchemaSection>{
      {"", {"seed", "threads", "device", "model", "data", "optimizer", "train", "output",
            "sharding"}},
      {"model", {"type", "num_dense", "embedding_dim", "bottom_mlp", "top_mlp", "dcn", "tables",
                 "table_rows", "max_table_rows", "init_from", "dense_dtype",
                 "embedding_dtype", "embedding_rounding", "embedding_output_dtype"}},
      {"model.dcn", {"num_layers", "low_rank"}},
      {"model.tables[]",
       {"name", "rows", "dim", "pooling", "features", "init", "storage", "dynamic",
        "output_dtype"}},
      {"model.tables[].init", {"type", "scale"}},
      {"model.tables[].storage", internal::StorageKeys()},
      {"data", {"format", "train", "eval", "batch_size", "eval_batch_size", "shuffle",
                "on_bad_record", "max_bad_records", "prefetch_batches", "synthetic",
                "train_days", "eval_days", "eval_split"}},
      {"data.synthetic", {"train_samples", "eval_samples", "zipf_exponent", "pooling",
                          "planted_scale", "seed", "id_space"}},
      {"optimizer", {"embedding", "dense", "schedule"}},
      {"optimizer.embedding", {"type", "lr", "eps", "beta1", "beta2", "adagrad_initial"}},
      {"optimizer.dense", {"type", "lr", "eps", "beta1", "beta2", "weight_decay",
                           "adagrad_initial"}},
      {"optimizer.schedule", {"warmup_steps", "decay_start", "decay_steps", "decay_power",
                              "end_lr"}},
      {"train", {"steps", "epochs", "eval_every", "eval_batches", "log_every",
                 "checkpoint_every", "checkpoint_minutes", "resume", "nonfinite"}},
      {"output", {"dir", "metrics", "export", "progress", "checkpoint_dir", "tensorboard",
                  "mllog"}},
      {"sharding", {"group_size", "layout", "replica_sync", "sync_every", "sync_rows", "plan",
                    "bucket_bytes", "comm_dtype", "pipeline", "profile", "transport",
                    "peer_timeout_s", "collective_timeout_s", "stall_timeout_s"}},
  };
  static const auto* with_dynamic = [] {
    auto* all = new std::vector<SchemaSection>(*schema);
    for (const SchemaSection& section : internal::DynamicSchema()) all->push_back(section);
    return all;
  }();
  return *with_dynamic;
}

namespace {

constexpr int64_t kMaxInt = int64_t{1} << 30;  // bound for fields stored as int
const auto kPositive = [](int64_t v) { return v > 0; };
const auto kNonNegative = [](int64_t v) { return v >= 0; };
const auto kPositiveInt = [](int64_t v) { return v > 0 && v <= kMaxInt; };
const auto kNonNegativeInt = [](int64_t v) { return v >= 0 && v <= kMaxInt; };
const auto kPositiveD = [](double v) { return v > 0; };
const auto kNonNegativeD = [](double v) { return v >= 0; };
const auto kBeta = [](double v) { return v >= 0 && v < 1; };

// Reads ints into narrower fields.
template <typename T>
absl::Status ReadInto(const ConfigReader& r, const YAML::Node& map, const std::string& path,
                      const char* key, const char* expected,
                      const std::function<bool(int64_t)>& valid, T* out) {
  int64_t v = static_cast<int64_t>(*out);
  TESSERA_RETURN_IF_ERROR(r.ReadInt(map, path, key, expected, valid, &v));
  *out = static_cast<T>(v);
  return absl::OkStatus();
}
absl::Status ReadFloat(const ConfigReader& r, const YAML::Node& map, const std::string& path,
                       const char* key, const char* expected,
                       const std::function<bool(double)>& valid, float* out) {
  double v = *out;
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(map, path, key, expected, valid, &v));
  *out = static_cast<float>(v);
  return absl::OkStatus();
}

// Resolves a file named in the config against the config file's folder, as an absolute path,
// and checks that it exists.
absl::Status ResolveExisting(const ConfigReader& r, const YAML::Node& map, const std::string& path,
                             const char* key, const std::string& base_dir, std::string* value) {
  if (value->empty()) return absl::OkStatus();
  std::filesystem::path p{*value};
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  std::error_code ec;
  p = std::filesystem::absolute(p, ec).lexically_normal();
  if (ec || !std::filesystem::exists(p, ec))
    return r.Error(Child(map, key), map, internal::JoinKey(path, key),
                   absl::StrCat("file not found: ", p.string()));
  *value = p.string();
  return absl::OkStatus();
}

// The same for a comma-separated list of files (data.train, data.eval: several files read as
// one stream, trainer/data_sources.cc); each must exist. Stored joined by commas again.
absl::Status ResolveExistingList(const ConfigReader& r, const YAML::Node& map,
                                 const std::string& path, const char* key,
                                 const std::string& base_dir, std::string* value) {
  if (value->empty()) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(*value, ',');
  for (std::string& part : parts) {
    part = std::string(absl::StripAsciiWhitespace(part));
    if (part.empty())
      return r.Error(Child(map, key), map, internal::JoinKey(path, key),
                     "empty file name in the comma-separated list");
    TESSERA_RETURN_IF_ERROR(ResolveExisting(r, map, path, key, base_dir, &part));
  }
  *value = absl::StrJoin(parts, ",");
  return absl::OkStatus();
}

absl::Status ParseModel(const ConfigReader& r, const YAML::Node& root, const std::string& dir,
                        ModelConfig* m, YAML::Node* model_out) {
  YAML::Node model = Child(root, "model");
  *model_out = model;
  TESSERA_RETURN_IF_ERROR(r.CheckMap(model, root, "model", "model"));
  if (!model.IsDefined() || model.IsNull())
    return r.Error(YAML::Node(), root, "model", "required");
  const std::string p = "model";
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(model, p, "type", kInteractionTypeNames, &m->interaction));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(model, p, "dense_dtype", kDenseDtypeNames, &m->dense_dtype));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(model, p, "embedding_dtype", kRowDtypeNames, &m->embedding_dtype));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(model, p, "embedding_rounding", kRowRoundingNames, &m->embedding_rounding));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(model, p, "embedding_output_dtype", kRowDtypeNames,
                                     &m->embedding_output_dtype));
  TESSERA_RETURN_IF_ERROR(
      r.ReadInt(model, p, "num_dense", "a positive integer", kPositive, &m->num_dense));
  TESSERA_RETURN_IF_ERROR(
      r.ReadInt(model, p, "embedding_dim", "a positive integer", kPositive, &m->embedding_dim));
  TESSERA_RETURN_IF_ERROR(r.ReadIntList(model, p, "bottom_mlp", "a positive integer", kPositive,
                                        false, &m->bottom_mlp));
  TESSERA_RETURN_IF_ERROR(r.ReadIntList(model, p, "top_mlp", "a positive integer", kPositive,
                                        false, &m->top_mlp));
  if (m->bottom_mlp.empty())
    return r.Error(YAML::Node(), model, "model.bottom_mlp", "required (layer sizes)");
  if (m->top_mlp.empty())
    return r.Error(YAML::Node(), model, "model.top_mlp", "required (layer sizes, ending in 1)");
  YAML::Node dcn = Child(model, "dcn");
  TESSERA_RETURN_IF_ERROR(r.CheckMap(dcn, model, "model.dcn", "model.dcn"));
  TESSERA_RETURN_IF_ERROR(ReadInto(r, dcn, "model.dcn", "num_layers", "a positive integer",
                                   kPositiveInt, &m->dcn_num_layers));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(dcn, "model.dcn", "low_rank",
                                    "a non-negative integer (0 = full rank)", kNonNegative,
                                    &m->dcn_low_rank));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(model, p, "max_table_rows",
                                    "a non-negative integer (0 = no cap)", kNonNegative,
                                    &m->max_table_rows));
  TESSERA_RETURN_IF_ERROR(r.ReadString(model, p, "init_from", &m->init_from));
  TESSERA_RETURN_IF_ERROR(ResolveExisting(r, model, p, "init_from", dir, &m->init_from));
  TESSERA_RETURN_IF_ERROR(internal::ParseTables(r, model, m));
  if (m->max_table_rows > 0)
    for (TableConfig& t : m->tables) t.num_rows = std::min(t.num_rows, m->max_table_rows);
  return absl::OkStatus();
}

// Cross-field rules of the model; returns the number of sparse features.
absl::Status ValidateModel(const ConfigReader& r, const YAML::Node& model, const ModelConfig& m,
                           int* num_features) {
  YAML::Node top = Child(model, "top_mlp");
  if (m.top_mlp.back() != 1)
    return r.Error(top, model, "model.top_mlp",
                   "the last layer must be 1 (the logit)");
  if (m.interaction == InteractionType::kDot && m.bottom_mlp.back() != m.embedding_dim)
    return r.Error(Child(model, "bottom_mlp"), model, "model.bottom_mlp",
                   absl::StrCat("the last layer (", m.bottom_mlp.back(),
                                ") must equal model.embedding_dim (", m.embedding_dim,
                                ") for model.type dlrm: the dot interaction treats the bottom "
                                "output as one more embedding"));
  YAML::Node tables = Child(model, "tables");
  auto table_node = [&](size_t i) {
    return tables.IsSequence() && i < tables.size() ? tables[i] : Child(model, "table_rows");
  };
  int max_feature = -1;
  for (const TableConfig& t : m.tables)
    for (int f : t.features) max_feature = std::max(max_feature, f);
  std::vector<int> owner(max_feature + 1, -1);
  for (size_t i = 0; i < m.tables.size(); ++i) {
    const TableConfig& t = m.tables[i];
    if (t.dim != m.embedding_dim)
      return r.Error(Child(table_node(i), "dim"), table_node(i),
                     absl::StrCat("model.tables[", i, "].dim"),
                     absl::StrCat("must equal model.embedding_dim (", m.embedding_dim,
                                  "): the interaction concatenates equal-width embeddings"));
    for (int f : t.features) {
      if (owner[f] >= 0)
        return r.Error(Child(table_node(i), "features"), table_node(i),
                       absl::StrCat("model.tables[", i, "].features"),
                       absl::StrCat("feature ", f, " is already served by table '",
                                    m.tables[owner[f]].name, "'; each feature needs exactly "
                                    "one table"));
      owner[f] = static_cast<int>(i);
    }
  }
  for (int f = 0; f <= max_feature; ++f) {
    if (owner[f] < 0)
      return r.Error(YAML::Node(), tables.IsDefined() ? tables : model, "model.tables",
                     absl::StrCat("feature ", f, " is served by no table (features must be 0..",
                                  max_feature, " with each served by exactly one table)"));
  }
  *num_features = max_feature + 1;
  return absl::OkStatus();
}

// data.train_days / eval_days / eval_split: only with mlperf_npy, whose defaults are MLPerf's
// (train on days 0-22, evaluate on the first half of day 23).
absl::Status ParseMlperfKeys(const ConfigReader& r, const YAML::Node& data, DataConfig* d) {
  const bool npy = d->format == DataFormat::kMlperfNpy;
  struct Key {
    const char* key;
    const char* fallback;
  } keys[] = {{"train_days", "0-22"}, {"eval_days", "23"}, {"eval_split", nullptr}};
  for (const Key& k : keys) {
    YAML::Node node = Child(data, k.key);
    const bool given = node.IsDefined() && !node.IsNull();
    if (given && !npy)
      return r.Error(node, data, internal::JoinKey("data", k.key),
                     "only used with data.format mlperf_npy");
    if (!npy) continue;
    if (k.fallback == nullptr) {  // eval_split; DataConfig's default (val) stands when absent
      TESSERA_RETURN_IF_ERROR(r.ReadEnum(data, "data", k.key, kMlperfSplitNames, &d->eval_split));
      continue;
    }
    std::string text = k.fallback;
    TESSERA_RETURN_IF_ERROR(r.ReadString(data, "data", k.key, &text));
    auto days = ParseDayList(text);
    if (!days.ok())
      return r.Error(node, data, internal::JoinKey("data", k.key),
                     std::string(days.status().message()));
    (std::string(k.key) == "train_days" ? d->train_days : d->eval_days) = *days;
  }
  return absl::OkStatus();
}

absl::Status ParseData(const ConfigReader& r, const YAML::Node& root, const std::string& dir,
                       int num_features, const ModelConfig& m, DataConfig* d) {
  YAML::Node data = Child(root, "data");
  const std::string p = "data";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(data, root, p, "data"));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(data, p, "format", kDataFormatNames, &d->format));
  TESSERA_RETURN_IF_ERROR(ParseMlperfKeys(r, data, d));
  TESSERA_RETURN_IF_ERROR(r.ReadString(data, p, "train", &d->train_path));
  TESSERA_RETURN_IF_ERROR(r.ReadString(data, p, "eval", &d->eval_path));
  TESSERA_RETURN_IF_ERROR(
      r.ReadInt(data, p, "batch_size", "a positive integer", kPositive, &d->batch_size));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(data, p, "eval_batch_size",
                                    "a non-negative integer (0 = data.batch_size)", kNonNegative,
                                    &d->eval_batch_size));
  TESSERA_RETURN_IF_ERROR(r.ReadBool(data, p, "shuffle", &d->shuffle));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(data, p, "on_bad_record", kBadRecordPolicyNames, &d->on_bad_record));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(data, p, "max_bad_records", "a non-negative integer",
                                    kNonNegative, &d->max_bad_records));
  TESSERA_RETURN_IF_ERROR(ReadInto(r, data, p, "prefetch_batches", "a non-negative integer",
                                   kNonNegativeInt, &d->prefetch_batches));

  YAML::Node syn = Child(data, "synthetic");
  const std::string sp = "data.synthetic";
  SyntheticDataConfig& s = d->synthetic;
  TESSERA_RETURN_IF_ERROR(r.CheckMap(syn, data, sp, sp));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(syn, sp, "train_samples", "a positive integer", kPositive,
                                    &s.num_train_samples));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(syn, sp, "eval_samples", "a non-negative integer",
                                    kNonNegative, &s.num_eval_samples));
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(syn, sp, "zipf_exponent",
                                       "a non-negative number (0 = uniform ids)", kNonNegativeD,
                                       &s.zipf_exponent));
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(syn, sp, "planted_scale", "a non-negative number",
                                       kNonNegativeD, &s.planted_scale));
  TESSERA_RETURN_IF_ERROR(r.ReadUint(syn, sp, "seed", &s.seed));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(syn, sp, "id_space",
                                    "an integer in [0, 2^40] (0: each table's rows)",
                                    [](int64_t v) { return v >= 0 && v <= (int64_t{1} << 40); },
                                    &s.id_space));
  YAML::Node pooling = Child(syn, "pooling");
  if (pooling.IsScalar() && !pooling.Scalar().empty() &&
      !absl::ascii_isdigit(static_cast<unsigned char>(pooling.Scalar()[0]))) {
    auto preset = PoolingPreset(pooling.Scalar());
    if (!preset)
      return r.Error(pooling, syn, "data.synthetic.pooling",
                     "expected a positive integer, a list of them (one per feature) or a "
                     "preset: mlperf_multi_hot, mlperf_multi_hot_half");
    s.pooling = *preset;
  } else {
    TESSERA_RETURN_IF_ERROR(r.ReadIntList(syn, sp, "pooling", "a positive integer", kPositive,
                                          true, &s.pooling));
  }
  if (s.pooling.empty()) s.pooling = {1};
  if (s.pooling.size() != 1 && static_cast<int>(s.pooling.size()) != num_features)
    return r.Error(pooling, syn, "data.synthetic.pooling",
                   absl::StrCat(s.pooling.size(), " values for ", num_features,
                                " features: give one value, or one per feature"));

  const bool synthetic = d->format == DataFormat::kSynthetic;
  if (synthetic) {
    for (const char* key : {"train", "eval"}) {
      if (Child(data, key).IsDefined() && !Child(data, key).IsNull())
        return r.Error(Child(data, key), data, internal::JoinKey(p, key),
                       "not used with data.format synthetic (set data.format to read files)");
    }
    return absl::OkStatus();
  }
  if (syn.IsDefined() && !syn.IsNull())
    return r.Error(YAML::Node(), syn, sp, "only used with data.format synthetic");
  if (d->train_path.empty())
    return r.Error(YAML::Node(), data, "data.train",
                   "required: the training data file for data.format other than synthetic");
  TESSERA_RETURN_IF_ERROR(ResolveExistingList(r, data, p, "train", dir, &d->train_path));
  TESSERA_RETURN_IF_ERROR(ResolveExistingList(r, data, p, "eval", dir, &d->eval_path));
  if (d->format == DataFormat::kCriteoTsv || d->format == DataFormat::kCriteoCsv) {
    // Criteo rows carry 13 integer and 26 categorical features.
    if (m.num_dense != 13)
      return r.Error(YAML::Node(), data, "model.num_dense",
                     absl::StrCat("must be 13 for Criteo data (is ", m.num_dense, ")"));
    if (num_features != 26)
      return r.Error(YAML::Node(), data, "model.tables",
                     absl::StrCat("Criteo data has 26 categorical features but the tables serve ",
                                  num_features));
  }
  return absl::OkStatus();
}

absl::Status ParseOptimizer(const ConfigReader& r, const YAML::Node& root, OptimizerConfig* o) {
  YAML::Node opt = Child(root, "optimizer");
  TESSERA_RETURN_IF_ERROR(r.CheckMap(opt, root, "optimizer", "optimizer"));

  YAML::Node emb = Child(opt, "embedding");
  std::string p = "optimizer.embedding";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(emb, opt, p, p));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(emb, p, "type", kRowOptimizerTypeNames, &o->embedding.type));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, emb, p, "lr", "a positive number", kPositiveD,
                                    &o->embedding_lr));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, emb, p, "eps", "a positive number", kPositiveD,
                                    &o->embedding.eps));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, emb, p, "beta1", "a number in [0, 1)", kBeta,
                                    &o->embedding.beta1));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, emb, p, "beta2", "a number in [0, 1)", kBeta,
                                    &o->embedding.beta2));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, emb, p, "adagrad_initial", "a non-negative number",
                                    kNonNegativeD, &o->embedding.adagrad_initial));

  YAML::Node dense = Child(opt, "dense");
  p = "optimizer.dense";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(dense, opt, p, p));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(dense, p, "type", kDenseOptimizerTypeNames, &o->dense.type));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, dense, p, "lr", "a positive number", kPositiveD,
                                    &o->dense_lr));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, dense, p, "eps", "a positive number", kPositiveD,
                                    &o->dense.eps));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, dense, p, "beta1", "a number in [0, 1)", kBeta,
                                    &o->dense.beta1));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, dense, p, "beta2", "a number in [0, 1)", kBeta,
                                    &o->dense.beta2));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, dense, p, "weight_decay", "a non-negative number",
                                    kNonNegativeD, &o->dense.weight_decay));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, dense, p, "adagrad_initial", "a non-negative number",
                                    kNonNegativeD, &o->dense.adagrad_initial));

  YAML::Node sched = Child(opt, "schedule");
  p = "optimizer.schedule";
  LrScheduleOptions& s = o->schedule;
  s.base_lr = 1.0f;  // the schedule is a multiplier on both learning rates
  TESSERA_RETURN_IF_ERROR(r.CheckMap(sched, opt, p, p));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(sched, p, "warmup_steps", "a non-negative integer",
                                    kNonNegative, &s.warmup_steps));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(sched, p, "decay_start",
                                    "a step >= 0, or -1 for no decay",
                                    [](int64_t v) { return v >= -1; }, &s.decay_start));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(sched, p, "decay_steps", "a non-negative integer",
                                    kNonNegative, &s.decay_steps));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, sched, p, "decay_power", "a positive number", kPositiveD,
                                    &s.decay_power));
  TESSERA_RETURN_IF_ERROR(ReadFloat(r, sched, p, "end_lr",
                                    "a number in [0, 1] (a fraction of the base rates)",
                                    [](double v) { return v >= 0 && v <= 1; }, &s.end_lr));
  if (s.decay_start >= 0 && s.decay_steps == 0)
    return r.Error(Child(sched, "decay_steps"), sched, "optimizer.schedule.decay_steps",
                   "must be positive when optimizer.schedule.decay_start is set");
  return absl::OkStatus();
}

absl::Status ParseRest(const ConfigReader& r, const YAML::Node& root, const std::string& dir,
                       Config* c) {
  TESSERA_RETURN_IF_ERROR(r.ReadUint(root, "", "seed", &c->seed));
  TESSERA_RETURN_IF_ERROR(ReadInto(r, root, "", "threads",
                                   "a non-negative integer (0 = all cores)", kNonNegativeInt,
                                   &c->threads));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(root, "", "device", kDeviceNames, &c->device));
  if (c->device == Device::kCuda) {
    for (size_t i = 0; i < c->model.tables.size(); ++i) {
      const TableConfig& t = c->model.tables[i];
      if (t.storage.dtype == RowDtype::kF32) continue;
      return r.Error(Child(root, "device"), root, "device",
                     absl::StrCat("table '", t.name, "' has storage.dtype ",
                                  RowDtypeName(t.storage.dtype),
                                  ": 16-bit embedding storage runs on the CPU only for now (use "
                                  "device: cpu, or model.embedding_dtype fp32)"));
    }
  }

  YAML::Node train = Child(root, "train");
  std::string p = "train";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(train, root, p, p));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(train, p, "steps", "a non-negative integer (0 = by epochs)",
                                    kNonNegative, &c->train.steps));
  TESSERA_RETURN_IF_ERROR(
      r.ReadInt(train, p, "epochs", "a positive integer", kPositive, &c->train.epochs));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(train, p, "eval_every",
                                    "a non-negative integer (0 = only at the end)", kNonNegative,
                                    &c->train.eval_every));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(train, p, "eval_batches",
                                    "a non-negative integer (0 = the whole eval set)",
                                    kNonNegative, &c->train.eval_batches));
  TESSERA_RETURN_IF_ERROR(
      r.ReadInt(train, p, "log_every", "a positive integer", kPositive, &c->train.log_every));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(train, p, "checkpoint_every",
                                    "a non-negative integer (0 = by time only)", kNonNegative,
                                    &c->train.checkpoint_every));
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(train, p, "checkpoint_minutes",
                                       "a non-negative number of minutes (0 = by steps only)",
                                       kNonNegativeD, &c->train.checkpoint_minutes));
  TESSERA_RETURN_IF_ERROR(r.ReadBool(train, p, "resume", &c->train.resume));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(train, p, "nonfinite", kNonFinitePolicyNames, &c->train.nonfinite));

  YAML::Node out = Child(root, "output");
  p = "output";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(out, root, p, p));
  TESSERA_RETURN_IF_ERROR(r.ReadString(out, p, "dir", &c->output.dir));
  TESSERA_RETURN_IF_ERROR(r.ReadString(out, p, "metrics", &c->output.metrics));
  TESSERA_RETURN_IF_ERROR(r.ReadString(out, p, "export", &c->output.export_path));
  TESSERA_RETURN_IF_ERROR(r.ReadBool(out, p, "progress", &c->output.progress));
  TESSERA_RETURN_IF_ERROR(r.ReadBool(out, p, "tensorboard", &c->output.tensorboard));
  TESSERA_RETURN_IF_ERROR(r.ReadString(out, p, "checkpoint_dir", &c->output.checkpoint_dir));
  TESSERA_RETURN_IF_ERROR(r.ReadString(out, p, "mllog", &c->output.mllog));
  if (c->output.dir.empty())
    return r.Error(Child(out, "dir"), out, "output.dir", "must not be empty");

  YAML::Node sh = Child(root, "sharding");
  p = "sharding";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(sh, root, p, p));
  TESSERA_RETURN_IF_ERROR(ReadInto(r, sh, p, "group_size",
                                   "a non-negative integer (0 = the whole world)",
                                   kNonNegativeInt, &c->sharding.group_size));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(sh, p, "layout", kGridLayoutNames, &c->sharding.layout));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(sh, p, "replica_sync", kReplicaSyncNames, &c->sharding.replica_sync));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(sh, p, "sync_every", "a positive integer", kPositive,
                                    &c->sharding.sync_every));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(sh, p, "sync_rows", kSyncRowsNames, &c->sharding.sync_rows));
  TESSERA_RETURN_IF_ERROR(r.ReadString(sh, p, "plan", &c->sharding.plan));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(sh, p, "bucket_bytes", "a positive integer", kPositive,
                                    &c->sharding.bucket_bytes));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(sh, p, "comm_dtype", kPayloadDTypeNames, &c->sharding.comm_dtype));
  TESSERA_RETURN_IF_ERROR(r.ReadBool(sh, p, "pipeline", &c->sharding.pipeline));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(sh, p, "transport", kPayloadTransportNames, &c->sharding.transport));
  TESSERA_RETURN_IF_ERROR(r.ReadString(sh, p, "profile", &c->sharding.profile));
  const auto seconds = [](double v) { return std::isfinite(v) && v >= 0 && v <= 86400; };
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(sh, p, "peer_timeout_s",
                                       "seconds, 0 to 86400 (0 = off)", seconds,
                                       &c->sharding.peer_timeout_s));
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(sh, p, "collective_timeout_s",
                                       "seconds, 0 to 86400 (0 = off)", seconds,
                                       &c->sharding.collective_timeout_s));
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(sh, p, "stall_timeout_s",
                                       "seconds, 0 to 86400 (0 = off)", seconds,
                                       &c->sharding.stall_timeout_s));
  if (c->sharding.profile.empty())
    return r.Error(Child(sh, "profile"), sh, "sharding.profile",
                   "must be auto, a shipped profile or a profile file");
  {
    const std::string& v = c->sharding.profile;
    auto ends = [&](const char* x) { return absl::EndsWith(v, x); };
    if (v.find('/') != std::string::npos || ends(".yaml") || ends(".json")) {
      TESSERA_RETURN_IF_ERROR(ResolveExisting(r, sh, p, "profile", dir, &c->sharding.profile));
    }
  }
  if (c->sharding.plan == "auto") return absl::OkStatus();  // planned at start-up (auto_plan.h)
  return ResolveExisting(r, sh, p, "plan", dir, &c->sharding.plan);
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& source_name,
                                   const std::vector<std::string>& overrides) {
  try {
    YAML::Node root;
    try {
      root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& e) {
      return absl::InvalidArgumentError(absl::StrCat(source_name, ":", e.mark.line + 1,
                                                     ": YAML syntax error: ",
                                                     EscapeBytes(e.msg, 200)));
    }
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap())
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": expected a map of sections (model:, data:, ...) at the "
                                    "top level"));
    std::vector<std::pair<std::string, std::string>> applied;
    for (const std::string& o : overrides) {
      std::string key;
      TESSERA_RETURN_IF_ERROR(internal::ApplyConfigOverride(source_name, o, &root, &key));
      applied.emplace_back(key, o);
    }
    ConfigReader r(source_name, std::move(applied), internal::ConfigSchema());
    TESSERA_RETURN_IF_ERROR(r.CheckMap(root, root, "", ""));
    std::filesystem::path dir = std::filesystem::path(source_name).parent_path();
    const std::string base = dir.empty() ? "." : dir.string();

    Config c;
    c.source = source_name;
    YAML::Node model;
    TESSERA_RETURN_IF_ERROR(ParseModel(r, root, base, &c.model, &model));
    int num_features = 0;
    TESSERA_RETURN_IF_ERROR(ValidateModel(r, model, c.model, &num_features));
    TESSERA_RETURN_IF_ERROR(ParseData(r, root, base, num_features, c.model, &c.data));
    TESSERA_RETURN_IF_ERROR(ParseOptimizer(r, root, &c.optimizer));
    TESSERA_RETURN_IF_ERROR(ParseRest(r, root, base, &c));
    TESSERA_RETURN_IF_ERROR(internal::ValidateRunDirectories(r, root, c));
    TESSERA_RETURN_IF_ERROR(internal::ValidateDynamicTables(r, root, c));
    return c;
  } catch (const YAML::Exception& e) {
    // Reads guard against yaml-cpp's throwing accessors; this is the backstop.
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ":", e.mark.line + 1, ": ", EscapeBytes(e.msg, 200)));
  }
}

absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file not found: ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path, overrides);
}

}  // namespace tessera
