// The .npy parser and the MLPerf day reader: files written here byte for byte as np.save /
// np.savez write them (no numpy needed), checked against the same rows read from TSV, and every
// kind of bad file giving one message that names it.
#include "io/mlperf_npy.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/criteo_text.h"
#include "io/npy.h"
#include "io_test_util.h"
#include "npy_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing_io::AppendFlat;
using testing_io::FlatSample;
using testing_io::NpyBytes;
using testing_io::RawBytes;
using testing_io::SharedPath;
using testing_io::WriteFile;
using testing_io::ZipBytes;
using ::testing::HasSubstr;

std::vector<int64_t> Kaggle() { return *CriteoRowsPreset("kaggle"); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// ---------------------------------------------------------------------------------------------
// The parser

TEST(NpyTest, HeaderRoundTripsLikeNumpy) {
  // np.save(f, np.zeros((3, 2), np.float32)) writes this 64-byte header.
  std::string h = EncodeNpyHeader(NpyDtype::kFloat32, {3, 2});
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_THAT(h, HasSubstr("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }"));
  EXPECT_EQ(h.back(), '\n');
  std::string bytes = h + std::string(24, '\0');
  auto a = ParseNpy("x.npy", bytes.data(), bytes.size());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, NpyDtype::kFloat32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_FALSE(a->fortran_order);
  EXPECT_EQ(a->data, bytes.data() + h.size());
  EXPECT_EQ(a->num_bytes, 24);

  for (NpyDtype d : {NpyDtype::kBool, NpyDtype::kUInt8, NpyDtype::kInt32, NpyDtype::kInt64,
                     NpyDtype::kFloat64}) {
    std::string b = EncodeNpyHeader(d, {5}, true) + std::string(5 * NpyDtypeSize(d), '\0');
    auto p = ParseNpy("y.npy", b.data(), b.size());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->dtype, d);
    EXPECT_EQ(p->shape, std::vector<int64_t>{5});
    EXPECT_TRUE(p->fortran_order);
  }
  // A scalar, and a hand-written version 2.0 header with the keys in another order.
  std::string s = EncodeNpyHeader(NpyDtype::kInt64, {}) + std::string(8, '\0');
  auto scalar = ParseNpy("s.npy", s.data(), s.size());
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->num_elements(), 1);
  std::string dict = "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<i4\"}";
  dict.append(128 - 12 - dict.size() - 1, ' ');
  dict += '\n';
  uint32_t len = static_cast<uint32_t>(dict.size());
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + std::string(reinterpret_cast<char*>(&len), 4) +
                   dict + std::string(8, '\0');
  auto p2 = ParseNpy("v2.npy", v2.data(), v2.size());
  ASSERT_TRUE(p2.ok()) << p2.status();
  EXPECT_EQ(p2->dtype, NpyDtype::kInt32);
}

TEST(NpyTest, BadFilesNameTheFileAndTheProblem) {
  const std::string good = EncodeNpyHeader(NpyDtype::kFloat32, {4, 13}) + std::string(208, '\0');
  struct Case {
    std::string bytes, want;
  } cases[] = {
      {"PK\x03\x04 not npy at all", "no \\x93NUMPY magic"},
      {good.substr(0, good.size() - 5), "(truncated)"},
      {good + "xx", "(trailing bytes)"},
      {good.substr(0, 40), "truncated"},
      {EncodeNpyHeader(NpyDtype::kFloat32, {4, 13}).replace(21, 3, ">f4") + std::string(208, 0),
       "big-endian"},
      {EncodeNpyHeader(NpyDtype::kFloat32, {4, 13}).replace(21, 3, "<c8") + std::string(208, 0),
       "'<c8' is not a plain number type"},
      {EncodeNpyHeader(NpyDtype::kFloat32, {4, 13}).replace(12, 5, "dexcr") + std::string(208, 0),
       "unknown key 'dexcr'"},
      {std::string("\x93NUMPY\x07\x00\x10\x00", 10) + std::string(16, ' '), "format version 7.0"},
  };
  for (const Case& c : cases) {
    auto a = ParseNpy("day_0_dense.npy", c.bytes.data(), c.bytes.size());
    ASSERT_FALSE(a.ok()) << c.want;
    EXPECT_TRUE(absl::IsDataLoss(a.status())) << a.status();
    EXPECT_THAT(Message(a.status()), HasSubstr("day_0_dense.npy: "));
    EXPECT_THAT(Message(a.status()), HasSubstr(c.want));
  }
}

