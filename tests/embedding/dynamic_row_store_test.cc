// DynamicRowStore against a straightforward reference (std::unordered_map of rows, exact counts,
// eviction by sorting every row), step by step: the keys held, every weight and state bit, the
// stats; plus determinism, save / load, the zero row, evaluation steps and bad options.
#include "embedding/dynamic_row_store.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "embedding/row_optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDim = 4;

DynamicRowStoreOptions Options(int64_t capacity, EvictionPolicy policy) {
  DynamicRowStoreOptions o;
  o.capacity = capacity;
  o.dim = kDim;
  o.state_dim = 1;
  o.state_init = 0.5f;
  o.init.scale = 0.1f;
  o.seed = 77;
  o.table_id = 3;
  o.name = "dyn";
  o.dynamic.enabled = true;
  o.dynamic.policy = policy;
  if (policy == EvictionPolicy::kTtl) o.dynamic.ttl_steps = 3;
  o.dynamic.counter_slots = 1 << 20;  // no collisions among the test's keys: exact counts
  return o;
}

// The gradient a key's row gets per lookup in these tests (any fixed function of the key).
std::vector<float> Grad(uint64_t key) {
  std::vector<float> g(kDim);
  for (int k = 0; k < kDim; ++k) g[k] = 0.01f * static_cast<float>((key % 7) + k) - 0.02f;
  return g;
}

RowOptimizerOptions Adagrad() {
  RowOptimizerOptions o;
  o.type = RowOptimizerType::kRowWiseAdagrad;
  return o;
}

// The reference: the rules of dynamic_row_store.h written the plain way.
class Reference {
 public:
  explicit Reference(const DynamicRowStoreOptions& o) : o_(o) {}
  struct Row {
    std::vector<float> w;
    float v = 0;
    uint32_t lookups = 0;
    int64_t last = 0;
  };

  // Returns, per id, whether it has a row this step.
  std::vector<bool> Resolve(const std::vector<int64_t>& ids) {
    saved_ = std::make_unique<Saved>(Saved{rows_, counts_, stats_});
    std::map<uint64_t, uint32_t> misses;
    for (int64_t id : ids) {
      if (!rows_.count(static_cast<uint64_t>(id))) ++misses[static_cast<uint64_t>(id)];
    }
    for (const auto& [key, c] : misses) {
      bool admit = true;
      if (o_.dynamic.min_count > 1) admit = (counts_[key] += c) >= o_.dynamic.min_count;
      if (!admit) continue;
      if (static_cast<int64_t>(rows_.size()) < o_.capacity) {
        Row r;
        r.w.resize(kDim);
        InitRow(o_.init, o_.seed, o_.table_id, o_.capacity, static_cast<int64_t>(key), kDim,
                r.w.data());
        r.v = o_.state_init;
        rows_[key] = r;
        ++pending_admissions_;
      } else {
        waiting_[key] += c;
      }
    }
    std::vector<bool> has(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      has[i] = rows_.count(static_cast<uint64_t>(ids[i])) > 0;
      if (!has[i]) ++stats_.unadmitted_lookups;
    }
    stats_.lookups += static_cast<int64_t>(ids.size());
    return has;
  }

  void Update(uint64_t key, const std::vector<float>& g, float lr, int64_t step) {
    Row& r = rows_.at(key);
    ApplyRowUpdate(Adagrad(), lr, step, kDim, g.data(), r.w.data(), &r.v);
  }

