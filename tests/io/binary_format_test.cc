#include "io/binary_format.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io_test_util.h"

namespace tessera {
namespace {

using testing_io::AppendFlat;
using testing_io::FlatSample;
using testing_io::SharedPath;
using testing_io::TempFile;

std::vector<int64_t> Kaggle() { return *CriteoRowsPreset("kaggle"); }

std::string TempPath(const std::string& name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += "/";
  return dir + "tessera_bin_" + std::to_string(getpid()) + "_" + name;
}

CriteoTextOptions Text(std::vector<std::string> paths) {
  CriteoTextOptions o;
  o.paths = std::move(paths);
  o.rows_per_feature = Kaggle();
  o.batch_size = 100;
  return o;
}

template <typename Reader>
std::vector<FlatSample> Drain(Reader& r) {
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

class BinaryFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("head1000.bin");
    auto stats = ConvertCriteoTextToBinary(Text({SharedPath("kaggle_train_head1000.tsv")}), path_);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->records_written, 1000);
    EXPECT_EQ(stats->bad_records_skipped, 0);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(BinaryFormatTest, HeaderDescribesTheFile) {
  auto info = ReadBinaryHeader(path_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version, kBinaryVersion);
  EXPECT_EQ(info->num_records, 1000);
  EXPECT_EQ(info->num_dense, 13);
  EXPECT_EQ(info->num_sparse, 26);
  EXPECT_EQ(info->record_bytes, 160);
  EXPECT_EQ(info->header_bytes, 4096);
  EXPECT_EQ(info->rows_per_feature, Kaggle());
  std::string raw = testing_io::ReadAll(path_);
  EXPECT_EQ(raw.size(), 4096u + 1000u * 160u);
  EXPECT_EQ(std::memcmp(raw.data(), "TSRRECS\0", 8), 0);
  // The first record, byte for byte: label 0, I1 = 1 -> log1p(1), C1 = 0x68fd1e64 % 1460.
  float label, i1;
  uint32_t c1;
  std::memcpy(&label, raw.data() + 4096, 4);
  std::memcpy(&i1, raw.data() + 4096 + 4, 4);
  std::memcpy(&c1, raw.data() + 4096 + 4 + 13 * 4, 4);
  EXPECT_EQ(label, 0.0f);
  EXPECT_EQ(i1, static_cast<float>(std::log1p(1.0)));
  EXPECT_EQ(c1, 0x68fd1e64u % 1460u);
}

TEST_F(BinaryFormatTest, RoundTripEqualsTextReadingWholeAndSharded) {
  auto text = CriteoTextReader::Open(Text({SharedPath("kaggle_train_head1000.tsv")}));
  ASSERT_TRUE(text.ok());
  std::vector<FlatSample> want = Drain(**text);
  BinaryReaderOptions o;
  o.paths = {path_};
  o.batch_size = 64;
  o.rows_per_feature = Kaggle();
  auto bin = BinaryReader::Open(o);
  ASSERT_TRUE(bin.ok()) << bin.status();
  EXPECT_EQ((*bin)->num_records(), 1000);
  EXPECT_EQ(Drain(**bin), want);
  EXPECT_EQ((*bin)->stats().records, 1000);
  ASSERT_TRUE((*bin)->Rewind().ok());
  EXPECT_EQ(Drain(**bin), want);
  for (int shards : {3, 8}) {
    for (int s = 0; s < shards; ++s) {
      CriteoTextOptions to = Text({SharedPath("kaggle_train_head1000.tsv")});
      to.shard_index = o.shard_index = s;
      to.num_shards = o.num_shards = shards;
      auto t = CriteoTextReader::Open(to);
      auto b = BinaryReader::Open(o);
      ASSERT_TRUE(t.ok() && b.ok());
      EXPECT_EQ(Drain(**b), Drain(**t)) << s << " of " << shards;
    }
  }
}

TEST_F(BinaryFormatTest, SeveralFilesAreOneStream) {
  const std::string second = TempPath("paddle.bin");
  ASSERT_TRUE(
      ConvertCriteoTextToBinary(Text({SharedPath("paddlerec_sample_train.tsv")}), second).ok());
  BinaryReaderOptions o;
  o.paths = {path_, second};
  o.batch_size = 128;  // batches span the file boundary
  auto bin = BinaryReader::Open(o);
  ASSERT_TRUE(bin.ok()) << bin.status();
  auto text = CriteoTextReader::Open(
      Text({SharedPath("kaggle_train_head1000.tsv"), SharedPath("paddlerec_sample_train.tsv")}));
  EXPECT_EQ(Drain(**bin), Drain(**text));
  EXPECT_EQ((*bin)->total_records(), 1100);
  std::remove(second.c_str());
}

TEST_F(BinaryFormatTest, OtherTableSizesAreRejected) {
  BinaryReaderOptions o;
  o.paths = {path_};
  o.rows_per_feature = Kaggle();
  o.rows_per_feature[2] = 1000000;
  auto r = BinaryReader::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            path_ +
                ": ids were hashed with 10131227 rows for sparse feature 2 but the model has "
                "1000000 rows; re-convert the text with the model's rows_per_feature");
  o.rows_per_feature.pop_back();
  EXPECT_EQ(BinaryReader::Open(o).status().message(),
            path_ + ": has 26 sparse features, the model has 25");
}

TEST_F(BinaryFormatTest, CorruptFilesAreDataLoss) {
  const std::string raw = testing_io::ReadAll(path_);
  auto write = [](const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  };
  const std::string bad = TempPath("bad.bin");
  BinaryReaderOptions o;
  o.paths = {bad};

  write(bad, raw.substr(0, raw.size() - 7));  // truncated
  auto r = BinaryReader::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), bad +
                                      ": file is 164089 bytes, the header says 1000 records = "
                                      "164096 bytes (truncated or appended to)");

  std::string flipped = raw;
  flipped[64 + 8 * 3] ^= 1;  // a rows value: the checksum catches it
  write(bad, flipped);
  EXPECT_EQ(BinaryReader::Open(o).status().message(), bad + ": corrupt header (checksum mismatch)");

  write(bad, "label,I1\n0,1\n");
  EXPECT_EQ(BinaryReader::Open(o).status().code(), absl::StatusCode::kDataLoss);

  std::string bad_id = raw;
  const uint32_t huge = 0xFFFFFFFF;
  std::memcpy(&bad_id[4096 + 160 * 700 + 4 + 13 * 4 + 4 * 5], &huge, 4);  // record 700, C6
  write(bad, bad_id);
  o.batch_size = 256;
  auto reader = BinaryReader::Open(o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  Batch b;
  EXPECT_TRUE(*(*reader)->Next(&b));
  EXPECT_TRUE(*(*reader)->Next(&b));
  auto st = (*reader)->Next(&b);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(st.status().message(),
            bad + ": record 700 is corrupt (label not 0/1 or an id >= rows)");
  std::remove(bad.c_str());
  EXPECT_EQ(ReadBinaryHeader(bad).status().code(), absl::StatusCode::kNotFound);
}

