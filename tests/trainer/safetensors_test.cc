#include "trainer/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/safetensors_" + std::to_string(::getpid()) + "_" + name;
}
bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}
// A file as the format defines it: u64 LE header length, header, data.
std::string MakeFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}
// A header object from tensor entries.
std::string Hdr(std::initializer_list<std::string> entries) {
  return absl::StrCat("{", absl::StrJoin(entries, ","), "}");
}
std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

TEST(SafetensorsTest, RoundTripIsBitIdentical) {
  std::mt19937 gen(5);
  std::normal_distribution<float> z;
  std::vector<float> table(1000 * 16), bias(7);
  for (float& v : table) v = z(gen);
  for (float& v : bias) v = z(gen);
  bias[0] = -0.0f;
  bias[1] = std::numeric_limits<float>::quiet_NaN();
  bias[2] = std::numeric_limits<float>::denorm_min();
  std::vector<int64_t> step = {int64_t{1} << 40};
  std::vector<uint16_t> half = {0x3c00, 0x7bff, 0x8001};
  std::vector<int32_t> ids = {-1, 2, 3, 4, 5, 6};

  std::string path = TempPath("roundtrip.safetensors");
  std::vector<TensorSpec> specs = {
      {"embedding.t0.weight", SafetensorsDtype::kF32, {1000, 16}},
      {"bias", SafetensorsDtype::kF32, {7}},
      {"step", SafetensorsDtype::kI64, {}},
      {"half", SafetensorsDtype::kBF16, {3}},
      {"ids", SafetensorsDtype::kI32, {2, 3}},
      {"empty", SafetensorsDtype::kF16, {0, 4}},
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "a \"quoted\"\nline é"}};
  auto writer = SafetensorsWriter::Create(path, specs, meta);
  ASSERT_TRUE(writer.ok()) << writer.status();
  SafetensorsWriter& w = **writer;
  // The big table in row ranges, last range first: order does not matter.
  ASSERT_TRUE(w.WriteRows("embedding.t0.weight", 600, 1000, table.data() + 600 * 16).ok());
  ASSERT_TRUE(w.WriteRows("embedding.t0.weight", 0, 600, table.data()).ok());
  ASSERT_TRUE(w.WriteTensor("bias", bias.data()).ok());
  ASSERT_TRUE(w.WriteTensor("step", step.data()).ok());
  ASSERT_TRUE(w.Write("half", 2, half.data() + 1, 4).ok());
  ASSERT_TRUE(w.Write("half", 0, half.data(), 2).ok());
  ASSERT_TRUE(w.WriteTensor("ids", ids.data()).ok());
  ASSERT_TRUE(w.WriteTensor("empty", nullptr).ok());
  EXPECT_FALSE(Exists(path));  // only the tmp file exists until Finish
  EXPECT_TRUE(Exists(path + ".tmp"));
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_TRUE(Exists(path));
  EXPECT_FALSE(Exists(path + ".tmp"));

  std::string raw = ReadAll(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
  std::string header = raw.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  // Header lists tensors by name and data follows in that order.
  EXPECT_LT(header.find("\"bias\""), header.find("\"embedding.t0.weight\""));
  EXPECT_LT(header.find("\"embedding.t0.weight\""), header.find("\"step\""));

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  ASSERT_EQ(f.tensors().size(), 6u);
  std::vector<std::string> names;
  for (const TensorView& t : f.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"bias", "embedding.t0.weight", "empty", "half",
                                             "ids", "step"}));
  auto t = f.Get("embedding.t0.weight", SafetensorsDtype::kF32, {1000, 16});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Bytes((*t)->data, (*t)->num_bytes), Bytes(table.data(), table.size() * 4));
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*t)->data) % 4, 0u);
  EXPECT_EQ(Bytes(f.Find("bias")->data, 28), Bytes(bias.data(), 28));
  EXPECT_EQ(Bytes(f.Find("step")->data, 8), Bytes(step.data(), 8));
  EXPECT_TRUE(f.Find("step")->shape.empty());
  EXPECT_EQ(Bytes(f.Find("half")->data, 6), Bytes(half.data(), 6));
  EXPECT_EQ(f.Find("half")->dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(Bytes(f.Find("ids")->data, 24), Bytes(ids.data(), 24));
  EXPECT_EQ(f.Find("empty")->num_bytes, 0);
  EXPECT_EQ(f.Find("empty")->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.Find("nope"), nullptr);
}

