// How the CUDA backward (SumRunsKernel in embedding/pooled_lookup_cuda.cu) cuts a run of equal
// slots into bounded pieces. Pure functions (TESSERA_HD), so the CPU test
// (tests/embedding/run_pieces_test.cc) checks the kernel's arithmetic without a GPU.
//
// A run is the entries [eb, ee) of the sorted key array that hold one slot, in (source, bag,
// position) order. A hot row can own ~10^5 of them, and one thread group walking them in order
// would serialise the backward, so the run is summed as
//   piece 0 + piece 1 + ... + piece P-1,  piece k = entries [eb + 256k, min(ee, eb + 256(k+1)))
// each piece in entry order. The cuts are RELATIVE TO THE RUN'S OWN START: the pieces, and so the
// summed bits, depend only on the run's own entries, not on where the run sits in the sorted
// array. That position is the number of entries with smaller keys: it changes with the slot
// numbering (an HBM cache hands out slots in first-appearance order, the whole table uses the
// row) and with the tables that share a fused pass. Cutting at absolute multiples of 256 (the
// first version) made an HBM-cached table train to other bits than the same table whole.
//
// Pieces 1.. of every run ("extra pieces") are numbered globally: run r's extra pieces take the
// numbers [excl_r, excl_r + RunExtraPieces(len_r)), excl_r the exclusive prefix sum over the runs
// before it. The kernel keeps the inclusive prefix sum per ENTRY (RunExtraPieces at a run's head,
// 0 elsewhere), so a scan over the n entries suffices, without the device-side run count; the
// total is at most n / 256, the room of the chunk partials.
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace tessera::embedding_internal {

constexpr int64_t kRunPieceEntries = 256;

// Pieces after the first of a run of `len` entries: ceil(len / 256) - 1 (0 for len <= 256).
TESSERA_HD_INLINE int64_t RunExtraPieces(int64_t len) {
  return len > 0 ? (len - 1) / kRunPieceEntries : 0;
}

struct EntryRange {
  int64_t begin, end;
};

// Piece k of the run [eb, ee).
TESSERA_HD_INLINE EntryRange RunPiece(int64_t eb, int64_t ee, int64_t k) {
  const int64_t b = eb + k * kRunPieceEntries;
  const int64_t e = b + kRunPieceEntries;
  return EntryRange{b, e < ee ? e : ee};
}

// Extra piece number `item` given `scan`, the inclusive prefix sum over the n entries of
// (RunExtraPieces of its run at a run's head, 0 elsewhere): the head entry of its run (the
// smallest i with scan[i] > item) and its piece index k >= 1 within that run. REQUIRES
// 0 <= item < scan[n - 1].
struct ExtraPiece {
  int64_t head;
  int64_t k;
};
template <typename Int>
TESSERA_HD_INLINE ExtraPiece FindExtraPiece(const Int* scan, int64_t n, int64_t item) {
  int64_t lo = 0, hi = n - 1;  // answer in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(scan[mid]) > item)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int64_t before = lo > 0 ? static_cast<int64_t>(scan[lo - 1]) : 0;  // excl of its run
  return ExtraPiece{lo, item - before + 1};
}

// The global number of extra piece k >= 1 of the run whose head entry is `head`, whose run has
// `extra` = RunExtraPieces(len) extra pieces: excl + k - 1 with excl = scan[head] - extra.
template <typename Int>
TESSERA_HD_INLINE int64_t ExtraPieceNumber(const Int* scan, int64_t head, int64_t extra,
                                           int64_t k) {
  return static_cast<int64_t>(scan[head]) - extra + k - 1;
}

}  // namespace tessera::embedding_internal
