#include "trainer/config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/presets.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A minimal valid config; tests append or override.
const char* kBase = R"(model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: [10, 20, 30]
)";

std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto c = ParseConfig(yaml, "test.yaml", overrides);
  if (c.ok()) return "<ok>";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

TEST(ConfigTest, ShippedConfigsLoad) {
  const fs::path dir = fs::path(TESSERA_SOURCE_DIR) / "configs";
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    auto c = LoadConfig(entry.path().string());
    ASSERT_TRUE(c.ok()) << entry.path() << ": " << c.status();
    EXPECT_FALSE(c->model.tables.empty());
    ++loaded;
  }
  EXPECT_GE(loaded, 4);
  auto quick = LoadConfig((dir / "quickstart.yaml").string());
  ASSERT_TRUE(quick.ok());
  EXPECT_EQ(quick->model.tables.size(), 8u);
  EXPECT_EQ(quick->data.format, DataFormat::kSynthetic);
  auto mlperf = LoadConfig((dir / "dcnv2_mlperf.yaml").string());
  ASSERT_TRUE(mlperf.ok());
  EXPECT_EQ(mlperf->model.interaction, InteractionType::kDcn);
  EXPECT_EQ(mlperf->model.tables[0].num_rows, 40000000);
  EXPECT_EQ(mlperf->data.synthetic.pooling[20], 100);
  // The reduced-scale recipe from the file's comment works.
  auto reduced = LoadConfig((dir / "dcnv2_mlperf.yaml").string(),
                            {"model.max_table_rows=100000", "data.batch_size=4096",
                             "data.synthetic.pooling=mlperf_multi_hot_half"});
  ASSERT_TRUE(reduced.ok()) << reduced.status();
  EXPECT_EQ(reduced->model.tables[0].num_rows, 100000);
  EXPECT_EQ(reduced->model.tables[5].num_rows, 3);
  EXPECT_EQ(reduced->data.synthetic.pooling[20], 50);
  EXPECT_EQ(reduced->data.synthetic.pooling[0], 2);  // 3 halved, rounded up
  auto sample = LoadConfig((dir / "criteo_sample.yaml").string());
  ASSERT_TRUE(sample.ok());
  EXPECT_TRUE(fs::path(sample->data.train_path).is_absolute());
  EXPECT_TRUE(fs::exists(sample->data.train_path));
  EXPECT_EQ(sample->model.tables[2].num_rows, 100000);  // 10131227 capped
  EXPECT_EQ(sample->model.tables[0].num_rows, 1460);
}

// The presets must be the numbers of ../shared/data/criteo/CARDINALITIES.md.
std::vector<int64_t> NumbersOfCodeBlock(const std::string& md, const std::string& heading,
                                        int block) {
  size_t pos = md.find(heading);
  EXPECT_NE(pos, std::string::npos) << heading;
  for (int b = 0; b <= block; ++b) pos = md.find("```", md.find("```", pos) + 3 * (b > 0)) ;
  size_t begin = md.find('\n', pos) + 1;
  size_t end = md.find("```", begin);
  std::string body = md.substr(begin, end - begin);
  std::vector<int64_t> out;
  std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), num);
       it != std::sregex_iterator(); ++it)
    out.push_back(std::stoll(it->str()));
  return out;
}

