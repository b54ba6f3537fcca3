#include "io/prefetch.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rng.h"

namespace tessera {

struct PrefetchingReader::State {
  struct Item {
    std::unique_ptr<Batch> batch;  // null for the end marker or an error
    absl::Status status;
    ReaderStats stats;  // the inner reader's stats when this item was produced
  };

  std::unique_ptr<BatchReader> inner;
  PrefetchOptions options;

  std::mutex mu;
  std::condition_variable ready_cv;  // consumer waits: an item is ready
  std::condition_variable space_cv;  // producer waits: room in the queue, or stop
  std::deque<Item> ready;
  std::vector<std::unique_ptr<Batch>> free;  // recycled batches
  bool stop = false;
  std::thread producer;

  // Consumer-side state (consumer thread only).
  bool finished = false;
  absl::Status final_status;
  ReaderStats delivered;
  uint64_t epoch = 0;

  std::unique_ptr<Batch> TakeFree() {
    std::lock_guard<std::mutex> lock(mu);
    if (free.empty()) return std::make_unique<Batch>();
    std::unique_ptr<Batch> b = std::move(free.back());
    free.pop_back();
    return b;
  }

  // Queues `item`, waiting for room. Returns false when asked to stop.
  bool Push(Item item) {
    std::unique_lock<std::mutex> lock(mu);
    space_cv.wait(lock,
                  [&] { return stop || static_cast<int>(ready.size()) < options.queue_batches; });
    if (stop) {
      if (item.batch) free.push_back(std::move(item.batch));
      return false;
    }
    ready.push_back(std::move(item));
    ready_cv.notify_one();
    return true;
  }

  void Produce(uint64_t epoch_of_run) {
    CounterRng rng(options.seed, epoch_of_run);
    std::vector<Item> window;
    const size_t window_size = options.shuffle ? static_cast<size_t>(options.shuffle_window) : 0;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) break;
      }
      std::unique_ptr<Batch> batch = TakeFree();
      absl::StatusOr<bool> more = inner->Next(batch.get());
      Item item;
      item.stats = inner->stats();
      if (!more.ok() || !*more) {
        {
          std::lock_guard<std::mutex> lock(mu);
          free.push_back(std::move(batch));
        }
        // Drain the window in random order, then the end marker or the error.
        while (!window.empty()) {
          const size_t j = rng.NextBelow(window.size());
          Item out = std::move(window[j]);
          window[j] = std::move(window.back());
          window.pop_back();
          if (!Push(std::move(out))) return;
        }
        item.status = more.ok() ? absl::OkStatus() : more.status();
        Push(std::move(item));
        return;
      }
      item.batch = std::move(batch);
      if (window_size == 0) {
        if (!Push(std::move(item))) return;
        continue;
      }
      window.push_back(std::move(item));
      if (window.size() >= window_size) {
        const size_t j = rng.NextBelow(window.size());
        Item out = std::move(window[j]);
        window[j] = std::move(window.back());
        window.pop_back();
        if (!Push(std::move(out))) return;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (Item& it : window) free.push_back(std::move(it.batch));
  }

  void Start() {
    stop = false;
    finished = false;
    final_status = absl::OkStatus();
    const uint64_t e = epoch;
    producer = std::thread([this, e] { Produce(e); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    space_cv.notify_all();
    if (producer.joinable()) producer.join();
    std::lock_guard<std::mutex> lock(mu);
    for (Item& it : ready) {
      if (it.batch) free.push_back(std::move(it.batch));
    }
    ready.clear();
  }
};

PrefetchingReader::PrefetchingReader(std::unique_ptr<State> state) : state_(std::move(state)) {}

PrefetchingReader::~PrefetchingReader() { state_->Stop(); }

absl::StatusOr<std::unique_ptr<PrefetchingReader>> PrefetchingReader::Create(
    std::unique_ptr<BatchReader> inner, PrefetchOptions options) {
  if (inner == nullptr) return absl::InvalidArgumentError("PrefetchingReader: no inner reader");
  if (options.queue_batches < 1 || options.shuffle_window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrefetchingReader: queue_batches = ", options.queue_batches,
                     ", shuffle_window = ", options.shuffle_window, "; both must be >= 1"));
  }
  auto state = std::make_unique<State>();
  state->inner = std::move(inner);
  state->options = options;
  state->Start();
  return std::unique_ptr<PrefetchingReader>(new PrefetchingReader(std::move(state)));
}

absl::StatusOr<bool> PrefetchingReader::Next(Batch* batch) {
  State& s = *state_;
  if (s.finished) {
    if (!s.final_status.ok()) return s.final_status;
    return false;
  }
  State::Item item;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.ready_cv.wait(lock, [&] { return !s.ready.empty(); });
    item = std::move(s.ready.front());
    s.ready.pop_front();
  }
  s.space_cv.notify_one();
  s.delivered.bad_records_skipped = item.stats.bad_records_skipped;
  if (item.batch == nullptr) {
    s.finished = true;
    s.final_status = item.status;
    if (!item.status.ok()) return item.status;
    return false;
  }
  std::swap(*batch, *item.batch);
  s.delivered.records += batch->batch_size;
  std::lock_guard<std::mutex> lock(s.mu);
  s.free.push_back(std::move(item.batch));
  return true;
}

absl::Status PrefetchingReader::Rewind() {
  State& s = *state_;
  s.Stop();
  absl::Status st = s.inner->Rewind();
  if (!st.ok()) {
    s.finished = true;
    s.final_status = st;
    return st;
  }
  ++s.epoch;
  s.Start();
  return absl::OkStatus();
}

ReaderStats PrefetchingReader::stats() const { return state_->delivered; }

}  // namespace tessera
