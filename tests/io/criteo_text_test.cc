#include "io/criteo_text.h"

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io_test_util.h"

namespace tessera {
namespace {

using testing_io::AppendFlat;
using testing_io::FlatSample;
using testing_io::SharedPath;
using testing_io::SplitFile;
using testing_io::TempFile;

std::vector<int64_t> Kaggle() { return *CriteoRowsPreset("kaggle"); }
std::vector<int64_t> NoReduction() { return std::vector<int64_t>(26, int64_t{1} << 32); }

CriteoTextOptions Opts(std::vector<std::string> paths, std::vector<int64_t> rows,
                       CriteoTextFormat format = CriteoTextFormat::kTsv) {
  CriteoTextOptions o;
  o.paths = std::move(paths);
  o.rows_per_feature = std::move(rows);
  o.format = format;
  o.batch_size = 128;
  return o;
}

std::vector<FlatSample> ReadAllSamples(const CriteoTextOptions& o) {
  auto reader = CriteoTextReader::Open(o);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<FlatSample> out;
  if (!reader.ok()) return out;
  Batch b;
  while (true) {
    auto more = (*reader)->Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    EXPECT_LE(b.batch_size, o.batch_size);
    AppendFlat(b, &out);
  }
  return out;
}

// The reference preprocessing, from the naive split: what every reader value must equal.
void ExpectMatchesReference(const std::vector<std::vector<std::string>>& ref,
                            const std::vector<FlatSample>& got, const std::vector<int64_t>& rows) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t r = 0; r < ref.size(); ++r) {
    std::vector<std::string> f = ref[r];
    f.resize(40);  // short rows: the rest is empty
    EXPECT_EQ(got[r].label, static_cast<float>(std::strtod(f[0].c_str(), nullptr))) << r;
    for (int j = 0; j < 13; ++j) {
      double x = f[1 + j].empty() ? 0.0 : std::strtod(f[1 + j].c_str(), nullptr);
      float want = static_cast<float>(std::log1p(std::max(x, 0.0)));
      ASSERT_EQ(got[r].dense[j], want) << "row " << r << " I" << j + 1 << " '" << f[1 + j] << "'";
    }
    for (int k = 0; k < 26; ++k) {
      const std::string& h = f[14 + k];
      uint64_t v = h.empty() ? 0 : std::strtoull(h.c_str(), nullptr, 16);
      ASSERT_EQ(got[r].bags[k], std::vector<int64_t>{static_cast<int64_t>(v % rows[k])})
          << "row " << r << " C" << k + 1 << " '" << h << "'";
    }
  }
}

// Distinct non-empty values per categorical column, read through the reader with no reduction
// (so an id is the raw hash; empty fields read as 0 and no raw value in these files is 0).
std::vector<int64_t> DistinctPerColumn(const std::vector<FlatSample>& samples,
                                       std::vector<int64_t>* zeros) {
  std::vector<int64_t> distinct(26);
  zeros->assign(26, 0);
  for (int k = 0; k < 26; ++k) {
    std::set<int64_t> seen;
    for (const FlatSample& s : samples) {
      if (s.bags[k][0] == 0) {
        ++(*zeros)[k];
      } else {
        seen.insert(s.bags[k][0]);
      }
    }
    distinct[k] = static_cast<int64_t>(seen.size());
  }
  return distinct;
}

int64_t Positives(const std::vector<FlatSample>& s) {
  int64_t n = 0;
  for (const FlatSample& x : s) n += x.label == 1.0f;
  return n;
}

