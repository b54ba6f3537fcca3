// DynamicRowStore's checkpoint half (embedding/dynamic_row_store.h): SaveState gathers the keys
// held, their rows, optimizer state and counters (from the tier by row ranges when tiered);
// LoadState replaces the table with them.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "embedding/dynamic_row_store.h"

namespace tessera {

absl::Status DynamicRowStore::SaveState(bool with_state, DynamicTableState* out) const {
  // A pending evaluation forward changed nothing; a training step's admissions are provisional.
  if (!admitted_.empty() || !waiting_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": SaveState inside a training step (call EndStep first)"));
  }
  std::vector<int64_t> order;
  order.reserve(index_.size());
  for (int64_t s = 1; s <= options_.capacity; ++s) {
    if (meta_[s].last_step >= 0) order.push_back(s);
  }
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return meta_[a].key < meta_[b].key; });
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t rb = weight_row_bytes(), sd = options_.state_dim;
  out->dim = options_.dim;
  out->state_dim = sd;
  out->dtype = options_.dtype;
  out->keys.resize(n);
  out->weights.resize(static_cast<size_t>(n * rb));
  out->state.resize(with_state ? static_cast<size_t>(n * sd) : 0);
  out->lookups.resize(n);
  out->last_step.resize(n);
  auto* self = const_cast<DynamicRowStore*>(this);  // the slot arrays are read only here
  if (tier_ != nullptr) {
    // Over the tier: the rows in slot order, read in ranges (RocksDB, write-back, cache);
    // a row placed but never resolved has its key's initial value.
    std::vector<std::pair<int64_t, int64_t>> by_slot(n);  // (slot, position by key)
    for (int64_t i = 0; i < n; ++i) by_slot[i] = {order[i], i};
    std::sort(by_slot.begin(), by_slot.end());
    constexpr int64_t kChunk = 16384;
    std::vector<char> cw;
    std::vector<float> cs;
    for (size_t b = 0; b < by_slot.size();) {
      const int64_t first = by_slot[b].first;
      const int64_t count = std::min<int64_t>(kChunk, options_.capacity + 1 - first);
      cw.resize(static_cast<size_t>(count * rb));
      cs.resize(static_cast<size_t>(count * std::max<int64_t>(sd, 1)));
      TESSERA_RETURN_IF_ERROR(
          tier_->ReadRowBytes(first, count, cw.data(), sd > 0 ? cs.data() : nullptr));
      for (; b < by_slot.size() && by_slot[b].first < first + count; ++b) {
        const auto [slot, i] = by_slot[b];
        const int64_t k = slot - first;
        out->keys[i] = meta_[slot].key;
        char* wo = reinterpret_cast<char*>(out->weights.data()) + i * rb;
        float* so = with_state && sd > 0 ? &out->state[i * sd] : nullptr;
        if (fresh_[slot] != 0) {
          self->InitialValue(meta_[slot].key, wo, so);
        } else {
          std::memcpy(wo, cw.data() + k * rb, static_cast<size_t>(rb));
          if (so != nullptr) std::memcpy(so, cs.data() + k * sd, sd * sizeof(float));
        }
        out->lookups[i] = meta_[slot].lookups;
        out->last_step[i] = meta_[slot].last_step;
      }
    }
    out->sketch = use_sketch_ ? sketch_.counters() : std::vector<uint16_t>();
    out->stats = stats();
    return absl::OkStatus();
  }
  const char* w = static_cast<const char*>(self->rows_->weight_data());
  const float* st = self->rows_->state();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = order[i];
    out->keys[i] = meta_[s].key;
    std::memcpy(out->weights.data() + i * rb, w + s * rb, static_cast<size_t>(rb));
    if (with_state && sd > 0) std::memcpy(&out->state[i * sd], st + s * sd, sd * sizeof(float));
    out->lookups[i] = meta_[s].lookups;
    out->last_step[i] = meta_[s].last_step;
  }
  out->sketch = use_sketch_ ? sketch_.counters() : std::vector<uint16_t>();
  out->stats = stats();
  return absl::OkStatus();
}

