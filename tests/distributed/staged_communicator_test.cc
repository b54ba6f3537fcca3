// StagedCommunicator over MPI under 4 ranks: all-to-all with gaps between blocks on both sides,
// all-gather, all-reduce and broadcast give the values each rank computes alone, and receive
// gaps keep their bytes. First with a host copier (the offset logic, on every machine), then,
// where a GPU is visible, with the CUDA copier and all 4 ranks sharing device 0 (what NCCL
// cannot do).
#include "sharding/staged_communicator.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace tessera {
namespace {

using ::tessera::testing::World;

class HostCopier final : public StagingCopier {
 public:
  absl::StatusOr<void*> Staging(int which, size_t bytes) override {
    if (buf_[which].size() < bytes + 1) buf_[which].assign(bytes + 1, static_cast<char>(0x5A));
    return buf_[which].data();
  }
  absl::Status ToHost(void* h, const void* d, size_t n) override {
    std::memcpy(h, d, n);
    return absl::OkStatus();
  }
  absl::Status ToDevice(void* d, const void* h, size_t n) override {
    std::memcpy(d, h, n);
    return absl::OkStatus();
  }
  absl::Status Finish() override { return absl::OkStatus(); }
  std::unique_ptr<StagingCopier> Clone() const override { return std::make_unique<HostCopier>(); }

 private:
  std::vector<char> buf_[2];
};

// Memory the collectives run on: host vectors, or device buffers filled from them.
struct Mem {
  virtual ~Mem() = default;
  virtual float* Put(const std::vector<float>& v) = 0;
  virtual std::vector<float> Get(const float* p, size_t n) = 0;
};
struct HostMem final : Mem {
  std::vector<std::unique_ptr<std::vector<float>>> keep;
  float* Put(const std::vector<float>& v) override {
    keep.push_back(std::make_unique<std::vector<float>>(v));
    return keep.back()->data();
  }
  std::vector<float> Get(const float* p, size_t n) override { return {p, p + n}; }
};
struct DeviceMem final : Mem {
  std::vector<Buffer> keep;
  float* Put(const std::vector<float>& v) override {
    auto b = Buffer::Allocate(Device::kCuda, DType::kF32, {static_cast<int64_t>(v.size())});
    TESSERA_CHECK_OK(b.status());
    TESSERA_CHECK_OK(CudaMemcpy(b->raw(), v.data(), sizeof(float) * v.size()));
    keep.push_back(std::move(b).value());
    return keep.back().data<float>();
  }
  std::vector<float> Get(const float* p, size_t n) override {
    std::vector<float> h(n);
    TESSERA_CHECK_OK(CudaMemcpy(h.data(), p, sizeof(float) * n));
    return h;
  }
};

int64_t Count(int from, int to) { return (from + 1) * (to + 2) % 3 + 1; }
float Value(int from, int to, int64_t k) { return 100.0f * from + 10.0f * to + k; }

void CheckCollectives(Communicator& comm, Mem& mem) {
  const int p = comm.size(), me = comm.rank();
  // All-to-all: send blocks one float apart, receive blocks two floats apart.
  std::vector<int64_t> sc(p), sd(p), rc(p), rd(p);
  int64_t s_end = 0, r_end = 0;
  for (int r = 0; r < p; ++r) {
    sc[r] = Count(me, r), sd[r] = s_end, s_end += sc[r] + 1;
    rc[r] = Count(r, me), rd[r] = r_end + 2, r_end += rc[r] + 2;
  }
  std::vector<float> send(s_end, -9.0f), want(r_end + 1, -7.0f);
  for (int r = 0; r < p; ++r) {
    for (int64_t k = 0; k < sc[r]; ++k) send[sd[r] + k] = Value(me, r, k);
    for (int64_t k = 0; k < rc[r]; ++k) want[rd[r] + k] = Value(r, me, k);
  }
  float* d_send = mem.Put(send);
  float* d_recv = mem.Put(std::vector<float>(want.size(), -7.0f));
  ASSERT_TRUE(comm.AllToAllV<float>(d_send, sc, sd, d_recv, rc, rd).ok());
  EXPECT_EQ(mem.Get(d_recv, want.size()), want);

  // All-gather of 2 floats per rank into blocks 1 float apart.
  std::vector<int64_t> gb(p, 2 * sizeof(float)), gd(p);
  std::vector<float> gwant(3 * p, -7.0f);
  for (int r = 0; r < p; ++r) {
    gd[r] = static_cast<int64_t>(sizeof(float)) * 3 * r;
    gwant[3 * r] = Value(r, 0, 0), gwant[3 * r + 1] = Value(r, 0, 1);
  }
  float* d_mine = mem.Put({Value(me, 0, 0), Value(me, 0, 1)});
  float* d_gather = mem.Put(std::vector<float>(gwant.size(), -7.0f));
  ASSERT_TRUE(comm.AllGatherV(d_mine, 2 * sizeof(float), d_gather, gb, gd).ok());
  EXPECT_EQ(mem.Get(d_gather, gwant.size()), gwant);

  // All-reduce (sum in rank order) and a broadcast from the last rank.
  float* d_sum = mem.Put({static_cast<float>(me), 0.5f});
  ASSERT_TRUE(comm.AllReduce(d_sum, 2, ReduceOp::kSum).ok());
  EXPECT_EQ(mem.Get(d_sum, 2), (std::vector<float>{p * (p - 1) / 2.0f, 0.5f * p}));
  float* d_b = mem.Put({static_cast<float>(me), 1.0f * me});
  ASSERT_TRUE(comm.Broadcast(d_b, 2 * sizeof(float), p - 1).ok());
  EXPECT_EQ(mem.Get(d_b, 2), (std::vector<float>{p - 1.0f, p - 1.0f}));
}

std::unique_ptr<StagedCommunicator> Wrap(std::unique_ptr<StagingCopier> copier) {
  auto inner = World()->Split(0, World()->rank());
  EXPECT_TRUE(inner.ok()) << inner.status();
  auto c = StagedCommunicator::Create(std::move(inner).value(), std::move(copier));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

TEST(StagedCommunicatorMpiTest, HostCopierMatchesWhatEachRankComputes) {
  auto comm = Wrap(std::make_unique<HostCopier>());
  EXPECT_EQ(comm->backend(), "mpi+staged");
  HostMem mem;
  CheckCollectives(*comm, mem);
  // Split keeps the staging: the two halves of the world.
  auto half = comm->Split(comm->rank() % 2, comm->rank());
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ((*half)->backend(), "mpi+staged");
  CheckCollectives(**half, mem);
}

TEST(StagedCommunicatorMpiTest, CudaCopierWithAllRanksOnOneDevice) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: staging through device 0";
  auto ctx = CudaContext::Create(CudaContextOptions{});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto copier = CreateCudaStagingCopier((*ctx)->context());
  ASSERT_TRUE(copier.ok()) << copier.status();
  auto comm = Wrap(std::move(copier).value());
  DeviceMem mem;
  CheckCollectives(*comm, mem);
}

}  // namespace
}  // namespace tessera
