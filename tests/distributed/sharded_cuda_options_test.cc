// ShardedEmbeddingCollection with a CUDA context, checked without a GPU under 4 ranks: what CUDA
// shards do not support yet is refused before any collective, with the same error on every rank
// and naming the key; and a supported config whose device stores cannot be made (no CUDA path,
// or no device) fails on every rank instead of leaving some ranks in a collective. (The CUDA
// shards themselves are checked against the CPU collection by distributed_sharded_cuda_test on
// a GPU.)
#include <string>

#include "core/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"
#include "sharding/sharded_embedding.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::tessera::testing::World;
namespace tt = ::tessera::testing;

DeviceContext HandMadeCuda() {
  DeviceContext c;
  c.device = Device::kCuda;
  return c;
}

ShardedEmbeddingOptions Options(int n) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kRowWiseAdagrad);
  so.plan = tt::PlanOfType(ShardingType::kRowWise, so.collection.tables, n);
  so.transport = PayloadTransport::kMpi;
  return so;
}

TEST(ShardedCudaOptions, RefusesWhatCudaShardsDoNotSupportYetNamingTheKey) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok()) << grid.status();
  {
    ShardedEmbeddingOptions so = Options(2);
    so.collection.tables[1].storage.tier = StorageTier::kRocksDb;
    auto c = ShardedEmbeddingCollection::Create(so, *grid, HandMadeCuda());
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("table 'ads': storage.tier rocksdb"));
  }
  {
    ShardedEmbeddingOptions so = Options(2);
    so.plan = tt::PlanOfType(ShardingType::kDataParallel, so.collection.tables, 2);
    so.collection.tables[2].storage.device_cache_rows = 8;
    auto c = ShardedEmbeddingCollection::Create(so, *grid, HandMadeCuda());
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()),
                HasSubstr("table 'site': storage.device_cache_rows is not supported for a "
                          "data_parallel table"));
  }
  {
    ShardedEmbeddingOptions so = Options(2);
    so.collection.tables[0].storage.dtype = RowDtype::kF16;
    auto c = ShardedEmbeddingCollection::Create(so, *grid, HandMadeCuda());
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("table 'users': storage.dtype fp16"));
  }
  // The grid is still usable: nobody was left inside a collective.
  EXPECT_TRUE(World()->Barrier().ok());
}

// Table-wise over a group of 4: rank 3 owns no shard of the 3 tables, so only the others fail
// to make a device store; everyone must return an error (and then meet at the barrier).
TEST(ShardedCudaOptions, AStoreThatCannotBeMadeFailsEveryRank) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible: tests/cuda covers this path";
  auto grid = ProcessGrid::Create(World(), {.group_size = 4});
  ASSERT_TRUE(grid.ok()) << grid.status();
  ShardedEmbeddingOptions so = Options(4);
  so.plan = tt::PlanOfType(ShardingType::kTableWise, so.collection.tables, 4);
  auto c = ShardedEmbeddingCollection::Create(so, *grid, HandMadeCuda());
  ASSERT_FALSE(c.ok());
  const std::string msg(c.status().message());
  bool owns = false;
  for (const TablePlan& tp : so.plan.tables) {
    for (const Shard& sh : tp.shards) owns |= sh.rank == grid->shard_rank();
  }
  if (owns && !CudaCompiled()) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented) << msg;
    EXPECT_THAT(msg, HasSubstr("no CUDA path"));
  } else if (!owns) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << msg;
    EXPECT_THAT(msg, HasSubstr("could not open their shard stores"));
  }
  EXPECT_TRUE(World()->Barrier().ok());
}

}  // namespace
}  // namespace tessera
