#include "embedding/dynamic_row_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rng.h"
#include "core/status.h"

namespace tessera {
namespace {

std::string Label(const DynamicRowStoreOptions& o) {
  return o.name.empty() ? absl::StrCat("table ", o.table_id) : absl::StrCat("table '", o.name, "'");
}

// Stream tags keeping the admission hashes apart from the rows' init streams.
constexpr uint64_t kSketchTag = 0x736b657463680001ull;
constexpr uint64_t kCoinTag = 0x636f696e00000002ull;

int64_t SketchSlots(const DynamicRowStoreOptions& o) {
  if (o.dynamic.min_count <= 1) return 0;
  int64_t want = o.dynamic.counter_slots > 0 ? o.dynamic.counter_slots : 4 * o.capacity;
  int64_t n = 64;
  while (n < want) n <<= 1;
  return n;
}

absl::Status Validate(const DynamicRowStoreOptions& o) {
  const std::string label = Label(o);
  const DynamicTableConfig& d = o.dynamic;
  if (o.capacity <= 0 || o.dim <= 0 || o.state_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": dynamic.capacity_rows (", o.capacity, ") and dim (", o.dim,
                     ") must be positive and state_dim (", o.state_dim, ") non-negative"));
  }
  if (o.capacity > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": dynamic.capacity_rows ", o.capacity,
                                                   " is above 2^40"));
  }
  if (o.init_dim < 0 || o.init_col_begin < 0 ||
      (o.init_dim > 0 && o.init_col_begin + o.dim > o.init_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": columns [", o.init_col_begin, ", ",
                                                   o.init_col_begin + o.dim,
                                                   ") are outside the init row of ", o.init_dim));
  }
  if (d.min_count < 1 || d.min_count > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": dynamic.admission.min_count ", d.min_count, " is outside [1, 65535]"));
  }
  if (!(d.probability >= 0.0 && d.probability <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": dynamic.admission.probability ", d.probability, " is outside (0, 1]"));
  }
  if (d.min_count > 1 && d.probability > 0.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": dynamic.admission sets both min_count and probability; choose one"));
  }
  if (d.counter_slots < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": dynamic.admission.counter_slots ", d.counter_slots, " is negative"));
  }
  if (d.policy == EvictionPolicy::kTtl && d.ttl_steps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": dynamic.eviction.policy ttl needs ttl_steps > 0 (got ", d.ttl_steps, ")"));
  }
  if (d.policy != EvictionPolicy::kTtl && d.ttl_steps != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": dynamic.eviction.ttl_steps is set but the policy is ",
                     EvictionPolicyName(d.policy), ", not ttl"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Over the tier: the cache rows TieredRowStore::Open gives these options (its own rule).
int64_t TierCacheRows(const DynamicRowStoreOptions& o) {
  const int64_t row = o.dim * RowDtypeBytes(o.dtype) + o.state_dim * 4;
  int64_t rows = o.tier.cache_rows > 0 ? o.tier.cache_rows : o.tier.cache_bytes / (row + 48);
  return std::clamp<int64_t>(rows, 0, o.capacity + 1);
}

}  // namespace

int64_t DynamicRowStore::MemoryBytes(const DynamicRowStoreOptions& o) {
  const int64_t slots = o.capacity + 1;
  int64_t buckets = 2;
  while (buckets < 2 * o.capacity) buckets <<= 1;
  const int64_t row = o.dim * RowDtypeBytes(o.dtype) + o.state_dim * 4;
  const bool tiered = !o.tier.path.empty();
  return (tiered ? TierCacheRows(o) * (row + 48) + slots : slots * row) +  // rows (cache), fresh
         buckets * 16 +                                                  // the index
         slots * (8 + 4 + 8 + 8) +                                       // key, counts, free list
         SketchSlots(o) * 2;                                             // the sketch
}

int64_t DynamicRowStore::DiskBytes(const DynamicRowStoreOptions& o) {
  if (o.tier.path.empty()) return 0;
  return (o.capacity + 1) * (o.dim * RowDtypeBytes(o.dtype) + o.state_dim * 4 + 32);
}

DynamicRowStore::DynamicRowStore(const DynamicRowStoreOptions& options)
    : options_(options), label_(Label(options)) {}