  void EndStep(const std::vector<int64_t>& ids) {
    const int64_t step = ++stats_.steps;
    // The policies' bookkeeping: counts under lfu, last use under lfu / lru / ttl.
    const EvictionPolicy policy = o_.dynamic.policy;
    for (int64_t id : ids) {
      auto it = rows_.find(static_cast<uint64_t>(id));
      if (it == rows_.end() || policy == EvictionPolicy::kNone) continue;
      if (policy == EvictionPolicy::kLfu) ++it->second.lookups;
      it->second.last = step;
    }
    stats_.admissions += pending_admissions_;
    pending_admissions_ = 0;
    const DynamicTableConfig& d = o_.dynamic;
    if (d.policy == EvictionPolicy::kTtl) {
      for (auto it = rows_.begin(); it != rows_.end();) {
        if (it->second.last + d.ttl_steps <= step) {
          it = rows_.erase(it);
          ++stats_.evictions;
        } else {
          ++it;
        }
      }
    }
    const int64_t free = o_.capacity - static_cast<int64_t>(rows_.size());
    const int64_t need = static_cast<int64_t>(waiting_.size()) - free;
    if ((d.policy == EvictionPolicy::kLfu || d.policy == EvictionPolicy::kLru) && need > 0) {
      std::vector<std::pair<uint64_t, Row*>> cands;
      for (auto& [k, r] : rows_) {
        if (r.last != step) cands.push_back({k, &r});
      }
      const bool lfu = d.policy == EvictionPolicy::kLfu;
      std::sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) {
        if (lfu && a.second->lookups != b.second->lookups) {
          return a.second->lookups < b.second->lookups;
        }
        if (a.second->last != b.second->last) return a.second->last < b.second->last;
        return a.first < b.first;
      });
      const int64_t k = std::min<int64_t>(cands.size(), std::max(need, o_.capacity / 64));
      for (int64_t i = 0; i < k; ++i) {
        evicted_.push_back(cands[i].first);
        rows_.erase(cands[i].first);
        ++stats_.evictions;
      }
    }
    for (const auto& [key, c] : waiting_) {
      if (static_cast<int64_t>(rows_.size()) >= o_.capacity) {
        ++stats_.refused;
        continue;
      }
      Row r;
      r.w.resize(kDim);
      InitRow(o_.init, o_.seed, o_.table_id, o_.capacity, static_cast<int64_t>(key), kDim,
              r.w.data());
      r.v = o_.state_init;
      r.lookups = c;
      r.last = step;
      rows_[key] = r;
      ++stats_.admissions;
    }
    waiting_.clear();
  }

  void EndReadOnlyStep() {
    const int64_t lookups = stats_.lookups, unadmitted = stats_.unadmitted_lookups;
    rows_ = saved_->rows;
    counts_ = saved_->counts;
    stats_ = saved_->stats;
    stats_.lookups = lookups;
    stats_.unadmitted_lookups = unadmitted;
    waiting_.clear();
    pending_admissions_ = 0;
  }

  const std::map<uint64_t, Row>& rows() const { return rows_; }
  const DynamicTableStats& stats() const { return stats_; }

 private:
  struct Saved {
    std::map<uint64_t, Row> rows;
    std::unordered_map<uint64_t, int64_t> counts;
    DynamicTableStats stats;
  };
  DynamicRowStoreOptions o_;
  std::map<uint64_t, Row> rows_;
  std::unordered_map<uint64_t, int64_t> counts_;
  std::map<uint64_t, uint32_t> waiting_;
  int64_t pending_admissions_ = 0;
  std::vector<uint64_t> evicted_;
  std::unique_ptr<Saved> saved_;
  DynamicTableStats stats_;
};

// Keys from a skewed space with some huge values (the top bit set: negative as int64).
std::vector<int64_t> Batch(CounterRng& rng, int n, uint64_t space) {
  std::vector<int64_t> ids(n);
  for (int i = 0; i < n; ++i) {
    const double u = rng.NextUniformDouble();
    uint64_t k = static_cast<uint64_t>(std::pow(static_cast<double>(space), u * u));
    if (k % 5 == 0) k = ~k;  // a key above 2^63
    ids[i] = static_cast<int64_t>(k * 0x9E3779B97F4A7C15ull);
  }
  return ids;
}