// ---------------------------------------------------------------------------------------------
// Days written from the Criteo sample

// The sample as the text reader reads it, plus the raw hex ids of every row.
struct Sample {
  std::vector<FlatSample> rows;
  std::vector<std::vector<int64_t>> raw_ids;  // [row][26], the hex values before reduction
};

Sample ReadSample() {
  Sample s;
  CriteoTextOptions o;
  o.paths = {SharedPath("kaggle_train_head1000.tsv")};
  o.rows_per_feature = Kaggle();
  o.batch_size = 128;
  auto r = CriteoTextReader::Open(o);
  EXPECT_TRUE(r.ok()) << r.status();
  Batch b;
  while (true) {
    auto more = (*r)->Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    AppendFlat(b, &s.rows);
  }
  for (const auto& fields : testing_io::SplitFile(o.paths[0], '\t', false)) {
    std::vector<int64_t> ids;
    for (int k = 0; k < 26; ++k) {
      size_t f = 14 + k;
      ids.push_back(f < fields.size() && !fields[f].empty()
                        ? static_cast<int64_t>(std::strtoull(fields[f].c_str(), nullptr, 16))
                        : 0);
    }
    s.raw_ids.push_back(ids);
  }
  EXPECT_EQ(s.rows.size(), 1000u);
  EXPECT_EQ(s.raw_ids.size(), 1000u);
  return s;
}

class MlperfNpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("tessera_npy_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(int day, const std::string& suffix) {
    return DayFilePath(dir_.string(), day, suffix);
  }

  // Writes rows [begin, end) of `s` as day `day`: dense float32, labels int32 [N, 1], and either
  // one-hot raw hex ids (int64, reduced by the reader) or a multi-hot archive whose feature k
  // holds hot[k] ids per bag: the row's reduced id, then (id + j * 7919) mod rows.
  void WriteDay(const Sample& s, int day, int64_t begin, int64_t end,
                const std::vector<int64_t>& hot = {}) {
    const int64_t n = end - begin;
    std::vector<float> dense;
    std::vector<int32_t> labels;
    std::vector<int64_t> ids;
    for (int64_t i = begin; i < end; ++i) {
      dense.insert(dense.end(), s.rows[i].dense.begin(), s.rows[i].dense.end());
      labels.push_back(static_cast<int32_t>(s.rows[i].label));
      ids.insert(ids.end(), s.raw_ids[i].begin(), s.raw_ids[i].end());
    }
    WriteFile(Path(day, "dense.npy"), NpyBytes(NpyDtype::kFloat32, {n, 13}, RawBytes(dense)));
    WriteFile(Path(day, "labels.npy"), NpyBytes(NpyDtype::kInt32, {n, 1}, RawBytes(labels)));
    if (hot.empty()) {
      WriteFile(Path(day, "sparse.npy"), NpyBytes(NpyDtype::kInt64, {n, 26}, RawBytes(ids)));
      return;
    }
    std::vector<std::pair<std::string, std::string>> members;
    const std::vector<int64_t> rows = Kaggle();
    for (int k = 0; k < 26; ++k) {
      std::vector<int32_t> v;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t id = s.rows[i].bags[k][0];
        for (int64_t j = 0; j < hot[k]; ++j) v.push_back(static_cast<int32_t>((id + j * 7919) % rows[k]));
      }
      members.emplace_back(std::to_string(k) + ".npy",
                           NpyBytes(NpyDtype::kInt32, {n, hot[k]}, RawBytes(v)));
    }
    WriteFile(Path(day, "sparse_multi_hot.npz"), ZipBytes(members));
  }

  MlperfNpyOptions Options(std::vector<int> days) {
    MlperfNpyOptions o;
    o.dir = dir_.string();
    o.days = std::move(days);
    o.rows_per_feature = Kaggle();
    o.batch_size = 64;
    return o;
  }

  static std::vector<FlatSample> Drain(MlperfNpyOptions o) {
    auto r = MlperfNpyReader::Open(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<FlatSample> out;
    if (!r.ok()) return out;
    Batch b;
    while (true) {
      auto more = (*r)->Next(&b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      AppendFlat(b, &out);
    }
    return out;
  }

  absl::Status OpenError(MlperfNpyOptions o) {
    auto r = MlperfNpyReader::Open(std::move(o));
    return r.ok() ? absl::OkStatus() : r.status();
  }

  fs::path dir_;
};

TEST_F(MlperfNpyTest, DaysAsOneStreamMatchTheTsvRowsInEveryShard) {
  Sample s = ReadSample();
  WriteDay(s, 0, 0, 400);
  WriteDay(s, 1, 400, 700);
  WriteDay(s, 2, 700, 1000);
  EXPECT_EQ(Drain(Options({0, 1, 2})), s.rows);
  // Three shards concatenate to the stream, and each is contiguous.
  std::vector<FlatSample> joined;
  for (int shard = 0; shard < 3; ++shard) {
    MlperfNpyOptions o = Options({0, 1, 2});
    o.shard_index = shard;
    o.num_shards = 3;
    o.batch_size = 37;
    std::vector<FlatSample> part = Drain(o);
    EXPECT_EQ(part.size(), shard == 0 ? 333u : 333u + (shard == 2));
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, s.rows);
}

TEST_F(MlperfNpyTest, ValAndTestSplitTheStreamAtCeilHalf) {
  Sample s = ReadSample();
  WriteDay(s, 23, 0, 7);  // 7 rows: val = 4 (ceil), test = 3
  MlperfNpyOptions o = Options({23});
  o.split = MlperfSplit::kVal;
  std::vector<FlatSample> val = Drain(o);
  o.split = MlperfSplit::kTest;
  std::vector<FlatSample> test = Drain(o);
  ASSERT_EQ(val.size(), 4u);
  ASSERT_EQ(test.size(), 3u);
  EXPECT_EQ(val[0], s.rows[0]);
  EXPECT_EQ(test[0], s.rows[4]);
  EXPECT_EQ(test[2], s.rows[6]);
}

TEST_F(MlperfNpyTest, MultiHotArchivesGiveBagsOfTheirWidth) {
  Sample s = ReadSample();
  std::vector<int64_t> hot(26);
  for (int k = 0; k < 26; ++k) hot[k] = 1 + k % 4;
  WriteDay(s, 0, 0, 500, hot);
  WriteDay(s, 1, 500, 1000, hot);
  MlperfNpyOptions o = Options({0, 1});
  o.batch_size = 96;  // batch 5 spans the two days (rows 480..575)
  auto r = MlperfNpyReader::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->multi_hot());
  EXPECT_EQ((*r)->ids_per_bag(), hot);
  std::vector<FlatSample> got = Drain(o);
  ASSERT_EQ(got.size(), 1000u);
  const std::vector<int64_t> rows = Kaggle();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].dense, s.rows[i].dense);
    EXPECT_EQ(got[i].label, s.rows[i].label);
    for (int k = 0; k < 26; ++k) {
      ASSERT_EQ(got[i].bags[k].size(), static_cast<size_t>(hot[k]));
      const int64_t id = s.rows[i].bags[k][0];
      for (int64_t j = 0; j < hot[k]; ++j) {
        EXPECT_EQ(got[i].bags[k][j], (id + j * 7919) % rows[k]) << i << " " << k << " " << j;
      }
    }
  }
}

