// The MPI backend under 4 ranks: every collective against values each rank can compute alone,
// Split into both kinds of process-grid groups, byte counters, and the NCCL backend where GPUs
// exist.
#include "sharding/communicator.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharding/nccl_communicator.h"
#include "sharding/process_grid.h"

namespace tessera {
namespace {

using ::tessera::testing::World;

TEST(MpiCommunicatorTest, RankAndSize) {
  Communicator& w = *World();
  EXPECT_EQ(w.size(), 4);
  EXPECT_EQ(w.backend(), "mpi");
  EXPECT_EQ(w.world_ranks(), std::vector<int>({0, 1, 2, 3}));
}

TEST(MpiCommunicatorTest, AllToAllVAndCounters) {
  Communicator& w = *World();
  const int p = w.size(), me = w.rank();
  // Rank me sends (me + 1) * (r + 1) values to rank r, each value 100 * me + r.
  std::vector<int64_t> sc(p), sd(p), rc(p), rd(p);
  for (int r = 0; r < p; ++r) {
    sc[r] = (me + 1) * (r + 1);
    rc[r] = (r + 1) * (me + 1);
  }
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t{0});
  std::vector<double> send(sd.back() + sc.back()), recv(rd.back() + rc.back(), -1);
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < sc[r]; ++i) send[sd[r] + i] = 100 * me + r;
  }
  w.ResetStats();
  ASSERT_TRUE(w.AllToAllV<double>(send.data(), sc, sd, recv.data(), rc, rd).ok());
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < rc[r]; ++i) ASSERT_EQ(recv[rd[r] + i], 100 * r + me);
  }
  int64_t expect_bytes = 0;
  for (int r = 0; r < p; ++r) {
    if (r != me) expect_bytes += sc[r] * 8;
    EXPECT_EQ(w.stats().peer_bytes[r], r == me ? 0 : sc[r] * 8);
  }
  EXPECT_EQ(w.stats().bytes_of(CollectiveKind::kAllToAll), expect_bytes);
  EXPECT_EQ(w.stats().calls_of(CollectiveKind::kAllToAll), 1);
  w.ResetStats();
  EXPECT_EQ(w.stats().total_bytes(), 0);
}

TEST(MpiCommunicatorTest, AllReduceIsRankOrderedAndIdenticalEverywhere) {
  Communicator& w = *World();
  const int p = w.size(), me = w.rank();
  // Values whose float sum depends on the order: rank r contributes 10^(8 r) / 3 and friends.
  const int64_t n = 1001;  // not a multiple of p: uneven reduce-scatter chunks
  auto value = [](int r, int64_t i) {
    return static_cast<float>(std::pow(-1.0, r) * std::pow(1e4, r % 3) / (3.0 + i));
  };
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = value(me, i);
  std::vector<float> sum = x;
  ASSERT_TRUE(w.AllReduce(sum.data(), n, ReduceOp::kSum).ok());
  for (int64_t i = 0; i < n; ++i) {
    float expect = 0;
    for (int r = 0; r < p; ++r) expect += value(r, i);
    ASSERT_EQ(sum[i], expect) << i;  // bit-exact: the sum is taken in rank order
  }
  std::vector<float> avg = x;
  ASSERT_TRUE(w.AllReduce(avg.data(), n, ReduceOp::kAvg).ok());
  EXPECT_EQ(avg[7], sum[7] / p);
  std::vector<double> d = {static_cast<double>(me), 1.0};
  ASSERT_TRUE(w.AllReduce(d.data(), 2, ReduceOp::kSum).ok());
  EXPECT_EQ(d[0], 6.0);
  EXPECT_EQ(d[1], 4.0);
  std::vector<int64_t> iv = {me + 1, int64_t{1} << 40};
  ASSERT_TRUE(w.AllReduce(iv.data(), 2, ReduceOp::kSum).ok());
  EXPECT_EQ(iv[0], 10);
  EXPECT_EQ(iv[1], int64_t{4} << 40);
  // Every rank holds the same bits.
  std::vector<float> all(static_cast<size_t>(p) * n);
  std::vector<int64_t> rb(p, n * 4), rd(p);
  for (int r = 0; r < p; ++r) rd[r] = r * n * 4;
  ASSERT_TRUE(w.AllGatherV(sum.data(), n * 4, all.data(), rb, rd).ok());
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(0, std::memcmp(all.data() + r * n, sum.data(), n * 4)) << "rank " << r;
  }
}