// One training step on the store: Resolve, an AdaGrad update on every distinct slot (slot 0
// too, as the fused update would), EndStep.
void StoreStep(DynamicRowStore& s, const std::vector<int64_t>& ids, float lr) {
  std::vector<int64_t> slots(ids.size());
  ASSERT_TRUE(s.Resolve(ids, absl::MakeSpan(slots)).ok());
  std::map<int64_t, std::vector<float>> grads;  // slot -> summed gradient
  for (size_t i = 0; i < ids.size(); ++i) {
    auto& g = grads[slots[i]];
    g.resize(kDim);
    const std::vector<float> gi = Grad(static_cast<uint64_t>(ids[i]));
    for (int k = 0; k < kDim; ++k) g[k] += gi[k];
  }
  float* w = static_cast<float*>(s.weight_data());
  for (auto& [slot, g] : grads) {
    ApplyRowUpdate(Adagrad(), lr, s.stats().steps + 1, kDim, g.data(), w + slot * kDim,
                   s.state() + slot);
  }
  ASSERT_TRUE(s.EndStep().ok());
}

void RefStep(Reference& r, const std::vector<int64_t>& ids, float lr) {
  const std::vector<bool> has = r.Resolve(ids);
  std::map<uint64_t, std::vector<float>> grads;
  // Summed in id order per key, as StoreStep sums per slot.
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!has[i]) continue;
    auto& g = grads[static_cast<uint64_t>(ids[i])];
    g.resize(kDim);
    const std::vector<float> gi = Grad(static_cast<uint64_t>(ids[i]));
    for (int k = 0; k < kDim; ++k) g[k] += gi[k];
  }
  for (auto& [key, g] : grads) r.Update(key, g, lr, r.stats().steps + 1);
  r.EndStep(ids);
}

void ExpectSame(DynamicRowStore& s, const Reference& r, int step) {
  DynamicTableState st;
  ASSERT_TRUE(s.SaveState(true, &st).ok());
  ASSERT_EQ(st.keys.size(), r.rows().size()) << "step " << step;
  size_t i = 0;
  for (const auto& [key, row] : r.rows()) {
    ASSERT_EQ(st.keys[i], key) << "step " << step;
    const float* w = reinterpret_cast<const float*>(st.weights.data()) + i * kDim;
    for (int k = 0; k < kDim; ++k) ASSERT_EQ(w[k], row.w[k]) << "step " << step << " key " << key;
    ASSERT_EQ(st.state[i], row.v) << "step " << step << " key " << key;
    ASSERT_EQ(st.lookups[i], row.lookups) << "step " << step << " key " << key;
    ASSERT_EQ(st.last_step[i], row.last) << "step " << step << " key " << key;
    ++i;
  }
  const DynamicTableStats a = s.stats(), b = r.stats();
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.admissions, b.admissions) << "step " << step;
  EXPECT_EQ(a.evictions, b.evictions) << "step " << step;
  EXPECT_EQ(a.refused, b.refused) << "step " << step;
  EXPECT_EQ(a.lookups, b.lookups) << "step " << step;
  EXPECT_EQ(a.unadmitted_lookups, b.unadmitted_lookups) << "step " << step;
  EXPECT_EQ(a.occupancy, static_cast<int64_t>(r.rows().size()));
  EXPECT_GE(a.probes, a.lookups);
}