TEST_F(MlperfNpyTest, NegativeIdsReduceAsNumpyDoes) {
  // Raw tsv_to_npys output stores hex >= 2^31 as negative int32; numpy's % makes them [0, rows).
  std::vector<float> dense(13, 0.5f);
  std::vector<int32_t> labels = {1};
  std::vector<int32_t> ids(26, -7);
  WriteFile(Path(0, "dense.npy"), NpyBytes(NpyDtype::kFloat32, {1, 13}, RawBytes(dense)));
  WriteFile(Path(0, "labels.npy"), NpyBytes(NpyDtype::kInt32, {1}, RawBytes(labels)));
  WriteFile(Path(0, "sparse.npy"), NpyBytes(NpyDtype::kInt32, {1, 26}, RawBytes(ids)));
  std::vector<FlatSample> got = Drain(Options({0}));
  ASSERT_EQ(got.size(), 1u);
  const std::vector<int64_t> rows = Kaggle();
  for (int k = 0; k < 26; ++k) EXPECT_EQ(got[0].bags[k][0], ((-7 % rows[k]) + rows[k]) % rows[k]);
}

TEST_F(MlperfNpyTest, RawIdsStayAsStoredForDynamicTables) {
  // kMlperfRawIds (a dynamic table's feature): int32 ids read as their 32-bit pattern (the hex
  // value), the other features still reduced.
  std::vector<float> dense(13, 0.5f);
  std::vector<int32_t> labels = {1};
  std::vector<int32_t> ids(26, -7);
  ids[1] = 123456789;
  WriteFile(Path(0, "dense.npy"), NpyBytes(NpyDtype::kFloat32, {1, 13}, RawBytes(dense)));
  WriteFile(Path(0, "labels.npy"), NpyBytes(NpyDtype::kInt32, {1}, RawBytes(labels)));
  WriteFile(Path(0, "sparse.npy"), NpyBytes(NpyDtype::kInt32, {1, 26}, RawBytes(ids)));
  MlperfNpyOptions o = Options({0});
  o.rows_per_feature[0] = kMlperfRawIds;
  o.rows_per_feature[1] = kMlperfRawIds;
  std::vector<FlatSample> got = Drain(o);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bags[0][0], int64_t{4294967289});  // uint32(-7)
  EXPECT_EQ(got[0].bags[1][0], 123456789);
  const std::vector<int64_t> rows = Kaggle();
  EXPECT_EQ(got[0].bags[2][0], ((-7 % rows[2]) + rows[2]) % rows[2]);
}

