// Dynamic tables in the trainer: the config's `dynamic` block and its errors, 1-rank training on
// raw synthetic ids (2^40 space), checkpoint -> resume bit-identical to an uninterrupted run
// (admission counters and eviction included), the export's keys + weights, init_from of an
// export, the refusals (a static checkpoint loaded as dynamic and back, a capacity above
// memory), and the stats in metrics.jsonl.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/status.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/config.h"
#include "trainer/internal/dynamic_tables.h"
#include "trainer/run_log.h"
#include "trainer/safetensors.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

// t0 dynamic (feature 0, capacity 300 of a 2^40 key space), t1 static, t2 dynamic.
std::string Yaml(const std::string& dyn0, const std::string& dyn2, const fs::path& out,
                 int64_t steps, int64_t checkpoint_every, const std::string& extra = "") {
  return absl::StrCat(R"(seed: 5
threads: 2
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - {name: t0, features: [0], dynamic: )", dyn0, R"(}
    - {name: t1, rows: 1000, features: [1, 2]}
    - {name: t2, features: [3], dynamic: )", dyn2, R"(}
data:
  format: synthetic
  batch_size: 128
  shuffle: true
  synthetic: {train_samples: 1280, eval_samples: 256, pooling: [2, 3, 1, 1], zipf_exponent: 1.05}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.01}
train: {steps: )", steps, ", eval_every: 7, eval_batches: 1, log_every: 4, checkpoint_every: ",
                      checkpoint_every, R"(, resume: true}
output: {dir: )", out.string(), R"(, progress: false}
)", extra);
}

const char* kLfu =
    "{capacity_rows: 300, admission: {min_count: 2}, eviction: {policy: lfu}}";
const char* kTtl = "{capacity_rows: 400, admission: {probability: 0.5}, "
                   "eviction: {policy: ttl, ttl_steps: 6}}";

class DynamicTrainingTest : public tiertest::TempDirTest {
 protected:
  absl::StatusOr<Config> Make(const std::string& yaml) {
    return ParseConfig(yaml, (dir_ / "c.yaml").string());
  }
  absl::StatusOr<TrainSummary> Run(const Config& config) {
    TESSERA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config));
    return trainer->Run();
  }
};