void RunAgainstReference(DynamicRowStoreOptions o, uint64_t space, int steps) {
  auto made = DynamicRowStore::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  DynamicRowStore& s = **made;
  Reference r(o);
  CounterRng rng(11, o.table_id);
  for (int step = 0; step < steps; ++step) {
    const std::vector<int64_t> ids = Batch(rng, 64, space);
    if (step % 7 == 3) {
      // An evaluation step: lookups only, then nothing about the table may change.
      std::vector<int64_t> slots(ids.size());
      ASSERT_TRUE(s.Resolve(ids, absl::MakeSpan(slots)).ok());
      r.Resolve(ids);
      ASSERT_TRUE(s.EndReadOnlyStep().ok());
      r.EndReadOnlyStep();
    } else {
      StoreStep(s, ids, 0.1f);
      RefStep(r, ids, 0.1f);
    }
    ExpectSame(s, r, step);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(s.stats().admissions, 0);
}

TEST(DynamicRowStoreTest, NoEvictionMatchesReference) {
  RunAgainstReference(Options(100, EvictionPolicy::kNone), 400, 60);
}
TEST(DynamicRowStoreTest, LfuMatchesReference) {
  RunAgainstReference(Options(100, EvictionPolicy::kLfu), 400, 80);
}
TEST(DynamicRowStoreTest, LruMatchesReference) {
  RunAgainstReference(Options(100, EvictionPolicy::kLru), 400, 80);
}
TEST(DynamicRowStoreTest, LfuWithSlackMatchesReference) {
  // capacity / 64 = 4 rows evicted at least whenever keys wait.
  RunAgainstReference(Options(256, EvictionPolicy::kLfu), 3000, 60);
}
TEST(DynamicRowStoreTest, TtlMatchesReference) {
  RunAgainstReference(Options(150, EvictionPolicy::kTtl), 400, 80);
}
TEST(DynamicRowStoreTest, MinCountMatchesReference) {
  DynamicRowStoreOptions o = Options(120, EvictionPolicy::kLru);
  o.dynamic.min_count = 3;
  RunAgainstReference(o, 400, 80);
}

TEST(DynamicRowStoreTest, EvictionCountsAndOccupancyBounded) {
  DynamicRowStoreOptions o = Options(50, EvictionPolicy::kLfu);
  auto s = DynamicRowStore::Create(o).value();
  CounterRng rng(3, 3);
  for (int step = 0; step < 100; ++step) StoreStep(*s, Batch(rng, 64, 1 << 20), 0.1f);
  const DynamicTableStats st = s->stats();
  EXPECT_LE(st.occupancy, 50);
  EXPECT_GT(st.evictions, 0);
  EXPECT_EQ(st.admissions - st.evictions, st.occupancy);
}

TEST(DynamicRowStoreTest, UnadmittedIdsReadZeroAndLearnNothing) {
  DynamicRowStoreOptions o = Options(10, EvictionPolicy::kNone);
  o.dynamic.min_count = 3;
  auto s = DynamicRowStore::Create(o).value();
  const std::vector<int64_t> ids = {int64_t{1} << 50};
  std::vector<int64_t> slots(1);
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(s->Resolve(ids, absl::MakeSpan(slots)).ok());
    const float* w = static_cast<const float*>(s->weight_data()) + slots[0] * kDim;
    if (step < 3) {
      EXPECT_EQ(slots[0], 0);
      for (int k = 0; k < kDim; ++k) EXPECT_EQ(w[k], 0.0f);
    } else {
      // Admitted at its third lookup: the counter-based init of (seed, table, key).
      EXPECT_NE(slots[0], 0);
      std::vector<float> want(kDim);
      InitRow(o.init, o.seed, o.table_id, o.capacity, ids[0], kDim, want.data());
      for (int k = 0; k < kDim; ++k) EXPECT_EQ(w[k], want[k]);
    }
    // A big update lands on the slot; the zero row must be zero again after EndStep.
    float* wm = static_cast<float*>(s->weight_data()) + slots[0] * kDim;
    for (int k = 0; k < kDim; ++k) wm[k] += 5.0f;
    s->state()[slots[0]] += 1.0f;
    ASSERT_TRUE(s->EndStep().ok());
    const float* zero = static_cast<const float*>(s->weight_data());
    for (int k = 0; k < kDim; ++k) EXPECT_EQ(zero[k], 0.0f);
    EXPECT_EQ(s->state()[0], o.state_init);
  }
  EXPECT_EQ(s->stats().unadmitted_lookups, 2);
  EXPECT_EQ(s->stats().admissions, 1);
}