absl::StatusOr<std::unique_ptr<DynamicRowStore>> DynamicRowStore::Create(
    const DynamicRowStoreOptions& options) {
  TESSERA_RETURN_IF_ERROR(Validate(options));
  std::unique_ptr<DynamicRowStore> s(new DynamicRowStore(options));
  const int64_t slots = options.capacity + 1;
  if (!options.tier.path.empty()) {
    // The disk must hold the table full: its free space where the database goes (the path or
    // its nearest existing parent).
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path at = fs::absolute(options.tier.path, ec);
    while (!ec && !at.empty() && !fs::exists(at, ec) && at.has_parent_path() &&
           at.parent_path() != at) {
      at = at.parent_path();
    }
    const fs::space_info space = fs::space(at, ec);
    const int64_t need = DiskBytes(options);
    if (!ec && static_cast<uint64_t>(need) > space.available) {
      return absl::ResourceExhaustedError(absl::StrCat(
          s->label_, ": dynamic.capacity_rows ", options.capacity, " over the RocksDB tier needs ",
          need, " bytes of disk at ", options.tier.path, " but ", at.string(), " has ",
          space.available, " bytes free"));
    }
    TieredRowStoreOptions to = options.tier;
    to.num_rows = slots;
    to.dim = options.dim;
    to.state_dim = options.state_dim;
    to.dtype = options.dtype;
    to.state_init = options.state_init;
    to.init = RowInit();
    to.init.type = RowInitType::kZero;
    to.seed = options.seed;
    to.table_id = options.table_id;
    to.name = options.name;
    to.row_offset = to.init_col_begin = to.init_dim = 0;
    auto tier = TieredRowStore::Open(to);
    if (!tier.ok()) {
      if (tier.status().code() == absl::StatusCode::kResourceExhausted) {
        return absl::ResourceExhaustedError(
            absl::StrCat(s->label_, ": dynamic.capacity_rows ", options.capacity, " needs ",
                         MemoryBytes(options), " bytes: ", tier.status().message()));
      }
      return tier.status();
    }
    s->tier_ = tier->get();
    s->rows_ = std::move(tier).value();
    s->fresh_.assign(slots, 0);
  }
  // The slot rows: an in-memory store of zeros (slot 0 stays the zero row; the others are
  // written when a key is placed).
  InMemoryRowStoreOptions ro;
  ro.num_rows = slots;
  ro.dim = options.dim;
  ro.state_dim = options.state_dim;
  ro.state_init = options.state_init;
  ro.init.type = RowInitType::kZero;
  ro.seed = options.seed;
  ro.table_id = options.table_id;
  ro.name = options.name;
  ro.dtype = options.dtype;
  auto rows = s->tier_ != nullptr ? absl::StatusOr<std::unique_ptr<RowStore>>(std::move(s->rows_))
                                  : CreateInMemoryRowStore(ro);
  if (!rows.ok()) {
    if (rows.status().code() == absl::StatusCode::kResourceExhausted) {
      return absl::ResourceExhaustedError(
          absl::StrCat(s->label_, ": dynamic.capacity_rows ", options.capacity, " needs ",
                       MemoryBytes(options), " bytes: ", rows.status().message()));
    }
    return rows.status();
  }
  s->rows_ = std::move(rows).value();
  auto index = KeySlotIndex::Create(options.capacity);
  if (!index.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(s->label_, ": dynamic.capacity_rows ",
                                                     options.capacity, " needs ",
                                                     MemoryBytes(options), " bytes: ",
                                                     index.status().message()));
  }
  s->index_ = std::move(index).value();
  s->use_sketch_ = options.dynamic.min_count > 1;
  if (s->use_sketch_) {
    s->sketch_ = AdmissionSketch(SketchSlots(options),
                                 HashCombine(HashCombine(options.seed, kSketchTag),
                                             options.table_id));
  }
  s->meta_.assign(slots, SlotMeta());
  s->free_.reserve(slots);
  for (int64_t k = options.capacity; k >= 1; --k) s->free_.push_back(k);
  s->init_row_.resize(std::max(options.dim, options.init_dim));
  s->stats_.capacity = options.capacity;
  return s;
}