TEST(ConfigTest, PresetsMatchCardinalitiesFile) {
  std::ifstream in(std::string(TESSERA_SHARED_DIR) + "/data/criteo/CARDINALITIES.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string md = ss.str();
  auto kaggle = NumbersOfCodeBlock(md, "## 1. Criteo Kaggle", 0);
  auto mlperf = NumbersOfCodeBlock(md, "## 2. Criteo 1TB / MLPerf", 0);
  size_t mh = md.find("**Multi-hot sizes");
  ASSERT_NE(mh, std::string::npos);
  auto multi_hot = NumbersOfCodeBlock(md.substr(mh), "**Multi-hot", 0);
  EXPECT_EQ(kaggle, *TableRowsPreset("criteo_kaggle"));
  EXPECT_EQ(mlperf, *TableRowsPreset("criteo_1tb_mlperf"));
  EXPECT_EQ(multi_hot, *PoolingPreset("mlperf_multi_hot"));
  int64_t sum = 0;
  for (int64_t v : kaggle) sum += v;
  EXPECT_EQ(sum, 33762577);
  sum = 0;
  std::vector<int64_t> mh_preset = *PoolingPreset("mlperf_multi_hot");
  for (int64_t v : mh_preset) sum += v;
  EXPECT_EQ(sum, 214);
  EXPECT_FALSE(TableRowsPreset("criteo").has_value());
}

TEST(ConfigTest, DefaultsAndShorthand) {
  auto c = ParseConfig(kBase, "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  Config d;
  EXPECT_EQ(c->seed, d.seed);
  EXPECT_EQ(c->data.batch_size, d.data.batch_size);
  EXPECT_EQ(c->optimizer.embedding.type, RowOptimizerType::kRowWiseAdagrad);
  EXPECT_EQ(c->optimizer.schedule.base_lr, 1.0f);
  EXPECT_EQ(c->data.synthetic.pooling, std::vector<int64_t>{1});
  ASSERT_EQ(c->model.tables.size(), 3u);
  EXPECT_EQ(c->model.tables[1].name, "t1");
  EXPECT_EQ(c->model.tables[1].num_rows, 20);
  EXPECT_EQ(c->model.tables[1].dim, 4);
  EXPECT_EQ(c->model.tables[1].features, std::vector<int>{1});
  EXPECT_EQ(c->source, "test.yaml");
}

TEST(ConfigTest, FullTableForm) {
  auto c = ParseConfig(R"(model:
  embedding_dim: 4
  bottom_mlp: [4]
  top_mlp: [1]
  max_table_rows: 50
  tables:
    - {name: users, rows: 100, pooling: mean, features: [0, 2],
       init: {type: normal, scale: 0.01}}
    - {name: items, rows: 7, dim: 4, init: {type: zero}}
data:
  synthetic: {pooling: [1, 2, 3], seed: 9}
)",
                       "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const TableConfig& u = c->model.tables[0];
  EXPECT_EQ(u.name, "users");
  EXPECT_EQ(u.num_rows, 50);  // capped
  EXPECT_EQ(u.dim, 4);
  EXPECT_EQ(u.pooling, PoolingMode::kMean);
  EXPECT_EQ(u.features, (std::vector<int>{0, 2}));
  EXPECT_EQ(u.init.type, RowInitType::kNormal);
  EXPECT_FLOAT_EQ(u.init.scale, 0.01f);
  EXPECT_EQ(c->model.tables[1].features, std::vector<int>{1});  // default: its index
  EXPECT_EQ(c->model.tables[1].init.type, RowInitType::kZero);
  EXPECT_EQ(c->data.synthetic.seed, 9u);
}

TEST(ConfigTest, UnknownKeysNameLineAndSuggest) {
  EXPECT_EQ(ErrorOf(std::string(kBase) + "  bottom_mpl: [3]\n"),
            "test.yaml:7: model.bottom_mpl: unknown key (did you mean 'model.bottom_mlp'?)");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "  batch_size: 3\n"),
            "test.yaml:7: model.batch_size: unknown key (did you mean 'data.batch_size'?)");
  EXPECT_THAT(ErrorOf(std::string(kBase) + "trian:\n  steps: 3\n"),
              HasSubstr("test.yaml:7: trian: unknown key (did you mean 'train'?)"));
  EXPECT_THAT(ErrorOf(std::string(kBase) + "data:\n  synthetic:\n    zzz: 1\n"),
              HasSubstr("test.yaml:9: data.synthetic.zzz: unknown key (known keys of "
                        "data.synthetic: train_samples,"));
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                    "  tables:\n    - {rows: 3}\n    - {rowz: 3}\n"),
            "test.yaml:7: model.tables[1].rowz: unknown key (did you mean "
            "'model.tables[1].rows'?)");
  EXPECT_THAT(ErrorOf(std::string(kBase) + "  embedding_dim: 8\n"),
              HasSubstr("test.yaml:7: model.embedding_dim: duplicate key"));
}

TEST(ConfigTest, WrongTypes) {
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [8, abc, 4]\n  top_mlp: [1]\n"
                    "  table_rows: [5]\n"),
            "test.yaml:3: model.bottom_mlp[1]: expected a positive integer (got 'abc')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "data:\n  shuffle: maybe\n"),
            "test.yaml:8: data.shuffle: expected true or false (got 'maybe')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "optimizer:\n  dense:\n    lr: fast\n"),
            "test.yaml:9: optimizer.dense.lr: expected a positive number (got 'fast')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "data: [1, 2]\n"),
            "test.yaml:7: data: expected a map (got '[1, 2]')");
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: 4\n  top_mlp: [1]\n"
                    "  table_rows: [5]\n"),
            "test.yaml:3: model.bottom_mlp: expected a list of values, each a positive integer "
            "(got '4')");
}

TEST(ConfigTest, NegativeAndZeroSizes) {
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: -4\n"),
            "test.yaml:2: model.embedding_dim: expected a positive integer (got '-4')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "data:\n  batch_size: 0\n"),
            "test.yaml:8: data.batch_size: expected a positive integer (got '0')");
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                    "  table_rows: [5, -1]\n"),
            "test.yaml:5: model.table_rows[1]: expected a positive integer (got '-1')");
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                    "  tables:\n    - {name: a, rows: 0}\n"),
            "test.yaml:6: model.tables[0].rows: expected a positive integer (got '0')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "seed: -1\n"),
            "test.yaml:7: seed: expected a non-negative integer below 2^64 (got '-1')");
}

