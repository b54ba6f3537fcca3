// Checks shared by the CPU and CUDA embedding collections, so both reject bad options and bad
// batches with the same messages.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/keyed_jagged.h"
#include "embedding/embedding_collection.h"

namespace tessera::embedding_internal {

// "table 'name'" (or "table #t" when unnamed), for messages.
std::string TableLabel(const TableConfig& table, int t);

// InvalidArgument, prefixed with `who` (e.g. "EmbeddingCollection") or naming the table, when a
// table has no or a duplicate name, a non-positive size or no feature, or a feature in
// [0, num_features) is served by no table or by two.
absl::Status ValidateOptions(const EmbeddingCollectionOptions& options, const char* who);

// InvalidArgument, prefixed with `who` (e.g. "EmbeddingCollection::Forward"), when the batch's
// shape does not match (feature count, offsets size and range, weights size), `out` (the
// output, fp32 or bf16) is null for a non-empty batch, offsets decrease, or an id is outside its
// static table (a dynamic table's ids are raw keys: any value) (naming the table, feature,
// sample and id). `table_of_feature[f]` is the index in options.tables serving feature f.
absl::Status ValidateBatch(const KeyedJagged& batch, const EmbeddingCollectionOptions& options,
                           absl::Span<const int> table_of_feature, const void* out,
                           const char* who);

}  // namespace tessera::embedding_internal
