// Shared fixtures for the ShardedEmbeddingCollection tests: a small model (4 features over 3
// tables, one table serving two features, sum and mean pooling), plans of every sharding type,
// deterministic global batches, and the single-process reference run.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "embedding/embedding_collection.h"
#include "gtest/gtest.h"
#include "sharding/plan.h"
#include "sharding/process_grid.h"
#include "sharding/internal/ctx_array.h"
#include "sharding/sharded_embedding.h"

namespace tessera::testing {

inline EmbeddingCollectionOptions SmallModel(RowOptimizerType opt, uint64_t seed = 7) {
  EmbeddingCollectionOptions o;
  o.num_features = 4;
  o.seed = seed;
  o.optimizer.type = opt;
  o.tables.resize(3);
  auto table = [&](int t, const char* name, int64_t rows, int64_t dim, PoolingMode pooling,
                   std::vector<int> features) {
    o.tables[t].name = name;
    o.tables[t].num_rows = rows;
    o.tables[t].dim = dim;
    o.tables[t].pooling = pooling;
    o.tables[t].features = std::move(features);
  };
  table(0, "users", 41, 8, PoolingMode::kSum, {0, 2});
  table(1, "ads", 29, 6, PoolingMode::kMean, {1});
  table(2, "site", 23, 4, PoolingMode::kSum, {3});
  return o;
}

// A plan with every table sharded by `type` over a group of n ranks; owners rotate with the
// table index so shards of different tables land on different ranks.
inline ShardingPlan PlanOfType(ShardingType type, const std::vector<TableConfig>& tables, int n) {
  ShardingPlan plan;
  plan.group_size = n;
  for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
    const TableConfig& c = tables[t];
    TablePlan tp;
    tp.table = c.name;
    tp.type = type;
    auto add = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int i) {
      Shard sh;
      sh.row_begin = r0;
      sh.row_end = r1;
      sh.col_begin = c0;
      sh.col_end = c1;
      sh.rank = (i + t) % n;
      tp.shards.push_back(sh);
    };
    switch (type) {
      case ShardingType::kDataParallel: break;
      case ShardingType::kTableWise: add(0, c.num_rows, 0, c.dim, 0); break;
      case ShardingType::kRowWise:
      case ShardingType::kTableRowWise: {
        // Uneven pieces; table_row_wise uses two pieces (a "host" of two ranks).
        const int k = type == ShardingType::kRowWise ? n : std::min(n, 2);
        int64_t at = 0;
        for (int i = 0; i < k; ++i) {
          int64_t e = i + 1 == k ? c.num_rows : at + c.num_rows / (k + 1) + i;
          add(at, e, 0, c.dim, i);
          at = e;
        }
        break;
      }
      case ShardingType::kColumnWise: {
        const int k = static_cast<int>(std::min<int64_t>(n, c.dim / 2));
        for (int i = 0; i < std::max(k, 1); ++i) {
          add(0, c.num_rows, c.dim * i / std::max(k, 1), c.dim * (i + 1) / std::max(k, 1), i);
        }
        break;
      }
      case ShardingType::kGrid: {
        // 2 row blocks x 2 column blocks, plus the second row block's columns split unevenly.
        const int64_t rm = c.num_rows / 3, cm = c.dim / 2;
        add(0, rm, 0, cm, 0);
        add(0, rm, cm, c.dim, 1);
        add(rm, c.num_rows, 0, cm - 1, 2);
        add(rm, c.num_rows, cm - 1, c.dim, 3);
        break;
      }
    }
    plan.tables.push_back(tp);
  }
  return plan;
}

// Every sharding type and both row optimizers, as gtest parameter generators.
inline auto EveryShardingType() {
  return ::testing::Values(ShardingType::kDataParallel, ShardingType::kTableWise,
                           ShardingType::kRowWise, ShardingType::kColumnWise,
                           ShardingType::kTableRowWise, ShardingType::kGrid);
}
inline auto BothRowOptimizers() {
  return ::testing::Values(RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad);
}

// The global batch of step `step`: batch_of(r) samples for rank r, concatenated in rank order.
// Ids are skewed (many repeats), bags hold 0..4 ids, optional per-id weights.
struct GlobalBatch {
  std::vector<KeyedJagged> per_rank;
  KeyedJagged global;
};

inline KeyedJagged Concat(const std::vector<KeyedJagged>& parts, int num_features) {
  KeyedJagged g;
  g.num_features = num_features;
  for (const auto& p : parts) g.batch_size += p.batch_size;
  g.offsets.assign(1, 0);
  const bool weighted = !parts.empty() && !parts[0].weights.empty();
  for (int f = 0; f < num_features; ++f) {
    for (const auto& p : parts) {
      for (int64_t b = 0; b < p.batch_size; ++b) {
        const int64_t bag = f * p.batch_size + b;
        for (int64_t j = p.offsets[bag]; j < p.offsets[bag + 1]; ++j) {
          g.values.push_back(p.values[j]);
          if (weighted) g.weights.push_back(p.weights[j]);
        }
        g.offsets.push_back(static_cast<int64_t>(g.values.size()));
      }
    }
  }
  return g;
}

