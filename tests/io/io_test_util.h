// Helpers shared by the io/ tests: an independent, deliberately naive Criteo splitter (the
// reference the reader is checked against) and temp files.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io/batch.h"

namespace tessera::testing_io {

inline std::string SharedPath(const std::string& name) {
  return std::string(TESSERA_SHARED_DIR) + "/data/criteo/" + name;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Splits `path` into rows of fields (no padding), skipping blank lines and, if `header`, line 1.
inline std::vector<std::vector<std::string>> SplitFile(const std::string& path, char sep,
                                                       bool header) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(ReadAll(path));
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first && header) {
      first = false;
      continue;
    }
    first = false;
    if (line.empty()) continue;
    std::vector<std::string> fields;
    size_t start = 0;
    while (true) {
      size_t p = line.find(sep, start);
      fields.push_back(line.substr(start, p == std::string::npos ? std::string::npos : p - start));
      if (p == std::string::npos) break;
      start = p + 1;
    }
    rows.push_back(fields);
  }
  return rows;
}

// A temp file with `contents`, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::string& contents, const std::string& suffix = ".txt") {
    static int counter = 0;
    std::string dir = ::testing::TempDir();
    if (!dir.empty() && dir.back() != '/') dir += "/";
    path_ =
        dir + "tessera_io_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + suffix;
    std::ofstream out(path_, std::ios::binary);
    out << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A batch flattened to per-sample rows, for comparing streams regardless of batch boundaries.
struct FlatSample {
  float label;
  std::vector<float> dense;
  std::vector<std::vector<int64_t>> bags;  // per feature
  bool operator==(const FlatSample&) const = default;
};

inline void AppendFlat(const Batch& b, std::vector<FlatSample>* out) {
  const KeyedJagged& kj = b.sparse;
  EXPECT_EQ(kj.batch_size, b.batch_size);
  EXPECT_EQ(static_cast<int64_t>(kj.offsets.size()), kj.num_bags() + 1);
  EXPECT_EQ(kj.offsets.front(), 0);
  EXPECT_EQ(kj.offsets.back(), static_cast<int64_t>(kj.values.size()));
  for (int64_t i = 0; i < b.batch_size; ++i) {
    FlatSample s;
    s.label = b.labels[i];
    s.dense.assign(b.dense.begin() + i * b.num_dense, b.dense.begin() + (i + 1) * b.num_dense);
    for (int f = 0; f < kj.num_features; ++f) {
      const int64_t bag = f * kj.batch_size + i;
      s.bags.emplace_back(kj.values.begin() + kj.offsets[bag],
                          kj.values.begin() + kj.offsets[bag + 1]);
    }
    out->push_back(std::move(s));
  }
}

}  // namespace tessera::testing_io