absl::Status DynamicRowStore::LoadState(const DynamicTableState& in) {
  if (!step_slots_.empty() || !admitted_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": LoadState inside a step (call EndStep first)"));
  }
  const int64_t n = static_cast<int64_t>(in.keys.size());
  const int64_t rb = weight_row_bytes(), sd = options_.state_dim;
  if (in.dim != options_.dim || in.dtype != options_.dtype || in.state_dim != sd) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": state of dim ", in.dim, ", ", RowDtypeName(in.dtype),
                     ", state_dim ", in.state_dim, " does not match the table (dim ", options_.dim,
                     ", ", RowDtypeName(options_.dtype), ", state_dim ", sd, ")"));
  }
  if (n > options_.capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        label_, ": ", n, " keys do not fit dynamic.capacity_rows ", options_.capacity));
  }
  if (static_cast<int64_t>(in.weights.size()) != n * rb ||
      (!in.state.empty() && static_cast<int64_t>(in.state.size()) != n * sd) ||
      static_cast<int64_t>(in.lookups.size()) != n ||
      static_cast<int64_t>(in.last_step.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": state arrays do not match its ", n, " keys"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (in.last_step[i] < 0 || in.last_step[i] > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(label_, ": last_step ", in.last_step[i],
                                                     " of key ", in.keys[i], " is out of range"));
    }
  }
  for (int64_t i = 1; i < n; ++i) {
    if (in.keys[i - 1] >= in.keys[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat(label_, ": keys are not ascending and distinct at position ", i, " (key ",
                       in.keys[i], ")"));
    }
  }
  if (!in.sketch.empty() && (!use_sketch_ || in.sketch.size() != sketch_.counters().size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": admission counters of ", in.sketch.size(), " slots, the table has ",
                     use_sketch_ ? sketch_.counters().size() : 0,
                     " (dynamic.admission.min_count or counter_slots differ)"));
  }
  // Empty the table, then place the keys in order.
  std::vector<int64_t> held;  // over the tier: rows held now and not rewritten below
  for (int64_t s = 1; s <= options_.capacity; ++s) {
    if (meta_[s].last_step >= 0) {
      index_.Erase(meta_[s].key);
      if (tier_ != nullptr && s > n) held.push_back(s);
    }
    meta_[s] = SlotMeta();
  }
  free_.clear();
  for (int64_t k = options_.capacity; k >= 1; --k) free_.push_back(k);
  if (tier_ != nullptr) {
    // Keys i = 0..n-1 take rows 1..n (the free list's order): one range write.
    std::fill(fresh_.begin(), fresh_.end(), 0);
    TESSERA_RETURN_IF_ERROR(tier_->DropRows(held));
    std::vector<float> init_state;
    if (in.state.empty() && sd > 0) init_state.assign(n * sd, options_.state_init);
    TESSERA_RETURN_IF_ERROR(tier_->WriteRowBytes(
        1, n, in.weights.data(),
        sd == 0 ? nullptr : (in.state.empty() ? init_state.data() : in.state.data())));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = free_.back();
      free_.pop_back();
      meta_[s].key = in.keys[i];
      index_.Insert(in.keys[i], s);
      meta_[s].lookups = in.lookups[i];
      meta_[s].last_step = static_cast<int32_t>(in.last_step[i]);
    }
  }
  char* w = static_cast<char*>(rows_->weight_data());
  float* st = rows_->state();
  for (int64_t i = 0; i < n && tier_ == nullptr; ++i) {
    const int64_t s = free_.back();
    free_.pop_back();
    meta_[s].key = in.keys[i];
    index_.Insert(in.keys[i], s);
    std::memcpy(w + s * rb, in.weights.data() + i * rb, static_cast<size_t>(rb));
    if (sd > 0) {
      if (in.state.empty()) {
        std::fill(st + s * sd, st + (s + 1) * sd, options_.state_init);
      } else {
        std::memcpy(st + s * sd, &in.state[i * sd], sd * sizeof(float));
      }
    }
    meta_[s].lookups = in.lookups[i];
    meta_[s].last_step = static_cast<int32_t>(in.last_step[i]);
  }
  if (use_sketch_) {
    std::vector<uint16_t>& c = sketch_.mutable_counters();
    if (in.sketch.empty()) {
      std::fill(c.begin(), c.end(), 0);
    } else {
      c = in.sketch;
    }
  }
  stats_ = in.stats;
  stats_.capacity = options_.capacity;
  stats_.occupancy = n;
  return absl::OkStatus();
}

}  // namespace tessera
