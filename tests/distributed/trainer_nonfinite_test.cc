// The non-finite guard across ranks (train.nonfinite): one rank's batch holds a record with an
// infinite dense feature. With stop every rank's run fails together, each naming that rank's
// batch and record; with skip every rank skips the same step and the run ends on all of them
// (nobody is left waiting in a collective), with equal dense models.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/binary_format.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
using ::testing::HasSubstr;
using testing::World;

// 4 ranks x 128 records, batches of 64: rank r reads records [128 r, 128 r + 128) as 2 batches.
constexpr int kRecords = 512, kDense = 3;
constexpr int kInfRecord = 2 * 128 + 70;  // rank 2, its batch 1 (records 320..383)

std::string WriteData(const std::string& dir) {
  const std::string path = dir + "/data.bin";
  if (World()->rank() == 0) {
    auto w = BinaryRecordWriter::Create(path, kDense, {50, 40, 30});
    EXPECT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < kRecords; ++i) {
      const uint32_t ids[3] = {static_cast<uint32_t>(i % 50), static_cast<uint32_t>(i * 7 % 40),
                               static_cast<uint32_t>(i * 13 % 30)};
      float dense[kDense] = {0.1f * (i % 5), 0.3f, 1.0f - 0.01f * (i % 50)};
      if (i == kInfRecord) dense[1] = std::numeric_limits<float>::infinity();
      EXPECT_TRUE((*w)->Append(ids[0] % 2 == 0 ? 1.0f : 0.0f, dense, ids).ok());
    }
    EXPECT_TRUE((*w)->Finish().ok());
  }
  EXPECT_TRUE(World()->Barrier().ok());
  return path;
}

absl::StatusOr<Config> MakeConfig(const std::string& dir, const std::string& data,
                                  const std::string& policy) {
  return ParseConfig(absl::StrCat(R"(seed: 5
threads: 1
model:
  num_dense: 3
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: [50, 40, 30]
data: {format: binary, train: )", data, R"(, batch_size: 64}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.01}
train: {epochs: 2, log_every: 1, nonfinite: )", policy, R"(}
output: {dir: )", dir, "/run_", policy, R"(, progress: false}
sharding: {group_size: 2}
)"),
                     dir + "/c.yaml");
}

TEST(TrainerNonFiniteTest, StopFailsOnEveryRankNamingTheCulprit) {
  testing::SharedTempDir dir("tessera_nonfinite_stop_");
  const std::string data = WriteData(dir.path());
  auto config = MakeConfig(dir.path(), data, "stop");
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(summary.status().message(), HasSubstr("step 2: the loss is not finite"));
  EXPECT_THAT(summary.status().message(),
              HasSubstr(absl::StrCat("rank 2: epoch 0, batch 1 of the rank's slice (first sample: ",
                                     data, ": record 320)")));
  EXPECT_THAT(summary.status().message(), ::testing::Not(HasSubstr("rank 1:")));
}

TEST(TrainerNonFiniteTest, SkipSkipsTheSameStepOnEveryRank) {
  testing::SharedTempDir dir("tessera_nonfinite_skip_");
  const std::string data = WriteData(dir.path());
  auto config = MakeConfig(dir.path(), data, "skip");
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 4);              // 2 epochs x 2 batches per rank
  EXPECT_EQ(summary->nonfinite_skipped, 2);  // step 2 of each epoch
  EXPECT_TRUE(std::isfinite(summary->last_train_loss));
  // The dense model is the same on every rank (each applied the same steps) and finite.
  double sum = 0;
  for (Parameter* p : (*trainer)->model().dense_parameters()) {
    const float* v = p->value.data<float>();
    for (int64_t i = 0; i < p->value.numel(); ++i) sum += v[i];
  }
  ASSERT_TRUE(std::isfinite(sum));
  const int n = World()->size();
  std::vector<double> all(n);
  std::vector<int64_t> bytes(n, sizeof(double)), displs(n);
  for (int r = 0; r < n; ++r) displs[r] = r * static_cast<int64_t>(sizeof(double));
  ASSERT_TRUE(World()->AllGatherV(&sum, sizeof(double), all.data(), bytes, displs).ok());
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], sum) << "rank " << r << "'s dense model differs";
}

}  // namespace
}  // namespace tessera
