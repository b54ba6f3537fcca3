// CreateDeviceRowStore on a GPU against its CPU twin (the in-memory store of the same options):
// the same initial rows and state bit for bit, WriteRowBytes/ReadRowBytes round trips, the
// identity Resolve with the in-memory store's range error, the CUDA row update on its device
// pointers equal to the CPU update (within the FMA tolerance of the other row-update tests), and
// a table too large for the device is ResourceExhausted naming the table and its bytes.
#include "embedding/device_row_store.h"

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "embedding/pooled_lookup.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using cuda_testing::CudaTest;

InMemoryRowStoreOptions Options() {
  InMemoryRowStoreOptions o;
  o.num_rows = 9000;  // more than one 4096-row init chunk
  o.dim = 16;
  o.state_dim = 1;
  o.state_init = 0.125f;
  o.init.type = RowInitType::kNormal;
  o.seed = 5;
  o.table_id = 2;
  o.name = "clicks";
  return o;
}

class DeviceRowStoreCudaTest : public CudaTest {};

TEST_F(DeviceRowStoreCudaTest, SameRowsAsTheHostStoreAndRoundTrips) {
  auto d = CreateDeviceRowStore(gpu(), Options());
  auto h = CreateInMemoryRowStore(Options());
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(h.ok()) << h.status();
  const InMemoryRowStoreOptions o = Options();
  std::vector<float> wd(o.num_rows * o.dim), wh(wd.size()), sd(o.num_rows), sh(o.num_rows);
  ASSERT_TRUE((*d)->ReadRows(0, o.num_rows, wd.data(), sd.data()).ok());
  ASSERT_TRUE((*h)->ReadRows(0, o.num_rows, wh.data(), sh.data()).ok());
  EXPECT_EQ(wd, wh);
  EXPECT_EQ(sd, sh);
  std::vector<float> w(3 * o.dim, 1.5f), s = {7, 8, 9}, back(w.size()), sback(3);
  ASSERT_TRUE((*d)->WriteRows(4100, 3, w.data(), s.data()).ok());
  ASSERT_TRUE((*d)->ReadRows(4100, 3, back.data(), sback.data()).ok());
  EXPECT_EQ(back, w);
  EXPECT_EQ(sback, s);
  std::vector<int64_t> ids = {3, 8999}, slots(2);
  ASSERT_TRUE((*d)->Resolve(ids, absl::MakeSpan(slots)).ok());
  EXPECT_EQ(slots, ids);
  ids = {1, 9000};
  auto bad = (*d)->Resolve(ids, absl::MakeSpan(slots));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("table 'clicks': row id 9000 at position 1"));
  EXPECT_FALSE((*d)->ReadRows(8999, 2, back.data(), nullptr).ok());
}

TEST_F(DeviceRowStoreCudaTest, RowUpdateOnDevicePointersMatchesTheHostStore) {
  auto d = CreateDeviceRowStore(gpu(), Options());
  auto h = CreateInMemoryRowStore(Options());
  ASSERT_TRUE(d.ok() && h.ok());
  const InMemoryRowStoreOptions o = Options();
  std::vector<int64_t> slots = {0, 17, 4095, 4096, 8999};
  std::vector<float> g(slots.size() * o.dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  RowUpdateArgs a;
  a.dim = o.dim;
  a.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
  a.lr = 0.1f;
  a.step = 1;
  a.weights = (*h)->weight_data();
  a.state = (*h)->state();
  ASSERT_TRUE(ApplyRowUpdates(cpu(), slots, g.data(), a).ok());
  Buffer dslots = cuda_testing::ToDevice(slots), dg = cuda_testing::ToDevice(g);
  a.weights = (*d)->weight_data();
  a.state = (*d)->state();
  ASSERT_TRUE(ApplyRowUpdates(gpu(), absl::MakeConstSpan(dslots.data<int64_t>(), slots.size()),
                              dg.data<float>(), a)
                  .ok());
  std::vector<float> wd(o.num_rows * o.dim), wh(wd.size()), sd(o.num_rows), sh(o.num_rows);
  ASSERT_TRUE((*d)->ReadRows(0, o.num_rows, wd.data(), sd.data()).ok());
  ASSERT_TRUE((*h)->ReadRows(0, o.num_rows, wh.data(), sh.data()).ok());
  EXPECT_EQ(sd, sh);  // the state update has no multiply-add to contract
  for (size_t i = 0; i < wd.size(); ++i) {
    ASSERT_NEAR(wd[i], wh[i], 1e-6 + 1e-6 * std::abs(wh[i])) << "weight " << i;
  }
}

TEST_F(DeviceRowStoreCudaTest, TooLargeForTheDeviceIsResourceExhaustedNamingTheTable) {
  InMemoryRowStoreOptions o = Options();
  o.num_rows = int64_t{1} << 36;  // 64 Gi rows x 16 floats = 4 TiB of weights
  auto s = CreateDeviceRowStore(gpu(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("table 'clicks'"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("4398046511104 bytes of weights"));
  // The device is still usable afterwards.
  EXPECT_TRUE(CreateDeviceRowStore(gpu(), Options()).ok());
}

}  // namespace
}  // namespace tessera
