// RowStore's non-virtual members: the fp32 views over the stored bytes.
#include "embedding/row_store.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/status.h"

namespace tessera {

float* RowStore::weights() {
  TESSERA_CHECK(weight_dtype() == RowDtype::kF32)
      << "RowStore::weights() on a " << RowDtypeName(weight_dtype())
      << " table: use weight_data() and weight_dtype()";
  return static_cast<float*>(weight_data());
}

namespace {
// Rows converted per chunk: ~1 MiB of 16-bit staging at dim 128.
int64_t ChunkRows(int64_t dim) { return std::max<int64_t>(1, (int64_t{1} << 19) / dim); }

// The whole range is checked before the first chunk moves, so a bad range changes nothing.
absl::Status CheckRows(const RowStore& s, const char* what, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin > s.num_rows() - count) {
    return absl::InvalidArgumentError(absl::StrCat("RowStore::", what, " of rows [", begin, ", ",
                                                   begin + count, ") is outside [0, ",
                                                   s.num_rows(), ")"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status RowStore::ReadRows(int64_t begin, int64_t count, float* weights_out,
                                float* state_out) {
  const RowDtype dtype = weight_dtype();
  if (dtype == RowDtype::kF32) return ReadRowBytes(begin, count, weights_out, state_out);
  TESSERA_RETURN_IF_ERROR(CheckRows(*this, "ReadRows", begin, count));
  if (count == 0) return absl::OkStatus();
  if (weights_out == nullptr) {
    return absl::InvalidArgumentError("RowStore::ReadRows: null weights_out");
  }
  const int64_t d = dim(), sd = state_dim(), chunk = ChunkRows(d);
  std::vector<uint16_t> staged(static_cast<size_t>(std::min(count, chunk) * d));
  for (int64_t r = 0; r < count; r += chunk) {
    const int64_t n = std::min(chunk, count - r);
    TESSERA_RETURN_IF_ERROR(ReadRowBytes(begin + r, n, staged.data(),
                                         state_out != nullptr ? state_out + r * sd : nullptr));
    RowValuesToFloat(dtype, staged.data(), n * d, weights_out + r * d);
  }
  return absl::OkStatus();
}

absl::Status RowStore::WriteRows(int64_t begin, int64_t count, const float* weights,
                                 const float* state) {
  const RowDtype dtype = weight_dtype();
  if (dtype == RowDtype::kF32) return WriteRowBytes(begin, count, weights, state);
  TESSERA_RETURN_IF_ERROR(CheckRows(*this, "WriteRows", begin, count));
  if (count == 0) return absl::OkStatus();
  if (weights == nullptr) {
    return absl::InvalidArgumentError("RowStore::WriteRows: null weights");
  }
  const int64_t d = dim(), sd = state_dim(), chunk = ChunkRows(d);
  std::vector<uint16_t> staged(static_cast<size_t>(std::min(count, chunk) * d));
  for (int64_t r = 0; r < count; r += chunk) {
    const int64_t n = std::min(chunk, count - r);
    RowValuesFromFloat(dtype, weights + r * d, n * d, staged.data());
    TESSERA_RETURN_IF_ERROR(WriteRowBytes(begin + r, n, staged.data(),
                                          state != nullptr ? state + r * sd : nullptr));
  }
  return absl::OkStatus();
}

}  // namespace tessera
