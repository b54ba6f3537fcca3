// Argument checks and byte accounting shared by all backends, and the world-of-one backend.
#include "sharding/communicator.h"

#include "core/trace.h"

#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tessera {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "?";
}

size_t CommDTypeSize(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32: return 4;
    case CommDType::kF64: return 8;
    case CommDType::kI64: return 8;
    case CommDType::kU8: return 1;
  }
  return 0;
}

int64_t CollectiveStats::total_bytes() const {
  return std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
}

void Communicator::InitWorldRanks(std::vector<int> world_ranks) {
  world_ranks_ = std::move(world_ranks);
  stats_.peer_bytes.assign(world_ranks_.size(), 0);
}

void Communicator::ResetStats() {
  stats_.bytes.fill(0);
  stats_.calls.fill(0);
  stats_.peer_bytes.assign(world_ranks_.size(), 0);
}

void Communicator::Count(CollectiveKind kind, int64_t bytes) {
  stats_.bytes[static_cast<int>(kind)] += bytes;
  stats_.calls[static_cast<int>(kind)] += 1;
}

absl::Status Communicator::CheckSpans(const char* what, size_t n) const {
  if (n != static_cast<size_t>(size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected ", size(),
                                                   " counts/displacements (one per rank), got ",
                                                   n));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckAndCountAllToAll(absl::Span<const int64_t> send_bytes,
                                                 absl::Span<const int64_t> send_displs,
                                                 absl::Span<const int64_t> recv_bytes,
                                                 absl::Span<const int64_t> recv_displs) {
  for (auto s : {send_bytes, send_displs, recv_bytes, recv_displs}) {
    if (auto st = CheckSpans("AllToAllV", s.size()); !st.ok()) return st;
  }
  int64_t sent = 0;
  for (int r = 0; r < size(); ++r) {
    if (send_bytes[r] < 0 || recv_bytes[r] < 0 || send_displs[r] < 0 || recv_displs[r] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllToAllV: negative count or displacement for rank ", r));
    }
  }
  for (int r = 0; r < size(); ++r) {
    if (r != rank()) {
      sent += send_bytes[r];
      stats_.peer_bytes[r] += send_bytes[r];
    }
  }
  Count(CollectiveKind::kAllToAll, sent);
  return absl::OkStatus();
}

absl::Status Communicator::AllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                                     absl::Span<const int64_t> send_displs, void* recv,
                                     absl::Span<const int64_t> recv_bytes,
                                     absl::Span<const int64_t> recv_displs) {
  trace::Span span("all_to_all", "collective");
  span.Arg("bytes", std::accumulate(send_bytes.begin(), send_bytes.end(), int64_t{0}));
  span.Arg("peers", size());
  if (auto st = CheckAndCountAllToAll(send_bytes, send_displs, recv_bytes, recv_displs);
      !st.ok()) {
    return st;
  }
  return DoAllToAllV(send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
}

absl::StatusOr<std::unique_ptr<PendingCollective>> Communicator::StartAllToAllV(
    const void* send, absl::Span<const int64_t> send_bytes, absl::Span<const int64_t> send_displs,
    void* recv, absl::Span<const int64_t> recv_bytes, absl::Span<const int64_t> recv_displs) {
  if (auto st = CheckAndCountAllToAll(send_bytes, send_displs, recv_bytes, recv_displs);
      !st.ok()) {
    return st;
  }
  return DoStartAllToAllV(send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
}

absl::StatusOr<std::unique_ptr<PendingCollective>> Communicator::DoStartAllToAllV(
    const void* send, absl::Span<const int64_t> send_bytes, absl::Span<const int64_t> send_displs,
    void* recv, absl::Span<const int64_t> recv_bytes, absl::Span<const int64_t> recv_displs) {
  return std::unique_ptr<PendingCollective>(new FinishedCollective(
      DoAllToAllV(send, send_bytes, send_displs, recv, recv_bytes, recv_displs)));
}

absl::StatusOr<std::unique_ptr<PendingCollective>> Communicator::DoStartAllReduce(
    void* data, int64_t count, CommDType dtype, ReduceOp op) {
  return std::unique_ptr<PendingCollective>(
      new FinishedCollective(DoAllReduce(data, count, dtype, op)));
}

absl::Status Communicator::AllToAllCounts(absl::Span<const int64_t> send,
                                          absl::Span<int64_t> recv) {
  if (auto st = CheckSpans("AllToAllCounts", send.size()); !st.ok()) return st;
  if (auto st = CheckSpans("AllToAllCounts", recv.size()); !st.ok()) return st;
  const int p = size();
  std::vector<int64_t> ones(p, 1), displs(p);
  std::iota(displs.begin(), displs.end(), 0);
  return AllToAllV<int64_t>(send.data(), ones, displs, recv.data(), ones, displs);
}

namespace {
int64_t AllReduceWireBytes(int p, int64_t bytes) {
  return p <= 1 ? 0 : 2 * (p - 1) * bytes / p;
}
}  // namespace

absl::Status Communicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  trace::Span span("all_reduce", "collective");
  span.Arg("bytes", count * 4);
  span.Arg("peers", size());
  if (count < 0) return absl::InvalidArgumentError("AllReduce: negative count");
  Count(CollectiveKind::kAllReduce, AllReduceWireBytes(size(), count * 4));
  return DoAllReduce(data, count, CommDType::kF32, op);
}
absl::StatusOr<std::unique_ptr<PendingCollective>> Communicator::StartAllReduce(float* data,
                                                                                int64_t count,
                                                                                ReduceOp op) {
  if (count < 0) return absl::InvalidArgumentError("AllReduce: negative count");
  Count(CollectiveKind::kAllReduce, AllReduceWireBytes(size(), count * 4));
  return DoStartAllReduce(data, count, CommDType::kF32, op);
}
absl::Status Communicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  trace::Span span("all_reduce", "collective");
  span.Arg("bytes", count * 8);
  span.Arg("peers", size());
  if (count < 0) return absl::InvalidArgumentError("AllReduce: negative count");
  Count(CollectiveKind::kAllReduce, AllReduceWireBytes(size(), count * 8));
  return DoAllReduce(data, count, CommDType::kF64, op);
}
absl::Status Communicator::AllReduce(int64_t* data, int64_t count, ReduceOp op) {
  trace::Span span("all_reduce", "collective");
  span.Arg("bytes", count * 8);
  span.Arg("peers", size());
  if (count < 0) return absl::InvalidArgumentError("AllReduce: negative count");
  Count(CollectiveKind::kAllReduce, AllReduceWireBytes(size(), count * 8));
  return DoAllReduce(data, count, CommDType::kI64, op);
}

