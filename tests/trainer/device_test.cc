// device selection in the trainer: `device: cuda` where no GPU is visible (or in a build without
// the CUDA path) fails in Trainer::Create with one clear message and leaves no output behind.
// On a machine with a GPU these checks are skipped (tests/cuda/trainer_cuda_test.cc trains there).
#include <filesystem>
#include <string>
#include <unistd.h>

#include "core/cuda_runtime.h"
#include "gtest/gtest.h"
#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/trainer.h"
#include "trainer/world.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_device_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Config SmallConfig(const std::string& device) {
    const std::string yaml = "device: " + device + R"(
model:
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  table_rows: [50, 30]
data:
  format: synthetic
  batch_size: 16
  synthetic: {train_samples: 64, eval_samples: 32}
train: {epochs: 1}
output: {dir: )" + (dir_ / "out").string() + R"(, progress: false, export: model.safetensors}
)";
    auto c = ParseConfig(yaml, (dir_ / "small.yaml").string());
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
  fs::path dir_;
};

TEST_F(DeviceTest, CpuNeedsNoContext) {
  auto cuda = CreateDeviceForConfig(SmallConfig("cpu"), 0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(*cuda, nullptr);
  // And the same config trains and writes its output (so the test below can fail).
  auto t = Trainer::Create(SmallConfig("cpu"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(fs::exists(dir_ / "out"));
}

TEST_F(DeviceTest, CudaWithoutDeviceFailsFirstWithOneMessage) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible: nothing to refuse here";
  for (int local_rank : {0, 3}) {
    auto t = Trainer::Create(SmallConfig("cuda"), TrainerOptions{.local_rank = local_rank});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
    const std::string msg(t.status().message());
    EXPECT_NE(msg.find("small.yaml: device: cuda: no CUDA device visible ("), std::string::npos)
        << msg;
    EXPECT_FALSE(fs::exists(dir_ / "out")) << "output dir created before the device check";
  }
  auto cuda = CreateDeviceForConfig(SmallConfig("cuda"), 0);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Where a device: cuda model on several ranks keeps its shards: on the GPU unless the config
// needs what CUDA shards lack (trainer/world.h); the reason names the key or the table.
TEST_F(DeviceTest, ShardsStayOnHostNamesWhatCudaShardsLack) {
  Config c = SmallConfig("cuda");
  EXPECT_EQ(ShardsStayOnHost(c), "");
  c.sharding.replica_sync = ReplicaSync::kAverage;  // average mode's sync runs on device shards
  EXPECT_EQ(ShardsStayOnHost(c), "");
  c = SmallConfig("cuda");
  c.model.tables[1].storage.tier = StorageTier::kRocksDb;
  EXPECT_EQ(ShardsStayOnHost(c), "table '" + c.model.tables[1].name +
                                     "' is in the RocksDB tier without storage.device_cache_rows");
  c.model.tables[1].storage.device_cache_rows = 16;  // an HBM cache over each shard's tier
  EXPECT_EQ(ShardsStayOnHost(c), "");
  c = SmallConfig("cuda");
  c.model.tables[0].storage.dtype = RowDtype::kBf16;
  EXPECT_EQ(ShardsStayOnHost(c),
            "table '" + c.model.tables[0].name + "' has storage.dtype bf16");
}

}  // namespace
}  // namespace tessera
