// StagedCommunicator's buffer and offset logic on the CPU: PlanStaging's packing and merged
// copies, and the decorator over the world of one with a host copier that records every copy
// (the "device" is host memory), so receive gaps, counts and splits are checked without a GPU.
// The CUDA copier is tested in tests/cuda/staged_communicator_cuda_test.cc.
#include "sharding/staged_communicator.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

struct CopyLog {
  int to_host = 0, to_device = 0, finish = 0;
  std::vector<size_t> sizes;
};

// Host "device": memcpy copies; staging poisoned with 0xAB on growth so a byte the collective
// forgets to fill shows up.
class HostCopier final : public StagingCopier {
 public:
  explicit HostCopier(CopyLog* log) : log_(log) {}
  absl::StatusOr<void*> Staging(int which, size_t bytes) override {
    std::vector<char>& b = buf_[which];
    if (b.size() < bytes + 1) b.assign(bytes + 1, static_cast<char>(0xAB));
    return b.data();
  }
  absl::Status ToHost(void* host, const void* device, size_t bytes) override {
    ++log_->to_host;
    log_->sizes.push_back(bytes);
    std::memcpy(host, device, bytes);
    return absl::OkStatus();
  }
  absl::Status ToDevice(void* device, const void* host, size_t bytes) override {
    ++log_->to_device;
    log_->sizes.push_back(bytes);
    std::memcpy(device, host, bytes);
    return absl::OkStatus();
  }
  absl::Status Finish() override {
    ++log_->finish;
    return absl::OkStatus();
  }
  std::unique_ptr<StagingCopier> Clone() const override {
    return std::make_unique<HostCopier>(log_);
  }

 private:
  CopyLog* log_;
  std::vector<char> buf_[2];
};

std::unique_ptr<StagedCommunicator> MakeStaged(CopyLog* log) {
  auto c = StagedCommunicator::Create(CreateSingleProcessCommunicator(),
                                      std::make_unique<HostCopier>(log));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

TEST(PlanStagingTest, PacksInRankOrderAndMergesAdjacentBlocks) {
  // Ranks 0 and 1 adjacent, rank 2 empty, rank 3 after a gap, rank 4 before rank 3 in memory.
  const std::vector<int64_t> bytes = {8, 4, 0, 4, 2};
  const std::vector<int64_t> displs = {0, 8, 12, 20, 16};
  auto l = PlanStaging(bytes, displs);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->staging_displs, (std::vector<int64_t>{0, 8, 12, 12, 16}));
  EXPECT_EQ(l->staging_bytes, 18);
  ASSERT_EQ(l->runs.size(), 3u);
  EXPECT_EQ(l->runs[0].device_offset, 0);
  EXPECT_EQ(l->runs[0].staging_offset, 0);
  EXPECT_EQ(l->runs[0].bytes, 12);
  EXPECT_EQ(l->runs[1].device_offset, 20);
  EXPECT_EQ(l->runs[1].staging_offset, 12);
  EXPECT_EQ(l->runs[1].bytes, 4);
  EXPECT_EQ(l->runs[2].device_offset, 16);
  EXPECT_EQ(l->runs[2].staging_offset, 16);
  EXPECT_EQ(l->runs[2].bytes, 2);
}

TEST(PlanStagingTest, PackedLayoutIsOneCopyAndEmptyIsNone) {
  auto l = PlanStaging(std::vector<int64_t>{3, 5, 7}, std::vector<int64_t>{0, 3, 8});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->runs.size(), 1u);
  EXPECT_EQ(l->runs[0].bytes, 15);
  auto e = PlanStaging(std::vector<int64_t>{0, 0}, std::vector<int64_t>{4, 9});
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->runs.empty());
  EXPECT_EQ(e->staging_bytes, 0);
}

TEST(PlanStagingTest, BadArguments) {
  auto l = PlanStaging(std::vector<int64_t>{1, -2}, std::vector<int64_t>{0, 1});
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("rank 1 has -2 bytes"));
  EXPECT_FALSE(PlanStaging(std::vector<int64_t>{1}, std::vector<int64_t>{0, 1}).ok());
}