TEST_F(DynamicTrainingTest, ConfigRoundTripsAndNamesBadKeys) {
  auto c = Make(Yaml(kLfu, kTtl, dir_ / "o", 5, 0));
  ASSERT_TRUE(c.ok()) << c.status();
  const TableConfig& t0 = c->model.tables[0];
  EXPECT_TRUE(t0.dynamic.enabled);
  EXPECT_EQ(t0.num_rows, 300);
  EXPECT_EQ(t0.dynamic.min_count, 2);
  EXPECT_EQ(t0.dynamic.policy, EvictionPolicy::kLfu);
  EXPECT_EQ(c->model.tables[2].dynamic.ttl_steps, 6);
  EXPECT_DOUBLE_EQ(c->model.tables[2].dynamic.probability, 0.5);
  EXPECT_FALSE(c->model.tables[1].dynamic.enabled);
  // The effective config reads back to the same tables.
  auto again = ParseConfig(ConfigToYaml(*c), "effective.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigToYaml(*c);
  EXPECT_EQ(again->model.tables[0].dynamic.min_count, 2);
  EXPECT_EQ(again->model.tables[2].dynamic.policy, EvictionPolicy::kTtl);
  EXPECT_EQ(again->model.tables[2].num_rows, 400);

  struct Bad {
    std::string dyn;
    std::string key;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"{capacity_rows: 0}", "model.tables[0].dynamic.capacity_rows", "positive"},
      {"{admission: {min_count: 2}}", "model.tables[0].dynamic.capacity_rows", "required"},
      {"{capacity_rows: 10, eviction: {policy: fifo}}", "dynamic.eviction.policy", "lfu"},
      {"{capacity_rows: 10, eviction: {policy: ttl}}", "dynamic.eviction.ttl_steps",
       "required"},
      {"{capacity_rows: 10, eviction: {policy: lru, ttl_steps: 3}}",
       "dynamic.eviction.ttl_steps", "only used with eviction.policy ttl"},
      {"{capacity_rows: 10, admission: {min_count: 2, probability: 0.1}}",
       "dynamic.admission.probability", "not both"},
      {"{capacity_rows: 10, admission: {probability: 1.5}}", "dynamic.admission.probability",
       "(0, 1]"},
      {"{capacity_rows: 10, admit: {}}", "model.tables[0].dynamic", "admit"},
  };
  for (const Bad& b : bad) {
    auto r = Make(Yaml(b.dyn, kTtl, dir_ / "o", 5, 0));
    ASSERT_FALSE(r.ok()) << b.dyn;
    EXPECT_THAT(r.status().message(), HasSubstr(b.key)) << b.dyn;
    EXPECT_THAT(r.status().message(), HasSubstr(b.says)) << b.dyn;
  }
  // rows and dynamic together; a dynamic table in the RocksDB tier.
  std::string yaml = Yaml(kLfu, kTtl, dir_ / "o", 5, 0);
  std::string with_rows = yaml;
  with_rows.replace(with_rows.find("{name: t0,"), 10, "{name: t0, rows: 5,");
  auto r = Make(with_rows);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("model.tables[0].rows"));
  // Over the RocksDB tier: fine; with a device cache: refused naming the table's key.
  std::string tiered = yaml;
  tiered.replace(tiered.find("{name: t0,"), 10,
                 "{name: t0, storage: {tier: rocksdb, cache_rows: 100},");
  EXPECT_TRUE(Make(tiered).ok()) << Make(tiered).status();
  std::string cached = yaml;
  cached.replace(cached.find("{name: t0,"), 10,
                 "{name: t0, storage: {device_cache_rows: 100},");
  r = Make(cached);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("model.tables[0].dynamic"));
  EXPECT_THAT(r.status().message(), HasSubstr("device cache"));
}

// The same run with both dynamic tables over the RocksDB tier, each with a row cache smaller
// than the rows it holds (t0: 300 keys, cache 270; t2: 400 keys, cache 150), gives the in-memory
// run's model byte for byte, uninterrupted and resumed from a checkpoint.
TEST_F(DynamicTrainingTest, OverTheTierEqualsMemoryAndResumes) {
  auto tiered_yaml = [&](const fs::path& out, int64_t steps, int64_t every) {
    std::string y = Yaml(kLfu, kTtl, out, steps, every);
    y.replace(y.find("{name: t0,"), 10, "{name: t0, storage: {tier: rocksdb, cache_rows: 270},");
    y.replace(y.find("{name: t2,"), 10, "{name: t2, storage: {tier: rocksdb, cache_rows: 150},");
    return y;
  };
  auto memory = Make(Yaml(kLfu, kTtl, dir_ / "memory", 27, 0));
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto a = Run(*memory);
  ASSERT_TRUE(a.ok()) << a.status();
  auto tiered = Make(tiered_yaml(dir_ / "tiered", 27, 0));
  ASSERT_TRUE(tiered.ok()) << tiered.status();
  auto b = Run(*tiered);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(ReadFile(a->export_path) == ReadFile(b->export_path))
      << "the tiered dynamic tables trained another model";
  EXPECT_EQ(a->eval.auc, b->eval.auc);
  // The tier was used: its working databases exist and the metrics name the tier.
  EXPECT_TRUE(fs::exists(dir_ / "tiered" / "tables" / "t0"));
  const std::string metrics = ReadFile(dir_ / "tiered" / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"dynamic_table\": \"t2\""));
  EXPECT_THAT(metrics, HasSubstr("\"tier_table\": \"t0\""));

  const fs::path out = dir_ / "resumed";
  auto first = Make(tiered_yaml(out, 17, 5));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Run(*first).ok());
  EXPECT_EQ(ReadFile(out / "checkpoints" / "LATEST"), "ckpt-15\n");
  auto second = Make(tiered_yaml(out, 27, 5));
  ASSERT_TRUE(second.ok());
  auto c = Run(*second);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(ReadFile(a->export_path) == ReadFile(c->export_path))
      << "the resumed tiered run's model differs from the uninterrupted one";
}

