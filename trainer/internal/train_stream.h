// TrainStream: the training reader as the loop sees it when checkpoints and the RocksDB tier are
// in play (trainer/checkpoint.h). Wraps a BatchReader and
//   - counts the data position: epoch = Rewind calls, batches_in_epoch = batches delivered
//     since the last Rewind;
//   - with a model to hint (`prefetch_model` non-null), reads one batch ahead and calls
//     Model::Prefetch(next) when it delivers a batch, so a tiered table's reads for the next
//     step overlap the current one (an error reading ahead is delivered at the next Next);
//   - Skip(n) reads and drops n batches without hinting (resume's fast-forward).
// The order of batches is exactly the inner reader's. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "io/reader.h"
#include "trainer/model.h"

namespace tessera::internal {

class TrainStream final : public BatchReader {
 public:
  TrainStream(std::unique_ptr<BatchReader> inner, Model* prefetch_model)
      : inner_(std::move(inner)), model_(prefetch_model) {}

  absl::StatusOr<bool> Next(Batch* batch) override;
  absl::Status Rewind() override;
  ReaderStats stats() const override { return inner_->stats(); }

  // Reads and drops `n` batches of the current epoch. DataLoss when the epoch ends first.
  absl::Status Skip(int64_t n);

  int64_t epoch() const { return epoch_; }
  int64_t batches_in_epoch() const { return batches_; }

 private:
  std::unique_ptr<BatchReader> inner_;
  Model* model_;
  Batch ahead_;
  bool have_ahead_ = false;   // ahead_ holds the next batch
  bool ahead_done_ = false;   // the read ahead found the end of the epoch
  absl::Status ahead_error_;  // the read ahead failed
  int64_t epoch_ = 0;
  int64_t batches_ = 0;
};

}  // namespace tessera::internal
