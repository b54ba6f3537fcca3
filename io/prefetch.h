// PrefetchingReader: runs a BatchReader on its own thread, keeping up to `queue_batches` batches
// ready, so parsing or generation overlaps training.
//
// Order: the inner reader's order, unless `shuffle` is set; then the producer holds a window of
// `shuffle_window` batches and emits a uniformly chosen one each time (deterministic: the choice
// depends only on (seed, epoch, step), and the epoch advances on Rewind).
// Errors: an inner error is delivered in order, after the batches read before it; Next then keeps
// returning it until Rewind.
// Memory: batches are recycled. Next swaps the ready batch into the caller's Batch and takes the
// caller's old buffers back into the pool, so steady state allocates nothing.
// Thread-safety: one consumer thread calls Next/Rewind/stats; the inner reader is used only by
// the producer thread (and by Rewind while the producer is stopped). The destructor stops and
// joins the producer (it waits for an inner Next in progress to return).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "io/reader.h"

namespace tessera {

struct PrefetchOptions {
  // Batches kept ready ahead of the consumer (>= 1). Default: 4.
  int queue_batches = 4;
  // Shuffle the order of batches within a window. Default: false (source order).
  bool shuffle = false;
  // Batches in the shuffle window (>= 1; 1 means no reordering). Default: 16.
  int shuffle_window = 16;
  // Seed of the shuffle. Default: 0.
  uint64_t seed = 0;
};

class PrefetchingReader : public BatchReader {
 public:
  // Takes ownership of `inner` and starts the producer thread. InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<PrefetchingReader>> Create(
      std::unique_ptr<BatchReader> inner, PrefetchOptions options = {});
  ~PrefetchingReader() override;

  // Blocks until a batch, the end or an error is ready.
  absl::StatusOr<bool> Next(Batch* batch) override;
  // Stops the producer, drops what was read ahead, rewinds the inner reader, starts again.
  absl::Status Rewind() override;
  // records: samples delivered by Next since Create (all epochs); bad_records_skipped: the inner
  // reader's count as of the last delivered batch.
  ReaderStats stats() const override;

 private:
  struct State;
  explicit PrefetchingReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera
