// End-to-end properties of a training run: same seed -> same bits; export -> init_from ->
// export is the identity; the real Criteo samples train and report metrics; a run that fails on
// bad data leaves no model file and says so in its metrics.
#include "trainer/trainer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera_trainer_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small synthetic DLRM (or DCNv2) run writing into `out`.
  absl::StatusOr<Config> SmallConfig(const std::string& out, const std::string& type = "dlrm") {
    std::string yaml = R"(seed: 7
model:
  type: )" + type + R"(
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  dcn: {num_layers: 2, low_rank: 4}
  table_rows: [500, 300, 200, 100]
data:
  format: synthetic
  batch_size: 128
  synthetic: {train_samples: 2560, eval_samples: 512, pooling: [1, 2, 3, 1]}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.01}
  schedule: {warmup_steps: 5}
train: {epochs: 1, eval_every: 10, log_every: 5}
output: {dir: )" + out + R"(, progress: false}
)";
    return ParseConfig(yaml, (dir_ / "small.yaml").string());
  }

  fs::path dir_;
};

TEST_F(TrainerTest, SameSeedSameBits) {
  for (const char* type : {"dlrm", "dcnv2"}) {
    std::string exported[2];
    for (int run = 0; run < 2; ++run) {
      auto config = SmallConfig((dir_ / (std::string(type) + std::to_string(run))).string(), type);
      ASSERT_TRUE(config.ok()) << config.status();
      auto trainer = Trainer::Create(*config);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      auto summary = (*trainer)->Run();
      ASSERT_TRUE(summary.ok()) << summary.status();
      EXPECT_EQ(summary->steps, 20);
      EXPECT_GT(summary->eval.auc, 0.5);
      exported[run] = ReadFile(summary->export_path);
    }
    EXPECT_GT(exported[0].size(), 8u);
    EXPECT_TRUE(exported[0] == exported[1]) << type << ": two runs with one seed differ";
  }
}

TEST_F(TrainerTest, ExportInitFromExportRoundTripsBitIdentically) {
  auto config = SmallConfig((dir_ / "a").string(), "dcnv2");
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();

  Config again = *config;
  again.model.init_from = summary->export_path;
  again.seed = 12345;  // every value must come from the file, not from the seed
  auto model = Model::Create(again, DeviceContext::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  fs::path second = dir_ / "second.safetensors";
  ASSERT_TRUE((*model)->Export(second.string(), summary->steps).ok());
  EXPECT_TRUE(ReadFile(summary->export_path) == ReadFile(second));
}

TEST_F(TrainerTest, InitFromWithWrongShapeNamesTheTensor) {
  auto config = SmallConfig((dir_ / "a").string());
  ASSERT_TRUE(config.ok());
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok());
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  Config other = *config;
  other.model.tables[1].num_rows = 301;
  other.model.init_from = summary->export_path;
  auto model = Model::Create(other, DeviceContext::Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("embedding.t1.weight"));
}

TEST_F(TrainerTest, TrainsOnTheCriteoSamplesAndReportsMetrics) {
  auto config = LoadConfig(std::string(TESSERA_SOURCE_DIR) + "/configs/criteo_sample.yaml",
                           {"output.dir=" + (dir_ / "criteo").string(), "output.progress=false",
                            "train.epochs=2"});
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->samples, 2000);  // 1000 rows, 2 epochs
  EXPECT_EQ(summary->eval.count, 100);
  EXPECT_EQ(summary->eval.positives, 36);  // ../shared/data/criteo/SOURCES.md
  EXPECT_GT(summary->eval.auc, 0.0);
  EXPECT_LT(summary->eval.auc, 1.0);
  EXPECT_GT(summary->eval.logloss, 0.0);
  EXPECT_LT(summary->eval.logloss, 5.0);
  std::string metrics = ReadFile(dir_ / "criteo" / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"eval_auc\""));
  EXPECT_THAT(metrics, HasSubstr("\"eval_logloss\""));
  EXPECT_THAT(metrics, HasSubstr("\"status\": \"done\""));
}

TEST_F(TrainerTest, BadRecordMidRunLeavesNoModelAndSaysFailed) {
  // 300 good rows, then one with a label of 2.
  std::string good = ReadFile(fs::path(TESSERA_SHARED_DIR) / "data/criteo/paddlerec_sample_train.tsv");
  std::string bad = good + good + good + "2\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\n";
  fs::path data = dir_ / "bad.tsv";
  std::ofstream(data) << bad;
  std::string yaml = R"(model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: criteo_kaggle
  max_table_rows: 1000
data: {format: criteo_tsv, train: )" + data.string() + R"(, batch_size: 50}
output: {dir: )" + (dir_ / "out").string() + R"(, progress: false}
)";
  auto config = ParseConfig(yaml, (dir_ / "bad.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("bad.tsv:301"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "model.safetensors"));
  std::string metrics = ReadFile(dir_ / "out" / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"status\": \"failed\""));
  EXPECT_THAT(metrics, HasSubstr("bad.tsv:301"));
}

}  // namespace
}  // namespace tessera
