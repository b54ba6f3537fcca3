// Helpers shared by the RocksDB-tier and checkpoint tests of the trainer: a small synthetic
// DLRM config whose tables can be put in the RocksDB tier, and file comparison.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "trainer/config.h"

namespace tessera::tiertest {

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("tessera_", ::testing::UnitTest::GetInstance()->current_test_suite()->name(),
                        "_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// Four features over three tables: t0 (2000 rows, feature 0), t1 (1000 rows, features 1 and 2,
// multi-hot), t2 (300 rows, feature 3); 128 samples per batch, 10 batches per epoch, Zipf ids.
// `storage[t]` is YAML for table t's storage map ("" = in memory). `extra` is appended as
// top-level YAML (train:, output: ... keys are given here, so pass whole sections).
inline std::string SmallTierYaml(const std::vector<std::string>& storage,
                                 const std::string& embedding_optimizer,
                                 const std::string& dense_optimizer) {
  const char* tables[3] = {"{name: t0, rows: 2000, features: [0]",
                           "{name: t1, rows: 1000, features: [1, 2]",
                           "{name: t2, rows: 300, features: [3]"};
  std::string t;
  for (int i = 0; i < 3; ++i) {
    std::string st = i < static_cast<int>(storage.size()) ? storage[i] : "";
    absl::StrAppend(&t, "    - ", tables[i], st.empty() ? "" : ", storage: " + st, "}\n");
  }
  return absl::StrCat(R"(seed: 11
threads: 2
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
)", t, R"(data:
  format: synthetic
  batch_size: 128
  shuffle: true
  synthetic: {train_samples: 1280, eval_samples: 256, pooling: [2, 3, 1, 1], zipf_exponent: 1.05}
optimizer:
  embedding: {type: )", embedding_optimizer, R"(, lr: 0.05}
  dense: {type: )", dense_optimizer, R"(, lr: 0.01}
  schedule: {warmup_steps: 4, decay_start: 12, decay_steps: 20}
)");
}

}  // namespace tessera::tiertest
