// EmbeddingCollection: output layout, a table serving two features, the fused backward per table
// against a double-precision reference (|got - ref| <= 1e-5 * (1 + |ref|)), and error paths.
#include "embedding/embedding_collection.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// Table "user" (dim 8, sum) serves features 0 and 2; table "item" (dim 4, mean) serves 1.
EmbeddingCollectionOptions TwoTables(RowOptimizerType opt) {
  EmbeddingCollectionOptions o;
  o.num_features = 3;
  o.seed = 99;
  o.optimizer.type = opt;
  TableConfig user;
  user.name = "user";
  user.num_rows = 40;
  user.dim = 8;
  user.features = {0, 2};
  TableConfig item;
  item.name = "item";
  item.num_rows = 25;
  item.dim = 4;
  item.pooling = PoolingMode::kMean;
  item.features = {1};
  o.tables = {user, item};
  return o;
}

KeyedJagged MakeBatch(uint64_t seed, int64_t batch, const EmbeddingCollectionOptions& o,
                      bool weighted) {
  CounterRng rng(seed, 0);
  KeyedJagged kj;
  kj.num_features = o.num_features;
  kj.batch_size = batch;
  kj.offsets.push_back(0);
  for (int f = 0; f < o.num_features; ++f) {
    int64_t rows = 0;
    for (const TableConfig& t : o.tables) {
      for (int tf : t.features) rows = tf == f ? t.num_rows : rows;
    }
    for (int64_t b = 0; b < batch; ++b) {
      int len = static_cast<int>(rng.NextBelow(5));  // 0..4 ids, empty bags included
      for (int j = 0; j < len; ++j) {
        kj.values.push_back(static_cast<int64_t>(rng.NextBelow(rows)));
        if (weighted) kj.weights.push_back(rng.NextUniform() + 0.5f);
      }
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  return kj;
}

std::vector<std::vector<double>> ReadTables(EmbeddingCollection& c) {
  std::vector<std::vector<double>> tables;
  for (int t = 0; t < c.num_tables(); ++t) {
    std::vector<float> w(c.table(t).num_rows * c.table(t).dim);
    EXPECT_TRUE(c.store(t).ReadRows(0, c.table(t).num_rows, w.data(), nullptr).ok());
    tables.emplace_back(w.begin(), w.end());
  }
  return tables;
}

TEST(EmbeddingCollectionTest, LayoutAndForwardMatchReference) {
  auto o = TwoTables(RowOptimizerType::kSgd);
  auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(c.ok()) << c.status();
  EmbeddingCollection& coll = **c;
  EXPECT_EQ(coll.output_dim(), 8 + 4 + 8);
  EXPECT_EQ(coll.feature_column(0), 0);
  EXPECT_EQ(coll.feature_column(1), 8);
  EXPECT_EQ(coll.feature_column(2), 12);
  EXPECT_EQ(coll.table_of_feature(2), 0);
  KeyedJagged kj = MakeBatch(1, 16, o, /*weighted=*/true);
  std::vector<float> out(16 * coll.output_dim(), -1.0f);
  ASSERT_TRUE(coll.Forward(kj, out.data()).ok());
  auto tables = ReadTables(coll);
  for (int f = 0; f < 3; ++f) {
    const int t = coll.table_of_feature(f);
    const int64_t dim = o.tables[t].dim;
    for (int64_t b = 0; b < 16; ++b) {
      const int64_t jb = kj.offsets[f * 16 + b], je = kj.offsets[f * 16 + b + 1];
      for (int64_t k = 0; k < dim; ++k) {
        double ref = 0;
        for (int64_t j = jb; j < je; ++j) ref += kj.weights[j] * tables[t][kj.values[j] * dim + k];
        if (o.tables[t].pooling == PoolingMode::kMean && je > jb) ref /= double(je - jb);
        ASSERT_NEAR(out[b * coll.output_dim() + coll.feature_column(f) + k], ref, 1e-6)
            << "feature " << f << " sample " << b;
      }
    }
  }
}

// The per-row gradient summed over both features of a table, in double.
std::map<int64_t, std::vector<double>> RowGrads(const KeyedJagged& kj, const EmbeddingCollection& c,
                                                const std::vector<float>& d_out, int t) {
  std::map<int64_t, std::vector<double>> g;
  const TableConfig& table = c.table(t);
  for (int f : table.features) {
    for (int64_t b = 0; b < kj.batch_size; ++b) {
      const int64_t jb = kj.offsets[f * kj.batch_size + b],
                    je = kj.offsets[f * kj.batch_size + b + 1];
      for (int64_t j = jb; j < je; ++j) {
        auto& row = g[kj.values[j]];
        row.resize(table.dim);
        double scale = kj.weights.empty() ? 1.0 : kj.weights[j];
        if (table.pooling == PoolingMode::kMean) scale /= double(je - jb);
        for (int64_t k = 0; k < table.dim; ++k) {
          row[k] += scale * d_out[b * c.output_dim() + c.feature_column(f) + k];
        }
      }
    }
  }
  return g;
}

TEST(EmbeddingCollectionTest, BackwardUpdatesSharedTableFromBothFeatures) {
  for (RowOptimizerType type : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad}) {
    auto o = TwoTables(type);
    o.optimizer.adagrad_initial = 0.5f;
    auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
    ASSERT_TRUE(c.ok());
    EmbeddingCollection& coll = **c;
    auto ref = ReadTables(coll);
    std::vector<std::vector<double>> ref_state = {std::vector<double>(40, 0.5),
                                                  std::vector<double>(25, 0.5)};
    const float lr = 0.1f;
    for (int64_t step = 1; step <= 2; ++step) {
      KeyedJagged kj = MakeBatch(10 + step, 32, o, /*weighted=*/step == 2);
      std::vector<float> out(32 * coll.output_dim());
      ASSERT_TRUE(coll.Forward(kj, out.data()).ok());
      std::vector<float> d_out(out.size());
      CounterRng rng(step, 5);
      for (float& v : d_out) v = rng.NextUniform() - 0.5f;
      ASSERT_TRUE(coll.BackwardUpdate(d_out.data(), lr, step).ok());
      for (int t = 0; t < 2; ++t) {
        const int64_t dim = o.tables[t].dim;
        for (const auto& [row, g] : RowGrads(kj, coll, d_out, t)) {
          double* w = ref[t].data() + row * dim;
          if (type == RowOptimizerType::kSgd) {
            for (int64_t k = 0; k < dim; ++k) w[k] -= lr * g[k];
          } else {
            double sq = 0;
            for (double x : g) sq += x * x;
            ref_state[t][row] += sq / dim;
            const double scale = lr / (std::sqrt(ref_state[t][row]) + 1e-8);
            for (int64_t k = 0; k < dim; ++k) w[k] -= scale * g[k];
          }
        }
      }
    }
    auto got = ReadTables(coll);
    for (int t = 0; t < 2; ++t) {
      double moved = 0;
      for (size_t i = 0; i < got[t].size(); ++i) {
        ASSERT_NEAR(got[t][i], ref[t][i], 1e-5 * (1 + std::abs(ref[t][i]))) << "table " << t;
      }
      if (type == RowOptimizerType::kRowWiseAdagrad) {
        for (int64_t r = 0; r < o.tables[t].num_rows; ++r) {
          ASSERT_NEAR(coll.store(t).state()[r], ref_state[t][r], 1e-5 * (1 + ref_state[t][r]));
          moved += std::abs(ref_state[t][r] - 0.5);
        }
        EXPECT_GT(moved, 1e-3);
      }
    }
  }
}

TEST(EmbeddingCollectionTest, OutOfRangeIdIsInvalidArgumentNamingTable) {
  auto o = TwoTables(RowOptimizerType::kSgd);
  auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(c.ok());
  KeyedJagged kj = MakeBatch(3, 4, o, false);
  std::vector<float> out(4 * (*c)->output_dim());
  for (int64_t bad : {int64_t{25}, int64_t{-2}}) {
    KeyedJagged b = kj;
    ASSERT_GT(b.feature_end(1), b.feature_begin(1));
    b.values[b.feature_end(1) - 1] = bad;
    absl::Status st = (*c)->Forward(b, out.data());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("table 'item'"));
    EXPECT_THAT(st.message(), HasSubstr("feature 1"));
    EXPECT_THAT(st.message(), HasSubstr("id " + std::to_string(bad)));
  }
  KeyedJagged wrong = kj;
  wrong.num_features = 2;
  EXPECT_EQ((*c)->Forward(wrong, out.data()).code(), absl::StatusCode::kInvalidArgument);
  wrong = kj;
  wrong.offsets[2] = 1000;  // past values.size(), then decreasing
  absl::Status st = (*c)->Forward(wrong, out.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("offsets decrease at bag 2"));
  EXPECT_EQ((*c)->BackwardUpdate(out.data(), 0.1f, 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(EmbeddingCollectionTest, BadConfigsNameTheTable) {
  auto o = TwoTables(RowOptimizerType::kSgd);
  o.tables[1].features = {1, 2};
  auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("table 'item': feature 2 is already served by table 'user'"));
  o = TwoTables(RowOptimizerType::kSgd);
  o.tables[1].features = {};
  EXPECT_THAT(EmbeddingCollection::Create(o, DeviceContext::Cpu()).status().message(),
              HasSubstr("table 'item'"));
  o.tables[1].features = {1};
  o.num_features = 4;
  EXPECT_THAT(EmbeddingCollection::Create(o, DeviceContext::Cpu()).status().message(),
              HasSubstr("feature 3 is served by no table"));
  o = TwoTables(RowOptimizerType::kSgd);
  o.tables[0].num_rows = 0;
  EXPECT_THAT(EmbeddingCollection::Create(o, DeviceContext::Cpu()).status().message(),
              HasSubstr("table 'user': num_rows (0)"));
  // Caller-made stores must match their tables.
  o = TwoTables(RowOptimizerType::kRowWiseAdagrad);
  std::vector<std::unique_ptr<RowStore>> stores;
  for (int t = 0; t < 2; ++t) {
    InMemoryRowStoreOptions so;
    so.num_rows = o.tables[t].num_rows;
    so.dim = o.tables[t].dim;
    so.state_dim = t == 0 ? 1 : 0;  // table 1 lacks the AdaGrad accumulator
    stores.push_back(*CreateInMemoryRowStore(so));
  }
  auto w = EmbeddingCollection::CreateWithStores(o, std::move(stores), DeviceContext::Cpu());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("table 'item': store does not match"));
}

// Whole tables per thread (several host-memory tables on 2 or 3 threads, costliest first) give
// the bits of the tables one after the other on 1 thread: pooled outputs of every step, then
// every table's rows and state. Six tables of unequal cost (one serving two features, mean
// pooling, weighted batches), so the dynamic schedule hands them out in another order than the
// table order; row-wise AdaGrad and dims 8 / 128 (the in-register update) / 24.
TEST(EmbeddingCollectionTest, TablesRunInParallelWithTheBitsOfOneThread) {
  EmbeddingCollectionOptions o = TwoTables(RowOptimizerType::kRowWiseAdagrad);
  o.num_features = 7;
  const int64_t dims[] = {128, 24, 8, 128};
  for (int k = 0; k < 4; ++k) {
    TableConfig t;
    t.name = "extra" + std::to_string(k);
    t.num_rows = 300 + 100 * k;
    t.dim = dims[k];
    t.pooling = k % 2 ? PoolingMode::kMean : PoolingMode::kSum;
    t.features = {3 + k};
    o.tables.push_back(t);
  }
  auto run = [&](int threads, std::vector<std::vector<float>>* outs,
                 std::vector<std::vector<float>>* rows) {
    ScopedNumThreads scoped(threads);
    auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
    ASSERT_TRUE(c.ok()) << c.status();
    for (int step = 1; step <= 3; ++step) {
      KeyedJagged kj = MakeBatch(50 + step, 37, o, /*weighted=*/step % 2 == 1);
      outs->emplace_back(kj.batch_size * (*c)->output_dim());
      ASSERT_TRUE((*c)->Forward(kj, outs->back().data()).ok());
      std::vector<float> g(outs->back().size());
      CounterRng rng(step, 9);
      for (float& x : g) x = rng.NextUniform() - 0.5f;
      ASSERT_TRUE((*c)->BackwardUpdate(g.data(), 0.3f, step).ok());
    }
    for (int t = 0; t < (*c)->num_tables(); ++t) {
      const TableConfig& tc = (*c)->table(t);
      rows->emplace_back(tc.num_rows * (tc.dim + 1));
      ASSERT_TRUE((*c)->store(t).ReadRows(0, tc.num_rows, rows->back().data(),
                                         rows->back().data() + tc.num_rows * tc.dim)
                      .ok());
    }
  };
  std::vector<std::vector<float>> out1, rows1;
  run(1, &out1, &rows1);
  for (int threads : {2, 3}) {
    std::vector<std::vector<float>> out, rows;
    run(threads, &out, &rows);
    ASSERT_EQ(out.size(), out1.size());
    for (size_t s = 0; s < out1.size(); ++s) {
      EXPECT_EQ(out[s], out1[s]) << threads << " threads, pooled output of step " << s + 1;
    }
    for (size_t t = 0; t < rows1.size(); ++t) {
      EXPECT_EQ(rows[t], rows1[t]) << threads << " threads, rows and state of table " << t;
    }
  }
}

// A table with more than its share of the ids (the skewed bench config's hot table: 40 ids a bag)
// runs alone first, its lookup and update split across the threads, then the small tables share
// the threads: the bits are still those of one thread, on 2 and 3 threads, sum pooling (the
// in-register update at dim 64) and mean pooling at dim 24.
TEST(EmbeddingCollectionTest, HotTableSplitAcrossThreadsHasTheBitsOfOneThread) {
  for (PoolingMode pooling : {PoolingMode::kSum, PoolingMode::kMean}) {
    EmbeddingCollectionOptions o;
    o.num_features = 3;
    o.seed = 7;
    o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
    const int64_t rows[] = {3000, 2000, 500};  // the last one is hot
    for (int k = 0; k < 3; ++k) {
      TableConfig t;
      t.name = "t" + std::to_string(k);
      t.num_rows = rows[k];
      t.dim = pooling == PoolingMode::kSum ? 64 : 24;
      t.pooling = pooling;
      t.features = {k};
      o.tables.push_back(t);
    }
    const int64_t batch = 512, hot_ids = 40;  // 20480 hot ids, past kSplitTableMinIds
    auto make_batch = [&](uint64_t seed) {
      CounterRng rng(seed, 0);
      KeyedJagged kj;
      kj.num_features = 3;
      kj.batch_size = batch;
      kj.offsets.push_back(0);
      for (int f = 0; f < 3; ++f) {
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t len = f == 2 ? hot_ids : 1;
          for (int64_t j = 0; j < len; ++j) {
            kj.values.push_back(static_cast<int64_t>(rng.NextBelow(rows[f])));
          }
          kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
        }
      }
      return kj;
    };
    auto run = [&](int threads, std::vector<std::vector<float>>* outs,
                   std::vector<std::vector<float>>* tables) {
      ScopedNumThreads scoped(threads);
      auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
      ASSERT_TRUE(c.ok()) << c.status();
      for (int step = 1; step <= 2; ++step) {
        KeyedJagged kj = make_batch(70 + step);
        outs->emplace_back(kj.batch_size * (*c)->output_dim());
        ASSERT_TRUE((*c)->Forward(kj, outs->back().data()).ok());
        std::vector<float> g(outs->back().size());
        CounterRng rng(step, 11);
        for (float& x : g) x = rng.NextUniform() - 0.5f;
        ASSERT_TRUE((*c)->BackwardUpdate(g.data(), 0.3f, step).ok());
      }
      for (int t = 0; t < (*c)->num_tables(); ++t) {
        const TableConfig& tc = (*c)->table(t);
        tables->emplace_back(tc.num_rows * (tc.dim + 1));
        ASSERT_TRUE((*c)->store(t).ReadRows(0, tc.num_rows, tables->back().data(),
                                           tables->back().data() + tc.num_rows * tc.dim)
                        .ok());
      }
    };
    std::vector<std::vector<float>> out1, tables1;
    run(1, &out1, &tables1);
    // Also with the thresholds of a spinning pool (core/parallel.h): every table's kernels
    // split at 1/16 of the sizes, the small tables' too.
    for (bool cheap : {false, true}) {
      SetParallelForkCheap(cheap);
      for (int threads : {2, 3}) {
        std::vector<std::vector<float>> out, tables;
        run(threads, &out, &tables);
        ASSERT_EQ(out.size(), out1.size());
        for (size_t s = 0; s < out1.size(); ++s) {
          EXPECT_EQ(out[s], out1[s])
              << threads << " threads, cheap fork " << cheap << ", pooled output of step " << s + 1;
        }
        for (size_t t = 0; t < tables1.size(); ++t) {
          EXPECT_EQ(tables[t], tables1[t])
              << threads << " threads, cheap fork " << cheap << ", rows and state of table " << t;
        }
      }
      SetParallelForkCheap(false);
    }
  }
}

}  // namespace
}  // namespace tessera