TEST(BinaryConvertTest, BadRecordPolicyAppliesToConversion) {
  std::string good = "1\t5";
  TempFile text(good + "\n0\tx\n" + good + "\n");
  const std::string out = TempPath("conv.bin");
  CriteoTextOptions o = Text({text.path()});
  auto st = ConvertCriteoTextToBinary(o, out);
  EXPECT_EQ(st.status().message(), text.path() + ":2: field I1: 'x' is not an integer");
  EXPECT_EQ(ReadBinaryHeader(out).status().code(), absl::StatusCode::kNotFound);  // no output
  EXPECT_EQ(ReadBinaryHeader(out + ".tmp").status().code(), absl::StatusCode::kNotFound);
  o.on_bad_record = BadRecordPolicy::kSkip;
  auto ok = ConvertCriteoTextToBinary(o, out);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->records_written, 2);
  EXPECT_EQ(ok->bad_records_skipped, 1);
  EXPECT_EQ(ReadBinaryHeader(out)->num_records, 2);
  std::remove(out.c_str());
}

TEST(BinaryWriterTest, GeneralShapesAndValidation) {
  const std::string out = TempPath("writer.bin");
  auto w = BinaryRecordWriter::Create(out, 2, {5, 1ll << 32, 3});
  ASSERT_TRUE(w.ok()) << w.status();
  float dense[2] = {0.5f, 1.5f};
  uint32_t ids[3] = {4, 0xFFFFFFFF, 2};
  ASSERT_TRUE((*w)->Append(1.0f, dense, ids).ok());
  uint32_t bad_ids[3] = {5, 0, 0};
  EXPECT_EQ((*w)->Append(0.0f, dense, bad_ids).message(),
            "record 1: id 5 of sparse feature 0 >= rows 5");
  EXPECT_EQ((*w)->Append(0.5f, dense, ids).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBinaryHeader(out).status().code(), absl::StatusCode::kNotFound);  // not yet
  ASSERT_EQ(*(*w)->Finish(), 1);
  BinaryReaderOptions o;
  o.paths = {out};
  auto r = BinaryReader::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  Batch b;
  ASSERT_TRUE(*(*r)->Next(&b));
  EXPECT_EQ(b.batch_size, 1);
  EXPECT_EQ(b.dense, (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(b.sparse.values, (std::vector<int64_t>{4, 0xFFFFFFFFll, 2}));
  std::remove(out.c_str());
  // An abandoned writer leaves nothing behind.
  {
    auto w2 = BinaryRecordWriter::Create(out, 1, {2});
    ASSERT_TRUE(w2.ok());
  }
  EXPECT_EQ(ReadBinaryHeader(out + ".tmp").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
