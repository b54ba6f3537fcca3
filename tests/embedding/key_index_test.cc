#include "embedding/key_index.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "embedding/admission_sketch.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// Random inserts, erases and finds against std::unordered_map, full to max_keys, with keys from
// a small space (long clusters, wrap-around at the array's end) and a 64-bit space.
void CheckAgainstMap(int64_t max_keys, uint64_t key_space, uint64_t seed) {
  auto made = KeySlotIndex::Create(max_keys);
  ASSERT_TRUE(made.ok()) << made.status();
  KeySlotIndex index = std::move(made).value();
  EXPECT_GE(index.buckets(), 2 * max_keys);
  std::unordered_map<uint64_t, int64_t> ref;
  CounterRng rng(seed, 7);
  for (int op = 0; op < 200000; ++op) {
    const uint64_t key = key_space == 0 ? rng.NextBits() % 4096 * 0x9E3779B97F4A7C15ull
                                        : rng.NextBelow(key_space);
    const uint64_t what = rng.NextBelow(3);
    int64_t probes = 0;
    const int64_t found = index.Find(key, &probes);
    ASSERT_GE(probes, 1);
    auto it = ref.find(key);
    ASSERT_EQ(found, it == ref.end() ? -1 : it->second) << "op " << op << " key " << key;
    if (what == 0 && it == ref.end() && index.size() < max_keys) {
      index.Insert(key, op);
      ref[key] = op;
    } else if (what == 1) {
      ASSERT_EQ(index.Erase(key), it != ref.end());
      if (it != ref.end()) ref.erase(it);
    }
    ASSERT_EQ(index.size(), static_cast<int64_t>(ref.size()));
  }
  // Every key still findable at the end.
  for (const auto& [k, v] : ref) {
    int64_t probes = 0;
    ASSERT_EQ(index.Find(k, &probes), v);
  }
}

TEST(KeySlotIndexTest, MatchesUnorderedMapSmallSpace) { CheckAgainstMap(100, 300, 1); }
TEST(KeySlotIndexTest, MatchesUnorderedMapFull) { CheckAgainstMap(1000, 1200, 2); }
TEST(KeySlotIndexTest, MatchesUnorderedMapWideKeys) { CheckAgainstMap(5000, 0, 3); }

TEST(KeySlotIndexTest, ProbeLengthAtHalfLoadIsShort) {
  auto index = KeySlotIndex::Create(1 << 16).value();
  for (int64_t k = 0; k < (1 << 16); ++k) index.Insert(static_cast<uint64_t>(k) << 20, k);
  int64_t probes = 0;
  for (int64_t k = 0; k < (1 << 16); ++k) ASSERT_EQ(index.Find(static_cast<uint64_t>(k) << 20, &probes), k);
  // Linear probing at load 1/2: 1.5 buckets per hit expected (Knuth).
  EXPECT_LT(static_cast<double>(probes) / (1 << 16), 1.8);
}

TEST(KeySlotIndexTest, InsertThenEraseRestoresLayout) {
  auto index = KeySlotIndex::Create(64).value();
  for (uint64_t k = 0; k < 60; ++k) index.Insert(k * 7919, static_cast<int64_t>(k));
  std::vector<int64_t> before;
  for (uint64_t k = 0; k < 60; ++k) {
    int64_t p = 0;
    index.Find(k * 7919, &p);
    before.push_back(p);
  }
  index.Insert(123456789, 99);
  ASSERT_TRUE(index.Erase(123456789));
  for (uint64_t k = 0; k < 60; ++k) {
    int64_t p = 0;
    index.Find(k * 7919, &p);
    EXPECT_EQ(p, before[k]) << k;
  }
}

TEST(KeySlotIndexTest, RejectsBadSize) {
  EXPECT_FALSE(KeySlotIndex::Create(0).ok());
  EXPECT_FALSE(KeySlotIndex::Create(-5).ok());
}

TEST(AdmissionSketchTest, NeverUnderestimatesAndUndoes) {
  AdmissionSketch sketch(256, 42);
  std::unordered_map<uint64_t, uint32_t> truth;
  CounterRng rng(5, 5);
  for (int i = 0; i < 5000; ++i) {
    const uint64_t key = rng.NextBelow(400);
    const uint32_t n = 1 + static_cast<uint32_t>(rng.NextBelow(3));
    truth[key] += n;
    ASSERT_GE(sketch.Add(key, n), truth[key]);
  }
  sketch.Commit();
  const std::vector<uint16_t> saved = sketch.counters();
  for (int i = 0; i < 100; ++i) sketch.Add(rng.NextBits(), 5);
  EXPECT_NE(sketch.counters(), saved);
  sketch.Undo();
  EXPECT_EQ(sketch.counters(), saved);
}

TEST(AdmissionSketchTest, ExactWithoutCollisions) {
  AdmissionSketch sketch(1 << 20, 9);
  for (uint64_t k = 0; k < 100; ++k) {
    for (uint32_t r = 0; r < 3; ++r) sketch.Add(k, 1);
  }
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(sketch.Add(k, 0), 3u) << k;
}

}  // namespace
}  // namespace tessera