TEST(StagedCommunicatorTest, AllToAllVWritesOnlyInsideReceiveBlocks) {
  CopyLog log;
  auto comm = MakeStaged(&log);
  EXPECT_EQ(comm->backend(), "single+staged");
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->world_ranks(), std::vector<int>{0});
  std::vector<float> send = {0, 0, 1, 2, 3};  // block at element 2
  std::vector<float> recv = {-1, -1, -1, -1, -1, -1};
  const std::vector<int64_t> n = {3}, sd = {2}, rd = {1};
  ASSERT_TRUE(comm->AllToAllV<float>(send.data(), n, sd, recv.data(), n, rd).ok());
  EXPECT_EQ(recv, (std::vector<float>{-1, 1, 2, 3, -1, -1}));
  EXPECT_EQ(log.to_host, 1);
  EXPECT_EQ(log.to_device, 1);
  EXPECT_EQ(log.finish, 1);
  EXPECT_EQ(log.sizes, (std::vector<size_t>{12, 12}));
  EXPECT_EQ(comm->stats().calls_of(CollectiveKind::kAllToAll), 1);
  EXPECT_EQ(comm->inner().stats().calls_of(CollectiveKind::kAllToAll), 1);
}

TEST(StagedCommunicatorTest, AllReduceAllGatherBroadcastRoundTrip) {
  CopyLog log;
  auto comm = MakeStaged(&log);
  std::vector<double> d = {1.5, 2.5};
  ASSERT_TRUE(comm->AllReduce(d.data(), 2, ReduceOp::kAvg).ok());
  EXPECT_EQ(d, (std::vector<double>{1.5, 2.5}));
  std::vector<int64_t> i = {7, -3};
  ASSERT_TRUE(comm->AllReduce(i.data(), 2, ReduceOp::kSum).ok());
  EXPECT_EQ(i, (std::vector<int64_t>{7, -3}));

  std::vector<char> g = {'x', 'x', 'x', 'x', 'x'};
  const char word[] = "ab";
  ASSERT_TRUE(comm->AllGatherV(word, 2, g.data() + 1, std::vector<int64_t>{2},
                               std::vector<int64_t>{1})
                  .ok());
  EXPECT_EQ(std::string(g.begin(), g.end()), "xxabx");

  std::vector<float> b = {4, 5};
  ASSERT_TRUE(comm->Broadcast(b.data(), sizeof(float) * 2, 0).ok());
  EXPECT_EQ(b, (std::vector<float>{4, 5}));
  EXPECT_TRUE(comm->Barrier().ok());
  // Root of a broadcast copies to the host only; every collective waits once.
  EXPECT_EQ(log.finish, 4);
}

TEST(StagedCommunicatorTest, EmptyCollectivesCopyNothing) {
  CopyLog log;
  auto comm = MakeStaged(&log);
  const std::vector<int64_t> zero = {0};
  ASSERT_TRUE(comm->AllToAllV(nullptr, zero, zero, nullptr, zero, zero).ok());
  ASSERT_TRUE(comm->AllReduce(static_cast<float*>(nullptr), 0, ReduceOp::kSum).ok());
  EXPECT_EQ(log.to_host + log.to_device, 0);
}

TEST(StagedCommunicatorTest, SplitKeepsTheStaging) {
  CopyLog log;
  auto comm = MakeStaged(&log);
  auto sub = comm->Split(0, 0);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ((*sub)->backend(), "single+staged");
  float x = 3;
  ASSERT_TRUE((*sub)->AllReduce(&x, 1, ReduceOp::kSum).ok());
  EXPECT_EQ(x, 3);
  EXPECT_EQ(log.to_host, 1);
}

TEST(StagedCommunicatorTest, BadArguments) {
  CopyLog log;
  EXPECT_FALSE(StagedCommunicator::Create(nullptr, std::make_unique<HostCopier>(&log)).ok());
  EXPECT_FALSE(StagedCommunicator::Create(CreateSingleProcessCommunicator(), nullptr).ok());
  // The CUDA copier refuses host contexts (and, without the CUDA path, says so).
  auto c = CreateCudaStagingCopier(DeviceContext::Cpu());
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == absl::StatusCode::kInvalidArgument ||
              c.status().code() == absl::StatusCode::kUnimplemented)
      << c.status();
}

}  // namespace
}  // namespace tessera
