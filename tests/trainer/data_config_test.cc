// Config mends of issue 13: data.synthetic.zipf_exponent 0 means uniform ids (and trains);
// data.train / data.eval may name several files separated by commas, each resolved and
// checked, read in order as one stream.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/binary_format.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/data_sources.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DataConfigTest : public tiertest::TempDirTest {
 protected:
  void WriteBinary(const std::string& name, int records) {
    auto w = BinaryRecordWriter::Create((dir_ / name).string(), 2, {10, 10});
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < records; ++i) {
      const float dense[2] = {0.5f, 1.0f};
      const uint32_t ids[2] = {static_cast<uint32_t>(i % 10), static_cast<uint32_t>(i % 7)};
      ASSERT_TRUE((*w)->Append(i % 2 ? 1.0f : 0.0f, dense, ids).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }
  std::string BinaryYaml(const std::string& train, const std::string& eval) {
    return absl::StrCat(R"(threads: 1
model: {num_dense: 2, embedding_dim: 4, bottom_mlp: [4], top_mlp: [4, 1], table_rows: [10, 10]}
data: {format: binary, batch_size: 16, train: ")", train, R"(", eval: ")", eval, R"("}
train: {log_every: 1}
output: {dir: )", (dir_ / "run").string(), R"(, progress: false}
)");
  }
};

TEST_F(DataConfigTest, ZipfExponentZeroIsUniformIdsAndTrains) {
  auto c = ParseConfig(tiertest::SmallTierYaml({}, "rowwise_adagrad", "sgd") +
                           "train: {steps: 3}\noutput: {dir: " + (dir_ / "z").string() +
                           ", progress: false}\n",
                       (dir_ / "c.yaml").string(), {"data.synthetic.zipf_exponent=0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.synthetic.zipf_exponent, 0.0);
  auto trainer = Trainer::Create(*c);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  auto negative = ParseConfig(tiertest::SmallTierYaml({}, "sgd", "sgd"),
                              (dir_ / "c.yaml").string(), {"data.synthetic.zipf_exponent=-1"});
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("data.synthetic.zipf_exponent"));
}

TEST_F(DataConfigTest, CommaSeparatedFilesAreOneStream) {
  WriteBinary("a.bin", 40);
  WriteBinary("b.bin", 24);
  // Relative to the config's folder, spaces after commas allowed.
  auto c = ParseConfig(BinaryYaml("a.bin, b.bin", "b.bin,a.bin"), (dir_ / "c.yaml").string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.train_path, (dir_ / "a.bin").string() + "," + (dir_ / "b.bin").string());
  auto data = OpenDataSources(*c);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train_batches_per_epoch, 4);  // 64 records in batches of 16
  Batch b;
  int64_t records = 0;
  std::string origins;
  while (true) {
    auto more = data->train->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    records += b.batch_size;
    origins += b.origin + "\n";
  }
  EXPECT_EQ(records, 64);
  EXPECT_THAT(origins, HasSubstr("b.bin: record 8"));  // the 4th batch starts in the 2nd file
  // The effective config keeps the list and loads back.
  auto again = ParseConfig(ConfigToYaml(*c), (dir_ / "again.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data.train_path, c->data.train_path);
  // And it trains.
  auto trainer = Trainer::Create(*c);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 4);
  EXPECT_EQ(summary->eval.count, 64);
}

TEST_F(DataConfigTest, EachListedFileMustExist) {
  WriteBinary("a.bin", 16);
  auto missing = ParseConfig(BinaryYaml("a.bin,nope.bin", ""), (dir_ / "c.yaml").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("data.train: file not found: " + (dir_ / "nope.bin").string()));
  auto empty = ParseConfig(BinaryYaml("a.bin,,a.bin", ""), (dir_ / "c.yaml").string());
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("empty file name"));
}

}  // namespace
}  // namespace tessera