inline GlobalBatch MakeGlobalBatch(const EmbeddingCollectionOptions& o, int world, int step,
                                   bool weighted) {
  GlobalBatch gb;
  for (int r = 0; r < world; ++r) {
    CounterRng rng(HashCombine(1000 + step, r), 0);
    KeyedJagged k;
    k.num_features = o.num_features;
    k.batch_size = 3 + r % 3;  // unequal local batches
    k.offsets.assign(1, 0);
    for (int f = 0; f < o.num_features; ++f) {
      int64_t rows = 0;
      for (const auto& t : o.tables) {
        for (int ff : t.features) {
          if (ff == f) rows = t.num_rows;
        }
      }
      for (int64_t b = 0; b < k.batch_size; ++b) {
        const int len = static_cast<int>(rng.NextUniform() * 5);  // 0..4
        for (int j = 0; j < len; ++j) {
          const float u = rng.NextUniform();
          k.values.push_back(static_cast<int64_t>(u * u * u * rows) % rows);  // skewed
          if (weighted) k.weights.push_back(0.5f + rng.NextUniform());
        }
        k.offsets.push_back(static_cast<int64_t>(k.values.size()));
      }
    }
    gb.per_rank.push_back(std::move(k));
  }
  gb.global = Concat(gb.per_rank, o.num_features);
  return gb;
}

// d_out of the global batch (the gradient of the global loss): deterministic values.
inline std::vector<float> GlobalGrad(int64_t global_batch, int64_t od, int step) {
  CounterRng rng(HashCombine(77, step), 1);
  std::vector<float> g(global_batch * od);
  for (auto& x : g) x = (rng.NextUniform() - 0.5f) * 0.2f;
  return g;
}

inline int64_t RowsBefore(const GlobalBatch& gb, int rank) {
  int64_t n = 0;
  for (int r = 0; r < rank; ++r) n += gb.per_rank[r].batch_size;
  return n;
}

// |a - b| <= atol + rtol |b| for every element; reports the first few mismatches.
inline void ExpectClose(const float* got, const float* want, int64_t n, double rtol, double atol,
                        const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

// Steps 1..steps of Forward + BackwardUpdate (lr 0.5) of a ShardedEmbeddingCollection on ctx
// over the global batches above (odd steps weighted; the next batch prefetched), then every
// table read back: this rank's pooled outputs of each step (copied to the host), and each
// table's rows and state.
struct ShardedRun {
  std::vector<std::vector<float>> outputs, weights, state;
  std::unique_ptr<ShardedEmbeddingCollection> model;  // for metrics after the run
  bool ok = false;
};

inline ShardedRun TrainSharded(const ProcessGrid& grid, const ShardedEmbeddingOptions& so,
                               const DeviceContext& ctx, int steps, int me, int world) {
  ShardedRun run;
  auto m = ShardedEmbeddingCollection::Create(so, grid, ctx);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  run.model = std::move(m).value();
  ShardedEmbeddingCollection& model = *run.model;
  const int64_t od = model.output_dim();
  internal::CtxArray<float> out_buf, grad_buf;
  for (int step = 1; step <= steps; ++step) {
    GlobalBatch gb = MakeGlobalBatch(so.collection, world, step, step % 2 == 0);
    if (step < steps) {
      model.Prefetch(MakeGlobalBatch(so.collection, world, step + 1, (step + 1) % 2 == 0)
                         .per_rank[me]);
    }
    const int64_t n = gb.per_rank[me].batch_size * od;
    run.outputs.emplace_back(n);
    // Forward's out and BackwardUpdate's d_out are ctx's memory (device memory on a CUDA context,
    // sharding/sharded_embedding.h): both go through ctx arrays on every context, so the CPU runs
    // take the same path as the GPU ones (there the copies are memcpy).
    absl::StatusOr<float*> out = out_buf.Reserve(ctx, n, "the test's outputs");
    absl::StatusOr<float*> d_out = grad_buf.Reserve(ctx, n, "the test's output gradients");
    EXPECT_TRUE(out.ok() && d_out.ok()) << out.status() << d_out.status();
    if (!out.ok() || !d_out.ok()) return run;
    absl::Status fs = model.Forward(gb.per_rank[me], *out);
    if (fs.ok()) fs = internal::CopyToHost(ctx, run.outputs.back().data(), *out, n);
    EXPECT_TRUE(fs.ok()) << fs;
    if (!fs.ok()) return run;
    std::vector<float> grad = GlobalGrad(gb.global.batch_size, od, step);
    absl::Status bs =
        internal::CopyFromHost(ctx, *d_out, grad.data() + RowsBefore(gb, me) * od, n);
    if (bs.ok()) bs = model.BackwardUpdate(*d_out, 0.5f, step);
    EXPECT_TRUE(bs.ok()) << bs;
    if (!bs.ok()) return run;
  }
  for (int t = 0; t < model.num_tables(); ++t) {
    const TableConfig& c = model.table(t);
    const int64_t sd = RowStateDim(so.collection.optimizer.type, c.dim);
    run.weights.emplace_back(c.num_rows * c.dim);
    run.state.emplace_back(c.num_rows * sd + 1);
    absl::Status rs =
        model.ReadTable(t, 0, c.num_rows, run.weights.back().data(), run.state.back().data());
    EXPECT_TRUE(rs.ok()) << rs;
    if (!rs.ok()) return run;
  }
  run.ok = true;
  return run;
}

}  // namespace tessera::testing
