// Communicator: the collectives Tessera's distributed path needs, over a fixed set of ranks.
// The only place (with its backends) that knows there is more than one process.
//
// Backends:
//   - MPI (mpi_communicator.h): host memory; the CPU transport and the bootstrap of the others.
//   - NCCL (nccl_communicator.h): device memory; bootstrapped over an MPI communicator.
//   - World of one (CreateSingleProcessCommunicator below): no MPI needed; collectives copy.
//
// Every collective is blocking and must be called by all ranks of the communicator in the same
// order with matching sizes (as in MPI). Buffers live in the backend's memory (host for MPI and
// the world of one, device for NCCL). Reductions are deterministic: a float or double sum adds the
// ranks' contributions in rank order 0, 1, ..., size-1 and every rank receives the same bits
// (NCCL: its own fixed order, see nccl_communicator.h).
//
// Byte counters: each collective adds to a per-kind counter the bytes this rank puts on the wire
// under the reference algorithm (see CollectiveStats), so a training step's traffic can be
// reported per collective (tessera-bench). Data a rank "sends" to itself is not counted.
//
// Nonblocking collectives (StartAllReduce, StartAllToAllV) return a PendingCollective that is
// finished by Test()/Wait(). They run on a channel of their own (the MPI backend duplicates its
// MPI communicator), so blocking collectives may be called while they are in flight; between
// themselves they must be started by all ranks in the same order. Their sums are the same bits as
// the blocking AllReduce's. The MPI backend makes progress whenever the calling process is inside
// MPI (any Test/Wait or any other collective); other backends run them to completion at Start.
//
// Thread-safety: one thread at a time per communicator (as MPI communicators without
// MPI_THREAD_MULTIPLE). A communicator and the communicators split from it are independent.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace tessera {

enum class CollectiveKind { kAllToAll = 0, kAllReduce, kAllGather, kBroadcast, kBarrier };
inline constexpr int kNumCollectiveKinds = 5;
const char* CollectiveKindName(CollectiveKind kind);

enum class ReduceOp { kSum, kAvg };
enum class CommDType { kF32, kF64, kI64, kU8 };
size_t CommDTypeSize(CommDType dtype);

// Bytes this rank sent and calls it made, per collective kind, since the last ResetStats.
// What counts as sent, for a communicator of P ranks:
//   all-to-all   the bytes addressed to the other P-1 ranks
//   all-reduce   2 (P-1)/P x the buffer (reduce-scatter then all-gather, rounded down)
//   all-gather   this rank's block x (P-1)
//   broadcast    the buffer x (P-1) on the root, 0 elsewhere
//   barrier      0
// `peer_bytes[r]` splits the all-to-all bytes by destination rank r of this communicator, which
// shows which ranks a batch's all-to-all touches.
struct CollectiveStats {
  std::array<int64_t, kNumCollectiveKinds> bytes{};
  std::array<int64_t, kNumCollectiveKinds> calls{};
  std::vector<int64_t> peer_bytes;  // [size()], all-to-all only

  int64_t bytes_of(CollectiveKind kind) const { return bytes[static_cast<int>(kind)]; }
  int64_t calls_of(CollectiveKind kind) const { return calls[static_cast<int>(kind)]; }
  int64_t total_bytes() const;
};

// A collective started by Communicator::StartAllReduce / StartAllToAllV and not yet finished.
// Its buffers belong to the collective until Test() returns true or Wait() returns. Destroying an
// unfinished one waits for it (errors ignored). Must not outlive its communicator.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Advances the collectives in flight on the communicator without blocking; true once this one
  // is finished (then its error, if any, is returned instead).
  virtual absl::StatusOr<bool> Test() = 0;
  // Blocks until this one is finished.
  virtual absl::Status Wait() = 0;
};