TEST(MpiCommunicatorTest, AllGatherVBroadcastBarrier) {
  Communicator& w = *World();
  const int p = w.size(), me = w.rank();
  std::vector<int64_t> counts(p);
  ASSERT_TRUE(w.AllGatherCounts(me * 2 + 1, absl::MakeSpan(counts)).ok());
  for (int r = 0; r < p; ++r) EXPECT_EQ(counts[r], r * 2 + 1);
  std::vector<int64_t> rb(p), rd(p);
  for (int r = 0; r < p; ++r) rb[r] = counts[r] * 8;
  std::exclusive_scan(rb.begin(), rb.end(), rd.begin(), int64_t{0});
  std::vector<int64_t> mine(me * 2 + 1, me), all((rd.back() + rb.back()) / 8);
  w.ResetStats();
  ASSERT_TRUE(w.AllGatherV(mine.data(), mine.size() * 8, all.data(), rb, rd).ok());
  EXPECT_EQ(w.stats().bytes_of(CollectiveKind::kAllGather), int64_t(mine.size()) * 8 * (p - 1));
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < counts[r]; ++i) EXPECT_EQ(all[rd[r] / 8 + i], r);
  }
  char text[16] = {};
  if (me == 2) std::snprintf(text, sizeof(text), "from two");
  ASSERT_TRUE(w.Broadcast(text, sizeof(text), 2).ok());
  EXPECT_STREQ(text, "from two");
  EXPECT_EQ(w.stats().bytes_of(CollectiveKind::kBroadcast), me == 2 ? 16 * (p - 1) : 0);
  EXPECT_TRUE(w.Barrier().ok());
  EXPECT_EQ(w.AllReduce(static_cast<float*>(nullptr), -1, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MpiCommunicatorTest, SplitIntoGridGroups) {
  for (GridLayout layout : {GridLayout::kReplicasAdjacent, GridLayout::kGroupsContiguous}) {
    auto grid = ProcessGrid::Create(World(), {.group_size = 2, .layout = layout});
    ASSERT_TRUE(grid.ok()) << grid.status();
    const GridShape& s = grid->shape();
    const int me = World()->rank();
    EXPECT_EQ(grid->sharding_group().world_ranks(), s.ShardingGroupRanks(s.GroupOf(me)));
    EXPECT_EQ(grid->replica_group().world_ranks(), s.ReplicaGroupRanks(s.ShardRankOf(me)));
    EXPECT_EQ(grid->sharding_group().rank(), grid->shard_rank());
    EXPECT_EQ(grid->replica_group().rank(), grid->group());
    // A sum inside the sharding group sees only its members.
    int64_t v = me;
    ASSERT_TRUE(grid->sharding_group().AllReduce(&v, 1, ReduceOp::kSum).ok());
    auto members = s.ShardingGroupRanks(grid->group());
    EXPECT_EQ(v, members[0] + members[1]);
    // An all-to-all in the sharding group counts bytes only to its members.
    Communicator& g = grid->sharding_group();
    std::vector<int64_t> send = {me, me}, recv(2), ones = {1, 1}, displs = {0, 1};
    g.ResetStats();
    ASSERT_TRUE(g.AllToAllV<int64_t>(send.data(), ones, displs, recv.data(), ones, displs).ok());
    EXPECT_EQ(recv[0], members[0]);
    EXPECT_EQ(recv[1], members[1]);
    EXPECT_EQ(g.stats().bytes_of(CollectiveKind::kAllToAll), 8);
  }
  auto bad = ProcessGrid::Create(World(), {.group_size = 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("does not divide"));
}

// The NCCL backend: needs one GPU per rank of the communicator it makes. With G < 4 GPUs the
// first G ranks form the NCCL communicator (a single GPU still exercises the bootstrap, the
// grouped send/recv and the reductions); without a GPU the test skips and says why.
TEST(NcclCommunicatorTest, CollectivesOnDevice) {
  if (!NcclCompiled()) GTEST_SKIP() << "this build has no CUDA path (TESSERA_CUDA=OFF)";
  const int gpus = CudaDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no GPU visible: the NCCL backend needs one GPU per rank";
  const int me = World()->rank();
  const bool in = me < gpus;
  auto sub = World()->Split(in ? 0 : 1, me);
  ASSERT_TRUE(sub.ok());
  if (!in) GTEST_SKIP() << "rank " << me << " has no GPU of its own (" << gpus << " GPUs)";
  std::shared_ptr<Communicator> boot(std::move(*sub));
  auto nccl = CreateNcclCommunicator(boot, {.cuda_device = me});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  Communicator& c = **nccl;
  const int p = c.size();
  const int64_t n = 257;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = me + i * 0.5f;
  auto dev = CudaMallocZeroed(n * 4);
  ASSERT_TRUE(dev.ok()) << dev.status();
  ASSERT_TRUE(CudaMemcpy(*dev, host.data(), n * 4).ok());
  // From pageable memory cudaMemcpy may return before its DMA has landed, and NCCL runs on the
  // communicator's non-blocking stream, which does not wait for the legacy stream: a device to
  // host copy (legacy stream, returns once done) makes sure the upload has landed.
  float landed = 0.0f;
  ASSERT_TRUE(CudaMemcpy(&landed, static_cast<float*>(*dev) + n - 1, 4).ok());
  ASSERT_EQ(landed, host[n - 1]);
  ASSERT_TRUE(c.AllReduce(static_cast<float*>(*dev), n, ReduceOp::kSum).ok());
  ASSERT_TRUE(CudaMemcpy(host.data(), *dev, n * 4).ok());
  for (int64_t i = 0; i < n; ++i) {
    float expect = 0;
    for (int r = 0; r < p; ++r) expect += r + i * 0.5f;
    ASSERT_FLOAT_EQ(host[i], expect);
  }
  // All-to-all of one int64 per peer, value 10 * sender + receiver.
  std::vector<int64_t> send(p), recv(p), eights(p, 8), displs(p);
  for (int r = 0; r < p; ++r) {
    send[r] = 10 * me + r;
    displs[r] = 8 * r;
  }
  auto dsend = CudaMallocZeroed(p * 8), drecv = CudaMallocZeroed(p * 8);
  ASSERT_TRUE(dsend.ok() && drecv.ok());
  ASSERT_TRUE(CudaMemcpy(*dsend, send.data(), p * 8).ok());
  int64_t landed_id = -1;  // as above: the upload has landed before NCCL's stream reads it
  ASSERT_TRUE(CudaMemcpy(&landed_id, static_cast<int64_t*>(*dsend) + p - 1, 8).ok());
  ASSERT_EQ(landed_id, send[p - 1]);
  ASSERT_TRUE(c.AllToAllV(*dsend, eights, displs, *drecv, eights, displs).ok());
  ASSERT_TRUE(CudaMemcpy(recv.data(), *drecv, p * 8).ok());
  for (int r = 0; r < p; ++r) EXPECT_EQ(recv[r], 10 * r + me);
  ASSERT_TRUE(c.AllGatherV(*dsend, 8, *drecv, eights, displs).ok());
  ASSERT_TRUE(CudaMemcpy(recv.data(), *drecv, p * 8).ok());
  for (int r = 0; r < p; ++r) EXPECT_EQ(recv[r], 10 * r);  // each rank's send[0]
  ASSERT_TRUE(c.Broadcast(*dsend, 8, 0).ok());
  ASSERT_TRUE(c.Barrier().ok());
  auto split = c.Split(0, me);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ((*split)->backend(), "nccl");
  CudaFree(*dev);
  CudaFree(*dsend);
  CudaFree(*drecv);
}

}  // namespace
}  // namespace tessera
