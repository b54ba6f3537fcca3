// The gzip reader against the text reader on the same lines (compressed here with zlib), in
// small chunks on several parser threads; sharding by whole files; bad records, truncated and
// corrupt streams; and `convert` from .gz giving the same bytes as from the text.
#include "io/criteo_gzip.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/binary_format.h"
#include "io/criteo_text.h"
#include "io_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing_io::AppendFlat;
using testing_io::FlatSample;
using testing_io::ReadAll;
using testing_io::SharedPath;
using ::testing::HasSubstr;

std::vector<int64_t> Kaggle() { return *CriteoRowsPreset("kaggle"); }

// Writes `text` gzip-compressed; `members` > 1 writes that many concatenated gzip members.
void WriteGzip(const std::string& path, const std::string& text, int members = 1) {
  std::remove(path.c_str());
  const size_t step = text.size() / members + 1;
  for (int m = 0; m < members; ++m) {
    gzFile gz = gzopen(path.c_str(), "ab6");
    ASSERT_NE(gz, nullptr);
    const size_t begin = std::min(text.size(), m * step);
    const size_t len = std::min(text.size() - begin, step);
    if (len > 0) ASSERT_EQ(gzwrite(gz, text.data() + begin, static_cast<unsigned>(len)), int(len));
    ASSERT_EQ(gzclose(gz), Z_OK);
  }
}

// Lines [begin, end) of `text` (each with its '\n', but the last line of `text` may have none).
std::string Lines(const std::string& text, int begin, int end) {
  const auto after = [&](size_t from) {
    size_t nl = text.find('\n', from);
    return nl == std::string::npos ? text.size() : nl + 1;
  };
  size_t a = 0;
  for (int i = 0; i < begin; ++i) a = after(a);
  size_t b = a;
  for (int i = begin; i < end; ++i) b = after(b);
  return text.substr(a, b - a);
}

std::vector<FlatSample> DrainReader(BatchReader& r) {
  std::vector<FlatSample> out;
  Batch b;
  while (true) {
    auto more = r.Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    AppendFlat(b, &out);
  }
  return out;
}

class CriteoGzipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("tessera_gz_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    tsv_ = SharedPath("kaggle_train_head1000.tsv");
    text_ = ReadAll(tsv_);
    CriteoTextOptions o;
    o.paths = {tsv_};
    o.rows_per_feature = Kaggle();
    o.batch_size = 100;
    auto r = CriteoTextReader::Open(o);
    ASSERT_TRUE(r.ok()) << r.status();
    expected_ = DrainReader(**r);
    ASSERT_EQ(expected_.size(), 1000u);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) { return (dir_ / name).string(); }

  CriteoGzipOptions Options(std::vector<std::string> paths) {
    CriteoGzipOptions o;
    o.paths = std::move(paths);
    o.rows_per_feature = Kaggle();
    o.batch_size = 77;
    o.chunk_bytes = 5000;  // ~20 lines: many chunks, many out-of-order parses
    o.parse_threads = 3;
    o.max_chunks_in_flight = 5;
    return o;
  }

  std::vector<FlatSample> Drain(CriteoGzipOptions o) {
    auto r = CriteoGzipReader::Open(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? DrainReader(**r) : std::vector<FlatSample>{};
  }

  // The first error of a full pass.
  absl::Status PassError(CriteoGzipOptions o) {
    auto r = CriteoGzipReader::Open(std::move(o));
    if (!r.ok()) return r.status();
    Batch b;
    while (true) {
      auto more = (*r)->Next(&b);
      if (!more.ok()) return more.status();
      if (!*more) return absl::OkStatus();
    }
  }

  fs::path dir_;
  std::string tsv_, text_;
  std::vector<FlatSample> expected_;
};