// A PendingCollective that finished at Start (backends without nonblocking collectives).
class FinishedCollective final : public PendingCollective {
 public:
  explicit FinishedCollective(absl::Status status) : status_(std::move(status)) {}
  absl::StatusOr<bool> Test() override {
    if (!status_.ok()) return status_;
    return true;
  }
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "nccl" or "single".
  virtual std::string backend() const = 0;
  // The ranks of this communicator's members in the world it was split from (member i is world
  // rank world_ranks()[i]); identity for a world communicator.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // All-to-all with per-peer byte counts and displacements (each of size()): sends
  // send[send_displs[r] .. + send_bytes[r]) to rank r and receives rank r's block into
  // recv[recv_displs[r] .. + recv_bytes[r]). recv_bytes[r] must equal what rank r sends here.
  // Returns InvalidArgument for wrong span sizes or negative counts.
  absl::Status AllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                         absl::Span<const int64_t> send_displs, void* recv,
                         absl::Span<const int64_t> recv_bytes,
                         absl::Span<const int64_t> recv_displs);
  // The same in elements of T (counts and displacements in elements).
  template <typename T>
  absl::Status AllToAllV(const T* send, absl::Span<const int64_t> send_counts,
                         absl::Span<const int64_t> send_displs, T* recv,
                         absl::Span<const int64_t> recv_counts,
                         absl::Span<const int64_t> recv_displs);
  // Each rank sends send[r] to rank r and receives rank r's value in recv[r] (size() each):
  // the exchange of counts before an AllToAllV.
  absl::Status AllToAllCounts(absl::Span<const int64_t> send, absl::Span<int64_t> recv);

  // In-place all-reduce of `count` elements. kAvg divides the sum by size() (ints: truncating).
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op);
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op);
  absl::Status AllReduce(int64_t* data, int64_t count, ReduceOp op);

  // Nonblocking AllReduce of floats (sum or avg, in place; the same bits as AllReduce). `data`
  // must stay untouched until the returned collective is finished.
  absl::StatusOr<std::unique_ptr<PendingCollective>> StartAllReduce(float* data, int64_t count,
                                                                    ReduceOp op);
  // Nonblocking AllToAllV (bytes; as AllToAllV). Buffers as above; the spans are copied.
  absl::StatusOr<std::unique_ptr<PendingCollective>> StartAllToAllV(
      const void* send, absl::Span<const int64_t> send_bytes,
      absl::Span<const int64_t> send_displs, void* recv, absl::Span<const int64_t> recv_bytes,
      absl::Span<const int64_t> recv_displs);

  // Every rank contributes send_bytes bytes; rank r's block lands at recv[recv_displs[r]] on
  // every rank, and must be recv_bytes[r] long.
  absl::Status AllGatherV(const void* send, int64_t send_bytes, void* recv,
                          absl::Span<const int64_t> recv_bytes,
                          absl::Span<const int64_t> recv_displs);
  // All-gather of one int64 per rank (recv has size() entries).
  absl::Status AllGatherCounts(int64_t value, absl::Span<int64_t> recv);

  // Copies root's `bytes` bytes at `data` to every rank's `data`.
  absl::Status Broadcast(void* data, int64_t bytes, int root);
  absl::Status Barrier();

  // Collective over this communicator: ranks with the same `color` form a new communicator,
  // ordered by (key, rank). color must be >= 0. The new communicator has the same backend.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

  const CollectiveStats& stats() const { return stats_; }
  void ResetStats();

 protected:
  Communicator() = default;
  // Must be called by backends once the size is known (identity world ranks).
  void InitWorldRanks(std::vector<int> world_ranks);

  // Backend hooks: arguments are already checked and counted.
  virtual absl::Status DoAllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                                   absl::Span<const int64_t> send_displs, void* recv,
                                   absl::Span<const int64_t> recv_bytes,
                                   absl::Span<const int64_t> recv_displs) = 0;
  virtual absl::Status DoAllReduce(void* data, int64_t count, CommDType dtype, ReduceOp op) = 0;
  virtual absl::Status DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                                    absl::Span<const int64_t> recv_bytes,
                                    absl::Span<const int64_t> recv_displs) = 0;
  virtual absl::Status DoBroadcast(void* data, int64_t bytes, int root) = 0;
  virtual absl::Status DoBarrier() = 0;
  virtual absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) = 0;
  // Nonblocking hooks; the default runs the blocking hook and returns a FinishedCollective.
  virtual absl::StatusOr<std::unique_ptr<PendingCollective>> DoStartAllReduce(void* data,
                                                                              int64_t count,
                                                                              CommDType dtype,
                                                                              ReduceOp op);
  virtual absl::StatusOr<std::unique_ptr<PendingCollective>> DoStartAllToAllV(
      const void* send, absl::Span<const int64_t> send_bytes,
      absl::Span<const int64_t> send_displs, void* recv, absl::Span<const int64_t> recv_bytes,
      absl::Span<const int64_t> recv_displs);

 private:
  absl::Status CheckSpans(const char* what, size_t n) const;
  // Checks an all-to-all's spans and counts its bytes.
  absl::Status CheckAndCountAllToAll(absl::Span<const int64_t> send_bytes,
                                     absl::Span<const int64_t> send_displs,
                                     absl::Span<const int64_t> recv_bytes,
                                     absl::Span<const int64_t> recv_displs);
  void Count(CollectiveKind kind, int64_t bytes);

  std::vector<int> world_ranks_;
  CollectiveStats stats_;
};

// A communicator of one rank: collectives copy send to receive buffers (host memory).
std::unique_ptr<Communicator> CreateSingleProcessCommunicator();

template <typename T>
absl::Status Communicator::AllToAllV(const T* send, absl::Span<const int64_t> send_counts,
                                     absl::Span<const int64_t> send_displs, T* recv,
                                     absl::Span<const int64_t> recv_counts,
                                     absl::Span<const int64_t> recv_displs) {
  const int p = size();
  if (send_counts.size() != static_cast<size_t>(p) ||
      send_displs.size() != static_cast<size_t>(p) ||
      recv_counts.size() != static_cast<size_t>(p) ||
      recv_displs.size() != static_cast<size_t>(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllToAllV: expected ", p, " counts/displacements (one per rank)"));
  }
  std::vector<int64_t> b(4 * static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    b[r] = send_counts[r] * static_cast<int64_t>(sizeof(T));
    b[p + r] = send_displs[r] * static_cast<int64_t>(sizeof(T));
    b[2 * p + r] = recv_counts[r] * static_cast<int64_t>(sizeof(T));
    b[3 * p + r] = recv_displs[r] * static_cast<int64_t>(sizeof(T));
  }
  absl::Span<const int64_t> all(b);
  return AllToAllV(static_cast<const void*>(send), all.subspan(0, p), all.subspan(p, p),
                   static_cast<void*>(recv), all.subspan(2 * p, p), all.subspan(3 * p, p));
}

}  // namespace tessera
