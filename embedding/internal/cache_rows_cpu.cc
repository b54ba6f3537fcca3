// CPU twins of the row-cache copies (contract in embedding/cache_rows.h): one memcpy per row,
// rows split over the pool's threads when there are many.
#include <cstring>

#include "core/parallel.h"
#include "embedding/internal/cache_rows_kernels.h"

namespace tessera::embedding_internal {
namespace {

constexpr int64_t kRowsPerTask = 1024;

}  // namespace

absl::Status GatherCacheRowsCpu(const DeviceContext&, const CacheRowsArgs& a) {
  const char* base = static_cast<const char*>(a.base);
  char* packed = static_cast<char*>(a.packed);
  const size_t rb = static_cast<size_t>(a.row_bytes);
  ParallelFor(a.n, kRowsPerTask, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(packed + i * rb, base + a.slots[i] * a.row_bytes, rb);
    }
  });
  return absl::OkStatus();
}

absl::Status ScatterCacheRowsCpu(const DeviceContext&, const CacheRowsArgs& a) {
  char* base = static_cast<char*>(a.base);
  const char* packed = static_cast<const char*>(a.packed);
  const size_t rb = static_cast<size_t>(a.row_bytes);
  ParallelFor(a.n, kRowsPerTask, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(base + a.slots[i] * a.row_bytes, packed + i * rb, rb);
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::embedding_internal
