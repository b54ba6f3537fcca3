#include "io/reduce_ids.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

class ReducingReader final : public BatchReader {
 public:
  ReducingReader(std::unique_ptr<BatchReader> inner, std::vector<int64_t> rows)
      : inner_(std::move(inner)), rows_(std::move(rows)) {}

  absl::StatusOr<bool> Next(Batch* batch) override {
    absl::StatusOr<bool> got = inner_->Next(batch);
    if (!got.ok() || !*got) return got;
    KeyedJagged& s = batch->sparse;
    if (s.num_features != static_cast<int>(rows_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("ReduceIdsReader: a batch of ",
                                                     s.num_features, " features, expected ",
                                                     rows_.size()));
    }
    for (int f = 0; f < s.num_features; ++f) {
      const int64_t rows = rows_[f];
      if (rows <= 0) continue;
      for (int64_t j = s.feature_begin(f); j < s.feature_end(f); ++j) s.values[j] %= rows;
    }
    return true;
  }
  absl::Status Rewind() override { return inner_->Rewind(); }
  ReaderStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<BatchReader> inner_;
  std::vector<int64_t> rows_;
};

}  // namespace

std::unique_ptr<BatchReader> ReduceIdsReader(std::unique_ptr<BatchReader> inner,
                                             std::vector<int64_t> rows) {
  return std::make_unique<ReducingReader>(std::move(inner), std::move(rows));
}

}  // namespace tessera