TEST_F(MlperfNpyTest, BadFilesGiveOneMessageNamingTheFile) {
  Sample s = ReadSample();
  WriteDay(s, 0, 0, 100);
  WriteDay(s, 1, 100, 200);
  const std::string dense1 = Path(1, "dense.npy"), labels1 = Path(1, "labels.npy");
  const std::string sparse1 = Path(1, "sparse.npy");
  const std::vector<float> zeros(100 * 13, 0.0f);
  const auto expect = [&](const std::string& file, const std::string& want) {
    absl::Status st = OpenError(Options({0, 1}));
    EXPECT_FALSE(st.ok()) << want;
    EXPECT_THAT(Message(st), HasSubstr(file + ": ")) << st;
    EXPECT_THAT(Message(st), HasSubstr(want)) << st;
    WriteDay(s, 1, 100, 200);  // repair
  };
  // Wrong dtype.
  WriteFile(dense1, NpyBytes(NpyDtype::kFloat64, {50, 13}, std::string(50 * 13 * 8, '\0')));
  expect(dense1, "dtype float64 ('<f8'), dense features must be float32");
  // Shapes that do not agree with the model or the day's other files.
  WriteFile(dense1, NpyBytes(NpyDtype::kFloat32, {100, 12}, std::string(100 * 12 * 4, '\0')));
  expect(dense1, "12 dense columns, the model has 13");
  WriteFile(labels1, NpyBytes(NpyDtype::kInt32, {99, 1}, std::string(99 * 4, '\0')));
  expect(labels1, "99 rows, but " + dense1 + " has 100");
  WriteFile(sparse1, NpyBytes(NpyDtype::kInt32, {100, 25}, std::string(100 * 25 * 4, '\0')));
  expect(sparse1, "25 sparse columns, the model has 26 sparse features");
  WriteFile(sparse1, NpyBytes(NpyDtype::kFloat32, {100, 26}, std::string(100 * 26 * 4, '\0')));
  expect(sparse1, "sparse ids must be int32");
  // Truncated.
  std::string bytes = NpyBytes(NpyDtype::kFloat32, {100, 13}, RawBytes(zeros));
  WriteFile(dense1, bytes.substr(0, bytes.size() - 100));
  expect(dense1, "(truncated)");
  // A day missing.
  fs::remove(labels1);
  expect(labels1, "not found (day 1 of ");
  // A compressed archive (np.savez_compressed) cannot be mapped.
  std::vector<int64_t> hot(26, 1);
  WriteDay(s, 0, 0, 100, hot);
  WriteDay(s, 1, 100, 200, hot);
  std::string zip = testing_io::ReadAll(Path(1, "sparse_multi_hot.npz"));
  const size_t cd = zip.find("PK\x01\x02");
  zip[cd + 10] = 8;  // method: deflate
  WriteFile(Path(1, "sparse_multi_hot.npz"), zip);
  absl::Status st = OpenError(Options({0, 1}));
  EXPECT_THAT(Message(st), HasSubstr(Path(1, "sparse_multi_hot.npz") + ": member 0.npy is compressed"));
  // A truncated archive.
  WriteFile(Path(1, "sparse_multi_hot.npz"), zip.substr(0, zip.size() / 2));
  st = OpenError(Options({0, 1}));
  EXPECT_THAT(Message(st), HasSubstr(Path(1, "sparse_multi_hot.npz") + ": not a valid .npz"));
  // Multi-hot widths that change between days.
  hot[3] = 2;
  WriteDay(s, 1, 100, 200, hot);
  st = OpenError(Options({0, 1}));
  EXPECT_THAT(Message(st), HasSubstr(Path(1, "sparse_multi_hot.npz") + ":3.npy: 2 ids per bag, but day 0 has 1"));
}

TEST_F(MlperfNpyTest, ABadLabelIsDataLossNamingFileAndRow) {
  Sample s = ReadSample();
  WriteDay(s, 0, 0, 100);
  std::vector<int32_t> labels(100, 0);
  labels[70] = 2;
  WriteFile(Path(0, "labels.npy"), NpyBytes(NpyDtype::kInt32, {100, 1}, RawBytes(labels)));
  auto r = MlperfNpyReader::Open(Options({0}));
  ASSERT_TRUE(r.ok()) << r.status();
  Batch b;
  auto first = (*r)->Next(&b);
  ASSERT_TRUE(first.ok());
  auto second = (*r)->Next(&b);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsDataLoss(second.status()));
  EXPECT_THAT(Message(second.status()), HasSubstr(Path(0, "labels.npy") + ": row 70: label 2"));
}

TEST(MlperfDaysTest, DayListsAndSplitsParse) {
  EXPECT_EQ(*ParseDayList("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*ParseDayList("23"), std::vector<int>{23});
  EXPECT_EQ(*ParseDayList("5, 0-1"), (std::vector<int>{5, 0, 1}));
  for (const char* bad : {"", "3-1", "a", "1,,2", "-2"}) {
    EXPECT_FALSE(ParseDayList(bad).ok()) << bad;
  }
  EXPECT_EQ(*ParseMlperfSplit("val"), MlperfSplit::kVal);
  EXPECT_FALSE(ParseMlperfSplit("train").ok());
  EXPECT_EQ(DayFilePath("/d/", 3, "dense.npy"), "/d/day_3_dense.npy");
}

}  // namespace
}  // namespace tessera
