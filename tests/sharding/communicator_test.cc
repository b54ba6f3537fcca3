// The world-of-one backend and the argument checks shared by all backends (the MPI backend is
// tested under mpirun in tests/distributed/communicator_test.cc).
#include "sharding/communicator.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sharding/nccl_communicator.h"

namespace tessera {
namespace {

TEST(SingleProcessCommunicatorTest, CollectivesCopyAndCountNothing) {
  auto comm = CreateSingleProcessCommunicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> send = {1, 2, 3}, recv(3);
  std::vector<int64_t> counts = {3}, displs = {0};
  ASSERT_TRUE(comm->AllToAllV<float>(send.data(), counts, displs, recv.data(), counts, displs).ok());
  EXPECT_EQ(recv, send);
  std::vector<double> d = {1.5, 2.5};
  ASSERT_TRUE(comm->AllReduce(d.data(), 2, ReduceOp::kAvg).ok());
  EXPECT_EQ(d[1], 2.5);
  std::vector<int64_t> got(1);
  ASSERT_TRUE(comm->AllGatherCounts(7, absl::MakeSpan(got)).ok());
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(comm->stats().total_bytes(), 0);
  EXPECT_EQ(comm->stats().calls_of(CollectiveKind::kAllToAll), 1);
  auto sub = comm->Split(0, 0);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ((*sub)->size(), 1);
  comm->ResetStats();
  EXPECT_EQ(comm->stats().calls_of(CollectiveKind::kAllToAll), 0);
}

TEST(SingleProcessCommunicatorTest, BadArguments) {
  auto comm = CreateSingleProcessCommunicator();
  std::vector<int64_t> two = {1, 1};
  char buf[2];
  auto st = comm->AllToAllV(buf, two, two, buf, two, two);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("expected 1"));
  EXPECT_EQ(comm->Broadcast(buf, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->Split(-1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, CreationFunctionExistsInEveryBuild) {
  std::shared_ptr<Communicator> boot = CreateSingleProcessCommunicator();
  auto nccl = CreateNcclCommunicator(boot, {});
  if (!NcclCompiled()) {
    ASSERT_FALSE(nccl.ok());
    EXPECT_EQ(nccl.status().code(), absl::StatusCode::kUnimplemented);
  } else if (!nccl.ok()) {
    // A CUDA build on a machine without a GPU says so instead of crashing.
    EXPECT_THAT(nccl.status().message(), ::testing::HasSubstr("GPU"));
  }
}

}  // namespace
}  // namespace tessera