TEST(SafetensorsTest, ReadsAHandWrittenFile) {
  // As another writer might lay it out: pretty JSON, metadata last, tensors not in name order,
  // escapes in a name, no padding.
  float b[2] = {1.5f, -2.0f};
  int64_t a = 42;
  std::string data = Bytes(&a, 8) + Bytes(b, 8);
  std::string header =
      "{ \"zeta\\u00e9\\ud83d\\ude00\" : {\"dtype\": \"F32\", \"shape\": [2, 1],"
      " \"data_offsets\": [8, 16]},\n \"alpha\": {\"data_offsets\": [0, 8], \"shape\": [1],"
      " \"dtype\": \"I64\"},\n \"__metadata__\": {\"format\": \"pt\"} }";
  std::string path = TempPath("hand.safetensors");
  WriteAll(path, MakeFile(header, data));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorView* z = (*file)->Find("zeta\xc3\xa9\xf0\x9f\x98\x80");
  ASSERT_NE(z, nullptr);
  // The unpadded header leaves the data misaligned in the file; the view is aligned anyway.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z->data) % alignof(float), 0u);
  EXPECT_EQ(z->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(z->f32()[0], 1.5f);
  EXPECT_EQ(z->f32()[1], -2.0f);
  const TensorView* al = (*file)->Find("alpha");
  ASSERT_NE(al, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(al->data) % alignof(int64_t), 0u);
  EXPECT_EQ(*static_cast<const int64_t*>(al->data), 42);
  EXPECT_EQ((*file)->tensors()[0].name, "alpha");  // data order
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
}

struct Corruption {
  std::string what;
  std::string file;  // full bytes
  std::string expect;
};

TEST(SafetensorsTest, RejectsCorruptFilesWithClearErrors) {
  std::string d8(8, '\0');
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  int b, int e) {
    // StrCat, not operator+: GCC 12 warns falsely (-Wrestrict) on long + chains.
    return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape,
                        ",\"data_offsets\":[", b, ",", e, "]}");
  };
  std::string huge(8, '\0');
  huge[7] = 0x01;  // 2^56
  std::vector<Corruption> cases = {
      {"short", "abc", "too short"},
      {"huge length", huge + "{}", "exceeds the 100 MB limit"},
      {"length past end", MakeFile("{}", "").substr(0, 8) + "{", "exceeds the file size"},
      {"truncated json", MakeFile("{\"w\":{\"dtype\":\"F32\"", ""), "header JSON at byte"},
      {"not an object", MakeFile("[1,2]", ""), "not a JSON object"},
      {"bad dtype", MakeFile(Hdr({entry("w", "F64", "[1]", 0, 8)}), d8),
       "tensor 'w': unsupported dtype 'F64'"},
      {"shape mismatch", MakeFile(Hdr({entry("w", "F32", "[3]", 0, 8)}), d8),
       "tensor 'w': shape and dtype F32 need 12 bytes but data_offsets span 8"},
      {"offsets past end", MakeFile(Hdr({entry("w", "F32", "[4]", 0, 16)}), d8),
       "tensor 'w': data_offsets [0, 16] run past the data section (8 bytes)"},
      {"decreasing offsets", MakeFile(Hdr({entry("w", "F32", "[1]", 8, 4)}), d8),
       "tensor 'w': data_offsets [8, 4] decrease"},
      {"gap", MakeFile(Hdr({entry("w", "F32", "[1]", 4, 8)}), d8),
       "tensor 'w': starts at data byte 4 but the previous tensor ends at 0"},
      {"overlap",
       MakeFile(Hdr({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[1]", 4, 8)}),
                d8),
       "tensor 'b': starts at data byte 4 but the previous tensor ends at 8 (overlap)"},
      {"trailing data", MakeFile(Hdr({entry("w", "F32", "[1]", 0, 4)}), d8),
       "tensors cover 4 bytes but the data section holds 8"},
      {"float in shape", MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", d8),
       "expected an integer"},
      {"negative shape", MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", d8),
       "unexpected character '-'"},
      {"missing field", MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", d8),
       "tensor 'w': needs dtype, shape and data_offsets"},
      {"unknown field",
       MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", d8),
       "tensor 'w': unknown field 'x'"},
      {"duplicate tensor",
       MakeFile(Hdr({entry("w", "F32", "[1]", 0, 4), entry("w", "F32", "[1]", 4, 8)}),
                d8),
       "duplicate key \"w\""},
      {"metadata not strings", MakeFile("{\"__metadata__\":{\"k\":3}}", ""),
       "__metadata__: value of 'k' is not a string"},
      {"trailing garbage", MakeFile("{} x", ""), "trailing characters"},
      {"control char", MakeFile("{\"a\nb\":1}", ""), "control character"},
  };
  for (const Corruption& c : cases) {
    std::string path = TempPath("corrupt.safetensors");
    WriteAll(path, c.file);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << c.what;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << c.what;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path)) << c.what;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(c.expect)) << c.what;
  }
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open(TempPath("does_not_exist"));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, GetChecksDtypeAndShape) {
  std::string path = TempPath("get.safetensors");
  float v[6] = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(WriteSafetensors(path, {{"w", SafetensorsDtype::kF32, {2, 3}}}, {v}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->Get("w", SafetensorsDtype::kF32, {2, 3}).ok());
  auto wrong = (*file)->Get("w", SafetensorsDtype::kF32, {3, 2});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.status().message()),
              HasSubstr("tensor 'w' is F32 [2, 3], expected F32 [3, 2]"));
  EXPECT_EQ((*file)->Get("v", SafetensorsDtype::kF32, {1}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, FailedWriteLeavesNoFile) {
  std::string path = TempPath("failed.safetensors");
  float v[4] = {1, 2, 3, 4};
  {
    auto w = SafetensorsWriter::Create(path, {{"a", SafetensorsDtype::kF32, {4}},
                                              {"b", SafetensorsDtype::kF32, {4}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->WriteTensor("a", v).ok());
    ASSERT_TRUE((*w)->Write("b", 0, v, 8).ok());
    absl::Status st = (*w)->Finish();
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(st.message()), HasSubstr("tensor 'b' has 8 of 16 bytes written"));
    EXPECT_FALSE(Exists(path));
    EXPECT_FALSE(Exists(path + ".tmp"));
  }
  {
    // Abandoned writer (e.g. the run died): the destructor removes the tmp file.
    auto w = SafetensorsWriter::Create(path, {{"a", SafetensorsDtype::kF32, {4}}});
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE(Exists(path + ".tmp"));
  }
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(path + ".tmp"));
  // A good file already at the path survives a failed rewrite untouched.
  ASSERT_TRUE(WriteSafetensors(path, {{"a", SafetensorsDtype::kF32, {4}}}, {v}).ok());
  std::string before = ReadAll(path);
  {
    auto w = SafetensorsWriter::Create(path, {{"a", SafetensorsDtype::kF32, {8}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("a", 0, v, 16).ok());
    EXPECT_FALSE((*w)->Finish().ok());
  }
  EXPECT_EQ(ReadAll(path), before);
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST(SafetensorsTest, WriterRejectsBadCalls) {
  std::string path = TempPath("badcalls.safetensors");
  float v[8] = {};
  EXPECT_EQ(SafetensorsWriter::Create(path, {{"a", SafetensorsDtype::kF32, {1}},
                                             {"a", SafetensorsDtype::kF32, {1}}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SafetensorsWriter::Create(path, {{"__metadata__", SafetensorsDtype::kF32, {1}}}).ok());
  EXPECT_FALSE(SafetensorsWriter::Create(path, {{"n", SafetensorsDtype::kF32, {-1}}}).ok());
  EXPECT_EQ(SafetensorsWriter::Create(TempPath("no/such/dir/x"), {}).status().code(),
            absl::StatusCode::kNotFound);
  auto w = SafetensorsWriter::Create(path, {{"a", SafetensorsDtype::kF32, {2, 4}}});
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(std::string((*w)->Write("b", 0, v, 4).message()), HasSubstr("no tensor 'b'"));
  EXPECT_THAT(std::string((*w)->Write("a", 28, v, 8).message()),
              HasSubstr("bytes [28, 36) outside its 32 bytes"));
  EXPECT_TRUE((*w)->WriteRows("a", 1, 2, v).ok());
  EXPECT_THAT(std::string((*w)->Write("a", 12, v, 8).message()),
              HasSubstr("overlap bytes already written [16, 32)"));
  EXPECT_THAT(std::string((*w)->WriteRows("a", 1, 3, v).message()),
              HasSubstr("rows [1, 3) outside its 2 rows"));
  EXPECT_TRUE((*w)->WriteRows("a", 0, 1, v).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  EXPECT_EQ((*w)->Finish().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SafetensorsTest, ParallelRowRangesFromThreads) {
  const int64_t rows = 4096, dim = 8;
  std::vector<float> table(rows * dim);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.25f;
  std::string path = TempPath("parallel.safetensors");
  auto w = SafetensorsWriter::Create(path, {{"t", SafetensorsDtype::kF32, {rows, dim}}});
  ASSERT_TRUE(w.ok());
  std::vector<std::thread> threads;
  std::vector<absl::Status> st(4);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int64_t r = k * 64; r < rows && st[k].ok(); r += 256)
        st[k] = (*w)->WriteRows("t", r, r + 64, table.data() + r * dim);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE((*w)->Finish().ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Bytes((*f)->Find("t")->data, table.size() * 4), Bytes(table.data(), table.size() * 4));
}

}  // namespace
}  // namespace tessera
