#include "trainer/internal/train_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera::internal {

absl::StatusOr<bool> TrainStream::Next(Batch* batch) {
  if (model_ == nullptr) {
    TESSERA_ASSIGN_OR_RETURN(bool more, inner_->Next(batch));
    if (more) ++batches_;
    return more;
  }
  if (!have_ahead_) {
    if (!ahead_error_.ok()) return std::exchange(ahead_error_, absl::OkStatus());
    if (ahead_done_) return false;
    TESSERA_ASSIGN_OR_RETURN(bool more, inner_->Next(&ahead_));
    if (!more) {
      ahead_done_ = true;
      return false;
    }
    have_ahead_ = true;
  }
  std::swap(*batch, ahead_);
  have_ahead_ = false;
  ++batches_;
  absl::StatusOr<bool> more = inner_->Next(&ahead_);
  if (!more.ok()) {
    ahead_error_ = more.status();
  } else if (*more) {
    have_ahead_ = true;
    model_->Prefetch(ahead_);
  } else {
    ahead_done_ = true;
  }
  return true;
}

absl::Status TrainStream::Rewind() {
  have_ahead_ = false;
  ahead_done_ = false;
  ahead_error_ = absl::OkStatus();
  ++epoch_;
  batches_ = 0;
  return inner_->Rewind();
}

absl::Status TrainStream::Skip(int64_t n) {
  Batch scratch;
  for (int64_t i = 0; i < n; ++i) {
    TESSERA_ASSIGN_OR_RETURN(bool more, inner_->Next(&scratch));
    if (!more) {
      return absl::DataLossError(absl::StrCat(
          "resume: the checkpoint consumed ", n, " batches of epoch ", epoch_,
          " but the training data has only ", i, " (did the data change?)"));
    }
    ++batches_;
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
