// Training on each file format gives the model training on the same rows as TSV gives, bit for
// bit: gzip-compressed days, the MLPerf NumPy days (one-hot .npy and multi-hot .npz), all
// written here from the Criteo sample (no numpy needed). And a bad day fails the run with one
// message naming the file.
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/criteo_text.h"
#include "io/mlperf_npy.h"
#include "tests/io/npy_test_util.h"
#include "core/status.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing_io::NpyBytes;
using testing_io::RawBytes;
using testing_io::WriteFile;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const fs::path kSample = fs::path(TESSERA_SHARED_DIR) / "data/criteo/kaggle_train_head1000.tsv";

class DataFormatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera_formats_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains a small DLRM on `data` (a YAML flow map of data keys) and returns its export.
  absl::StatusOr<std::string> Train(const std::string& name, const std::string& data) {
    const fs::path out = dir_ / name;
    std::string yaml = R"(seed: 3
model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: criteo_kaggle
  max_table_rows: 1000
data: )" + data + R"(
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adagrad, lr: 0.05}
train: {epochs: 1, log_every: 5}
output: {dir: )" + out.string() + R"(, progress: false}
)";
    TESSERA_ASSIGN_OR_RETURN(Config config, ParseConfig(yaml, (dir_ / "c.yaml").string()));
    TESSERA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config));
    TESSERA_ASSIGN_OR_RETURN(TrainSummary summary, trainer->Run());
    if (summary.samples != 1000) return absl::InternalError("expected 1000 samples");
    return ReadFile(summary.export_path);
  }

  // The sample's rows as the text reader reads them (dense, labels) and the raw hex ids.
  void ReadSample() {
    CriteoTextOptions o;
    o.paths = {kSample.string()};
    o.rows_per_feature = *CriteoRowsPreset("kaggle");
    o.batch_size = 1000;
    auto r = CriteoTextReader::Open(o);
    ASSERT_TRUE(r.ok()) << r.status();
    Batch b;
    ASSERT_TRUE(*(*r)->Next(&b));
    dense_ = b.dense;
    labels_.assign(b.labels.begin(), b.labels.end());
    std::ifstream in(kSample);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      size_t start = 0;
      while (true) {
        size_t p = line.find('\t', start);
        f.push_back(line.substr(start, p == std::string::npos ? p : p - start));
        if (p == std::string::npos) break;
        start = p + 1;
      }
      for (int k = 0; k < 26; ++k) {
        const size_t i = 14 + k;
        hex_.push_back(i < f.size() && !f[i].empty()
                           ? static_cast<int64_t>(std::strtoull(f[i].c_str(), nullptr, 16))
                           : 0);
      }
    }
    ASSERT_EQ(hex_.size(), 26000u);
  }

  // Rows [begin, end) as MLPerf day `day` under `folder`: one-hot int64 raw ids, or a multi-hot
  // archive of 26 [n, 1] int64 arrays.
  void WriteDay(const fs::path& folder, int day, int64_t begin, int64_t end, bool multi_hot) {
    fs::create_directories(folder);
    const int64_t n = end - begin;
    std::vector<float> dense(dense_.begin() + begin * 13, dense_.begin() + end * 13);
    std::vector<int32_t> labels;
    for (int64_t i = begin; i < end; ++i) labels.push_back(static_cast<int32_t>(labels_[i]));
    const std::string dir = folder.string();
    WriteFile(DayFilePath(dir, day, "dense.npy"),
              NpyBytes(NpyDtype::kFloat32, {n, 13}, RawBytes(dense)));
    WriteFile(DayFilePath(dir, day, "labels.npy"),
              NpyBytes(NpyDtype::kInt32, {n, 1}, RawBytes(labels)));
    if (!multi_hot) {
      std::vector<int64_t> ids(hex_.begin() + begin * 26, hex_.begin() + end * 26);
      WriteFile(DayFilePath(dir, day, "sparse.npy"),
                NpyBytes(NpyDtype::kInt64, {n, 26}, RawBytes(ids)));
      return;
    }
    std::vector<std::pair<std::string, std::string>> members;
    for (int k = 0; k < 26; ++k) {
      std::vector<int64_t> ids;
      for (int64_t i = begin; i < end; ++i) ids.push_back(hex_[i * 26 + k]);
      members.emplace_back(std::to_string(k) + ".npy",
                           NpyBytes(NpyDtype::kInt64, {n, 1}, RawBytes(ids)));
    }
    WriteFile(DayFilePath(dir, day, "sparse_multi_hot.npz"), testing_io::ZipBytes(members));
  }

  fs::path dir_;
  std::vector<float> dense_, labels_;
  std::vector<int64_t> hex_;
};