TEST(ConfigTest, BadEnums) {
  EXPECT_EQ(ErrorOf("model:\n  type: dot\n"),
            "test.yaml:2: model.type: expected one of dlrm, dcnv2 (got 'dot')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "optimizer:\n  embedding: {type: adagrad}\n"),
            "test.yaml:8: optimizer.embedding.type: expected one of sgd, rowwise_adagrad, adam "
            "(got 'adagrad')");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "data:\n  format: parquet\n"),
            "test.yaml:8: data.format: expected one of synthetic, criteo_tsv, criteo_csv, "
            "binary, mlperf_npy (got 'parquet')");
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                      "  table_rows: criteo_2tb\n"),
              HasSubstr("test.yaml:5: model.table_rows: expected a list of positive integers or "
                        "a preset: criteo_kaggle, criteo_1tb_mlperf (got 'criteo_2tb')"));
}

TEST(ConfigTest, DataFilesResolveAgainstTheConfigFolder) {
  fs::path dir = fs::path(::testing::TempDir()) / ("config_test_" + std::to_string(::getpid()));
  fs::create_directories(dir / "data");
  std::ofstream(dir / "data" / "train.tsv") << "0\n";
  std::string model =
      "model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n  num_dense: 13\n"
      "  table_rows: criteo_kaggle\n";
  std::ofstream(dir / "good.yaml") << model << "data:\n  format: criteo_tsv\n"
                                   << "  train: data/train.tsv\n";
  auto c = LoadConfig((dir / "good.yaml").string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.train_path, (dir / "data" / "train.tsv").string());

  std::ofstream(dir / "bad.yaml") << model << "data:\n  format: criteo_tsv\n"
                                  << "  train: data/train.tsv\n  eval: data/missing.tsv\n";
  auto bad = LoadConfig((dir / "bad.yaml").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()),
            (dir / "bad.yaml").string() + ":10: data.eval: file not found: " +
                (dir / "data" / "missing.tsv").string() + " (got 'data/missing.tsv')");
  EXPECT_THAT(ErrorOf(std::string(kBase) + "data:\n  format: criteo_tsv\n"),
              HasSubstr("data.train: required"));
  EXPECT_THAT(ErrorOf(std::string(kBase) + "data:\n  train: x.tsv\n"),
              HasSubstr("test.yaml:8: data.train: not used with data.format synthetic"));
  EXPECT_EQ(LoadConfig((dir / "none.yaml").string()).status().code(),
            absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(ConfigTest, InteractionAndFeatureRules) {
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [8, 6]\n  top_mlp: [1]\n"
                      "  table_rows: [5]\n"),
              HasSubstr("test.yaml:3: model.bottom_mlp: the last layer (6) must equal "
                        "model.embedding_dim (4) for model.type dlrm"));
  // dcnv2 has no such rule.
  EXPECT_EQ(ErrorOf("model:\n  type: dcnv2\n  embedding_dim: 4\n  bottom_mlp: [8, 6]\n"
                    "  top_mlp: [1]\n  table_rows: [5]\n"),
            "<ok>");
  EXPECT_EQ(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [8, 2]\n"
                    "  table_rows: [5]\n"),
            "test.yaml:4: model.top_mlp: the last layer must be 1 (the logit) (got '[8, 2]')");
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                      "  tables:\n    - {rows: 3}\n    - {rows: 3, dim: 8}\n"),
              HasSubstr("test.yaml:7: model.tables[1].dim: must equal model.embedding_dim (4)"));
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                      "  tables:\n    - {name: a, rows: 3, features: [0, 1]}\n"
                      "    - {name: b, rows: 3}\n"),
              HasSubstr("test.yaml:7: model.tables[1].features: feature 1 is already served "
                        "by table 'a'"));
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                      "  tables:\n    - {name: a, rows: 3, features: [0, 2]}\n"),
              HasSubstr("model.tables: feature 1 is served by no table"));
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                      "  tables:\n    - {name: a.b, rows: 3}\n"),
              HasSubstr("test.yaml:6: model.tables[0].name: expected letters, digits and '_'"));
  EXPECT_THAT(ErrorOf(std::string(kBase) + "data:\n  synthetic: {pooling: [1, 2]}\n"),
              HasSubstr("data.synthetic.pooling: 2 values for 3 features"));
  EXPECT_THAT(ErrorOf(std::string(kBase) + "data:\n  synthetic: {pooling: mlperf_multi_hot}\n"),
              HasSubstr("data.synthetic.pooling: 26 values for 3 features"));
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: [4]\n  top_mlp: [1]\n"),
              HasSubstr("test.yaml:2: model.tables: required"));
}

