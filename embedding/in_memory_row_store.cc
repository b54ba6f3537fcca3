// InMemoryRowStore: the dense host-memory RowStore (slot == row).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/parallel.h"
#include "core/status.h"
#include "embedding/row_store.h"

namespace tessera {
namespace {

std::string TableLabel(const InMemoryRowStoreOptions& o) {
  return o.name.empty() ? absl::StrCat("table ", o.table_id) : absl::StrCat("table '", o.name, "'");
}

class InMemoryRowStore final : public RowStore {
 public:
  explicit InMemoryRowStore(const InMemoryRowStoreOptions& options)
      : options_(options), label_(TableLabel(options)) {}
  ~InMemoryRowStore() override {
    FreeHost(weights_, WeightBytes());
    FreeHost(state_, StateBytes());
  }
  InMemoryRowStore(const InMemoryRowStore&) = delete;
  InMemoryRowStore& operator=(const InMemoryRowStore&) = delete;

  absl::Status Allocate() {
    // AllocateHost maps tables >= 2 MiB with MADV_HUGEPAGE and zero-fills lazily.
    weights_ = static_cast<char*>(AllocateHost(WeightBytes()));
    if (weights_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(label_, ": allocating ", WeightBytes(), " bytes of weights failed"));
    }
    if (options_.state_dim > 0) {
      state_ = static_cast<float*>(AllocateHost(StateBytes()));
      if (state_ == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(label_, ": allocating ", StateBytes(),
                                                         " bytes of optimizer state failed"));
      }
    }
    return absl::OkStatus();
  }

  // Initialises in parallel over rows: each row depends on (seed, table, row) only, and the
  // first touch of a page happens on the thread that later reads it most (no NUMA effect on
  // these machines, but it spreads the page faults over the threads).
  // A 16-bit table rounds each InitRow value to nearest.
  void Initialize() {
    const int64_t dim = options_.dim, sd = options_.state_dim;
    const int64_t row_bytes = RowBytes();
    ParallelFor(options_.num_rows, 4096, [&](int64_t begin, int64_t end, int) {
      std::vector<float> row(options_.dtype == RowDtype::kF32 ? 0 : dim);
      for (int64_t r = begin; r < end; ++r) {
        char* dst = weights_ + r * row_bytes;
        if (options_.dtype == RowDtype::kF32) {
          InitRow(options_.init, options_.seed, options_.table_id, options_.num_rows, r, dim,
                  reinterpret_cast<float*>(dst));
        } else {
          InitRow(options_.init, options_.seed, options_.table_id, options_.num_rows, r, dim,
                  row.data());
          RowValuesFromFloat(options_.dtype, row.data(), dim, dst);
        }
      }
      if (sd > 0 && options_.state_init != 0.0f) {
        std::fill(state_ + begin * sd, state_ + end * sd, options_.state_init);
      }
    });
  }

  int64_t num_rows() const override { return options_.num_rows; }
  int64_t dim() const override { return options_.dim; }
  int64_t state_dim() const override { return options_.state_dim; }

  absl::Status Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) override {
    if (ids.size() != slots.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_, ": Resolve got ", ids.size(), " ids but ", slots.size(), " slots"));
    }
    const uint64_t rows = static_cast<uint64_t>(options_.num_rows);
    const size_t n = ids.size();
    // One unsigned compare catches negative ids too; the copy and the check fuse into one pass.
    bool bad = false;
    for (size_t i = 0; i < n; ++i) {
      bad |= static_cast<uint64_t>(ids[i]) >= rows;
      slots[i] = ids[i];
    }
    if (bad) {
      for (size_t i = 0; i < n; ++i) {
        if (static_cast<uint64_t>(ids[i]) >= rows) {
          return absl::InvalidArgumentError(
              absl::StrCat(label_, ": row id ", ids[i], " at position ", i, " is out of range [0, ",
                           options_.num_rows, ")"));
        }
      }
    }
    return absl::OkStatus();
  }

  RowDtype weight_dtype() const override { return options_.dtype; }
  void* weight_data() override { return weights_; }
  float* state() override { return state_; }

  absl::Status ReadRowBytes(int64_t begin, int64_t count, void* weights_out,
                            float* state_out) override {
    TESSERA_RETURN_IF_ERROR(CheckRange("ReadRows", begin, count));
    if (count > 0 && weights_out == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": ReadRows with null weights_out"));
    }
    if (count > 0) {
      std::memcpy(weights_out, weights_ + begin * RowBytes(),
                  static_cast<size_t>(count * RowBytes()));
    }
    if (state_out != nullptr && options_.state_dim > 0) {
      std::memcpy(state_out, state_ + begin * options_.state_dim,
                  RowsBytes(count, options_.state_dim));
    }
    return absl::OkStatus();
  }

  absl::Status WriteRowBytes(int64_t begin, int64_t count, const void* weights,
                             const float* state) override {
    TESSERA_RETURN_IF_ERROR(CheckRange("WriteRows", begin, count));
    if (count > 0 && weights == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": WriteRows with null weights"));
    }
    if (count > 0) {
      std::memcpy(weights_ + begin * RowBytes(), weights, static_cast<size_t>(count * RowBytes()));
    }
    if (state != nullptr && options_.state_dim > 0) {
      std::memcpy(state_ + begin * options_.state_dim, state, RowsBytes(count, options_.state_dim));
    }
    return absl::OkStatus();
  }

 private:
  static size_t RowsBytes(int64_t rows, int64_t width) {
    return static_cast<size_t>(rows) * static_cast<size_t>(width) * sizeof(float);
  }
  int64_t RowBytes() const { return options_.dim * RowDtypeBytes(options_.dtype); }
  size_t WeightBytes() const {
    return static_cast<size_t>(options_.num_rows) * static_cast<size_t>(RowBytes());
  }
  size_t StateBytes() const { return RowsBytes(options_.num_rows, options_.state_dim); }

  absl::Status CheckRange(const char* what, int64_t begin, int64_t count) const {
    if (begin < 0 || count < 0 || begin > options_.num_rows - count) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": ", what, " of rows [", begin, ", ",
                                                     begin + count, ") is outside [0, ",
                                                     options_.num_rows, ")"));
    }
    return absl::OkStatus();
  }

  const InMemoryRowStoreOptions options_;
  const std::string label_;
  char* weights_ = nullptr;
  float* state_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RowStore>> CreateInMemoryRowStore(
    const InMemoryRowStoreOptions& options) {
  const std::string label = TableLabel(options);
  if (options.num_rows <= 0 || options.dim <= 0 || options.state_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": num_rows (", options.num_rows, ") and dim (", options.dim,
                     ") must be positive and state_dim (", options.state_dim, ") non-negative"));
  }
  // Row offsets are computed as int64 in floats and bytes; refuse tables whose byte size does not
  // fit.
  const int64_t width = options.dim + options.state_dim;
  if (options.num_rows > std::numeric_limits<int64_t>::max() / 4 / width) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", options.num_rows, " rows of ",
                                                   width, " floats cannot be addressed"));
  }
  auto store = std::make_unique<InMemoryRowStore>(options);
  TESSERA_RETURN_IF_ERROR(store->Allocate());
  store->Initialize();
  return std::unique_ptr<RowStore>(std::move(store));
}

}  // namespace tessera
