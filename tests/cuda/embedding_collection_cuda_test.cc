// CudaEmbeddingCollection against the CPU EmbeddingCollection on the same options and batches:
// initial rows, pooled outputs, and weights and optimizer state after several fused updates
// (three tables, one shared by two features, weighted ids, sum and mean pooling; tables a and c
// share a dim, so their features take one forward launch and their backward one fused pass of
// FusedBackwardUpdateTablesCuda, table b its own). Also the host-side
// validation (an id out of range names table, feature and sample) and Read/WriteRows.
// Tolerance: the twins take the same terms in the same order (FMA aside): rtol 1e-5, atol 1e-6
// after three steps of row-wise AdaGrad / Adam.
#include "embedding/embedding_collection_cuda.h"

#include <memory>
#include <vector>

#include "embedding/embedding_collection.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_testing::CudaTest;
using cuda_testing::ExpectNear;
using cuda_testing::Poisoned;
using cuda_testing::RandomFloats;
using cuda_testing::ToDevice;
using cuda_testing::ToHost;

EmbeddingCollectionOptions Options(RowOptimizerType type) {
  EmbeddingCollectionOptions o;
  TableConfig a;
  a.name = "a";
  a.num_rows = 5000;
  a.dim = 32;
  a.pooling = PoolingMode::kSum;
  a.features = {0, 2};
  TableConfig b;
  b.name = "b";
  b.num_rows = 700;
  b.dim = 12;
  b.pooling = PoolingMode::kMean;
  b.init.type = RowInitType::kNormal;
  b.init.scale = 0.1f;
  b.features = {1};
  TableConfig c;  // a's dim: fused with a (forward launch, backward pass)
  c.name = "c";
  c.num_rows = 300;
  c.dim = 32;
  c.pooling = PoolingMode::kMean;
  c.features = {3};
  o.tables = {a, b, c};
  o.num_features = 4;
  o.optimizer.type = type;
  o.seed = 42;
  return o;
}

KeyedJagged MakeBatch(const EmbeddingCollectionOptions& o, int64_t batch, uint64_t seed) {
  KeyedJagged kj;
  kj.num_features = o.num_features;
  kj.batch_size = batch;
  kj.offsets = {0};
  CounterRng rng(seed, 1);
  for (int f = 0; f < o.num_features; ++f) {
    int64_t rows = 0;
    for (const TableConfig& t : o.tables) {
      for (int tf : t.features) {
        if (tf == f) rows = t.num_rows;
      }
    }
    for (int64_t s = 0; s < batch; ++s) {
      const int len = static_cast<int>(rng.NextBelow(7));
      for (int k = 0; k < len; ++k) {
        kj.values.push_back(static_cast<int64_t>(rng.NextUniform() < 0.4f ? rng.NextBelow(5)
                                                                          : rng.NextBelow(rows)));
      }
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  kj.weights = RandomFloats(static_cast<int64_t>(kj.values.size()), seed + 3, 0.5f, 1.5f);
  return kj;
}

void ExpectTablesNear(EmbeddingCollection& c, CudaEmbeddingCollection& g, const char* when) {
  for (int t = 0; t < c.num_tables(); ++t) {
    const TableConfig& table = c.table(t);
    const int64_t sd = c.store(t).state_dim();
    std::vector<float> w_cpu(table.num_rows * table.dim), w_gpu(w_cpu.size(), std::nanf(""));
    std::vector<float> s_cpu(std::max<int64_t>(1, table.num_rows * sd)),
        s_gpu(s_cpu.size(), std::nanf(""));
    ASSERT_TRUE(
        c.store(t).ReadRows(0, table.num_rows, w_cpu.data(), sd > 0 ? s_cpu.data() : nullptr).ok());
    ASSERT_TRUE(
        g.ReadRows(t, 0, table.num_rows, w_gpu.data(), sd > 0 ? s_gpu.data() : nullptr).ok());
    ExpectNear(w_gpu, w_cpu, 1e-5, 1e-6, std::string(when) + " weights of " + table.name);
    if (sd > 0) ExpectNear(s_gpu, s_cpu, 1e-5, 1e-6, std::string(when) + " state of " + table.name);
  }
}

class CollectionCuda : public CudaTest, public ::testing::WithParamInterface<RowOptimizerType> {};

TEST_P(CollectionCuda, TrainsLikeTheCpuCollection) {
  const EmbeddingCollectionOptions o = Options(GetParam());
  auto c = EmbeddingCollection::Create(o, cpu());
  auto g = CreateCudaEmbeddingCollection(o, gpu());
  ASSERT_TRUE(c.ok() && g.ok()) << c.status() << g.status();
  ASSERT_EQ((*g)->output_dim(), (*c)->output_dim());
  ExpectTablesNear(**c, **g, "initial");
  const int64_t batch = 256, width = (*c)->output_dim();
  Buffer out = Poisoned<float>(batch * width);
  for (int step = 1; step <= 3; ++step) {
    const KeyedJagged kj = MakeBatch(o, batch, 100 + step);
    std::vector<float> want(batch * width);
    ASSERT_TRUE((*c)->Forward(kj, want.data()).ok());
    ASSERT_TRUE((*g)->Forward(kj, out.data<float>()).ok());
    ExpectNear(ToHost<float>(out, batch * width), want, 1e-5, 1e-6, "pooled");
    const auto d_out = RandomFloats(batch * width, 7 + step);
    Buffer g_dout = ToDevice(d_out);
    ASSERT_TRUE((*c)->BackwardUpdate(d_out.data(), 0.05f, step).ok());
    ASSERT_TRUE((*g)->BackwardUpdate(g_dout.data<float>(), 0.05f, step).ok());
  }
  ExpectTablesNear(**c, **g, "after 3 steps");
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CollectionCuda,
                         ::testing::Values(RowOptimizerType::kSgd,
                                           RowOptimizerType::kRowWiseAdagrad,
                                           RowOptimizerType::kAdam));

TEST_F(CudaTest, CollectionRejectsBadIdsAndRanges) {
  const EmbeddingCollectionOptions o = Options(RowOptimizerType::kSgd);
  auto g = CreateCudaEmbeddingCollection(o, gpu());
  ASSERT_TRUE(g.ok()) << g.status();
  KeyedJagged kj = MakeBatch(o, 16, 3);
  kj.values[kj.feature_begin(1)] = 700;  // feature 1 -> table b (700 rows)
  Buffer out = Poisoned<float>(16 * (*g)->output_dim());
  const absl::Status st = (*g)->Forward(kj, out.data<float>());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("table 'b': feature 1"), std::string::npos) << st;
  EXPECT_EQ((*g)->BackwardUpdate(out.data<float>(), 0.1f, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<float> rows(3 * 12, 0.25f), back(3 * 12, 0.0f);
  ASSERT_TRUE((*g)->WriteRows(1, 697, 3, rows.data(), nullptr).ok());
  ASSERT_TRUE((*g)->ReadRows(1, 697, 3, back.data(), nullptr).ok());
  EXPECT_EQ(back, rows);
  EXPECT_EQ((*g)->ReadRows(1, 698, 3, back.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EmbeddingCollectionOptions bad = o;
  bad.tables[1].features = {0};
  EXPECT_EQ(CreateCudaEmbeddingCollection(bad, gpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
