#include "embedding/internal/collection_checks.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tessera::embedding_internal {

std::string TableLabel(const TableConfig& table, int t) {
  return table.name.empty() ? absl::StrCat("table #", t) : absl::StrCat("table '", table.name, "'");
}

absl::Status ValidateOptions(const EmbeddingCollectionOptions& o, const char* who) {
  if (o.num_features <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": num_features ", o.num_features, " must be positive"));
  }
  std::vector<int> served_by(o.num_features, -1);
  absl::flat_hash_set<std::string> names;
  for (int t = 0; t < static_cast<int>(o.tables.size()); ++t) {
    const TableConfig& table = o.tables[t];
    const std::string label = TableLabel(table, t);
    if (table.name.empty()) return absl::InvalidArgumentError(absl::StrCat(label, ": empty name"));
    if (!names.insert(table.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": name used by two tables"));
    }
    if (table.num_rows <= 0 || table.dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": num_rows (", table.num_rows, ") and dim (", table.dim, ") must be positive"));
    }
    if (table.features.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": serves no feature"));
    }
    if (table.output_dtype == RowDtype::kF16) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": output_dtype fp16 is not supported (fp32 or bf16)"));
    }
    if (table.output_dtype == RowDtype::kBf16 && table.storage.dtype == RowDtype::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": output_dtype bf16 needs 16-bit storage, but storage.dtype is fp32 (set "
                 "storage.dtype fp16 or bf16, or output_dtype fp32)"));
    }
    for (int f : table.features) {
      if (f < 0 || f >= o.num_features) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": feature ", f, " outside [0, ", o.num_features, ")"));
      }
      if (served_by[f] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": feature ", f, " is already served by ",
                         TableLabel(o.tables[served_by[f]], served_by[f])));
      }
      served_by[f] = t;
    }
  }
  for (int f = 0; f < o.num_features; ++f) {
    if (served_by[f] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": feature ", f, " is served by no table"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBatch(const KeyedJagged& batch, const EmbeddingCollectionOptions& options,
                           absl::Span<const int> table_of_feature, const void* out,
                           const char* who) {
  const int64_t B = batch.batch_size;
  if (batch.num_features != options.num_features || B < 0 ||
      static_cast<int64_t>(batch.offsets.size()) != batch.num_bags() + 1 ||
      batch.offsets.front() != 0 ||
      batch.offsets.back() != static_cast<int64_t>(batch.values.size()) ||
      (!batch.weights.empty() && batch.weights.size() != batch.values.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": batch of ", batch.num_features, " features (want ", options.num_features, "), ",
        B, " samples, ", batch.offsets.size(), " offsets (want ", batch.num_bags() + 1,
        ", from 0 to values.size() = ", batch.values.size(), "), ", batch.weights.size(),
        " weights (want 0 or values.size())"));
  }
  if (out == nullptr && B > 0) return absl::InvalidArgumentError(absl::StrCat(who, ": null out"));
  for (int64_t i = 0; i < batch.num_bags(); ++i) {
    if (batch.offsets[i + 1] < batch.offsets[i]) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": offsets decrease at bag ", i,
                                                     " (feature ", i / B, " sample ", i % B, ")"));
    }
  }
  // Range-check every id here, where the table, feature and sample can be named; a store's
  // Resolve then only fails for its own reasons (I/O). The first pass is branch-free.
  for (int f = 0; f < options.num_features; ++f) {
    const int t = table_of_feature[f];
    if (options.tables[t].dynamic.enabled) continue;  // raw 64-bit keys: any value is an id
    const uint64_t rows = static_cast<uint64_t>(options.tables[t].num_rows);
    const int64_t fb = batch.feature_begin(f), fe = batch.feature_end(f);
    bool bad = false;
    for (int64_t j = fb; j < fe; ++j) bad |= static_cast<uint64_t>(batch.values[j]) >= rows;
    if (!bad) continue;
    for (int64_t j = fb; j < fe; ++j) {
      if (static_cast<uint64_t>(batch.values[j]) < rows) continue;
      const int64_t* offs = batch.feature_offsets(f);
      const int64_t sample = std::upper_bound(offs, offs + B + 1, j) - offs - 1;
      return absl::InvalidArgumentError(absl::StrCat(
          TableLabel(options.tables[t], t), ": feature ", f, " sample ", sample, " has id ",
          batch.values[j], " outside [0, ", options.tables[t].num_rows, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::embedding_internal
