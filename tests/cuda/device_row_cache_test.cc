// The HBM cache on the GPU. GatherCacheRows / ScatterCacheRows (CUDA twins) against their CPU
// twins, byte for byte, on each of the kernel's paths (16-byte, 4-byte and byte words). Then a
// CudaEmbeddingCollection whose tables are DeviceRowCaches in HBM far smaller than the rows the
// run touches, over host memory and over the RocksDB tier, LRU and LFU, against the same
// collection with every table whole in HBM: the same kernels over other slot numbers, so the
// pooled outputs and, afterwards, every weight and state float must be bit-identical.
#include "embedding/device_row_cache.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "embedding/cache_rows.h"
#include "embedding/embedding_collection_cuda.h"
#include "embedding/internal/cache_rows_kernels.h"
#include "embedding/tiered_row_store.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using cuda_testing::CudaTest;
using cuda_testing::RandomFloats;
using cuda_testing::ToDevice;
using cuda_testing::ToHost;

class CacheRowsCuda : public CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CacheRowsCuda, GatherAndScatterMatchTheCpuTwin) {
  const int64_t row_bytes = GetParam(), capacity = 3000, n = 1200;
  std::vector<uint8_t> base(capacity * row_bytes), packed(n * row_bytes);
  CounterRng rng(row_bytes, 0);
  for (auto& b : base) b = static_cast<uint8_t>(rng.NextBelow(256));
  for (auto& b : packed) b = static_cast<uint8_t>(rng.NextBelow(256));
  std::vector<int64_t> slots(capacity);
  for (int64_t i = 0; i < capacity; ++i) slots[i] = i;
  for (int64_t i = capacity - 1; i > 0; --i) std::swap(slots[i], slots[rng.NextBelow(i + 1)]);
  slots.resize(n);  // distinct, shuffled
  Buffer d_base = ToDevice(base), d_packed = ToDevice(packed), d_slots = ToDevice(slots);
  CacheRowsArgs host{base.data(), row_bytes, capacity, slots.data(), n, packed.data()};
  CacheRowsArgs dev{d_base.raw(), row_bytes, capacity, d_slots.data<int64_t>(), n,
                    d_packed.raw()};
  // Gather: packed from base.
  ASSERT_TRUE(GatherCacheRows(cpu(), host).ok());
  ASSERT_TRUE(GatherCacheRows(gpu(), dev).ok());
  ASSERT_TRUE(CudaSynchronize(gpu()).ok());
  EXPECT_EQ(ToHost<uint8_t>(d_packed, n * row_bytes), packed) << "gather, row_bytes " << row_bytes;
  // Scatter new rows back.
  for (auto& b : packed) b = static_cast<uint8_t>(b ^ 0x5A);
  d_packed = ToDevice(packed);
  dev.packed = d_packed.raw();
  ASSERT_TRUE(ScatterCacheRows(cpu(), host).ok());
  ASSERT_TRUE(ScatterCacheRows(gpu(), dev).ok());
  ASSERT_TRUE(CudaSynchronize(gpu()).ok());
  EXPECT_EQ(ToHost<uint8_t>(d_base, capacity * row_bytes), base)
      << "scatter, row_bytes " << row_bytes;
}

// 64: 16-byte words (an fp32 row of dim 16); 36: 4-byte words (dim 9); 6: the byte path.
INSTANTIATE_TEST_SUITE_P(RowBytes, CacheRowsCuda, ::testing::Values(64, 36, 6));

EmbeddingCollectionOptions Options(RowOptimizerType type) {
  EmbeddingCollectionOptions o;
  o.num_features = 3;
  o.seed = 17;
  o.optimizer.type = type;
  o.optimizer.adagrad_initial = 0.1f;
  const int64_t rows[2] = {20000, 3000};
  const std::vector<std::vector<int>> features = {{0, 2}, {1}};
  for (int t = 0; t < 2; ++t) {
    TableConfig c;
    c.name = t == 0 ? "big" : "small";
    c.num_rows = rows[t];
    c.dim = 16;  // one dim: the two tables share the fused backward pass
    c.pooling = t == 0 ? PoolingMode::kSum : PoolingMode::kMean;
    c.features = features[t];
    o.tables.push_back(c);
  }
  return o;
}

