// CreateDeviceRowStore without a GPU: a CPU context gives the in-memory store (same rows and
// state); a CUDA context refuses 16-bit rows and bad sizes before touching the device, and
// without a device (or without the CUDA path) fails with an error naming the table instead of
// aborting. tests/cuda/device_row_store_test.cc checks the device store itself on a GPU.
#include "embedding/device_row_store.h"

#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

InMemoryRowStoreOptions Options() {
  InMemoryRowStoreOptions o;
  o.num_rows = 37;
  o.dim = 6;
  o.state_dim = 1;
  o.state_init = 0.25f;
  o.init.type = RowInitType::kUniform;
  o.seed = 11;
  o.table_id = 3;
  o.name = "ads";
  return o;
}

DeviceContext HandMadeCuda() {
  DeviceContext c;
  c.device = Device::kCuda;
  return c;
}

TEST(DeviceRowStoreTest, CpuContextGivesTheInMemoryStoreRows) {
  auto a = CreateDeviceRowStore(DeviceContext::Cpu(), Options());
  auto b = CreateInMemoryRowStore(Options());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const InMemoryRowStoreOptions o = Options();
  std::vector<float> wa(o.num_rows * o.dim), wb(wa.size()), sa(o.num_rows), sb(o.num_rows);
  ASSERT_TRUE((*a)->ReadRows(0, o.num_rows, wa.data(), sa.data()).ok());
  ASSERT_TRUE((*b)->ReadRows(0, o.num_rows, wb.data(), sb.data()).ok());
  EXPECT_EQ(wa, wb);
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(sa[5], 0.25f);
}

TEST(DeviceRowStoreTest, CudaRefusesSixteenBitRowsAndBadSizesNamingTheTable) {
  InMemoryRowStoreOptions o = Options();
  o.dtype = RowDtype::kBf16;
  auto s = CreateDeviceRowStore(HandMadeCuda(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("table 'ads': storage.dtype bf16"));
  o = Options();
  o.num_rows = 0;
  s = CreateDeviceRowStore(HandMadeCuda(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("table 'ads': num_rows 0"));
}

TEST(DeviceRowStoreTest, WithoutADeviceFailsCleanly) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible: tests/cuda covers it";
  auto s = CreateDeviceRowStore(HandMadeCuda(), Options());
  ASSERT_FALSE(s.ok());
  if (!CudaCompiled()) {
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("no CUDA path"));
  } else {
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("table 'ads'"));
  }
}

}  // namespace
}  // namespace tessera
