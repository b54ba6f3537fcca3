// Evaluation of a saved model (TrainerOptions::eval_only, tessera-train --eval-only): the AUC,
// log loss and NE of an exported model on the training run's eval data equal what the training
// run logged for that model, one score per eval sample comes back in data order, and an
// eval-only trainer writes nothing.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/metrics.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

class EvalOnlyTest : public tiertest::TempDirTest {
 protected:
  absl::StatusOr<Config> MakeConfig(const fs::path& out) {
    return ParseConfig(tiertest::SmallTierYaml({}, "rowwise_adagrad", "adam") +
                           absl::StrCat("train: {steps: 15, log_every: 5}\noutput: {dir: ",
                                        out.string(), ", progress: false}\n"),
                       (dir_ / "c.yaml").string());
  }
};

TEST_F(EvalOnlyTest, AucOfTheExportEqualsTheTrainingRunsFinalEval) {
  auto config = MakeConfig(dir_ / "train");
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_GT(summary->eval.count, 0);
  ASSERT_FALSE(summary->export_path.empty());

  auto eval_config = MakeConfig(dir_ / "never_created");
  ASSERT_TRUE(eval_config.ok());
  eval_config->model.init_from = summary->export_path;
  TrainerOptions options;
  options.eval_only = true;
  auto evaluator = Trainer::Create(*eval_config, options);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  std::vector<float> scores;
  auto m = (*evaluator)->Evaluate(0, &scores);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->count, summary->eval.count);
  EXPECT_EQ(m->auc, summary->eval.auc);
  EXPECT_EQ(m->logloss, summary->eval.logloss);
  EXPECT_EQ(m->ne, summary->eval.ne);
  ASSERT_EQ(static_cast<int64_t>(scores.size()), m->count);
  for (float p : scores) ASSERT_TRUE(p >= 0.0f && p <= 1.0f) << p;
  EXPECT_FALSE(fs::exists(dir_ / "never_created")) << "eval-only wrote into output.dir";

  // A second evaluation (the reader rewinds) gives the same scores.
  std::vector<float> again;
  ASSERT_TRUE((*evaluator)->Evaluate(0, &again).ok());
  EXPECT_EQ(again, scores);
}

}  // namespace
}  // namespace tessera