TEST_F(DynamicTrainingTest, ResumedRunEqualsUninterruptedRun) {
  auto straight = Make(Yaml(kLfu, kTtl, dir_ / "straight", 27, 0));
  ASSERT_TRUE(straight.ok()) << straight.status();
  auto a = Run(*straight);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->eval.auc, 0.5);

  const fs::path out = dir_ / "resumed";
  auto first = Make(Yaml(kLfu, kTtl, out, 17, 5));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Run(*first).ok());
  EXPECT_EQ(ReadFile(out / "checkpoints" / "LATEST"), "ckpt-15\n");
  auto second = Make(Yaml(kLfu, kTtl, out, 27, 5));
  ASSERT_TRUE(second.ok());
  auto b = Run(*second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->samples, 12 * 128);
  EXPECT_TRUE(ReadFile(a->export_path) == ReadFile(b->export_path))
      << "the resumed run's model differs from the uninterrupted one";

  // The export: per dynamic table, its keys (U64, ascending, from the 2^40 space) and weights.
  auto file = SafetensorsFile::Open(a->export_path);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const char* t : {"t0", "t2"}) {
    const TensorView* keys = (*file)->Find(absl::StrCat("embedding.", t, ".keys"));
    const TensorView* w = (*file)->Find(absl::StrCat("embedding.", t, ".weight"));
    ASSERT_NE(keys, nullptr) << t;
    ASSERT_NE(w, nullptr) << t;
    EXPECT_EQ(keys->dtype, SafetensorsDtype::kU64);
    const int64_t n = keys->num_elements();
    EXPECT_GT(n, 20) << t;
    EXPECT_LE(n, std::string(t) == "t0" ? 300 : 400);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{n, 8}));
    const uint64_t* k = static_cast<const uint64_t*>(keys->data);
    for (int64_t i = 1; i < n; ++i) ASSERT_LT(k[i - 1], k[i]);
    EXPECT_LT(k[n - 1], uint64_t{1} << 40);
    EXPECT_GT(k[n - 1], uint64_t{1} << 20);  // raw ids, not rows of a 300-row table
  }
  EXPECT_NE((*file)->Find("embedding.t1.weight"), nullptr);
  EXPECT_EQ((*file)->Find("embedding.t1.keys"), nullptr);

  // Stats lines in metrics.jsonl.
  const std::string metrics = ReadFile(dir_ / "straight" / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"dynamic_table\": \"t0\""));
  EXPECT_THAT(metrics, HasSubstr("\"dynamic_evictions\""));
  EXPECT_THAT(metrics, HasSubstr("\"dynamic_unadmitted_frac\""));
  EXPECT_THAT(metrics, HasSubstr("\"dynamic_probe_length\""));

  // --eval-only on the export: the same metrics as the run's final eval (unseen ids read the
  // zero row), and evaluating twice changes nothing.
  auto from = Make(Yaml(kLfu, kTtl, dir_ / "from", 27, 0));
  ASSERT_TRUE(from.ok());
  from->model.init_from = a->export_path;
  TrainerOptions eval_only;
  eval_only.eval_only = true;
  auto ev = Trainer::Create(*from, eval_only);
  ASSERT_TRUE(ev.ok()) << ev.status();
  auto m1 = (*ev)->Evaluate(0);
  ASSERT_TRUE(m1.ok()) << m1.status();
  auto m2 = (*ev)->Evaluate(0);
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m1->auc, a->eval.auc);
  EXPECT_EQ(m1->logloss, m2->logloss);
}

