// ShardedEmbeddingCollection with its shards on the GPU (a CUDA context) against the same
// collection on the CPU, on the same ranks: for every sharding type, every grid of this world
// (groups x group size), SGD and row-wise AdaGrad, exact replica sync (and average mode),
// several steps of Forward + BackwardUpdate give the CPU run's pooled outputs, final rows and
// optimizer state within rtol 2e-5, atol 1e-6 (the CUDA kernels contract multiply-adds and sum
// in another order: embedding/pooled_lookup_cuda.h). Several ranks share the machine's one GPU
// through sharding.transport mpi (payloads staged through pinned memory; NCCL refuses two ranks
// on one device); a world of one sends its payloads over NCCL. Also: HBM caches smaller than
// their shards, over host memory and over the RocksDB tier, train as the CPU run without
// caches. Without a device every test skips; bench/gpu_check.sh runs this binary on 1, 2 and 4
// ranks.
#include <memory>
#include <string>
#include <tuple>

#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

constexpr double kRtol = 2e-5;
constexpr double kAtol = 1e-6;
constexpr int kSteps = 4;

// This rank's CUDA context (device 0: the ranks of one machine share its GPU), made once.
const DeviceContext* Gpu() {
  static std::unique_ptr<CudaContext> ctx = [] {
    std::unique_ptr<CudaContext> c;
    if (CudaDeviceCount() == 0) return c;
    auto made = CudaContext::Create(CudaContextOptions{});
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) c = std::move(made).value();
    return c;
  }();
  return ctx == nullptr ? nullptr : &ctx->context();
}

#define SKIP_WITHOUT_GPU()                                                                 \
  if (Gpu() == nullptr) {                                                                  \
    GTEST_SKIP() << "no CUDA device: CUDA shards are checked on a GPU (bench/gpu_check.sh)"; \
  }

void ExpectClose(const tt::ShardedRun& gpu, const tt::ShardedRun& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.ok && cpu.ok) << what;
  for (size_t s = 0; s < cpu.outputs.size(); ++s) {
    tt::ExpectClose(gpu.outputs[s].data(), cpu.outputs[s].data(),
                    static_cast<int64_t>(cpu.outputs[s].size()), kRtol, kAtol,
                    what + ": pooled output of step " + std::to_string(s + 1));
  }
  for (size_t t = 0; t < cpu.weights.size(); ++t) {
    tt::ExpectClose(gpu.weights[t].data(), cpu.weights[t].data(),
                    static_cast<int64_t>(cpu.weights[t].size()), kRtol, kAtol,
                    what + ": weights of table " + std::to_string(t));
    tt::ExpectClose(gpu.state[t].data(), cpu.state[t].data(),
                    static_cast<int64_t>(cpu.state[t].size()), kRtol, kAtol,
                    what + ": state of table " + std::to_string(t));
  }
}

ShardedEmbeddingOptions Options(ShardingType type, RowOptimizerType opt, int n) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(opt);
  so.plan = tt::PlanOfType(type, so.collection.tables, n);
  so.transport = World()->size() == 1 ? PayloadTransport::kNccl : PayloadTransport::kMpi;
  return so;
}

using Param = std::tuple<int /*group size N*/, ShardingType, RowOptimizerType>;
class ShardedCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(ShardedCudaTest, MatchesTheCpuCollection) {
  SKIP_WITHOUT_GPU();
  const auto [n, type, opt] = GetParam();
  const int me = World()->rank(), world = World()->size();
  if (n > world || world % n != 0) GTEST_SKIP() << "group size " << n << " in a world of " << world;
  auto grid = ProcessGrid::Create(World(), {.group_size = n});
  ASSERT_TRUE(grid.ok()) << grid.status();
  const ShardedEmbeddingOptions so = Options(type, opt, n);
  const tt::ShardedRun cpu = tt::TrainSharded(*grid, so, DeviceContext::Cpu(), kSteps, me, world);
  const tt::ShardedRun gpu = tt::TrainSharded(*grid, so, *Gpu(), kSteps, me, world);
  ASSERT_TRUE(gpu.ok);
  EXPECT_TRUE(gpu.model->on_device());
  EXPECT_EQ(gpu.model->payload_backend(), world == 1 ? "nccl" : "mpi+staged");
  ExpectClose(gpu, cpu, std::string(ShardingTypeName(type)) + " " + std::to_string(world / n) +
                            "x" + std::to_string(n));
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [n, type, opt] = info.param;
  return "group" + std::to_string(n) + "_" + ShardingTypeName(type) + "_" +
         (opt == RowOptimizerType::kSgd ? "sgd" : "rowwise_adagrad");
}

