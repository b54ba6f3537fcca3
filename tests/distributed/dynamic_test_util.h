// The dynamic-table model and keyed batches of the sharded dynamic tests
// (sharded_dynamic_test.cc, sharded_dynamic_tiered_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include "core/rng.h"
#include "sharded_test_util.h"

namespace tessera::testing {

// SmallModel with its first two tables dynamic (`half`: users bf16, ads fp16).
inline EmbeddingCollectionOptions DynamicModel(RowOptimizerType opt, bool half = false) {
  EmbeddingCollectionOptions o = SmallModel(opt);
  // users: 2 features, sum, admitted at the 2nd lookup (no sketch collisions at 2^16 counters),
  // never evicted; ads: mean, a 50% coin, ttl 2 steps. Capacities far above the keys seen.
  o.tables[0].num_rows = 4096;
  o.tables[0].dynamic.enabled = true;
  o.tables[0].dynamic.min_count = 2;
  o.tables[0].dynamic.counter_slots = 1 << 16;
  o.tables[1].num_rows = 2048;
  o.tables[1].dynamic.enabled = true;
  o.tables[1].dynamic.probability = 0.5;
  o.tables[1].dynamic.policy = EvictionPolicy::kTtl;
  o.tables[1].dynamic.ttl_steps = 2;
  if (half) {
    o.tables[0].storage.dtype = RowDtype::kBf16;
    o.tables[1].storage.dtype = RowDtype::kF16;
  }
  return o;
}

// The global batch of `step` with the dynamic tables' ids turned into raw 64-bit keys (any
// int64, negative ones included); at step 3 `empty_rank` (>= 0) gets an empty local batch.
inline GlobalBatch KeyedBatch(const EmbeddingCollectionOptions& o, int world, int step,
                              int empty_rank = -1) {
  GlobalBatch gb = MakeGlobalBatch(o, world, step, step % 2 == 0);
  if (step == 3 && empty_rank >= 0) {
    KeyedJagged& e = gb.per_rank[empty_rank];
    e.batch_size = 0;
    e.offsets.assign(1, 0);
    e.values.clear();
    e.weights.clear();
    gb.global = Concat(gb.per_rank, o.num_features);
  }
  auto keyed = [&](KeyedJagged* k) {
    for (int t = 0; t < 2; ++t) {
      for (int f : o.tables[t].features) {
        for (int64_t j = k->feature_begin(f); j < k->feature_end(f); ++j) {
          k->values[j] = static_cast<int64_t>(Mix64(static_cast<uint64_t>(k->values[j]) + 99));
        }
      }
    }
  };
  for (auto& k : gb.per_rank) keyed(&k);
  keyed(&gb.global);
  return gb;
}

// Every counter of `got` equals `want`'s (decisions, not sums: exactly).
inline void ExpectSameStats(const DynamicTableStats& got, const DynamicTableStats& want,
                            const std::string& what) {
  EXPECT_EQ(got.steps, want.steps) << what;
  EXPECT_EQ(got.capacity, want.capacity) << what;
  EXPECT_EQ(got.occupancy, want.occupancy) << what;
  EXPECT_EQ(got.admissions, want.admissions) << what;
  EXPECT_EQ(got.evictions, want.evictions) << what;
  EXPECT_EQ(got.refused, want.refused) << what;
  EXPECT_EQ(got.lookups, want.lookups) << what;
  EXPECT_EQ(got.unadmitted_lookups, want.unadmitted_lookups) << what;
}

}  // namespace tessera::testing