bool DynamicRowStore::Admits(uint64_t key, uint32_t count) {
  const DynamicTableConfig& d = options_.dynamic;
  if (use_sketch_) return sketch_.Add(key, count) >= static_cast<uint32_t>(d.min_count);
  if (d.probability > 0.0 && d.probability < 1.0) {
    // One coin per lookup: admitted unless all `count` coins fail, 1 - (1 - p)^count, drawn as
    // one uniform keyed by (seed, table, key, step).
    const uint64_t h = HashCombine(
        HashCombine(HashCombine(options_.seed, kCoinTag), options_.table_id),
        HashCombine(key, static_cast<uint64_t>(stats_.steps + 1)));
    const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
    return u < 1.0 - std::pow(1.0 - d.probability, static_cast<double>(count));
  }
  return true;
}

void DynamicRowStore::InitialValue(uint64_t key, char* w, float* st) {
  const int64_t full = options_.init_dim > 0 ? options_.init_dim : options_.dim;
  InitRow(options_.init, options_.seed, options_.table_id, options_.capacity,
          static_cast<int64_t>(key), full, init_row_.data());
  if (options_.init_col_begin > 0) {
    std::memmove(init_row_.data(), init_row_.data() + options_.init_col_begin,
                 static_cast<size_t>(options_.dim) * sizeof(float));
  }
  RowValuesFromFloat(options_.dtype, init_row_.data(), options_.dim, w);
  if (options_.state_dim > 0 && st != nullptr) {
    std::fill(st, st + options_.state_dim, options_.state_init);
  }
}

int64_t DynamicRowStore::Place(uint64_t key) {
  const int64_t slot = free_.back();
  free_.pop_back();
  if (tier_ != nullptr) {
    fresh_[slot] = 1;  // written into the cache when a step resolves it
  } else {
    InitialValue(key, static_cast<char*>(rows_->weight_data()) + slot * weight_row_bytes(),
                 options_.state_dim > 0 ? rows_->state() + slot * options_.state_dim : nullptr);
  }
  meta_[slot] = {key, 0, 0};
  index_.Insert(key, slot);
  return slot;
}

void DynamicRowStore::Evict(int64_t slot) {
  if (tier_ != nullptr) {
    // A row still waiting for its initial value was never written by this key (and what an
    // earlier key wrote was dropped when it left): nothing of it to delete.
    if (fresh_[slot] != 1) dropped_.push_back(slot);
    fresh_[slot] = 0;
  }
  index_.Erase(meta_[slot].key);
  meta_[slot] = SlotMeta();
  free_.push_back(slot);
  ++stats_.evictions;
}

void DynamicRowStore::ResetZeroRow() {
  // Row 0's slot: itself in memory, its cache slot (resolved in this step) over the tier.
  const int64_t slot = tier_ != nullptr ? zero_cache_slot_ : 0;
  if (slot < 0) return;
  std::memset(static_cast<char*>(rows_->weight_data()) + slot * weight_row_bytes(), 0,
              static_cast<size_t>(weight_row_bytes()));
  if (options_.state_dim > 0) {
    float* st = rows_->state() + slot * options_.state_dim;
    std::fill(st, st + options_.state_dim, options_.state_init);
  }
}

