// MPI backend. Counts and displacements are int in MPI 3; calls are checked to fit, and a
// collective that would need more than 2 GiB per peer returns an error instead of truncating.
#include "sharding/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {
namespace {

absl::Status MpiError(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(call, " failed: ", std::string(text, len)));
}

#define TESSERA_MPI(call)                                  \
  do {                                                     \
    int tessera_mpi_rc_ = (call);                          \
    if (tessera_mpi_rc_ != MPI_SUCCESS) return MpiError(#call, tessera_mpi_rc_); \
  } while (0)

absl::Status ToInts(const char* what, absl::Span<const int64_t> in, std::vector<int>* out) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] > INT_MAX) {
      return absl::UnimplementedError(absl::StrCat(
          what, ": ", in[i], " bytes for one peer exceed MPI's 2 GiB limit per call"));
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
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
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
    if (size_ == 1 || count == 0) return absl::OkStatus();
    switch (dtype) {
      case CommDType::kF32: return OrderedAllReduce(static_cast<float*>(data), count, op);
      case CommDType::kF64: return OrderedAllReduce(static_cast<double*>(data), count, op);
      case CommDType::kI64: {
        if (count > INT_MAX) return absl::UnimplementedError("AllReduce: count exceeds INT_MAX");
        TESSERA_MPI(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_INT64_T,
                                  MPI_SUM, comm_));
        if (op == ReduceOp::kAvg) {
          auto* d = static_cast<int64_t*>(data);
          for (int64_t i = 0; i < count; ++i) d[i] /= size_;
        }
        return absl::OkStatus();
      }
      case CommDType::kU8: break;
    }
    return absl::InvalidArgumentError("AllReduce: unsupported dtype");
  }

  absl::Status DoAllGatherV(const void* send, int64_t send_bytes, void* recv,
                            absl::Span<const int64_t> recv_bytes,
                            absl::Span<const int64_t> recv_displs) override {
    std::vector<int> rc, rd;
    TESSERA_RETURN_IF_ERROR(ToInts("AllGatherV", recv_bytes, &rc));
    TESSERA_RETURN_IF_ERROR(ToInts("AllGatherV", recv_displs, &rd));
    char dummy = 0;
    TESSERA_MPI(MPI_Allgatherv(send ? send : &dummy, static_cast<int>(send_bytes), MPI_BYTE,
                               recv ? recv : &dummy, rc.data(), rd.data(), MPI_BYTE, comm_));
    return absl::OkStatus();
  }

  absl::Status DoBroadcast(void* data, int64_t bytes, int root) override {
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
    TESSERA_MPI(MPI_Barrier(comm_));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override {
    MPI_Comm sub;
    TESSERA_MPI(MPI_Comm_split(comm_, color, key, &sub));
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub));
  }

 private:
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
    std::vector<T> blocks(static_cast<size_t>(p) * mine);
    TESSERA_RETURN_IF_ERROR(DoAllToAllV(data, sb, sd, blocks.data(), rb, rd));
    std::vector<T> reduced(mine);
    if (mine > 0) SumInRankOrder(blocks.data(), p, mine, reduced.data());
    if (op == ReduceOp::kAvg) {
      for (auto& v : reduced) v /= static_cast<T>(p);
    }
    // In-place all-gather: every rank's chunk lands at its offset in `data`.
    std::memcpy(data + begin[rank_], reduced.data(), mine * sizeof(T));
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
  int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) return MpiError("MPI_Finalize", rc);
  return absl::OkStatus();
}

bool MpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
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