TEST(CriteoTextTest, Head1000FactsFromSourcesMd) {
  const std::string path = SharedPath("kaggle_train_head1000.tsv");
  const std::string raw = testing_io::ReadAll(path);
  ASSERT_FALSE(raw.empty());
  EXPECT_NE(raw.back(), '\n') << "fixture should end without a newline";

  auto ref = SplitFile(path, '\t', false);
  ASSERT_EQ(ref.size(), 1000u);
  int n40 = 0, n38 = 0, n37 = 0;
  std::vector<int64_t> empty(40, 0);
  for (auto f : ref) {
    n40 += f.size() == 40;
    n38 += f.size() == 38;
    n37 += f.size() == 37;
    f.resize(40);
    for (int c = 0; c < 40; ++c) empty[c] += f[c].empty();
  }
  EXPECT_EQ(n40, 502);
  EXPECT_EQ(n38, 469);
  EXPECT_EQ(n37, 29);
  const std::vector<int64_t> empty_i = {458, 0, 230, 213, 41, 248, 39, 0, 39, 458, 39, 775, 213};
  const std::vector<int64_t> empty_c = {0, 0, 33, 33, 0, 122, 0,   0,  0,   0, 0,  33,  0,
                                        0, 0, 33, 0,  0, 498, 498, 33, 815, 0, 33, 498, 498};
  EXPECT_EQ(std::vector<int64_t>(empty.begin() + 1, empty.begin() + 14), empty_i);
  EXPECT_EQ(std::vector<int64_t>(empty.begin() + 14, empty.end()), empty_c);

  // Every value the reader produces equals the reference preprocessing.
  std::vector<FlatSample> got = ReadAllSamples(Opts({path}, Kaggle()));
  ExpectMatchesReference(ref, got, Kaggle());
  EXPECT_EQ(Positives(got), 205);

  // Distinct values and empty counts of C1..C26 straight from the reader.
  std::vector<FlatSample> unreduced = ReadAllSamples(Opts({path}, NoReduction()));
  std::vector<int64_t> zeros;
  EXPECT_EQ(DistinctPerColumn(unreduced, &zeros),
            (std::vector<int64_t>{53, 191, 674, 566, 22,  6,   696, 28,  2, 531, 605, 648, 552,
                                  15, 518, 619, 9,   359, 123, 3,   633, 5, 12,  420, 28,  321}));
  EXPECT_EQ(zeros, empty_c);
  for (const FlatSample& s : got) {
    for (int k = 0; k < 26; ++k) EXPECT_LT(s.bags[k][0], Kaggle()[k]);
  }
}

struct FileFacts {
  std::string name;
  CriteoTextFormat format;
  int64_t rows, positives;
  std::vector<int64_t> distinct;
};

TEST(CriteoTextTest, OtherSamplesFromSourcesMd) {
  const std::vector<FileFacts> files = {
      {"paddlerec_sample_train.tsv", CriteoTextFormat::kTsv, 100, 29, {16, 58, 92, 89, 7,  5,  93,
                                                                       13, 2,  70, 87, 92, 84, 11,
                                                                       95, 92, 9,  85, 14, 3,  92,
                                                                       3,  10, 77, 13, 44}},
      {"paddlerec_sample_test.tsv", CriteoTextFormat::kTsv, 100, 36, {14, 57, 91, 83, 11, 6,  93,
                                                                      14, 2,  72, 89, 88, 86, 6,
                                                                      89, 88, 9,  76, 21, 3,  88,
                                                                      3,  9,  67, 14, 51}},
      {"deepctr_criteo_sample.csv", CriteoTextFormat::kCsv, 200, 49, {27,  92, 171, 156, 12,  6,
                                                                      183, 19, 2,   142, 173, 169,
                                                                      166, 14, 170, 167, 9,   127,
                                                                      43,  3,  168, 5,   10,  124,
                                                                      19,  89}},
  };
  for (const FileFacts& ff : files) {
    SCOPED_TRACE(ff.name);
    const std::string path = SharedPath(ff.name);
    const bool csv = ff.format == CriteoTextFormat::kCsv;
    std::vector<FlatSample> got = ReadAllSamples(Opts({path}, Kaggle(), ff.format));
    EXPECT_EQ(static_cast<int64_t>(got.size()), ff.rows);
    EXPECT_EQ(Positives(got), ff.positives);
    ExpectMatchesReference(SplitFile(path, csv ? ',' : '\t', csv), got, Kaggle());
    std::vector<int64_t> zeros;
    EXPECT_EQ(DistinctPerColumn(ReadAllSamples(Opts({path}, NoReduction(), ff.format)), &zeros),
              ff.distinct);
  }
}

