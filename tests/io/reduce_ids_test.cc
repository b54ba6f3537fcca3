// ReduceIdsReader: synthetic ids drawn from one space of 10^8 ids, reduced mod a table size for
// the features that ask (modulo hashing), kept for the others (a dynamic table's raw keys).
#include "io/reduce_ids.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "io/synthetic.h"

namespace tessera {
namespace {

std::unique_ptr<BatchReader> Open(const std::shared_ptr<const SyntheticGenerator>& gen) {
  SyntheticStreamOptions s;
  s.num_samples = 512;
  s.batch_size = 128;
  return SyntheticReader::Open(gen, s).value();
}

TEST(ReduceIdsTest, ReducesTheFeaturesThatAskAndKeepsTheOthers) {
  SyntheticDataOptions o;
  o.rows_per_feature = {100000000, 100000000, 100000000};
  o.pooling = {2};
  o.seed = 3;
  std::shared_ptr<const SyntheticGenerator> gen = SyntheticGenerator::Create(o).value();
  auto raw = Open(gen);
  auto reduced = ReduceIdsReader(Open(gen), {1000, 0, 77});
  Batch a, b;
  int64_t above = 0;
  while (*raw->Next(&a)) {
    ASSERT_TRUE(*reduced->Next(&b));
    ASSERT_EQ(a.sparse.values.size(), b.sparse.values.size());
    const int64_t rows[3] = {1000, 0, 77};
    for (int f = 0; f < 3; ++f) {
      for (int64_t j = a.sparse.feature_begin(f); j < a.sparse.feature_end(f); ++j) {
        const int64_t want = rows[f] > 0 ? a.sparse.values[j] % rows[f] : a.sparse.values[j];
        ASSERT_EQ(b.sparse.values[j], want);
        above += a.sparse.values[j] >= 1000;
      }
    }
    EXPECT_EQ(a.labels, b.labels);
  }
  EXPECT_FALSE(*reduced->Next(&b));
  EXPECT_GT(above, 100);  // the space is really larger than the tables
  ASSERT_TRUE(reduced->Rewind().ok());
  EXPECT_TRUE(*reduced->Next(&b));
}

}  // namespace
}  // namespace tessera