INSTANTIATE_TEST_SUITE_P(
    EveryTypeAndGrid, ShardedCudaTest,
    ::testing::Combine(::testing::Values(1, 2, 4),
                       tt::EveryShardingType(), tt::BothRowOptimizers()),
    Name);

// Average mode (M = 2 replica groups, sync every 2 steps, touched rows and all rows): the sync
// gathers rows on the device and averages them over MPI, as the CPU collection does.
TEST(ShardedCudaAverageTest, AverageModeMatchesTheCpuCollection) {
  SKIP_WITHOUT_GPU();
  const int me = World()->rank(), world = World()->size();
  if (world % 2 != 0) GTEST_SKIP() << "average mode needs 2 replica groups";
  const int n = world / 2;
  auto grid = ProcessGrid::Create(World(), {.group_size = n});
  ASSERT_TRUE(grid.ok()) << grid.status();
  for (ShardingType type :
       {ShardingType::kTableWise, ShardingType::kRowWise, ShardingType::kColumnWise}) {
    for (SyncRows rows : {SyncRows::kTouched, SyncRows::kAll}) {
      ShardedEmbeddingOptions so = Options(type, RowOptimizerType::kRowWiseAdagrad, n);
      so.replica_sync = ReplicaSync::kAverage;
      so.sync_every = 2;
      so.sync_rows = rows;
      const tt::ShardedRun cpu =
          tt::TrainSharded(*grid, so, DeviceContext::Cpu(), kSteps, me, world);
      const tt::ShardedRun gpu = tt::TrainSharded(*grid, so, *Gpu(), kSteps, me, world);
      ExpectClose(gpu, cpu, std::string("average ") + ShardingTypeName(type) +
                                (rows == SyncRows::kAll ? " all rows" : " touched rows"));
    }
  }
}

// HBM caches of about a third of each shard of table 0 (2000 rows) and of all of table 1,
// over host memory and over the RocksDB tier, on a row-wise plan over the whole world: the same
// training as the CPU collection without caches.
TEST(ShardedCudaCacheTest, HbmCachesOverHostAndTierMatchTheCpuCollection) {
  SKIP_WITHOUT_GPU();
  const int me = World()->rank(), world = World()->size();
  tt::SharedTempDir tmp("tessera_sharded_cuda_cache_");
  auto grid = ProcessGrid::Create(World(), {.group_size = world});
  ASSERT_TRUE(grid.ok()) << grid.status();
  ShardedEmbeddingOptions so = Options(ShardingType::kRowWise, RowOptimizerType::kRowWiseAdagrad,
                                       world);
  so.collection.tables[0].num_rows = 2000;
  so.plan = tt::PlanOfType(ShardingType::kRowWise, so.collection.tables, world);
  const tt::ShardedRun cpu = tt::TrainSharded(*grid, so, DeviceContext::Cpu(), kSteps, me, world);
  for (StorageTier tier : {StorageTier::kMemory, StorageTier::kRocksDb}) {
    ShardedEmbeddingOptions c = so;
    TableStorage& st = c.collection.tables[0].storage;
    st.device_cache_rows = 700;
    st.policy = CachePolicy::kLru;
    if (tier == StorageTier::kRocksDb) {
      st.tier = StorageTier::kRocksDb;
      st.path = tmp.path() + "/tier";
      st.cache_rows = 1000;
    }
    c.collection.tables[1].storage.device_cache_rows = c.collection.tables[1].num_rows;
    c.collection.tables[1].storage.policy = CachePolicy::kLfu;
    const tt::ShardedRun gpu = tt::TrainSharded(*grid, c, *Gpu(), kSteps, me, world);
    ExpectClose(gpu, cpu, tier == StorageTier::kMemory ? "HBM cache over host memory"
                                                       : "HBM cache over the RocksDB tier");
  }
}

}  // namespace
}  // namespace tessera