TEST(CriteoTextTest, BatchingAndLayout) {
  CriteoTextOptions o = Opts({SharedPath("kaggle_train_head1000.tsv")}, Kaggle());
  o.batch_size = 64;
  auto reader = CriteoTextReader::Open(o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->num_records(), 1000);
  Batch b;
  std::vector<int64_t> sizes;
  while (*(*reader)->Next(&b)) {
    sizes.push_back(b.batch_size);
    EXPECT_EQ(b.num_dense, 13);
    EXPECT_EQ(b.sparse.num_features, 26);
    EXPECT_EQ(b.dense.size(), static_cast<size_t>(13 * b.batch_size));
    for (size_t i = 0; i < b.sparse.offsets.size(); ++i) EXPECT_EQ(b.sparse.offsets[i], (int64_t)i);
  }
  EXPECT_EQ(sizes.size(), 16u);
  EXPECT_EQ(sizes.back(), 1000 - 15 * 64);
  EXPECT_EQ((*reader)->stats().records, 1000);
  // At the end the batch is left untouched.
  Batch before = b;
  EXPECT_FALSE(*(*reader)->Next(&b));
  EXPECT_EQ(b.labels, before.labels);
  // Same stream regardless of batch size; Rewind replays it.
  CriteoTextOptions big = o;
  big.batch_size = 1000;
  std::vector<FlatSample> whole = ReadAllSamples(big);
  ASSERT_TRUE((*reader)->Rewind().ok());
  std::vector<FlatSample> again;
  while (*(*reader)->Next(&b)) AppendFlat(b, &again);
  EXPECT_EQ(again, whole);
  EXPECT_EQ(ReadAllSamples(o), whole);
}

TEST(CriteoTextTest, ShardsConcatenateToTheWholeStream) {
  CriteoTextOptions o =
      Opts({SharedPath("kaggle_train_head1000.tsv"), SharedPath("paddlerec_sample_train.tsv"),
            SharedPath("paddlerec_sample_test.tsv")},
           Kaggle());
  o.batch_size = 100;
  std::vector<FlatSample> whole = ReadAllSamples(o);
  ASSERT_EQ(whole.size(), 1200u);
  for (int shards : {2, 3, 7, 13}) {
    std::vector<FlatSample> joined;
    int64_t min_size = 1 << 30, max_size = 0;
    for (int s = 0; s < shards; ++s) {
      CriteoTextOptions so = o;
      so.shard_index = s;
      so.num_shards = shards;
      std::vector<FlatSample> part = ReadAllSamples(so);
      auto r = CriteoTextReader::Open(so);
      EXPECT_EQ((*r)->num_records(), static_cast<int64_t>(part.size()));
      EXPECT_EQ((*r)->total_records(), 1200);
      min_size = std::min<int64_t>(min_size, part.size());
      max_size = std::max<int64_t>(max_size, part.size());
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole) << shards << " shards";
    EXPECT_LE(max_size - min_size, 1);
  }
}

TEST(CriteoTextTest, QuirksEmptyNegativeShortRowsCrlfBlankLinesNoFinalNewline) {
  // Line 1: full row with negative integers; line 2: short row; line 3: blank; line 4: CRLF;
  // line 5: label only; no final newline.
  std::string full = "1\t-5\t0\t3";
  for (int j = 3; j < 13; ++j) full += "\t";
  full += "\t00000001\tFFFFFFFF";
  for (int k = 2; k < 26; ++k) full += "\tA";
  TempFile f(full + "\n0\t7\n\n1\t\t2\r\n0");
  std::vector<int64_t> rows(26, 1000);
  std::vector<FlatSample> got = ReadAllSamples(Opts({f.path()}, rows));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].label, 1.0f);
  EXPECT_EQ(got[0].dense[0], 0.0f);  // -5 -> log1p(max(-5, 0)) = 0
  EXPECT_EQ(got[0].dense[2], static_cast<float>(std::log1p(3.0)));
  EXPECT_EQ(got[0].bags[0][0], 1);
  EXPECT_EQ(got[0].bags[1][0], 0xFFFFFFFFll % 1000);
  EXPECT_EQ(got[0].bags[2][0], 10);
  EXPECT_EQ(got[1].dense[0], static_cast<float>(std::log1p(7.0)));
  for (int j = 1; j < 13; ++j) EXPECT_EQ(got[1].dense[j], 0.0f);
  for (int k = 0; k < 26; ++k) EXPECT_EQ(got[1].bags[k][0], 0);
  EXPECT_EQ(got[2].dense[1], static_cast<float>(std::log1p(2.0)));
  EXPECT_EQ(got[3].label, 0.0f);
  // Line numbers count blank lines: a bad record after them names its physical line.
  TempFile g("0\t1\n\n\n1\tx\n");
  auto r = CriteoTextReader::Open(Opts({g.path()}, rows));
  ASSERT_TRUE(r.ok());
  Batch b;
  auto st = (*r)->Next(&b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), g.path() + ":4: field I1: 'x' is not an integer");
}

