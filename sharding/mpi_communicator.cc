// MPI backend. Counts and displacements are int in MPI 3; calls are checked to fit, and a
// collective that would need more than 2 GiB per peer returns an error instead of truncating.
#include "sharding/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/scratch.h"
#include "core/status.h"
#include "sharding/peer_watchdog.h"

namespace tessera {
namespace {

absl::Status MpiError(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(call, " failed: ", std::string(text, len)));
}

#define TESSERA_MPI(call)                                                        \
  do {                                                                           \
    int tessera_mpi_rc_ = (call);                                                \
    if (tessera_mpi_rc_ != MPI_SUCCESS) return MpiError(#call, tessera_mpi_rc_); \
  } while (0)

absl::Status ToInts(const char* what, absl::Span<const int64_t> in, std::vector<int>* out) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] > INT_MAX) {
      return absl::UnimplementedError(
          absl::StrCat(what, ": ", in[i], " bytes for one peer exceed MPI's 2 GiB limit per call"));
    }
    (*out)[i] = static_cast<int>(in[i]);
  }
  return absl::OkStatus();
}

template <typename T>
void SumInRankOrder(const T* blocks, int p, int64_t n, T* out) {
  // out = blocks[0] + blocks[1] + ... in this order, element by element.
  std::memcpy(out, blocks, n * sizeof(T));
  for (int q = 1; q < p; ++q) {
    const T* b = blocks + q * n;
    for (int64_t i = 0; i < n; ++i) out[i] += b[i];
  }
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Group group, world_group;
    MPI_Comm_group(comm_, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    std::vector<int> mine(size_), world(size_);
    for (int i = 0; i < size_; ++i) mine[i] = i;
    MPI_Group_translate_ranks(group, size_, mine.data(), world_group, world.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    InitWorldRanks(std::move(world));
    CollectiveWait wait("MPI_Comm_dup", world_ranks());
    // Channels of the nonblocking collectives (see AsyncOp): collective, like the constructor.
    MPI_Comm_dup(comm_, &async_comm_);
    MPI_Comm_dup(comm_, &gather_comm_);
    MPI_Comm_set_errhandler(async_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(gather_comm_, MPI_ERRORS_RETURN);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Buffers of collectives still in flight belong to their owners: finish them first.
    while (!inflight_.empty()) {
      (void)WaitFor(inflight_.front().get());
      Progress();
    }
    MPI_Comm_free(&gather_comm_);
    MPI_Comm_free(&async_comm_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

 protected:
  absl::Status DoAllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                           absl::Span<const int64_t> send_displs, void* recv,
                           absl::Span<const int64_t> recv_bytes,
                           absl::Span<const int64_t> recv_displs) override {
    std::vector<int> sc, sd, rc, rd;
    CollectiveWait wait("AllToAllV", world_ranks());
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", send_bytes, &sc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", send_displs, &sd));
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", recv_bytes, &rc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", recv_displs, &rd));
    // MPI wants non-null buffers on some transports even for zero bytes.
    char dummy = 0;
    TESSERA_MPI(MPI_Alltoallv(send ? send : &dummy, sc.data(), sd.data(), MPI_BYTE,
                              recv ? recv : &dummy, rc.data(), rd.data(), MPI_BYTE, comm_));
    return absl::OkStatus();
  }

  absl::Status DoAllReduce(void* data, int64_t count, CommDType dtype, ReduceOp op) override {
    CollectiveWait wait("AllReduce", world_ranks());
    if (size_ == 1 || count == 0) return absl::OkStatus();
    switch (dtype) {
      case CommDType::kF32:
        return OrderedAllReduce(static_cast<float*>(data), count, op);
      case CommDType::kF64:
        return OrderedAllReduce(static_cast<double*>(data), count, op);
      case CommDType::kI64: {
        if (count > INT_MAX) return absl::UnimplementedError("AllReduce: count exceeds INT_MAX");
        TESSERA_MPI(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                                  comm_));
        if (op == ReduceOp::kAvg) {
          auto* d = static_cast<int64_t*>(data);
          for (int64_t i = 0; i < count; ++i) d[i] /= size_;
        }
        return absl::OkStatus();
      }
      case CommDType::kU8:
        break;
    }
    return absl::InvalidArgumentError("AllReduce: unsupported dtype");
  }

  absl::Status DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                            absl::Span<const int64_t> recv_bytes,
                            absl::Span<const int64_t> recv_displs) override {
    std::vector<int> rc, rd;
    CollectiveWait wait("AllGatherV", world_ranks());
    TESSERA_RETURN_IF_ERROR(ToInts("AllGatherV", recv_bytes, &rc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllGatherV", recv_displs, &rd));
    char dummy = 0;
    TESSERA_MPI(MPI_Allgatherv(send ? send : &dummy, static_cast<int>(send_bytes), MPI_BYTE,
                               recv ? recv : &dummy, rc.data(), rd.data(), MPI_BYTE, comm_));
    return absl::OkStatus();
  }

  absl::Status DoBroadcast(void* data, int64_t bytes, int root) override {
    CollectiveWait wait("Broadcast", world_ranks());
    char* p = static_cast<char*>(data);
    while (bytes > 0) {  // chunks of at most 1 GiB (MPI's int count)
      int n = static_cast<int>(std::min<int64_t>(bytes, int64_t{1} << 30));
      TESSERA_MPI(MPI_Bcast(p, n, MPI_BYTE, root, comm_));
      p += n;
      bytes -= n;
    }
    return absl::OkStatus();
  }

  absl::Status DoBarrier() override {
    CollectiveWait wait("Barrier", world_ranks());
    TESSERA_MPI(MPI_Barrier(comm_));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override {
    CollectiveWait wait("Split", world_ranks());
    MPI_Comm sub;
    TESSERA_MPI(MPI_Comm_split(comm_, color, key, &sub));
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub));
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>> DoStartAllToAllV(
      const void* send, absl::Span<const int64_t> send_bytes, absl::Span<const int64_t> send_displs,
      void* recv, absl::Span<const int64_t> recv_bytes,
      absl::Span<const int64_t> recv_displs) override {
    auto op = std::make_shared<AsyncOp>();
    op->reduce = false;
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", send_bytes, &op->sc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", send_displs, &op->sd));
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", recv_bytes, &op->rc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllToAllV", recv_displs, &op->rd));
    TESSERA_MPI(MPI_Ialltoallv(send ? send : &op->dummy, op->sc.data(), op->sd.data(), MPI_BYTE,
                               recv ? recv : &op->dummy, op->rc.data(), op->rd.data(), MPI_BYTE,
                               async_comm_, &op->req));
    return Enqueue(std::move(op));
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>> DoStartAllReduce(void* data, int64_t count,
                                                                      CommDType dtype,
                                                                      ReduceOp op) override {
    if (size_ == 1 || count == 0 || (dtype != CommDType::kF32 && dtype != CommDType::kF64)) {
      return Communicator::DoStartAllReduce(data, count, dtype, op);
    }
    // Stage 1 (reduce-scatter as an all-to-all of chunks) starts now on async_comm_; stage 2
    // (the all-gather of the reduced chunks) starts once stage 1 is done, on gather_comm_.
    auto a = std::make_shared<AsyncOp>();
    a->reduce = true;
    a->data = static_cast<char*>(data);
    a->elem = static_cast<int>(CommDTypeSize(dtype));
    a->dtype = dtype;
    a->op = op;
    const int p = size_;
    a->begin.resize(p + 1);
    for (int r = 0; r <= p; ++r) a->begin[r] = count * r / p;
    const int64_t mine = a->begin[rank_ + 1] - a->begin[rank_];
    std::vector<int64_t> sb(p), sd(p), rb(p), rd(p);
    for (int r = 0; r < p; ++r) {
      sb[r] = (a->begin[r + 1] - a->begin[r]) * a->elem;
      sd[r] = a->begin[r] * a->elem;
      rb[r] = mine * a->elem;
      rd[r] = r * mine * a->elem;
    }
    TESSERA_RETURN_IF_ERROR(ToInts("AllReduce", sb, &a->sc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllReduce", sd, &a->sd));
    TESSERA_RETURN_IF_ERROR(ToInts("AllReduce", rb, &a->rc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllReduce", rd, &a->rd));
    a->blocks.resize(static_cast<size_t>(p * mine * a->elem));
    TESSERA_MPI(MPI_Ialltoallv(data, a->sc.data(), a->sd.data(), MPI_BYTE,
                               a->blocks.empty() ? &a->dummy : a->blocks.data(), a->rc.data(),
                               a->rd.data(), MPI_BYTE, async_comm_, &a->req));
    return Enqueue(std::move(a));
  }

 private:
  // A nonblocking collective in flight. All-to-all: one MPI request. All-reduce: stage 1
  // (Ialltoallv of chunks) then, when it is done, the rank-ordered sum of this rank's chunk and
  // stage 2 (Iallgatherv). Stage 2s start strictly in the order the all-reduces were started, so
  // every rank issues the same sequence on gather_comm_ whatever order its tests happen in.
  struct AsyncOp {
    bool reduce = false;
    MPI_Request req = MPI_REQUEST_NULL;
    int stage = 1;             // 1, 2 (all-reduce), 3 = finished
    bool stage1_done = false;  // all-reduce: stage 1 arrived, waiting for its turn for stage 2
    absl::Status status;
    std::vector<int> sc, sd, rc, rd;
    char dummy = 0;
    // All-reduce.
    char* data = nullptr;
    int elem = 4;
    CommDType dtype = CommDType::kF32;
    ReduceOp op = ReduceOp::kSum;
    std::vector<int64_t> begin;
    std::vector<char> blocks;
    bool finished() const { return stage == 3; }
  };

  class Pending final : public PendingCollective {
   public:
    Pending(MpiCommunicator* comm, std::shared_ptr<AsyncOp> op) : comm_(comm), op_(std::move(op)) {}
    ~Pending() override {
      if (!op_->finished()) (void)comm_->WaitFor(op_.get());
    }
    absl::StatusOr<bool> Test() override {
      comm_->Progress();
      if (!op_->finished()) return false;
      if (!op_->status.ok()) return op_->status;
      return true;
    }
    absl::Status Wait() override { return comm_->WaitFor(op_.get()); }

   private:
    MpiCommunicator* comm_;
    std::shared_ptr<AsyncOp> op_;
  };

  std::unique_ptr<PendingCollective> Enqueue(std::shared_ptr<AsyncOp> op) {
    inflight_.push_back(op);
    return std::make_unique<Pending>(this, std::move(op));
  }

  void Fail(AsyncOp& op, absl::Status status) {
    op.status = std::move(status);
    op.stage = 3;
  }

  // Stage 1 of an all-reduce is done: sum this rank's chunk in rank order, start stage 2.
  void StartGather(AsyncOp& a) {
    const int p = size_;
    const int64_t mine = a.begin[rank_ + 1] - a.begin[rank_];
    if (mine > 0) {
      if (a.dtype == CommDType::kF32) {
        ReduceChunk(reinterpret_cast<const float*>(a.blocks.data()), p, mine, a.op,
                    reinterpret_cast<float*>(a.data) + a.begin[rank_]);
      } else {
        ReduceChunk(reinterpret_cast<const double*>(a.blocks.data()), p, mine, a.op,
                    reinterpret_cast<double*>(a.data) + a.begin[rank_]);
      }
    }
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a.data, a.sc.data(), a.sd.data(),
                             MPI_BYTE, gather_comm_, &a.req);
    if (rc != MPI_SUCCESS) return Fail(a, MpiError("MPI_Iallgatherv", rc));
    a.stage = 2;
  }

  template <typename T>
  static void ReduceChunk(const T* blocks, int p, int64_t n, ReduceOp op, T* out) {
    SumInRankOrder(blocks, p, n, out);
    if (op == ReduceOp::kAvg) {
      for (int64_t i = 0; i < n; ++i) out[i] /= static_cast<T>(p);
    }
  }

  // Tests everything in flight without blocking and starts the stage 2s whose turn has come.
  void Progress() {
    bool gather_blocked = false;  // an earlier all-reduce has not started its stage 2 yet
    for (auto& op : inflight_) {
      AsyncOp& a = *op;
      if (a.finished()) continue;
      if (a.stage == 1 && !a.stage1_done) {
        int flag = 0;
        int rc = MPI_Test(&a.req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          Fail(a, MpiError("MPI_Test", rc));
          continue;
        }
        if (flag) {
          if (!a.reduce) {
            a.stage = 3;
            continue;
          }
          a.stage1_done = true;
        }
      }
      if (a.reduce && a.stage == 1) {
        if (a.stage1_done && !gather_blocked) {
          StartGather(a);
        } else {
          gather_blocked = true;
          continue;
        }
      }
      if (a.stage == 2) {
        int flag = 0;
        int rc = MPI_Test(&a.req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          Fail(a, MpiError("MPI_Test", rc));
        } else if (flag) {
          a.stage = 3;
        }
      }
    }
    while (!inflight_.empty() && inflight_.front()->finished()) inflight_.pop_front();
  }

  // Blocks until `target` is finished, waiting on the earliest unfinished request each time
  // (the one everything after it may depend on).
  absl::Status WaitFor(AsyncOp* target) {
    CollectiveWait wait("Wait(nonblocking)", world_ranks());
    while (true) {
      Progress();
      if (target->finished()) return target->status;
      AsyncOp* head = nullptr;
      for (auto& op : inflight_) {
        if (!op->finished()) {
          head = op.get();
          break;
        }
      }
      if (head == nullptr) return target->status;
      if (head->stage == 1 && head->stage1_done) continue;  // Progress starts its stage 2
      int rc = MPI_Wait(&head->req, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        Fail(*head, MpiError("MPI_Wait", rc));
      } else if (head->stage == 1 && head->reduce) {
        head->stage1_done = true;
      } else {
        head->stage = 3;
      }
    }
  }

  MPI_Comm async_comm_ = MPI_COMM_NULL;
  MPI_Comm gather_comm_ = MPI_COMM_NULL;
  std::deque<std::shared_ptr<AsyncOp>> inflight_;
  // Reduce-scatter as an all-to-all of chunks (rank q's chunk r goes to rank r, which sums the
  // P contributions in rank order), then an all-gather of the reduced chunks. Moves the same
  // 2 (P-1)/P of the buffer as a ring all-reduce and fixes the summation order, which MPI's
  // MPI_Allreduce does not promise.
  template <typename T>
  absl::Status OrderedAllReduce(T* data, int64_t count, ReduceOp op) {
    const int p = size_;
    std::vector<int64_t> begin(p + 1);
    for (int r = 0; r <= p; ++r) begin[r] = count * r / p;
    const int64_t mine = begin[rank_ + 1] - begin[rank_];
    std::vector<int64_t> sb(p), sd(p), rb(p), rd(p);
    for (int r = 0; r < p; ++r) {
      sb[r] = (begin[r + 1] - begin[r]) * sizeof(T);
      sd[r] = begin[r] * sizeof(T);
      rb[r] = mine * sizeof(T);
      rd[r] = r * mine * sizeof(T);
    }
    // The received chunks go to a scratch buffer kept across calls: a fresh one per call
    // page-faulted its bytes in every time (a data-parallel table's 52 MB gradient all-reduce
    // spent most of its time zeroing new pages), and did so for some sizes and not others, as
    // glibc's mmap threshold decided.
    const size_t need = static_cast<size_t>(p) * mine * sizeof(T);
    if (reduce_scratch_.size() < need) {
      ReserveScratch(&reduce_scratch_, need);  // not resize alone: it copies the old chunks
      reduce_scratch_.resize(need);
    }
    T* blocks = reinterpret_cast<T*>(reduce_scratch_.data());
    TESSERA_RETURN_IF_ERROR(DoAllToAllV(data, sb, sd, blocks, rb, rd));
    // The sum lands at this rank's offset in `data` (its own chunk was copied into `blocks`):
    // the in-place all-gather below sends it from there.
    T* reduced = data + begin[rank_];
    if (mine > 0) SumInRankOrder(blocks, p, mine, reduced);
    if (op == ReduceOp::kAvg) {
      for (int64_t i = 0; i < mine; ++i) reduced[i] /= static_cast<T>(p);
    }
    std::vector<int> gc(p), gd(p);
    for (int r = 0; r < p; ++r) {
      if (sb[r] > INT_MAX || sd[r] > INT_MAX) {
        return absl::UnimplementedError("AllReduce: buffer exceeds MPI's 2 GiB limit");
      }
      gc[r] = static_cast<int>(sb[r]);
      gd[r] = static_cast<int>(sd[r]);
    }
    TESSERA_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, gc.data(), gd.data(),
                               MPI_BYTE, comm_));
    return absl::OkStatus();
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  // OrderedAllReduce's received chunks (the largest call's bytes so far; one thread calls MPI:
  // MPI_THREAD_FUNNELED).
  std::vector<unsigned char> reduce_scratch_;
};

}  // namespace