TEST(ConfigTest, OverridesApplyBeforeValidation) {
  auto c = ParseConfig(kBase, "test.yaml",
                       {"model.bottom_mlp=[16, 4]", "data.batch_size=512",
                        "model.table_rows.1=7", "output.export=", "data.synthetic.pooling=3",
                        "optimizer.dense.type=adam"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.bottom_mlp, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(c->data.batch_size, 512);
  EXPECT_EQ(c->model.tables[1].num_rows, 7);
  EXPECT_EQ(c->output.export_path, "");
  EXPECT_EQ(c->data.synthetic.pooling, std::vector<int64_t>{3});
  EXPECT_EQ(c->optimizer.dense.type, DenseOptimizerType::kAdam);
  // A later override of the same key wins; an override can fix an invalid file.
  auto fixed = ParseConfig(std::string(kBase) + "data:\n  batch_size: -1\n", "test.yaml",
                           {"data.batch_size=5", "data.batch_size=6"});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->data.batch_size, 6);
  auto tables = ParseConfig("model:\n  embedding_dim: 4\n  bottom_mlp: [4]\n  top_mlp: [1]\n"
                            "  tables:\n    - {name: a, rows: 3}\n",
                            "test.yaml", {"model.tables[0].rows=9"});
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_EQ(tables->model.tables[0].num_rows, 9);
}

TEST(ConfigTest, BadOverridesNameTheOverride) {
  EXPECT_EQ(ErrorOf(kBase, {"model.bottom_mpl=[4]"}),
            "test.yaml: override 'model.bottom_mpl=[4]': model.bottom_mpl: unknown key (did you "
            "mean 'model.bottom_mlp'?)");
  EXPECT_THAT(ErrorOf(kBase, {"modle.x=1"}),
              HasSubstr("test.yaml: override 'modle.x=1': modle: unknown key (did you mean "
                        "'model'?)"));
  EXPECT_EQ(ErrorOf(kBase, {"model.embedding_dim=abc"}),
            "test.yaml: override 'model.embedding_dim=abc': model.embedding_dim: expected a "
            "positive integer (got 'abc')");
  EXPECT_EQ(ErrorOf(kBase, {"model.bottom_mlp"}),
            "test.yaml: override 'model.bottom_mlp': expected dotted.key=value");
  EXPECT_THAT(ErrorOf(kBase, {"model.table_rows.5=1"}),
              HasSubstr("override 'model.table_rows.5=1': 'model.table_rows' is a list of 3"));
  EXPECT_THAT(ErrorOf(kBase, {"model.embedding_dim.x=1"}),
              HasSubstr("override 'model.embedding_dim.x=1': 'model.embedding_dim' is a value"));
  EXPECT_THAT(ErrorOf(kBase, {"model.bottom_mlp=[1, 2"}),
              HasSubstr("override 'model.bottom_mlp=[1, 2': the value is not valid YAML"));
}

TEST(ConfigTest, YamlSyntaxErrorsNameTheLine) {
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n  bottom_mlp: [4\n"),
              HasSubstr("test.yaml:"));
  EXPECT_THAT(ErrorOf("model:\n  embedding_dim: 4\n bad indent: [\n"),
              HasSubstr("YAML syntax error"));
  EXPECT_THAT(ErrorOf("- 1\n- 2\n"), HasSubstr("expected a map of sections"));
}

TEST(ConfigTest, ConfigToYamlRoundTrips) {
  const fs::path dir = fs::path(TESSERA_SOURCE_DIR) / "configs";
  for (const char* name : {"quickstart.yaml", "criteo_sample.yaml", "dcnv2_mlperf.yaml"}) {
    auto c = LoadConfig((dir / name).string(), {"optimizer.schedule.decay_start=100",
                                                "optimizer.schedule.decay_steps=50",
                                                "optimizer.embedding.lr=0.0123"});
    ASSERT_TRUE(c.ok()) << c.status();
    std::string yaml = ConfigToYaml(*c);
    auto again = ParseConfig(yaml, "/elsewhere/effective.yaml");
    ASSERT_TRUE(again.ok()) << name << ": " << again.status() << "\n" << yaml;
    std::string yaml2 = ConfigToYaml(*again);
    // Equal but for the first line (a comment naming the source).
    EXPECT_EQ(yaml2.substr(yaml2.find('\n')), yaml.substr(yaml.find('\n'))) << name;
    EXPECT_THAT(yaml, HasSubstr("lr: 0.0123\n"));
    EXPECT_EQ(again->optimizer.embedding_lr, c->optimizer.embedding_lr);
    EXPECT_EQ(again->model.tables.size(), c->model.tables.size());
    EXPECT_EQ(again->data.train_path, c->data.train_path);
    EXPECT_EQ(again->data.synthetic.zipf_exponent, c->data.synthetic.zipf_exponent);
  }
}

}  // namespace
}  // namespace tessera