TEST(CriteoTextTest, CsvIntegralFloatsAndHeader) {
  TempFile f(
      "label,I1,I2,I3,I4,I5,I6,I7,I8,I9,I10,I11,I12,I13,C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,C11,C12,"
      "C13,C14,C15,C16,C17,C18,C19,C20,C21,C22,C23,C24,C25,C26\n"
      "1.0,12.0,-3,7.,,0.000,,,,,,,,,0a\n0,5\n",
      ".csv");
  std::vector<int64_t> rows(26, 100);
  std::vector<FlatSample> got = ReadAllSamples(Opts({f.path()}, rows, CriteoTextFormat::kCsv));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].label, 1.0f);
  EXPECT_EQ(got[0].dense[0], static_cast<float>(std::log1p(12.0)));
  EXPECT_EQ(got[0].dense[1], 0.0f);
  EXPECT_EQ(got[0].dense[2], static_cast<float>(std::log1p(7.0)));
  EXPECT_EQ(got[0].bags[0][0], 10);
  EXPECT_EQ(got[1].dense[0], static_cast<float>(std::log1p(5.0)));

  TempFile bad_header("label,I1,I2\n0,1,2\n", ".csv");
  auto r = CriteoTextReader::Open(Opts({bad_header.path()}, rows, CriteoTextFormat::kCsv));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), bad_header.path() +
                                      ":1: CSV header has 3 columns, expected 40 "
                                      "(label,I1..I13,C1..C26)");
}

struct BadCase {
  std::string name;
  CriteoTextFormat format;
  std::string line;
  std::string message;  // after "path:3: "
};

std::string Row(char sep, const std::vector<std::pair<int, std::string>>& set, int fields = 40) {
  std::vector<std::string> f(fields);
  f[0] = "0";
  for (auto& [i, v] : set) f[i] = v;
  std::string s;
  for (int i = 0; i < fields; ++i) s += (i ? std::string(1, sep) : "") + f[i];
  return s;
}

TEST(CriteoTextTest, LeadingUtf8ByteOrderMarkIsSkipped) {
  const std::string bom = "\xEF\xBB\xBF";
  std::vector<int64_t> rows(26, 100);
  const std::string tsv = Row('\t', {{0, "1"}, {1, "4"}, {14, "0a"}});
  TempFile t(bom + tsv + "\n" + Row('\t', {}) + "\n");
  std::vector<FlatSample> got = ReadAllSamples(Opts({t.path()}, rows));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].label, 1.0f);
  EXPECT_EQ(got[0].dense[0], static_cast<float>(std::log1p(4.0)));
  EXPECT_EQ(got[0].bags[0][0], 10);
  // CSV with a header after the mark, and CSV without a header.
  TempFile h(bom + "label,I1,I2,I3,I4,I5,I6,I7,I8,I9,I10,I11,I12,I13,C1,C2,C3,C4,C5,C6,C7,C8,C9,"
                   "C10,C11,C12,C13,C14,C15,C16,C17,C18,C19,C20,C21,C22,C23,C24,C25,C26\n1,2\n",
             ".csv");
  got = ReadAllSamples(Opts({h.path()}, rows, CriteoTextFormat::kCsv));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].label, 1.0f);
  TempFile c(bom + "0,3\n", ".csv");
  got = ReadAllSamples(Opts({c.path()}, rows, CriteoTextFormat::kCsv));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dense[0], static_cast<float>(std::log1p(3.0)));
  // Only at the start of a file: a mark inside is data (a bad label on line 2).
  TempFile m(tsv + "\n" + bom + tsv + "\n");
  auto r = CriteoTextReader::Open(Opts({m.path()}, rows));
  ASSERT_TRUE(r.ok());
  Batch b;
  auto st = (*r)->Next(&b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), m.path() + ":2: field label: '\\xef\\xbb\\xbf1' is not 0 or 1");
}