absl::Status DynamicRowStore::Resolve(absl::Span<const int64_t> ids, absl::Span<int64_t> slots) {
  if (ids.size() != slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": Resolve got ", ids.size(), " ids but ", slots.size(), " slots"));
  }
  const size_t n = ids.size();
  constexpr size_t kAhead = 8;
  int64_t probes = 0;
  misses_.clear();
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index_.Prefetch(static_cast<uint64_t>(ids[i + kAhead]));
    const int64_t s = index_.Find(static_cast<uint64_t>(ids[i]), &probes);
    slots[i] = s < 0 ? 0 : s;
    if (s < 0) misses_.emplace_back(static_cast<uint64_t>(ids[i]), static_cast<int64_t>(i));
  }
  stats_.lookups += static_cast<int64_t>(n);
  stats_.probes += probes;
  if (!misses_.empty()) {
    // Keys without a row, in increasing key order (the order of admission), each with its
    // lookups in this batch.
    std::sort(misses_.begin(), misses_.end());
    for (size_t b = 0; b < misses_.size();) {
      const uint64_t key = misses_[b].first;
      size_t e = b + 1;
      while (e < misses_.size() && misses_[e].first == key) ++e;
      const uint32_t count = static_cast<uint32_t>(std::min<size_t>(e - b, 65535));
      if (admitting_ && Admits(key, count)) {
        if (free_.empty()) {
          waiting_.emplace_back(key, count);
        } else {
          const int64_t slot = Place(key);
          admitted_.push_back(key);
          for (size_t j = b; j < e; ++j) slots[misses_[j].second] = slot;
          b = e;
          continue;
        }
      }
      stats_.unadmitted_lookups += static_cast<int64_t>(e - b);
      zero_row_used_ = true;
      b = e;
    }
  }
  // Only the eviction policies read the rows' use (lfu: counts, lru / ttl: last step).
  if (options_.dynamic.policy != EvictionPolicy::kNone) {
    step_slots_.insert(step_slots_.end(), slots.begin(), slots.end());
  }
  // In memory: slot == row of rows_, nothing to pin.
  if (tier_ == nullptr) return absl::OkStatus();
  // Over the tier: rows to cache slots (pinned until the step ends), then the initial value
  // of every row placed since it was last resolved.
  id_rows_.assign(slots.begin(), slots.end());
  skip_rows_.clear();
  for (int64_t row : id_rows_) {
    if (fresh_[row] == 1) skip_rows_.push_back(row);  // overwritten below: nothing to read
  }
  if (!skip_rows_.empty()) tier_->SkipReads(skip_rows_);
  TESSERA_RETURN_IF_ERROR(tier_->Resolve(id_rows_, slots));
  const int64_t rb = weight_row_bytes(), sd = options_.state_dim;
  char* w = static_cast<char*>(rows_->weight_data());
  float* st = rows_->state();
  for (size_t i = 0; i < n; ++i) {
    const int64_t row = id_rows_[i];
    if (row == 0) zero_cache_slot_ = slots[i];
    if (fresh_[row] != 1) continue;
    InitialValue(meta_[row].key, w + slots[i] * rb, sd > 0 ? st + slots[i] * sd : nullptr);
    fresh_[row] = 2;
    fresh_written_.push_back(row);
  }
  return absl::OkStatus();
}

void DynamicRowStore::Prefetch(absl::Span<const int64_t> ids) {
  if (tier_ == nullptr) return;
  prefetch_rows_.clear();
  int64_t probes = 0;
  for (int64_t id : ids) {
    const int64_t row = index_.Find(static_cast<uint64_t>(id), &probes);
    if (row > 0 && fresh_[row] == 0) prefetch_rows_.push_back(row);  // fresh: nothing to read
  }
  tier_->Prefetch(prefetch_rows_);
}

void DynamicRowStore::FindSlots(absl::Span<const int64_t> keys, absl::Span<int64_t> slots) const {
  int64_t probes = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    slots[i] = index_.Find(static_cast<uint64_t>(keys[i]), &probes);
  }
}

void DynamicRowStore::EvictAtStepEnd(int64_t step, int64_t waiting) {
  const DynamicTableConfig& d = options_.dynamic;
  const int64_t cap = options_.capacity;
  candidates_.clear();
  if (d.policy == EvictionPolicy::kTtl) {
    for (int64_t s = 1; s <= cap; ++s) {
      const int64_t last = meta_[s].last_step;
      if (last >= 0 && last + d.ttl_steps <= step) candidates_.push_back(s);
    }
    std::sort(candidates_.begin(), candidates_.end(),
              [&](int64_t a, int64_t b) { return meta_[a].key < meta_[b].key; });
    for (int64_t s : candidates_) Evict(s);
    return;
  }
  if (d.policy != EvictionPolicy::kLfu && d.policy != EvictionPolicy::kLru) return;
  const int64_t need = waiting - static_cast<int64_t>(free_.size());
  if (need <= 0) return;
  for (int64_t s = 1; s <= cap; ++s) {
    if (meta_[s].last_step >= 0 && meta_[s].last_step != step) candidates_.push_back(s);
  }
  const bool lfu = d.policy == EvictionPolicy::kLfu;
  auto before = [&](int64_t a, int64_t b) {
    const SlotMeta &x = meta_[a], &y = meta_[b];
    if (lfu && x.lookups != y.lookups) return x.lookups < y.lookups;
    if (x.last_step != y.last_step) return x.last_step < y.last_step;
    return x.key < y.key;
  };
  const int64_t k =
      std::min<int64_t>(static_cast<int64_t>(candidates_.size()), std::max(need, cap / 64));
  if (k <= 0) return;
  std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), before);
  candidates_.resize(k);
  std::sort(candidates_.begin(), candidates_.end(), before);
  for (int64_t s : candidates_) Evict(s);
}