TEST_F(DataFormatsTest, GzipAndMlperfDaysTrainTheSameModelAsTsv) {
  ReadSample();
  auto tsv = Train("tsv", "{format: criteo_tsv, train: " + kSample.string() + ", batch_size: 100}");
  ASSERT_TRUE(tsv.ok()) << tsv.status();

  // The sample split into two gzip days at line 600.
  const std::string text = ReadFile(kSample);
  size_t cut = 0;
  for (int i = 0; i < 600; ++i) cut = text.find('\n', cut) + 1;
  const std::string parts[2] = {text.substr(0, cut), text.substr(cut)};
  for (int d = 0; d < 2; ++d) {
    gzFile gz = gzopen((dir_ / ("day_" + std::to_string(d) + ".gz")).c_str(), "wb");
    ASSERT_NE(gz, nullptr);
    ASSERT_EQ(gzwrite(gz, parts[d].data(), static_cast<unsigned>(parts[d].size())),
              static_cast<int>(parts[d].size()));
    ASSERT_EQ(gzclose(gz), Z_OK);
  }
  auto gz = Train("gz", "{format: criteo_tsv, train: '" + (dir_ / "day_0.gz").string() + "," +
                            (dir_ / "day_1.gz").string() + "', batch_size: 100}");
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_TRUE(*gz == *tsv) << "gzip days trained another model than the TSV";

  for (bool multi : {false, true}) {
    const fs::path folder = dir_ / (multi ? "multi" : "one");
    WriteDay(folder, 0, 0, 450, multi);
    WriteDay(folder, 1, 450, 1000, multi);
    auto npy = Train(multi ? "multi_run" : "one_run",
                     "{format: mlperf_npy, train: " + folder.string() +
                         ", train_days: '0-1', batch_size: 100}");
    ASSERT_TRUE(npy.ok()) << npy.status();
    EXPECT_TRUE(*npy == *tsv) << (multi ? "multi-hot" : "one-hot") << " days differ from TSV";
  }
}

TEST_F(DataFormatsTest, AMissingOrBadDayFailsNamingTheFile) {
  ReadSample();
  const fs::path folder = dir_ / "days";
  WriteDay(folder, 0, 0, 500, false);
  WriteDay(folder, 1, 500, 1000, false);
  const std::string data = "{format: mlperf_npy, train: " + folder.string() +
                           ", train_days: '0-2', batch_size: 100}";
  auto missing = Train("missing", data);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr(DayFilePath(folder.string(), 2, "dense.npy") + ": not found"));
  WriteDay(folder, 2, 0, 10, false);
  WriteFile(DayFilePath(folder.string(), 2, "labels.npy"),
            NpyBytes(NpyDtype::kInt32, {9, 1}, std::string(36, '\0')));
  auto bad = Train("bad", data);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(DayFilePath(folder.string(), 2, "labels.npy") + ": 9 rows, but "));
  // The MLPerf keys belong to mlperf_npy only.
  auto wrong = Train("wrong", "{format: criteo_tsv, train: " + kSample.string() +
                                  ", eval_split: test}");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("data.eval_split"));
}

TEST_F(DataFormatsTest, MlperfKeysRoundTripThroughTheEmittedConfig) {
  fs::create_directories(dir_ / "days");
  const std::string yaml = R"(model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: criteo_kaggle
data: {format: mlperf_npy, train: )" + (dir_ / "days").string() +
                           R"(, train_days: '0,2-3', eval: )" + (dir_ / "days").string() +
                           R"(, eval_split: test}
output: {dir: )" + (dir_ / "out").string() + R"(, progress: false}
)";
  auto config = ParseConfig(yaml, (dir_ / "m.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data.train_days, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(config->data.eval_days, std::vector<int>{23});
  EXPECT_EQ(config->data.eval_split, MlperfSplit::kTest);
  auto again = ParseConfig(ConfigToYaml(*config), (dir_ / "m2.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigToYaml(*config);
  EXPECT_EQ(again->data.format, DataFormat::kMlperfNpy);
  EXPECT_EQ(again->data.train_days, config->data.train_days);
  EXPECT_EQ(again->data.eval_days, config->data.eval_days);
  EXPECT_EQ(again->data.eval_split, MlperfSplit::kTest);
  // Bad day lists name the key.
  std::string bad = yaml;
  bad.replace(bad.find("'0,2-3'"), 7, "'3-1'");
  auto b = ParseConfig(bad, (dir_ / "b.yaml").string());
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("data.train_days"));
}

}  // namespace
}  // namespace tessera
