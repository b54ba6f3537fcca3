#include "embedding/internal/radix_sort.h"

#include <algorithm>

#include "embedding/internal/cpu_parallel.h"

namespace tessera::embedding_internal {
namespace {
// 11-bit digits: 2048 counters per chunk (16 KiB) stay in L1, and 3 passes cover 33 slot bits.
constexpr int kMaxDigitBits = 11;
// Below this many keys per chunk the second thread costs more than it saves (a sleeping pool;
// ScaledMinChunk when it spins, core/parallel.h).
constexpr int64_t kMinChunk = 16384;
}  // namespace

int64_t* RadixSortBits(int64_t* keys, int64_t* tmp, int64_t n, int lo_bit, int hi_bit,
                       std::vector<int64_t>* histogram) {
  const int bits = hi_bit - lo_bit;
  if (bits <= 0 || n <= 1) return keys;
  const int passes = (bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int digit_bits = (bits + passes - 1) / passes;
  const int64_t radix = int64_t{1} << digit_bits;
  const uint64_t mask = static_cast<uint64_t>(radix - 1);
  const int chunks = NumChunks(n, ScaledMinChunk(kMinChunk));
  if (static_cast<int64_t>(histogram->size()) < chunks * radix) histogram->resize(chunks * radix);
  int64_t* hist = histogram->data();

  int64_t* src = keys;
  int64_t* dst = tmp;
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = lo_bit + pass * digit_bits;
    auto count = [&](int c) {
      int64_t begin, end;
      ChunkRange(n, chunks, c, &begin, &end);
      int64_t* h = hist + c * radix;
      std::fill(h, h + radix, 0);
      for (int64_t i = begin; i < end; ++i) ++h[(static_cast<uint64_t>(src[i]) >> shift) & mask];
    };
    RunChunks(chunks, count);
    // Exclusive prefix in (digit, chunk) order: chunk c's keys of digit d land after those of
    // chunks < c, which is what keeps the sort stable across chunks.
    int64_t sum = 0;
    for (int64_t d = 0; d < radix; ++d) {
      for (int c = 0; c < chunks; ++c) {
        int64_t v = hist[c * radix + d];
        hist[c * radix + d] = sum;
        sum += v;
      }
    }
    auto scatter = [&](int c) {
      int64_t begin, end;
      ChunkRange(n, chunks, c, &begin, &end);
      int64_t* h = hist + c * radix;
      for (int64_t i = begin; i < end; ++i) {
        int64_t k = src[i];
        dst[h[(static_cast<uint64_t>(k) >> shift) & mask]++] = k;
      }
    };
    RunChunks(chunks, scatter);
    std::swap(src, dst);
  }
  return src;
}

}  // namespace tessera::embedding_internal