TEST(DynamicRowStoreTest, EvaluationNeverAdmits) {
  auto s = DynamicRowStore::Create(Options(10, EvictionPolicy::kNone)).value();
  std::vector<int64_t> ids = {5, 6, 7}, slots(3);
  // A forward whose step is skipped: admitted for the step, undone by EndReadOnlyStep.
  ASSERT_TRUE(s->Resolve(ids, absl::MakeSpan(slots)).ok());
  EXPECT_NE(slots[0], 0);
  ASSERT_TRUE(s->EndReadOnlyStep().ok());
  EXPECT_EQ(s->stats().occupancy, 0);
  EXPECT_EQ(s->stats().admissions, 0);
  // Evaluation: nothing admitted, the zero row read.
  s->set_admitting(false);
  ASSERT_TRUE(s->Resolve(ids, absl::MakeSpan(slots)).ok());
  EXPECT_EQ(slots, std::vector<int64_t>({0, 0, 0}));
  ASSERT_TRUE(s->EndReadOnlyStep().ok());
  s->set_admitting(true);
  ASSERT_TRUE(s->Resolve(ids, absl::MakeSpan(slots)).ok());
  ASSERT_TRUE(s->EndStep().ok());
  EXPECT_EQ(s->stats().occupancy, 3);
}

TEST(DynamicRowStoreTest, ProbabilityAdmissionIsDeterministicAndNearP) {
  DynamicRowStoreOptions o = Options(100000, EvictionPolicy::kNone);
  o.dynamic.probability = 0.25;
  auto a = DynamicRowStore::Create(o).value();
  auto b = DynamicRowStore::Create(o).value();
  std::vector<int64_t> ids(20000), slots(20000);
  for (int64_t i = 0; i < 20000; ++i) ids[i] = i * 1000003;
  ASSERT_TRUE(a->Resolve(ids, absl::MakeSpan(slots)).ok());
  ASSERT_TRUE(a->EndStep().ok());
  // The other store sees the ids in another order and in two calls: the same keys get in.
  std::reverse(ids.begin(), ids.end());
  ASSERT_TRUE(b->Resolve(absl::MakeConstSpan(ids).subspan(0, 7000),
                         absl::MakeSpan(slots).subspan(0, 7000)).ok());
  ASSERT_TRUE(b->Resolve(absl::MakeConstSpan(ids).subspan(7000),
                         absl::MakeSpan(slots).subspan(7000)).ok());
  ASSERT_TRUE(b->EndStep().ok());
  DynamicTableState sa, sb;
  ASSERT_TRUE(a->SaveState(true, &sa).ok());
  ASSERT_TRUE(b->SaveState(true, &sb).ok());
  EXPECT_EQ(sa.keys, sb.keys);
  EXPECT_EQ(sa.weights, sb.weights);
  const double frac = static_cast<double>(sa.keys.size()) / 20000.0;
  EXPECT_NEAR(frac, 0.25, 0.02);
}

TEST(DynamicRowStoreTest, SaveLoadResumesBitIdentically) {
  DynamicRowStoreOptions o = Options(80, EvictionPolicy::kLfu);
  o.dynamic.min_count = 2;
  o.dynamic.counter_slots = 0;  // the default sketch: collisions possible, still deterministic
  auto whole = DynamicRowStore::Create(o).value();
  auto first = DynamicRowStore::Create(o).value();
  CounterRng rng_a(8, 8), rng_b(8, 8);
  for (int step = 0; step < 40; ++step) {
    StoreStep(*whole, Batch(rng_a, 48, 2000), 0.05f);
    StoreStep(*first, Batch(rng_b, 48, 2000), 0.05f);
  }
  DynamicTableState mid;
  ASSERT_TRUE(first->SaveState(true, &mid).ok());
  first.reset();
  auto resumed = DynamicRowStore::Create(o).value();
  ASSERT_TRUE(resumed->LoadState(mid).ok());
  for (int step = 40; step < 80; ++step) {
    StoreStep(*whole, Batch(rng_a, 48, 2000), 0.05f);
    StoreStep(*resumed, Batch(rng_b, 48, 2000), 0.05f);
  }
  DynamicTableState a, b;
  ASSERT_TRUE(whole->SaveState(true, &a).ok());
  ASSERT_TRUE(resumed->SaveState(true, &b).ok());
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.lookups, b.lookups);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(a.sketch, b.sketch);
  EXPECT_EQ(whole->stats().evictions, resumed->stats().evictions);
  EXPECT_GT(whole->stats().evictions, 0);
}