TEST_F(CriteoGzipTest, DaysMatchTheTextReaderAndRewindRepeatsThem) {
  WriteGzip(Path("day_0.gz"), Lines(text_, 0, 400));
  WriteGzip(Path("day_1.gz"), Lines(text_, 400, 650), 3);  // multi-member
  WriteGzip(Path("day_2.gz"), Lines(text_, 650, 1000));
  auto r = CriteoGzipReader::Open(Options({Path("day_0.gz"), Path("day_1.gz"), Path("day_2.gz")}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(DrainReader(**r), expected_);
  EXPECT_EQ((*r)->stats().records, 1000);
  EXPECT_EQ((*r)->text_bytes(), static_cast<int64_t>(text_.size()));
  ASSERT_TRUE((*r)->Rewind().ok());
  EXPECT_EQ(DrainReader(**r), expected_);
  // One big chunk and one parser; the sample's last line has no newline.
  ASSERT_NE(text_.back(), '\n');
  WriteGzip(Path("all.gz"), text_);
  CriteoGzipOptions o = Options({Path("all.gz")});
  o.chunk_bytes = 1 << 20;
  o.parse_threads = 1;
  EXPECT_EQ(Drain(o), expected_);
}

TEST_F(CriteoGzipTest, ShardsReadWholeFilesRoundRobin) {
  WriteGzip(Path("day_0.gz"), Lines(text_, 0, 300));
  WriteGzip(Path("day_1.gz"), Lines(text_, 300, 500));
  WriteGzip(Path("day_2.gz"), Lines(text_, 500, 1000));
  CriteoGzipOptions o = Options({Path("day_0.gz"), Path("day_1.gz"), Path("day_2.gz")});
  o.num_shards = 2;
  std::vector<FlatSample> s0 = Drain(o);
  o.shard_index = 1;
  std::vector<FlatSample> s1 = Drain(o);
  std::vector<FlatSample> want0(expected_.begin(), expected_.begin() + 300);
  want0.insert(want0.end(), expected_.begin() + 500, expected_.end());
  EXPECT_EQ(s0, want0);
  EXPECT_EQ(s1, std::vector<FlatSample>(expected_.begin() + 300, expected_.begin() + 500));
}

TEST_F(CriteoGzipTest, BadRecordsNameTheFileAndLine) {
  std::string text = Lines(text_, 0, 500) + "\n" + "2\t1\t2\n" + Lines(text_, 500, 1000);
  WriteGzip(Path("bad.gz"), text);
  absl::Status st = PassError(Options({Path("bad.gz")}));
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(Path("bad.gz") + ":502: field label: '2'"));
  CriteoGzipOptions skip = Options({Path("bad.gz")});
  skip.on_bad_record = BadRecordPolicy::kSkip;
  auto r = CriteoGzipReader::Open(skip);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DrainReader(**r), expected_);
  EXPECT_EQ((*r)->stats().bad_records_skipped, 1);
  skip.max_bad_records = 0;
  st = PassError(skip);
  EXPECT_THAT(std::string(st.message()), HasSubstr("more than max_bad_records = 0"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("bad.gz:502"));
}

TEST_F(CriteoGzipTest, TruncatedCorruptAndMissingFilesAreOneMessageNamingThem) {
  WriteGzip(Path("day_0.gz"), text_);
  std::string gz = ReadAll(Path("day_0.gz"));
  {
    std::FILE* f = std::fopen(Path("cut.gz").c_str(), "wb");
    std::fwrite(gz.data(), 1, gz.size() * 2 / 3, f);
    std::fclose(f);
  }
  absl::Status st = PassError(Options({Path("day_0.gz"), Path("cut.gz")}));
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(Path("cut.gz") + ": truncated gzip stream"));

  std::string bad = gz;
  for (size_t i = bad.size() / 3; i < bad.size() / 3 + 64; ++i) bad[i] = static_cast<char>(~bad[i]);
  {
    std::FILE* f = std::fopen(Path("rot.gz").c_str(), "wb");
    std::fwrite(bad.data(), 1, bad.size(), f);
    std::fclose(f);
  }
  st = PassError(Options({Path("rot.gz")}));
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr(Path("rot.gz") + ":"));

  st = PassError(Options({Path("day_0.gz"), Path("day_9.gz")}));
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(Path("day_9.gz") + ": cannot open"));
}

TEST_F(CriteoGzipTest, ConvertFromGzipWritesTheSameBytesAsFromText) {
  WriteGzip(Path("day_0.gz"), Lines(text_, 0, 600));
  WriteGzip(Path("day_1.gz"), Lines(text_, 600, 1000));
  CriteoTextOptions o;
  o.rows_per_feature = Kaggle();
  o.paths = {tsv_};
  auto from_text = ConvertCriteoTextToBinary(o, Path("text.bin"));
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  o.paths = {Path("day_0.gz"), Path("day_1.gz")};
  auto from_gz = ConvertCriteoTextToBinary(o, Path("gz.bin"));
  ASSERT_TRUE(from_gz.ok()) << from_gz.status();
  EXPECT_EQ(from_gz->records_written, 1000);
  EXPECT_TRUE(ReadAll(Path("text.bin")) == ReadAll(Path("gz.bin")));
}

}  // namespace
}  // namespace tessera
