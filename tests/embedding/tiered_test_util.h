// Shared helpers of the tiered row store tests: a temp directory per test, a deterministic
// training-like step (Resolve, row-wise AdaGrad update of each distinct row, EndStep) that runs
// on any RowStore, and id streams.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "embedding/row_optimizer.h"
#include "embedding/row_store.h"
#include "gtest/gtest.h"

namespace tessera::testing {

// A fresh directory under /tmp, removed on destruction.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "x";
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = "/tmp/tessera_tier_" + std::to_string(::getpid()) + "_" + name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Deterministic gradient of element k of `row` at `step`: depends on nothing else, so two stores
// given the same ids compute the same bits.
inline float TestGrad(int64_t step, int64_t row, int64_t k) {
  uint64_t h = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(row) * 0xC2B2AE3D27D4EB4Full ^ static_cast<uint64_t>(k);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int64_t>(h % 2001) - 1000) * 1e-3f;
}

// One training-like step on `store`: optional Prefetch of `next`, Resolve of each id group
// (several groups = several features sharing the table), one row-wise AdaGrad update per
// distinct row with its gradient summed over occurrences, EndStep.
inline absl::Status TrainStep(RowStore* store, int64_t step,
                              const std::vector<std::vector<int64_t>>& groups,
                              const std::vector<int64_t>* next) {
  if (next != nullptr) store->Prefetch(*next);
  const int64_t dim = store->dim();
  RowOptimizerOptions opt;
  std::vector<int64_t> all_ids, all_slots;
  for (const auto& ids : groups) {
    std::vector<int64_t> slots(ids.size());
    absl::Status s = store->Resolve(ids, absl::MakeSpan(slots));
    if (!s.ok()) return s;
    all_ids.insert(all_ids.end(), ids.begin(), ids.end());
    all_slots.insert(all_slots.end(), slots.begin(), slots.end());
  }
  // Sum the gradient per distinct row, in id order of first occurrence.
  std::vector<int64_t> order_rows, order_slots;
  std::vector<std::vector<float>> grads;
  absl::flat_hash_map<int64_t, size_t> index;
  for (size_t i = 0; i < all_ids.size(); ++i) {
    auto [it, inserted] = index.try_emplace(all_ids[i], order_rows.size());
    if (inserted) {
      order_rows.push_back(all_ids[i]);
      order_slots.push_back(all_slots[i]);
      grads.emplace_back(dim, 0.0f);
    }
    for (int64_t k = 0; k < dim; ++k) grads[it->second][k] += TestGrad(step, all_ids[i], k);
  }
  for (size_t u = 0; u < order_rows.size(); ++u) {
    float* w = store->weights() + order_slots[u] * dim;
    float* s = store->state() + order_slots[u] * store->state_dim();
    ApplyRowUpdate(opt, 0.05f, step + 1, dim, grads[u].data(), w, s);
  }
  return store->EndStep();
}

// `n` ids in [0, rows) skewed toward low ids (squared uniform), so that some rows are hot.
inline std::vector<int64_t> SkewedIds(std::mt19937_64& rng, int64_t rows, int64_t n) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int64_t> ids(n);
  for (auto& id : ids) {
    double x = u(rng);
    id = std::min<int64_t>(rows - 1, static_cast<int64_t>(x * x * x * static_cast<double>(rows)));
  }
  return ids;
}

// `steps` steps of 64 skewed ids over [0, rows), from a generator seeded with `seed`.
inline std::vector<std::vector<int64_t>> SkewedIdStream(uint64_t seed, int64_t rows, int steps) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> out;
  for (int t = 0; t < steps; ++t) out.push_back(SkewedIds(rng, rows, 64));
  return out;
}

// TrainStep for steps [from, to) of `ids`, each prefetching the next step's ids (none for the
// last); fails the test with the step number on an error.
inline void TrainSteps(RowStore* store, const std::vector<std::vector<int64_t>>& ids, int from,
                       int to) {
  for (int t = from; t < to; ++t) {
    absl::Status s = TrainStep(store, t, {ids[t]}, t + 1 < to ? &ids[t + 1] : nullptr);
    ASSERT_TRUE(s.ok()) << "step " << t << ": " << s;
  }
}

inline int64_t DistinctCount(const std::vector<int64_t>& ids) {
  return static_cast<int64_t>(absl::flat_hash_set<int64_t>(ids.begin(), ids.end()).size());
}

// Reads every row of `store` (weights then state, concatenated).
inline std::vector<float> AllRows(RowStore* store, std::vector<float>* state) {
  std::vector<float> w(store->num_rows() * store->dim());
  state->assign(store->num_rows() * store->state_dim(), 0.0f);
  absl::Status s = store->ReadRows(0, store->num_rows(), w.data(), state->data());
  EXPECT_TRUE(s.ok()) << s;
  return w;
}

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace tessera::testing