absl::Status Communicator::AllGatherV(const void* send, int64_t send_bytes, void* recv,
                                      absl::Span<const int64_t> recv_bytes,
                                      absl::Span<const int64_t> recv_displs) {
  trace::Span span("all_gather", "collective");
  span.Arg("bytes", send_bytes);
  span.Arg("peers", size());
  if (auto st = CheckSpans("AllGatherV", recv_bytes.size()); !st.ok()) return st;
  if (auto st = CheckSpans("AllGatherV", recv_displs.size()); !st.ok()) return st;
  if (send_bytes != recv_bytes[rank()]) {
    return absl::InvalidArgumentError(absl::StrCat("AllGatherV: rank ", rank(), " sends ",
                                                   send_bytes, " bytes but expects ",
                                                   recv_bytes[rank()], " for itself"));
  }
  Count(CollectiveKind::kAllGather, send_bytes * (size() - 1));
  return DoAllGatherV(send, send_bytes, recv, recv_bytes, recv_displs);
}

absl::Status Communicator::AllGatherCounts(int64_t value, absl::Span<int64_t> recv) {
  if (auto st = CheckSpans("AllGatherCounts", recv.size()); !st.ok()) return st;
  const int p = size();
  std::vector<int64_t> eight(p, 8), displs(p);
  for (int r = 0; r < p; ++r) displs[r] = 8 * r;
  return AllGatherV(&value, 8, recv.data(), eight, displs);
}

absl::Status Communicator::Broadcast(void* data, int64_t bytes, int root) {
  trace::Span span("broadcast", "collective");
  span.Arg("bytes", bytes);
  span.Arg("peers", size());
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Broadcast: root ", root, " outside [0, ", size(), ")"));
  }
  if (bytes < 0) return absl::InvalidArgumentError("Broadcast: negative size");
  Count(CollectiveKind::kBroadcast, rank() == root ? bytes * (size() - 1) : 0);
  return DoBroadcast(data, bytes, root);
}

absl::Status Communicator::Barrier() {
  trace::Span span("barrier", "collective");
  span.Arg("bytes", 0);
  span.Arg("peers", size());
  Count(CollectiveKind::kBarrier, 0);
  return DoBarrier();
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  if (color < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Split: color must be >= 0, got ", color));
  }
  return DoSplit(color, key);
}

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(int world_rank) { InitWorldRanks({world_rank}); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }

 protected:
  absl::Status DoAllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                           absl::Span<const int64_t> send_displs, void* recv,
                           absl::Span<const int64_t> recv_bytes,
                           absl::Span<const int64_t> recv_displs) override {
    if (send_bytes[0] != recv_bytes[0]) {
      return absl::InvalidArgumentError("AllToAllV: send and receive sizes differ");
    }
    if (send_bytes[0] > 0) {
      std::memmove(static_cast<char*>(recv) + recv_displs[0],
                   static_cast<const char*>(send) + send_displs[0], send_bytes[0]);
    }
    return absl::OkStatus();
  }
  absl::Status DoAllReduce(void*, int64_t, CommDType, ReduceOp) override {
    return absl::OkStatus();  // the sum (and average) of one contribution is itself
  }
  absl::Status DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                            absl::Span<const int64_t>,
                            absl::Span<const int64_t> recv_displs) override {
    if (send_bytes > 0) {
      std::memmove(static_cast<char*>(recv) + recv_displs[0], send, send_bytes);
    }
    return absl::OkStatus();
  }
  absl::Status DoBroadcast(void*, int64_t, int) override { return absl::OkStatus(); }
  absl::Status DoBarrier() override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override {
    return std::unique_ptr<Communicator>(new SingleProcessCommunicator(world_ranks()[0]));
  }
};

}  // namespace

std::unique_ptr<Communicator> CreateSingleProcessCommunicator() {
  return std::unique_ptr<Communicator>(new SingleProcessCommunicator(0));
}

}  // namespace tessera
