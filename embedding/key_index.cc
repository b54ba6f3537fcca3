#include "embedding/key_index.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/logging.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<KeySlotIndex> KeySlotIndex::Create(int64_t max_keys) {
  if (max_keys <= 0 || max_keys > (std::numeric_limits<int64_t>::max() >> 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KeySlotIndex: max_keys ", max_keys, " is not in [1, 2^55)"));
  }
  uint64_t buckets = 2;
  while (buckets < 2 * static_cast<uint64_t>(max_keys)) buckets <<= 1;
  KeySlotIndex index;
  const size_t bytes = buckets * sizeof(Entry);
  index.entries_ = static_cast<Entry*>(AllocateHost(bytes));
  if (index.entries_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KeySlotIndex: allocating ", bytes, " bytes for ", max_keys, " keys failed"));
  }
  index.mask_ = buckets - 1;
  index.max_keys_ = max_keys;
  return index;
}

KeySlotIndex& KeySlotIndex::operator=(KeySlotIndex&& o) noexcept {
  if (this != &o) {
    if (entries_ != nullptr) FreeHost(entries_, static_cast<size_t>(bytes()));
    entries_ = std::exchange(o.entries_, nullptr);
    mask_ = std::exchange(o.mask_, 0);
    size_ = std::exchange(o.size_, 0);
    max_keys_ = std::exchange(o.max_keys_, 0);
  }
  return *this;
}

KeySlotIndex::~KeySlotIndex() {
  if (entries_ != nullptr) FreeHost(entries_, static_cast<size_t>(bytes()));
}

void KeySlotIndex::Insert(uint64_t key, int64_t slot) {
  TESSERA_CHECK(size_ < max_keys_ && slot >= 0)
      << "KeySlotIndex::Insert: " << size_ << " of " << max_keys_ << " keys, slot " << slot;
  uint64_t i = Home(key);
  while (entries_[i].slot1 != 0) {
    TESSERA_CHECK(entries_[i].key != key) << "KeySlotIndex::Insert: key " << key << " present";
    i = (i + 1) & mask_;
  }
  entries_[i] = {key, static_cast<uint64_t>(slot) + 1};
  ++size_;
}

bool KeySlotIndex::Erase(uint64_t key) {
  uint64_t i = Home(key);
  while (true) {
    if (entries_[i].slot1 == 0) return false;
    if (entries_[i].key == key) break;
    i = (i + 1) & mask_;
  }
  // Backward-shift deletion: walk the cluster after the hole; an entry whose home does not lie
  // cyclically in (hole, j] may move back into the hole, which then moves to j.
  uint64_t hole = i;
  uint64_t j = i;
  while (true) {
    j = (j + 1) & mask_;
    if (entries_[j].slot1 == 0) break;
    const uint64_t home = Home(entries_[j].key);
    const bool stays = ((j - home) & mask_) < ((j - hole) & mask_);
    if (!stays) {
      entries_[hole] = entries_[j];
      hole = j;
    }
  }
  entries_[hole] = {0, 0};
  --size_;
  return true;
}

}  // namespace tessera
