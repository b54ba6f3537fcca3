#include "trainer/internal/memory_check.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/config.h"
#include "trainer/model.h"

namespace tessera::internal {
namespace {

Config Parse(const std::vector<std::string>& overrides) {
  const char* yaml = R"(model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: [10, 20, 30]
)";
  auto c = ParseConfig(yaml, "test.yaml", overrides);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config();
}

HostMemory Limit(int64_t bytes) { return HostMemory{bytes, "the test's limit"}; }

TEST(MemoryCheckTest, SmallModelFits) {
  Config c = Parse({});
  EXPECT_TRUE(CheckDenseMemory(c, DenseOptionsFromConfig(c), Limit(int64_t{1} << 30)).ok());
  EXPECT_TRUE(CheckDenseMemory(c, DenseOptionsFromConfig(c), AvailableHostMemory()).ok());
}

TEST(MemoryCheckTest, TheTwoAbortsOfIssue13AreResourceExhausted) {
  for (const char* layers : {"[4000000000,4]", "[100000,100000,4]"}) {
    SCOPED_TRACE(layers);
    Config c = Parse({std::string("model.bottom_mlp=") + layers});
    absl::Status s = CheckDenseMemory(c, DenseOptionsFromConfig(c), Limit(int64_t{24} << 30));
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    const std::string m(s.message());
    EXPECT_EQ(m.rfind("test.yaml: model.bottom_mlp: the dense model needs ", 0), 0u) << m;
    EXPECT_NE(m.find("25769803776 bytes (24.0 GiB) are available (the test's limit)"),
              std::string::npos)
        << m;
  }
}

TEST(MemoryCheckTest, NamesTheLargestPart) {
  Config c = Parse({"model.top_mlp=[200000,1]"});
  absl::Status s = CheckDenseMemory(c, DenseOptionsFromConfig(c), Limit(1 << 20));
  EXPECT_NE(s.message().find("model.top_mlp: "), std::string::npos) << s;
  c = Parse({"data.batch_size=100000000"});
  s = CheckDenseMemory(c, DenseOptionsFromConfig(c), Limit(1 << 30));
  EXPECT_NE(s.message().find("activations of 100000000 samples (data.batch_size)"),
            std::string::npos)
      << s;
  // Adam keeps two state tensors per parameter: 4 x the parameters' bytes.
  c = Parse({"optimizer.dense.type=adam"});
  s = CheckDenseMemory(c, DenseOptionsFromConfig(c), Limit(10));
  EXPECT_NE(s.message().find("2 optimizer state tensors"), std::string::npos) << s;
}

TEST(MemoryCheckTest, OverflowIsInvalidArgumentNamingTheKey) {
  Config c = Parse({"model.bottom_mlp=[4000000000000000000,4000000000000000000,4]"});
  absl::Status s = CheckDenseMemory(c, DenseOptionsFromConfig(c), Limit(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("test.yaml: model.bottom_mlp: the layer sizes give more than 2^56"),
            std::string::npos)
      << s;
}

// data.synthetic.pooling=100000000 (and a Criteo config with data.batch_size=1000000000000)
// threw std::bad_alloc on the reader thread (exit 134) before this check.
TEST(MemoryCheckTest, InputBatchesTooLargeAreResourceExhausted) {
  Config c = Parse({"data.synthetic.pooling=100000000"});
  absl::Status s = CheckInputMemory(c, Limit(int64_t{24} << 30));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // Per sample: 4 x (13 dense + label) + 8 x 3 offsets + 8 x 3e8 ids = 2400000080 bytes;
  // x 2048 samples x 5 batches in flight.
  EXPECT_EQ(std::string(s.message()),
            "test.yaml: data.synthetic.pooling: input batches need 24576000819200 bytes (2048 "
            "samples (data.batch_size) x 2400000080 bytes per sample: 13 dense values and the "
            "label, 300000000 sparse ids (data.synthetic.pooling) over 3 features; 5 batches in "
            "flight (data.prefetch_batches + 1)) but 25769803776 bytes (24.0 GiB) are available "
            "(the test's limit); lower the pooling or the batch");
  // One id per bag: the batch is to blame.
  c = Parse({"data.batch_size=1000000000000"});
  s = CheckInputMemory(c, Limit(int64_t{24} << 30));
  EXPECT_NE(s.message().find("test.yaml: data.batch_size: input batches need"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("; lower the batch"), std::string::npos) << s;
  // Beyond any machine, even when the available memory is unknown (and no int64 overflows).
  c = Parse({"data.synthetic.pooling=[9223372036854775807, 9223372036854775807, 1]"});
  s = CheckInputMemory(c, HostMemory{});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("no machine has that much"), std::string::npos) << s;
  // The default config fits.
  EXPECT_TRUE(CheckInputMemory(Parse({}), Limit(int64_t{1} << 30)).ok());
  EXPECT_TRUE(CheckInputMemory(Parse({}), AvailableHostMemory()).ok());
}

}  // namespace
}  // namespace tessera::internal