TEST_F(DynamicTrainingTest, StaticCheckpointIsNotLoadedAsDynamicAndBack) {
  const fs::path out = dir_ / "mixed";
  // Train t0 static first.
  std::string yaml = Yaml(kLfu, kTtl, out, 10, 5);
  std::string static0 = yaml;
  static0.replace(static0.find("{name: t0, features: [0], dynamic: "),
                  std::string("{name: t0, features: [0], dynamic: ").size() + std::strlen(kLfu),
                  "{name: t0, features: [0], rows: 500");
  auto s = Make(static0);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(Run(*s).ok());
  // Resume with t0 dynamic: refused, naming the table.
  auto d = Make(Yaml(kLfu, kTtl, out, 12, 5));
  ASSERT_TRUE(d.ok());
  auto r = Run(*d);
  ASSERT_FALSE(r.ok());
  // The run directory's config fingerprint refuses first, naming the keys that differ.
  EXPECT_THAT(r.status().message(), HasSubstr("another model or optimizer"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("model.tables[0].dynamic.capacity_rows: (absent) there, '300' here"));
  EXPECT_THAT(r.status().message(), HasSubstr("model.tables[0].rows: '500' there, (absent) here"));

  // And the other way.
  const fs::path out2 = dir_ / "mixed2";
  auto dyn = Make(Yaml(kLfu, kTtl, out2, 10, 5));
  ASSERT_TRUE(Run(*dyn).ok());
  std::string static0b = Yaml(kLfu, kTtl, out2, 12, 5);
  static0b.replace(static0b.find("{name: t0, features: [0], dynamic: "),
                   std::string("{name: t0, features: [0], dynamic: ").size() + std::strlen(kLfu),
                   "{name: t0, features: [0], rows: 500");
  auto st = Make(static0b);
  ASSERT_TRUE(st.ok()) << st.status();
  r = Run(*st);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("model.tables[0].dynamic.capacity_rows: '300' there, (absent) here"));
}

TEST(DynamicStatsTest, MetricsLineAndTensorBoardTags) {
  internal::DynamicTableEntry now;
  now.name = "ads";
  now.stats.capacity = 100;
  now.stats.occupancy = 40;
  now.stats.lookups = 1000;
  now.stats.unadmitted_lookups = 250;
  now.stats.probes = 1500;
  now.stats.evictions = 7;
  DynamicTableStats before;
  before.lookups = 500;
  before.unadmitted_lookups = 200;
  before.probes = 700;
  before.evictions = 2;
  const JsonLine line = internal::DynamicStatsLine(12, now, before);
  EXPECT_THAT(line.str(), HasSubstr("\"dynamic_table\": \"ads\""));
  EXPECT_THAT(line.str(), HasSubstr("\"dynamic_evictions\": 5"));
  EXPECT_THAT(line.str(), HasSubstr("\"dynamic_unadmitted_frac\": 0.1"));
  EXPECT_THAT(line.str(), HasSubstr("\"dynamic_probe_length\": 1.6"));
  int64_t step = 0;
  const auto scalars = TensorBoardScalars(line, &step);
  EXPECT_EQ(step, 12);
  bool found = false;
  for (const auto& [tag, value] : scalars) {
    if (tag == "dynamic/ads/occupancy_frac") {
      found = true;
      EXPECT_FLOAT_EQ(value, 0.4f);
    }
  }
  EXPECT_TRUE(found);
  std::vector<internal::DynamicTableEntry> b(1);
  b[0].stats = before;
  EXPECT_EQ(internal::DynamicProgressNote({now}, b), "ads 40% full 10% unadmitted");
}

TEST_F(DynamicTrainingTest, CapacityAboveMemoryIsResourceExhausted) {
  ::setenv("TESSERA_MEMORY_LIMIT_BYTES", "200000000", 1);
  auto c = Make(Yaml("{capacity_rows: 100000000}", kTtl, dir_ / "big", 5, 0));
  ASSERT_TRUE(c.ok()) << c.status();
  auto r = Run(*c);
  ::unsetenv("TESSERA_MEMORY_LIMIT_BYTES");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("model.tables[0].dynamic.capacity_rows"));
  EXPECT_THAT(r.status().message(), HasSubstr("table 't0' needs"));
  EXPECT_THAT(r.status().message(), HasSubstr("bytes"));
  EXPECT_FALSE(fs::exists(dir_ / "big" / "metrics.jsonl"));
}

}  // namespace
}  // namespace tessera