absl::Status DynamicRowStore::EndStep() {
  const int64_t step = ++stats_.steps;
  const int32_t step32 = static_cast<int32_t>(step);
  if (options_.dynamic.policy == EvictionPolicy::kLfu) {
    for (int64_t s : step_slots_) {
      SlotMeta& m = meta_[s];  // slot 0 (the zero row) too: its meta is never read
      m.lookups += m.lookups != std::numeric_limits<uint32_t>::max();
      m.last_step = step32;
    }
  } else {
    for (int64_t s : step_slots_) meta_[s].last_step = step32;
  }
  meta_[0] = SlotMeta();
  stats_.admissions += static_cast<int64_t>(admitted_.size());
  admitted_.clear();
  if (use_sketch_) sketch_.Commit();
  // Keys that waited for room: one entry per key (several Resolve calls may each have seen it).
  std::sort(waiting_.begin(), waiting_.end());
  size_t w = 0;
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (w > 0 && waiting_[w - 1].first == waiting_[i].first) {
      waiting_[w - 1].second += waiting_[i].second;
    } else {
      waiting_[w++] = waiting_[i];
    }
  }
  waiting_.resize(w);
  EvictAtStepEnd(step, static_cast<int64_t>(waiting_.size()));
  for (const auto& [key, count] : waiting_) {
    if (free_.empty()) {
      ++stats_.refused;
      continue;
    }
    const int64_t slot = Place(key);
    meta_[slot].lookups = count;
    meta_[slot].last_step = step32;
    ++stats_.admissions;
  }
  waiting_.clear();
  if (zero_row_used_) ResetZeroRow();
  zero_row_used_ = false;
  step_slots_.clear();
  if (tier_ == nullptr) return rows_->EndStep();
  // Over the tier: the rows initialised in this step are written back when the cache evicts
  // them (the step made them dirty); the evicted keys' rows leave the tier.
  for (int64_t row : fresh_written_) {
    if (fresh_[row] == 2) fresh_[row] = 0;
  }
  fresh_written_.clear();
  zero_cache_slot_ = -1;
  TESSERA_RETURN_IF_ERROR(rows_->EndStep());
  absl::Status s = tier_->DropRows(dropped_);
  dropped_.clear();
  return s;
}

absl::Status DynamicRowStore::EndReadOnlyStep() {
  // Undo the step's admissions in reverse, so the free list is as before.
  for (auto it = admitted_.rbegin(); it != admitted_.rend(); ++it) {
    int64_t probes = 0;
    const int64_t slot = index_.Find(*it, &probes);
    index_.Erase(*it);
    meta_[slot] = SlotMeta();
    free_.push_back(slot);
    if (tier_ != nullptr) fresh_[slot] = 0;
  }
  admitted_.clear();
  if (use_sketch_) sketch_.Undo();
  waiting_.clear();
  step_slots_.clear();
  zero_row_used_ = false;  // nothing was updated: the zero row is still zero
  // Over the tier: an initial value only read is not kept (the row stays clean): write it
  // again at its next Resolve.
  for (int64_t row : fresh_written_) {
    if (fresh_[row] == 2) fresh_[row] = 1;
  }
  fresh_written_.clear();
  zero_cache_slot_ = -1;
  return rows_->EndReadOnlyStep();
}

absl::Status DynamicRowStore::ReadRowBytes(int64_t, int64_t, void*, float*) {
  return absl::FailedPreconditionError(absl::StrCat(
      label_, " is dynamic: its rows are keyed, not numbered (read it with SaveState)"));
}

absl::Status DynamicRowStore::WriteRowBytes(int64_t, int64_t, const void*, const float*) {
  return absl::FailedPreconditionError(absl::StrCat(
      label_, " is dynamic: its rows are keyed, not numbered (write it with LoadState)"));
}

DynamicTableStats DynamicRowStore::stats() const {
  DynamicTableStats s = stats_;
  s.occupancy = index_.size();
  return s;
}

}  // namespace tessera