TEST(CriteoTextTest, EveryBadRecordKindInBothPolicies) {
  const auto kTsv = CriteoTextFormat::kTsv, kCsv = CriteoTextFormat::kCsv;
  const std::vector<BadCase> cases = {
      {"non-numeric integer", kTsv, Row('\t', {{3, "abc"}}), "field I3: 'abc' is not an integer"},
      {"float in tsv", kTsv, Row('\t', {{2, "12.0"}}), "field I2: '12.0' is not an integer"},
      {"non-integral float in csv", kCsv, Row(',', {{5, "12.5"}}),
       "field I5: '12.5' is not an integer"},
      {"sign only", kTsv, Row('\t', {{1, "-"}}), "field I1: '-' is not an integer"},
      {"int64 overflow", kTsv, Row('\t', {{13, "99999999999999999999"}}),
       "field I13: '99999999999999999999' is out of range for a 64-bit integer"},
      {"non-hex categorical", kTsv, Row('\t', {{14, "zz12ab34"}}),
       "field C1: 'zz12ab34' is not a hex id of 1 to 8 digits"},
      {"nine hex digits", kTsv, Row('\t', {{39, "123456789"}}),
       "field C26: '123456789' is not a hex id of 1 to 8 digits"},
      {"label 2", kTsv, Row('\t', {{0, "2"}}), "field label: '2' is not 0 or 1"},
      {"empty label", kTsv, Row('\t', {{0, ""}}), "field label: '' is not 0 or 1"},
      {"label 0.5 in csv", kCsv, Row(',', {{0, "0.5"}}), "field label: '0.5' is not 0 or 1"},
      {"too many fields", kTsv, Row('\t', {}, 42), "42 fields, expected at most 40"},
      // Input bytes are escaped in messages: no control byte reaches the terminal.
      {"control bytes", kTsv, Row('\t', {{2, std::string("1\x01\x1b[2J\x7f", 7)}}),
       "field I2: '1\\x01\\x1b[2J\\x7f' is not an integer"},
      {"binary label", kTsv, Row('\t', {{0, std::string("\0\xff", 2)}}),
       "field label: '\\x00\\xff' is not 0 or 1"},
  };
  std::vector<int64_t> rows(26, 1000);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const char sep = c.format == kTsv ? '\t' : ',';
    const std::string good = Row(sep, {{1, "1"}, {14, "ab"}});
    // Line 1 good, line 2 good, line 3 bad, line 4 good.
    TempFile f(good + "\n" + good + "\n" + c.line + "\n" + good + "\n");
    const std::string want = f.path() + ":3: " + c.message;

    CriteoTextOptions o = Opts({f.path()}, rows, c.format);
    o.batch_size = 2;
    auto r = CriteoTextReader::Open(o);
    ASSERT_TRUE(r.ok()) << r.status();
    Batch b;
    auto first = (*r)->Next(&b);
    ASSERT_TRUE(first.ok() && *first);  // the two good lines before it
    auto st = (*r)->Next(&b);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(st.status().message(), want);

    o.on_bad_record = BadRecordPolicy::kSkip;
    o.max_bad_records = 1;
    auto skip = CriteoTextReader::Open(o);
    ASSERT_TRUE(skip.ok());
    int64_t n = 0;
    while (true) {
      auto more = (*skip)->Next(&b);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      n += b.batch_size;
    }
    EXPECT_EQ(n, 3);
    EXPECT_EQ((*skip)->stats().records, 3);
    EXPECT_EQ((*skip)->stats().bad_records_skipped, 1);
    ASSERT_EQ((*skip)->skipped_messages().size(), 1u);
    EXPECT_EQ((*skip)->skipped_messages()[0], want);
    // The cap is per pass: a second pass skips the same record again without failing.
    ASSERT_TRUE((*skip)->Rewind().ok());
    while (*(*skip)->Next(&b)) {
    }
    EXPECT_EQ((*skip)->stats().bad_records_skipped, 2);

    // Past the cap it fails, naming the last bad record.
    TempFile two(good + "\n" + c.line + "\n" + c.line + "\n");
    o.paths = {two.path()};
    auto capped = CriteoTextReader::Open(o);
    ASSERT_TRUE(capped.ok());
    absl::Status last;
    while (true) {
      auto more = (*capped)->Next(&b);
      if (!more.ok()) {
        last = more.status();
        break;
      }
      ASSERT_TRUE(*more) << "expected to fail past the cap";
    }
    EXPECT_EQ(last.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(last.message(), "more than max_bad_records = 1 bad records in one pass; the last: " +
                                  two.path() + ":3: " + c.message);
  }
}