KeyedJagged MakeBatch(const EmbeddingCollectionOptions& o, int64_t batch, uint64_t seed) {
  KeyedJagged kj;
  kj.num_features = o.num_features;
  kj.batch_size = batch;
  kj.offsets = {0};
  CounterRng rng(seed, 1);
  for (int f = 0; f < o.num_features; ++f) {
    const int64_t rows = o.tables[f == 1 ? 1 : 0].num_rows;
    for (int64_t s = 0; s < batch; ++s) {
      const int len = 1 + static_cast<int>(rng.NextBelow(4));
      for (int k = 0; k < len; ++k) {
        const double u = rng.NextUniform();
        kj.values.push_back(static_cast<int64_t>(u * u * static_cast<double>(rows)));
      }
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  return kj;
}

struct CacheCase {
  const char* name;
  bool tier;
  CachePolicy policy;
  RowOptimizerType optimizer;
};

class CachedCollectionCuda : public CudaTest, public ::testing::WithParamInterface<CacheCase> {};

TEST_P(CachedCollectionCuda, TrainsBitIdenticallyToTheTablesWholeInHbm) {
  const CacheCase& k = GetParam();
  testing::TempDir tmp;
  const EmbeddingCollectionOptions o = Options(k.optimizer);
  constexpr int64_t kBatch = 512;  // at most 4096 ids of "big", 2048 of "small" per step
  std::vector<std::unique_ptr<DeviceRowCache>> caches;
  for (int t = 0; t < 2; ++t) {
    const TableConfig& c = o.tables[t];
    std::unique_ptr<RowStore> backing;
    const int64_t sd = RowStateDim(o.optimizer.type, c.dim);
    const float state_init =
        o.optimizer.type == RowOptimizerType::kRowWiseAdagrad ? o.optimizer.adagrad_initial : 0;
    if (k.tier) {
      TieredRowStoreOptions so;
      so.path = tmp.Sub(c.name);
      so.num_rows = c.num_rows;
      so.dim = c.dim;
      so.state_dim = sd;
      so.state_init = state_init;
      so.init = c.init;
      so.seed = o.seed;
      so.table_id = static_cast<uint64_t>(t);
      so.name = c.name;
      so.cache_rows = 5000;
      auto s = TieredRowStore::Open(so);
      ASSERT_TRUE(s.ok()) << s.status();
      backing = std::move(*s);
    } else {
      auto s = CreateInMemoryRowStore(TableRowStoreOptions(c, t, o.optimizer, o.seed));
      ASSERT_TRUE(s.ok()) << s.status();
      backing = std::move(*s);
    }
    DeviceRowCacheOptions co;
    co.ctx = gpu();
    co.cache_rows = t == 0 ? 4200 : 2100;  // one step's rows, a fraction of the run's
    co.policy = k.policy;
    co.name = c.name;
    auto cache = DeviceRowCache::Create(co, std::move(backing));
    ASSERT_TRUE(cache.ok()) << cache.status();
    caches.push_back(std::move(*cache));
  }
  auto whole = CreateCudaEmbeddingCollection(o, gpu());
  auto cached = CreateCudaEmbeddingCollection(o, gpu(), {}, std::move(caches));
  ASSERT_TRUE(whole.ok() && cached.ok()) << whole.status() << cached.status();
  const int64_t width = (*whole)->output_dim();
  Buffer out_w = cuda_testing::Poisoned<float>(kBatch * width);
  Buffer out_c = cuda_testing::Poisoned<float>(kBatch * width);
  for (int step = 1; step <= 12; ++step) {
    const KeyedJagged kj = MakeBatch(o, kBatch, 500 + step);
    (*cached)->Prefetch(MakeBatch(o, kBatch, 501 + step));
    ASSERT_TRUE((*whole)->Forward(kj, out_w.data<float>()).ok());
    absl::Status st = (*cached)->Forward(kj, out_c.data<float>());
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(ToHost<float>(out_c, kBatch * width), ToHost<float>(out_w, kBatch * width))
        << "pooled, step " << step;
    Buffer d_out = ToDevice(RandomFloats(kBatch * width, 40 + step));
    ASSERT_TRUE((*whole)->BackwardUpdate(d_out.data<float>(), 0.05f, step).ok());
    st = (*cached)->BackwardUpdate(d_out.data<float>(), 0.05f, step);
    ASSERT_TRUE(st.ok()) << st;
  }
  for (int t = 0; t < 2; ++t) {
    const TableConfig& c = o.tables[t];
    const int64_t sd = RowStateDim(o.optimizer.type, c.dim);
    std::vector<float> ww(c.num_rows * c.dim), wc(ww.size());
    std::vector<float> sw(std::max<int64_t>(1, c.num_rows * sd)), sc(sw.size());
    ASSERT_TRUE((*whole)->ReadRows(t, 0, c.num_rows, ww.data(), sd > 0 ? sw.data() : nullptr).ok());
    ASSERT_TRUE(
        (*cached)->ReadRows(t, 0, c.num_rows, wc.data(), sd > 0 ? sc.data() : nullptr).ok());
    EXPECT_EQ(wc, ww) << c.name << " weights";
    EXPECT_EQ(sc, sw) << c.name << " state";
    const DeviceRowCacheMetrics m = (*cached)->cache(t)->metrics();
    EXPECT_GT(m.evictions, 0) << c.name;
    EXPECT_GT(m.writebacks, 0) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CachedCollectionCuda,
    ::testing::Values(
        CacheCase{"memory_lru_adagrad", false, CachePolicy::kLru, RowOptimizerType::kRowWiseAdagrad},
        CacheCase{"memory_lfu_adam", false, CachePolicy::kLfu, RowOptimizerType::kAdam},
        CacheCase{"tier_lru_adagrad", true, CachePolicy::kLru, RowOptimizerType::kRowWiseAdagrad},
        CacheCase{"tier_lfu_sgd", true, CachePolicy::kLfu, RowOptimizerType::kSgd}),
    [](const ::testing::TestParamInfo<CacheCase>& i) { return std::string(i.param.name); });

TEST_F(CudaTest, ACacheOnTheHostIsRefused) {
  const EmbeddingCollectionOptions o = Options(RowOptimizerType::kSgd);
  std::vector<std::unique_ptr<DeviceRowCache>> caches(2);
  InMemoryRowStoreOptions so;
  so.num_rows = o.tables[0].num_rows;
  so.dim = o.tables[0].dim;
  so.name = "big";
  auto s = CreateInMemoryRowStore(so);
  ASSERT_TRUE(s.ok());
  DeviceRowCacheOptions co;  // CPU context
  co.cache_rows = 100;
  auto c = DeviceRowCache::Create(co, std::move(*s));
  ASSERT_TRUE(c.ok());
  caches[0] = std::move(*c);
  auto g = CreateCudaEmbeddingCollection(o, gpu(), {}, std::move(caches));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("'big'"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace tessera