TEST(DynamicRowStoreTest, SixteenBitRowsRoundTheInit) {
  DynamicRowStoreOptions o = Options(10, EvictionPolicy::kNone);
  o.dtype = RowDtype::kBf16;
  auto s = DynamicRowStore::Create(o).value();
  std::vector<int64_t> ids = {42}, slots(1);
  ASSERT_TRUE(s->Resolve(ids, absl::MakeSpan(slots)).ok());
  std::vector<float> want(kDim), got(kDim);
  InitRow(o.init, o.seed, o.table_id, o.capacity, 42, kDim, want.data());
  std::vector<uint16_t> rounded(kDim);
  RowValuesFromFloat(RowDtype::kBf16, want.data(), kDim, rounded.data());
  RowValuesToFloat(RowDtype::kBf16,
                   static_cast<const uint16_t*>(s->weight_data()) + slots[0] * kDim, kDim,
                   got.data());
  std::vector<float> expect(kDim);
  RowValuesToFloat(RowDtype::kBf16, rounded.data(), kDim, expect.data());
  EXPECT_EQ(got, expect);
}

TEST(DynamicRowStoreTest, BadOptions) {
  DynamicRowStoreOptions o = Options(0, EvictionPolicy::kNone);
  EXPECT_THAT(DynamicRowStore::Create(o).status().message(), HasSubstr("capacity_rows"));
  o = Options(10, EvictionPolicy::kTtl);
  o.dynamic.ttl_steps = 0;
  EXPECT_THAT(DynamicRowStore::Create(o).status().message(), HasSubstr("ttl_steps"));
  o = Options(10, EvictionPolicy::kLru);
  o.dynamic.ttl_steps = 4;
  EXPECT_THAT(DynamicRowStore::Create(o).status().message(), HasSubstr("not ttl"));
  o = Options(10, EvictionPolicy::kNone);
  o.dynamic.min_count = 2;
  o.dynamic.probability = 0.5;
  EXPECT_THAT(DynamicRowStore::Create(o).status().message(), HasSubstr("choose one"));
  o = Options(10, EvictionPolicy::kNone);
  o.dynamic.probability = 1.5;
  EXPECT_THAT(DynamicRowStore::Create(o).status().message(), HasSubstr("probability"));
  EXPECT_THAT(ParseEvictionPolicy("fifo").status().message(), HasSubstr("fifo"));
  o = Options(int64_t{1} << 38, EvictionPolicy::kNone);
  o.dim = 1 << 16;
  auto huge = DynamicRowStore::Create(o);
  EXPECT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("'dyn'"));
}

TEST(DynamicRowStoreTest, RowRangesAndBadStateAreRefused) {
  auto s = DynamicRowStore::Create(Options(10, EvictionPolicy::kNone)).value();
  std::vector<float> w(kDim);
  EXPECT_EQ(s->ReadRows(0, 1, w.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->WriteRows(0, 1, w.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
  DynamicTableState st;
  ASSERT_TRUE(s->SaveState(true, &st).ok());
  st.keys = {5, 3};
  st.weights.resize(2 * kDim * 4);
  st.state.resize(2);
  st.lookups.resize(2);
  st.last_step.resize(2);
  EXPECT_THAT(s->LoadState(st).message(), HasSubstr("ascending"));
  st.dim = 8;
  EXPECT_THAT(s->LoadState(st).message(), HasSubstr("does not match"));
}

}  // namespace
}  // namespace tessera
