// Checks and dispatch of the row-cache copies (embedding/cache_rows.h); the only place that
// knows whether the CUDA twins are built.
#include "embedding/cache_rows.h"

#include "absl/strings/str_cat.h"
#include "embedding/internal/cache_rows_kernels.h"

namespace tessera {
namespace {

absl::Status Check(const char* op, const CacheRowsArgs& a) {
  if (a.row_bytes <= 0 || a.n < 0 || a.capacity < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": row_bytes ", a.row_bytes, ", n ", a.n,
                                                   ", capacity ", a.capacity));
  }
  if (a.n > 0 && (a.base == nullptr || a.slots == nullptr || a.packed == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null base, slots or packed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GatherCacheRows(const DeviceContext& ctx, const CacheRowsArgs& args) {
  if (absl::Status st = Check("GatherCacheRows", args); !st.ok()) return st;
  if (ctx.is_cuda()) {
#if TESSERA_HAVE_CUDA
    return embedding_internal::GatherCacheRowsCuda(ctx, args);
#else
    return absl::UnimplementedError("GatherCacheRows: this build has no CUDA path");
#endif
  }
  return embedding_internal::GatherCacheRowsCpu(ctx, args);
}

absl::Status ScatterCacheRows(const DeviceContext& ctx, const CacheRowsArgs& args) {
  if (absl::Status st = Check("ScatterCacheRows", args); !st.ok()) return st;
  if (ctx.is_cuda()) {
#if TESSERA_HAVE_CUDA
    return embedding_internal::ScatterCacheRowsCuda(ctx, args);
#else
    return absl::UnimplementedError("ScatterCacheRows: this build has no CUDA path");
#endif
  }
  return embedding_internal::ScatterCacheRowsCpu(ctx, args);
}

}  // namespace tessera