absl::Status MpiInitialize(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::OkStatus();
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return MpiError("MPI_Init_thread", rc);
  return absl::OkStatus();
}

absl::Status MpiFinalize() {
  if (!MpiActive()) return absl::OkStatus();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> everyone(size);
  for (int r = 0; r < size; ++r) everyone[r] = r;
  int rc = 0;
  {
    CollectiveWait wait("MPI_Finalize", everyone);
    rc = MPI_Finalize();
  }
  StopPeerWatchdog();
  if (rc != MPI_SUCCESS) return MpiError("MPI_Finalize", rc);
  return absl::OkStatus();
}

bool MpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int MpiWorldRank() {
  int rank = 0;
  if (MpiActive()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int MpiWorldSize() {
  int size = 1;
  if (MpiActive()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

bool UnderMpiLauncher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                          "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

void MpiAbort(int code) {
  if (MpiActive()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiWorldCommunicator() {
  if (!MpiActive()) {
    return absl::FailedPreconditionError(
        "CreateMpiWorldCommunicator: MPI is not initialised (call MpiInitialize first)");
  }
  MPI_Comm dup;
  TESSERA_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  return std::unique_ptr<Communicator>(new MpiCommunicator(dup));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateWorldCommunicator() {
  if (MpiActive()) return CreateMpiWorldCommunicator();
  return CreateSingleProcessCommunicator();
}

}  // namespace tessera
