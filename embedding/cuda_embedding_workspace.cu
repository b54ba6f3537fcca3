// CudaEmbeddingWorkspace (embedding/pooled_lookup_cuda.h): the device buffers the CUDA backward
// and the id preprocessing reuse across steps, grown by half again when a batch outgrows them and
// freed stream-ordered.
#include <algorithm>

#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "embedding/internal/lookup_cuda_common.h"
#include "embedding/internal/run_pieces.h"
#include "embedding/pooled_lookup_cuda.h"

namespace tessera {

using embedding_internal::kRunPieceEntries;
using embedding_internal::lookup_cuda::Key;

CudaEmbeddingWorkspace::~CudaEmbeddingWorkspace() {
  // Stream-ordered frees: safe while kernels that use the buffers are still queued.
  for (void* p :
       {static_cast<void*>(keys_), static_cast<void*>(keys_alt_), static_cast<void*>(heads_),
        static_cast<void*>(run_ids_), static_cast<void*>(grad_rows_), static_cast<void*>(scales_),
        static_cast<void*>(unique_slots_), static_cast<void*>(run_starts_),
        static_cast<void*>(piece_scan_), static_cast<void*>(row_grads_), sort_temp_, scan_temp_,
        static_cast<void*>(counters_)}) {
    (void)CudaFreeAsync(ctx_, p);
  }
}

absl::Status CudaEmbeddingWorkspace::Grow(void** ptr, size_t* capacity, size_t bytes) {
  if (*ptr != nullptr && *capacity >= bytes) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx_, *ptr));
  *ptr = nullptr;
  *capacity = 0;
  TESSERA_ASSIGN_OR_RETURN(*ptr, CudaMallocAsync(ctx_, bytes));
  *capacity = bytes;
  return absl::OkStatus();
}

absl::Status CudaEmbeddingWorkspace::Reserve(int64_t n, int64_t dim, size_t sort_temp_bytes,
                                             size_t scan_temp_bytes) {
  if (counters_ == nullptr) {
    TESSERA_ASSIGN_OR_RETURN(void* c, CudaMallocAsync(ctx_, 4 * sizeof(int64_t)));
    counters_ = static_cast<int64_t*>(c);
  }
  if (static_cast<size_t>(n) > cap_ids_) {
    // Grow by half again, so a slowly growing batch does not reallocate every step. The +1
    // covers run_starts' end entry.
    const size_t cap = std::max<size_t>(static_cast<size_t>(n), cap_ids_ + cap_ids_ / 2);
    void** arrays[] = {
        reinterpret_cast<void**>(&keys_),         reinterpret_cast<void**>(&keys_alt_),
        reinterpret_cast<void**>(&heads_),        reinterpret_cast<void**>(&run_ids_),
        reinterpret_cast<void**>(&grad_rows_),    reinterpret_cast<void**>(&scales_),
        reinterpret_cast<void**>(&unique_slots_), reinterpret_cast<void**>(&run_starts_),
        reinterpret_cast<void**>(&piece_scan_)};
    const size_t elem_bytes[] = {sizeof(Key),     sizeof(Key),     sizeof(int),
                                 sizeof(int),     sizeof(float*),  sizeof(float),
                                 sizeof(int64_t), sizeof(int64_t), sizeof(int)};
    constexpr int kArrays = sizeof(elem_bytes) / sizeof(elem_bytes[0]);
    static_assert(kArrays == sizeof(arrays) / sizeof(arrays[0]));
    cap_ids_ = 0;
    for (int i = 0; i < kArrays; ++i) {
      TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx_, *arrays[i]));
      *arrays[i] = nullptr;
    }
    for (int i = 0; i < kArrays; ++i) {
      TESSERA_ASSIGN_OR_RETURN(*arrays[i], CudaMallocAsync(ctx_, elem_bytes[i] * (cap + 1)));
    }
    cap_ids_ = cap;
  }
  void* rg = row_grads_;
  // Row gradients [n, dim], then the partials of long runs' extra pieces: at most
  // ceil(n / kRunPieceEntries) of them (a run of L entries has ceil(L / 256) - 1), [that, dim].
  const int64_t floats = (n + (n + kRunPieceEntries - 1) / kRunPieceEntries) * dim;
  TESSERA_RETURN_IF_ERROR(Grow(&rg, &cap_floats_, sizeof(float) * std::max<int64_t>(1, floats)));
  row_grads_ = static_cast<float*>(rg);
  TESSERA_RETURN_IF_ERROR(Grow(&sort_temp_, &cap_sort_, std::max<size_t>(1, sort_temp_bytes)));
  TESSERA_RETURN_IF_ERROR(Grow(&scan_temp_, &cap_scan_, std::max<size_t>(1, scan_temp_bytes)));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaEmbeddingWorkspace::NumUniqueOnHost() {
  int64_t n = 0;
  if (counters_ == nullptr) return n;
  TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx_, &n, counters_, sizeof(n)));
  return n;
}

}  // namespace tessera
