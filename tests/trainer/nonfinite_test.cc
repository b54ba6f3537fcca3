// The non-finite guard (Model::TrainStep, train.nonfinite): a batch whose loss is not finite
// (here: one record with an infinite dense feature, or a learning rate that blows the weights
// up) stops the run naming the step and the batch's first record, or, with skip, is skipped
// without touching the model: a run whose last batch is skipped ends with exactly the tensors of
// a run that stopped one step earlier.
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/binary_format.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/safetensors.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

constexpr int kRecords = 512, kBatch = 128, kDense = 3;
const std::vector<int64_t> kRows = {50, 40, 30};

class NonFiniteTest : public tiertest::TempDirTest {
 protected:
  // kRecords binary records with a planted signal; record `inf_record` (if >= 0) carries an
  // infinite dense feature.
  std::string WriteData(int inf_record) {
    const std::string path = (dir_ / "data.bin").string();
    auto w = BinaryRecordWriter::Create(path, kDense, kRows);
    EXPECT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < kRecords; ++i) {
      const uint32_t ids[3] = {static_cast<uint32_t>(i % 50), static_cast<uint32_t>(i * 7 % 40),
                               static_cast<uint32_t>(i * 13 % 30)};
      float dense[kDense] = {0.1f * (i % 5), 0.3f, 1.0f - 0.01f * (i % 50)};
      if (i == inf_record) dense[1] = std::numeric_limits<float>::infinity();
      EXPECT_TRUE((*w)->Append(ids[0] % 2 == 0 ? 1.0f : 0.0f, dense, ids).ok());
    }
    EXPECT_TRUE((*w)->Finish().ok());
    return path;
  }
  absl::StatusOr<Config> MakeConfig(const std::string& data, const std::string& out,
                                    const std::string& extra) {
    const std::string yaml = absl::StrCat(R"(seed: 5
threads: 1
model:
  num_dense: 3
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: [50, 40, 30]
data: {format: binary, train: )", data, ", batch_size: ", kBatch, R"(}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.01}
train: {log_every: 1)", extra, R"(}
output: {dir: )", out, R"(, progress: false}
)");
    return ParseConfig(yaml, (dir_ / "c.yaml").string());
  }
  absl::StatusOr<TrainSummary> Run(const Config& config) {
    auto trainer = Trainer::Create(config);
    if (!trainer.ok()) return trainer.status();
    return (*trainer)->Run();
  }
};

TEST_F(NonFiniteTest, StopNamesTheStepAndTheBatchsFirstRecord) {
  const std::string data = WriteData(/*inf_record=*/300);  // in batch 2: records 256..383
  auto config = MakeConfig(data, (dir_ / "run").string(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->train.nonfinite, NonFinitePolicy::kStop);  // the default
  auto summary = Run(*config);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(summary.status().message(), HasSubstr("step 3: the loss is not finite"));
  EXPECT_THAT(summary.status().message(),
              HasSubstr(absl::StrCat("epoch 0, batch 2 (first sample: ", data, ": record 256)")));
  EXPECT_THAT(summary.status().message(), HasSubstr("train.nonfinite: skip"));
  const std::string metrics = ReadFile(dir_ / "run" / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"nonfinite\": \"loss\", \"action\": \"stopped\""));
  EXPECT_THAT(metrics, HasSubstr("\"status\": \"failed\""));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "model.safetensors"));
}

TEST_F(NonFiniteTest, SkipLeavesTheModelUntouched) {
  // The infinite record is in the last batch (384..511): skipping it must leave the model as
  // three steps left it.
  const std::string data = WriteData(/*inf_record=*/400);
  auto skip = MakeConfig(data, (dir_ / "skip").string(), ", nonfinite: skip");
  auto three = MakeConfig(data, (dir_ / "three").string(), ", steps: 3");
  ASSERT_TRUE(skip.ok()) << skip.status();
  ASSERT_TRUE(three.ok()) << three.status();
  auto skipped = Run(*skip);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->steps, 4);
  EXPECT_EQ(skipped->nonfinite_skipped, 1);
  EXPECT_TRUE(std::isfinite(skipped->last_train_loss));
  auto ref = Run(*three);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_THAT(ReadFile(dir_ / "skip" / "metrics.jsonl"),
              HasSubstr("\"nonfinite\": \"loss\", \"action\": \"skipped\""));

  auto a = SafetensorsFile::Open(skipped->export_path);
  auto b = SafetensorsFile::Open(ref->export_path);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  for (const TensorView& t : (*a)->tensors()) {
    const TensorView* u = (*b)->Find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(t.num_bytes, u->num_bytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.num_bytes), 0) << t.name << " changed";
  }
}

TEST_F(NonFiniteTest, DivergingLearningRateStopsAtTheFirstNonFiniteStep) {
  const std::string data = WriteData(-1);
  auto config = MakeConfig(data, (dir_ / "run").string(), "");
  ASSERT_TRUE(config.ok());
  config->optimizer.dense.type = DenseOptimizerType::kSgd;
  config->optimizer.dense_lr = 1e30f;
  auto summary = Run(*config);
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(summary.status().message(), HasSubstr("is not finite"));
  EXPECT_THAT(summary.status().message(), HasSubstr("first sample: " + data + ": record "));
}

}  // namespace
}  // namespace tessera