TEST(CriteoTextTest, ParseLineReducesWithExactModulo) {
  // Lemire's fastmod against %, at the edges of the table sizes we accept.
  const std::vector<int64_t> sizes = {
      1, 2, 3, 7, 1460, 10131227, 40000000, (1ll << 31) - 1, 1ll << 31, (1ll << 32) - 1, 1ll << 32};
  const std::vector<uint32_t> values = {0,          1,          2,          6,          7,
                                        1459,       1460,       0x7FFFFFFF, 0x80000000, 0xFFFFFFFE,
                                        0xFFFFFFFF, 0x9727dd16, 0x68fd1e64};
  for (int64_t size : sizes) {
    std::vector<int64_t> rows(26, size);
    for (uint32_t v : values) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%x", v);
      std::string line = "1";
      for (int i = 1; i < 40; ++i) line += std::string("\t") + (i > 13 ? hex : "1");
      CriteoRecord rec;
      ASSERT_TRUE(ParseCriteoLine(line, CriteoTextFormat::kTsv, rows.data(), &rec).ok());
      for (int k = 0; k < 26; ++k) {
        ASSERT_EQ(rec.ids[k], static_cast<uint32_t>(v % static_cast<uint64_t>(size)))
            << v << " mod " << size;
      }
      EXPECT_EQ(rec.dense[0], static_cast<float>(std::log1p(1.0)));
    }
  }
  // Large integers take log1p directly (beyond the small-value table).
  std::string line = "0\t16384\t893008\t9223372036854775807";
  CriteoRecord rec;
  std::vector<int64_t> rows(26, 10);
  ASSERT_TRUE(ParseCriteoLine(line, CriteoTextFormat::kTsv, rows.data(), &rec).ok());
  EXPECT_EQ(rec.dense[0], static_cast<float>(std::log1p(16384.0)));
  EXPECT_EQ(rec.dense[1], static_cast<float>(std::log1p(893008.0)));
  EXPECT_EQ(rec.dense[2], static_cast<float>(std::log1p(9223372036854775807.0)));
}

TEST(CriteoTextTest, OptionErrors) {
  const std::string path = SharedPath("paddlerec_sample_train.tsv");
  CriteoTextOptions o = Opts({path}, Kaggle());
  o.rows_per_feature.pop_back();
  EXPECT_EQ(CriteoTextReader::Open(o).status().message(),
            "rows_per_feature has 25 values, expected 26 (one per categorical column C1..C26)");
  o = Opts({path}, Kaggle());
  o.rows_per_feature[4] = 0;
  EXPECT_EQ(CriteoTextReader::Open(o).status().message(),
            "rows_per_feature[4] (C5) = 0, expected 1..2^32");
  o = Opts({path}, Kaggle());
  o.shard_index = 2;
  o.num_shards = 2;
  EXPECT_EQ(CriteoTextReader::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Opts({path + ".missing"}, Kaggle());
  auto r = CriteoTextReader::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path + ".missing"), std::string::npos);
  o = Opts({}, Kaggle());
  EXPECT_EQ(CriteoTextReader::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  // An empty file is a valid stream of no records.
  TempFile empty("");
  auto e = CriteoTextReader::Open(Opts({empty.path()}, Kaggle()));
  ASSERT_TRUE(e.ok());
  Batch b;
  EXPECT_FALSE(*(*e)->Next(&b));
}

TEST(CriteoTextTest, RowsPresets) {
  auto kaggle = CriteoRowsPreset("kaggle");
  ASSERT_TRUE(kaggle.ok());
  ASSERT_EQ(kaggle->size(), 26u);
  EXPECT_EQ(std::accumulate(kaggle->begin(), kaggle->end(), int64_t{0}), 33762577);
  auto tb = CriteoRowsPreset("terabyte");
  ASSERT_TRUE(tb.ok());
  ASSERT_EQ(tb->size(), 26u);
  EXPECT_EQ(std::accumulate(tb->begin(), tb->end(), int64_t{0}), 204184588);
  EXPECT_EQ(CriteoRowsPreset("kagle").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
