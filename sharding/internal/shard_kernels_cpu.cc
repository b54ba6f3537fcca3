// CPU twins of sharding/internal/shard_kernels.h: plain loops over host memory, in the order
// the contracts state (the reference a CUDA twin is compared with). Single-threaded: the
// payloads of one step are small next to the lookup and the update, which embedding/ runs in
// parallel.
#include <algorithm>
#include <cstring>

#include "embedding/row_dtype.h"
#include "sharding/internal/shard_kernels.h"

namespace tessera::internal {

absl::Status PackSegmentsCpu(const DeviceContext&, const ByteSegment* segs, int64_t count,
                             char* dst) {
  for (int64_t i = 0; i < count; ++i) {
    // memcpy from null is undefined even for 0 bytes (an empty vector's data()).
    if (segs[i].bytes == 0) continue;
    std::memcpy(dst, segs[i].data, segs[i].bytes);
    dst += segs[i].bytes;
  }
  return absl::OkStatus();
}

absl::Status UnpackIdsCpu(const DeviceContext&, const int64_t* ids, int64_t count,
                          int64_t row_begin, int64_t* rows) {
  for (int64_t i = 0; i < count; ++i) rows[i] = ids[i] - row_begin;
  return absl::OkStatus();
}

absl::Status UnpackBagsCpu(const DeviceContext&, const int32_t* lengths, int64_t num_bags,
                           const int32_t* positions, int64_t num_positions, int64_t offset_base,
                           int64_t unique_base, int64_t* offsets, int64_t* indices) {
  int64_t at = offset_base;
  offsets[0] = at;
  for (int64_t i = 0; i < num_bags; ++i) offsets[i + 1] = at += lengths[i];
  for (int64_t j = 0; j < num_positions; ++j) indices[j] = unique_base + positions[j];
  return absl::OkStatus();
}

absl::Status MapIndicesCpu(const DeviceContext&, const int64_t* table, int64_t count,
                           int64_t* indices) {
  for (int64_t j = 0; j < count; ++j) indices[j] = table[indices[j]];
  return absl::OkStatus();
}

absl::Status FillFloatsCpu(const DeviceContext&, float value, int64_t count, float* dst) {
  std::fill(dst, dst + count, value);
  return absl::OkStatus();
}

absl::Status AddPartialsCpu(const DeviceContext&, const float* src, int64_t rows, int64_t width,
                            float* dst, int64_t dst_stride, bool first) {
  if (first) {
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(dst + i * dst_stride, src + i * width, width * sizeof(float));
    }
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < width; ++c) dst[i * dst_stride + c] += src[i * width + c];
  }
  return absl::OkStatus();
}

absl::Status ScaleBagsByLengthCpu(const DeviceContext&, const int64_t* offsets, int64_t num_bags,
                                  int64_t dim, float* out, int64_t out_stride) {
  for (int64_t i = 0; i < num_bags; ++i) {
    const int64_t len = offsets[i + 1] - offsets[i];
    if (len == 0) continue;
    const float inv = 1.0f / static_cast<float>(len);
    float* row = out + i * out_stride;
    for (int64_t c = 0; c < dim; ++c) row[c] *= inv;
  }
  return absl::OkStatus();
}

absl::Status PackGradSliceCpu(const DeviceContext&, const float* grad, int64_t grad_stride,
                              const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                              float* dst) {
  for (int64_t i = 0; i < num_bags; ++i) {
    const float* g = grad + i * grad_stride;
    float* p = dst + i * width;
    const int64_t len = mean_offsets ? mean_offsets[i + 1] - mean_offsets[i] : 0;
    if (len > 0) {
      const float inv = 1.0f / static_cast<float>(len);
      for (int64_t c = 0; c < width; ++c) p[c] = g[c] * inv;
    } else {
      std::memcpy(p, g, width * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status FloatsTo16Cpu(const DeviceContext&, PayloadDType dtype, const float* src,
                           int64_t count, uint16_t* dst) {
  if (dtype == PayloadDType::kF16) {
    for (int64_t i = 0; i < count; ++i) dst[i] = row_dtype::FloatToHalf(src[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) dst[i] = row_dtype::FloatToBf16(src[i]);
  }
  return absl::OkStatus();
}

absl::Status FloatsFrom16Cpu(const DeviceContext&, PayloadDType dtype, const uint16_t* src,
                             int64_t count, float* dst) {
  if (dtype == PayloadDType::kF16) {
    for (int64_t i = 0; i < count; ++i) dst[i] = row_dtype::HalfToFloat(src[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) dst[i] = row_dtype::Bf16ToFloat(src[i]);
  }
  return absl::OkStatus();
}

absl::Status GatherRowsCpu(const DeviceContext&, const float* src, const int64_t* slots,
                           int64_t count, int64_t width, float* dst) {
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + i * width, src + slots[i] * width, width * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status ScatterRowsCpu(const DeviceContext&, const float* src, const int64_t* slots,
                            int64_t count, int64_t width, float* dst) {
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + slots[i] * width, src + i * width, width * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status ScatterToUnionCpu(const DeviceContext&, const int64_t* rows, int64_t count,
                               const int64_t* union_rows, int64_t union_count, const float* src,
                               int64_t width, float* dst) {
  // Increasing rows (the aggregated ones are) walk the union once; others search it.
  if (std::is_sorted(rows, rows + count)) {
    int64_t k = 0;
    for (int64_t i = 0; i < count; ++i) {
      while (k < union_count && union_rows[k] < rows[i]) ++k;
      std::memcpy(dst + k * width, src + i * width, width * sizeof(float));
    }
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = std::lower_bound(union_rows, union_rows + union_count, rows[i]) - union_rows;
    std::memcpy(dst + k * width, src + i * width, width * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status ApplyDelayedAverageCpu(const DeviceContext&, const float* avg, const float* snapshot,
                                    const int64_t* slots, int64_t count, int64_t state_dim,
                                    float* state) {
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t c = 0; c < state_dim; ++c) {
      float& v = state[slots[i] * state_dim + c];
      v = avg[i * state_dim + c] + (v - snapshot[i * state_dim + c]);
    }
  }
  return absl::OkStatus();
}

absl::Status RowSquaredSumsCpu(const DeviceContext&, const float* grads, int64_t count,
                               int64_t width, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float* g = grads + i * width;
    float sq = 0.0f;
    for (int64_t c = 0; c < width; ++c) sq += g[c] * g[c];
    out[i] = sq;
  }
  return absl::OkStatus();
}

absl::Status ScaleFloatsCpu(const DeviceContext&, float scale, int64_t count, float* x) {
  for (int64_t i = 0; i < count; ++i) x[i] *= scale;
  return absl::OkStatus();
}

absl::Status ColumnSplitAdagradCpu(const DeviceContext&, const RowOptimizerOptions& opt, float lr,
                                   const float* total_sq, float dim, const int64_t* slots,
                                   int64_t count, int64_t width, const float* grads, float* weights,
                                   float* state) {
  for (int64_t i = 0; i < count; ++i) {
    RowWiseAdagradStep(opt, lr, total_sq[i] / dim, width, grads + i * width,
                       weights + slots[i] * width, state + slots[i]);
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
