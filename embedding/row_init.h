// Deterministic row initialisation: row r of table t under seed s gets values that depend on
// (s, t, r) only, so a row is the same whether it is created eagerly in memory, lazily by the
// RocksDB tier on first touch, or on whichever rank owns it. Header-only, host and device.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/enum_names.h"
#include "core/hd.h"
#include "core/rng.h"

namespace tessera {

enum class RowInitType {
  kUniform,  // U(-scale, scale); scale defaults to sqrt(1 / num_rows), as facebookresearch/dlrm
  kNormal,   // N(0, scale^2)
  kZero,
};
inline constexpr EnumName<RowInitType> kRowInitTypeNames[] = {
    {RowInitType::kUniform, "uniform"}, {RowInitType::kNormal, "normal"},
    {RowInitType::kZero, "zero"}};
// "uniform" / "normal" / "zero" (model.tables[].init.type); Parse: InvalidArgument otherwise.
inline const char* RowInitTypeName(RowInitType t) { return NameIn(kRowInitTypeNames, t); }
inline absl::StatusOr<RowInitType> ParseRowInitType(const std::string& name) {
  return ParseIn(kRowInitTypeNames, name, "row init type");
}

struct RowInit {
  RowInitType type = RowInitType::kUniform;
  // Uniform half-width or normal std-dev. Default (<= 0): sqrt(1 / num_rows).
  float scale = -1.0f;
};

// The scale InitRow uses for a table of `num_rows` rows: init.scale, or sqrt(1 / num_rows).
TESSERA_HD_INLINE float InitScale(const RowInit& init, int64_t num_rows) {
  return init.scale > 0 ? init.scale : sqrtf(1.0f / static_cast<float>(num_rows));
}

// `init` with the default scale of a table of `num_rows` rows made explicit: a store holding a
// shard of the table (fewer rows) initialises its rows as the whole table would.
inline RowInit ResolvedInit(RowInit init, int64_t num_rows) {
  init.scale = InitScale(init, num_rows);
  return init;
}

// Writes the initial `dim` values of row `row` of table `table_id` (the table's index in the
// model) under `seed` into `out`. `num_rows` resolves the default scale.
TESSERA_HD_INLINE void InitRow(const RowInit& init, uint64_t seed, uint64_t table_id,
                               int64_t num_rows, int64_t row, int64_t dim, float* out) {
  const float scale = InitScale(init, num_rows);
  CounterRng rng(HashCombine(seed, table_id), static_cast<uint64_t>(row));
  for (int64_t k = 0; k < dim; ++k) {
    switch (init.type) {
      case RowInitType::kUniform: out[k] = (2.0f * rng.NextUniform() - 1.0f) * scale; break;
      case RowInitType::kNormal: out[k] = rng.NextNormal() * scale; break;
      case RowInitType::kZero: out[k] = 0.0f; break;
    }
  }
}

}  // namespace tessera
