// Prefetch on the sharded tiered path, under 4 ranks sharded 2x2 (two sharding groups of 2) and
// 1x4 (one group of 4): the pipelined input dist hands the next batch's rows to the owners'
// TieredRowStores (ShardedEmbeddingCollection::Prefetch), so their misses are read in the
// background. Checked here:
//   - results are the same bits with the tier's prefetch on, off, and with no pipelining at all,
//     and the same bits as the same sharded model in memory (exact and average mode), which the
//     other distributed tests tie to one process on the global batch; a close check against one
//     process's EmbeddingCollection on the global batch (exact mode) is repeated here;
//   - the prefetch is real: with it, Resolve reads nothing from RocksDB itself after the first
//     step (sync_reads), while without it every miss of a written row is such a read. Average
//     mode too (sync every k = 1, 2, 3 steps; sync_rows touched and all): the sync's rows are
//     exchanged by the Forward of the syncing step and read ahead during its dense work.
#include <algorithm>
#include <string>
#include <vector>

#include "embedding/tiered_row_store.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

constexpr int kTiered = 0;       // the table in RocksDB ("users", two features)
constexpr int64_t kRows = 3000;  // its rows, far more than the shard caches below
constexpr int kSteps = 24;

class SharedTempDir : public testing::SharedTempDir {
 public:
  SharedTempDir() : testing::SharedTempDir("tessera_sharded_prefetch_") {}
};

enum class Variant {
  kMemory,      // every table in memory
  kNoPrefetch,  // tiered, storage.prefetch false (input dist still pipelined)
  kPrefetch,    // tiered, prefetch on, pipelined input dist: the owners read ahead
  kNoPipeline,  // tiered, prefetch on but pipeline_input_dist false: nothing to hint with
};

const char* VariantName(Variant v) {
  switch (v) {
    case Variant::kMemory: return "memory";
    case Variant::kNoPrefetch: return "tier, prefetch off";
    case Variant::kPrefetch: return "tier, prefetch on";
    case Variant::kNoPipeline: return "tier, no pipelined input dist";
  }
  return "?";
}

ShardedEmbeddingOptions Options(ShardingType type, ReplicaSync sync, int group_size,
                                const std::string& dir, Variant v, int sync_every = 2,
                                SyncRows sync_rows = SyncRows::kTouched) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kRowWiseAdagrad);
  so.collection.tables[kTiered].num_rows = kRows;
  so.plan = tt::PlanOfType(type, so.collection.tables, group_size);
  so.replica_sync = sync;
  so.sync_every = sync_every;
  so.sync_rows = sync_rows;
  so.pipeline_input_dist = v != Variant::kNoPipeline;
  if (v != Variant::kMemory) {
    // The smallest shard gets a cache of 130 rows in exact mode (a step touches at most 15
    // samples x 2 features x 4 ids = 120 rows of the table) and 260 in average mode (whose sync
    // every 2 steps pins the rows of both); the shards hold 750+ rows, so rows are evicted,
    // written back and read again. sync_rows all pins every row of the shard at each sync: the
    // cache holds the whole shard then.
    int64_t min_rows = kRows;
    for (const Shard& sh : so.plan.tables[kTiered].shards) {
      min_rows = std::min(min_rows, sh.num_rows());
    }
    TableStorage& st = so.collection.tables[kTiered].storage;
    st.tier = StorageTier::kRocksDb;
    st.path = dir;
    const int64_t per_shard = sync == ReplicaSync::kExact ? 130 : 260;
    st.cache_rows = sync_rows == SyncRows::kAll ? kRows
                                                : (per_shard * kRows + min_rows - 1) / min_rows;
    st.reader_threads = 2;
    st.prefetch = v != Variant::kNoPrefetch;
  }
  return so;
}

// Batch `step` of MakeGlobalBatch with the tiered table's ids remapped: every fourth id keeps
// its skew (spread over the table by a bijection), so steps share hot rows that stay cached; the
// rest are uniform over the table, so steps miss rows evicted and written back earlier.
tt::GlobalBatch Batch(const EmbeddingCollectionOptions& o, int step) {
  tt::GlobalBatch gb = tt::MakeGlobalBatch(o, World()->size(), step, step % 2 == 0);
  for (size_t r = 0; r < gb.per_rank.size(); ++r) {
    KeyedJagged& k = gb.per_rank[r];
    for (int f : o.tables[kTiered].features) {
      for (int64_t j = k.feature_begin(f); j < k.feature_end(f); ++j) {
        k.values[j] = j % 4 == 0 ? (k.values[j] * 73) % kRows
                                 : static_cast<int64_t>(HashCombine(HashCombine(step, r), j) %
                                                        static_cast<uint64_t>(kRows));
      }
    }
  }
  gb.global = tt::Concat(gb.per_rank, o.num_features);
  return gb;
}

struct Trained {
  std::vector<std::vector<float>> weights, state;  // per table, full, after training
  TieredRowStoreMetrics after_first, last;         // this rank's tiered shards, summed
  int64_t eval_sync_reads = 0;                     // of those, in the evaluation Forwards
  int64_t prefetched_forwards = 0;
  bool ok = false;
};

TieredRowStoreMetrics LocalTierMetrics(ShardedEmbeddingCollection& model) {
  TieredRowStoreMetrics sum;
  for (const auto& ls : model.local_shards()) {
    auto* t = dynamic_cast<TieredRowStore*>(ls.store);
    if (t == nullptr) continue;
    TieredRowStoreMetrics m = t->metrics();
    sum.misses += m.misses;
    sum.prefetch_used += m.prefetch_used;
    sum.sync_reads += m.sync_reads;
    sum.rows_read += m.rows_read;
    sum.rows_written += m.rows_written;
  }
  return sum;
}

// Trains kSteps steps as the training loop does: the next batch is handed to Prefetch before
// each Forward. With `evals`, every 5 steps two evaluation Forwards (other batches, no update)
// run while the next training batch is in flight; their own misses cannot be read ahead and are
// counted apart (eval_sync_reads).
Trained Train(const ProcessGrid& grid, const ShardedEmbeddingOptions& so, bool evals = false) {
  Trained run;
  auto m = ShardedEmbeddingCollection::Create(so, grid, DeviceContext::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  ShardedEmbeddingCollection& model = **m;
  const int me = World()->rank();
  const int64_t od = model.output_dim();
  for (int step = 1; step <= kSteps; ++step) {
    tt::GlobalBatch gb = Batch(so.collection, step);
    if (step < kSteps) model.Prefetch(Batch(so.collection, step + 1).per_rank[me]);
    std::vector<float> out(gb.per_rank[me].batch_size * od);
    absl::Status fs = model.Forward(gb.per_rank[me], out.data());
    EXPECT_TRUE(fs.ok()) << fs;
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    absl::Status bs =
        model.BackwardUpdate(grad.data() + tt::RowsBefore(gb, me) * od, 0.5f, step);
    EXPECT_TRUE(bs.ok()) << bs;
    if (!fs.ok() || !bs.ok()) return run;
    if (step == 1) run.after_first = LocalTierMetrics(model);
    if (evals && step % 5 == 0 && step < kSteps) {
      for (int e = 0; e < 2; ++e) {
        const KeyedJagged eval = Batch(so.collection, 1000 + step + e).per_rank[me];
        std::vector<float> eval_out(eval.batch_size * od);
        const int64_t before = LocalTierMetrics(model).sync_reads;
        absl::Status es = model.Forward(eval, eval_out.data());
        EXPECT_TRUE(es.ok()) << es;
        if (!es.ok()) return run;
        run.eval_sync_reads += LocalTierMetrics(model).sync_reads - before;
      }
    }
  }
  run.last = LocalTierMetrics(model);
  run.prefetched_forwards = model.prefetched_forwards();
  for (int t = 0; t < model.num_tables(); ++t) {
    const TableConfig& c = model.table(t);
    run.weights.emplace_back(c.num_rows * c.dim);
    run.state.emplace_back(c.num_rows);
    absl::Status rs =
        model.ReadTable(t, 0, c.num_rows, run.weights.back().data(), run.state.back().data());
    EXPECT_TRUE(rs.ok()) << rs;
  }
  run.ok = true;
  return run;
}

int64_t SumOverRanks(int64_t x) {
  EXPECT_TRUE(World()->AllReduce(&x, 1, ReduceOp::kSum).ok());
  return x;
}

using Param = std::tuple<int /*group size*/, ShardingType, ReplicaSync, int /*sync_every*/,
                         SyncRows>;
class ShardedTierPrefetchTest : public ::testing::TestWithParam<Param> {};

TEST_P(ShardedTierPrefetchTest, SameBitsWithAndWithoutPrefetchAndNoSyncReads) {
  const auto [n, type, sync, k, sync_rows] = GetParam();
  SharedTempDir tmp;
  auto grid = ProcessGrid::Create(World(), {.group_size = n});
  ASSERT_TRUE(grid.ok()) << grid.status();
  std::vector<Trained> runs;
  for (Variant v :
       {Variant::kMemory, Variant::kNoPrefetch, Variant::kPrefetch, Variant::kNoPipeline}) {
    runs.push_back(Train(
        *grid, Options(type, sync, n, tmp.path() + "/" + std::to_string(static_cast<int>(v)), v,
                       k, sync_rows)));
    ASSERT_TRUE(runs.back().ok) << VariantName(v);
  }
  const Trained& mem = runs[0];
  for (size_t i = 1; i < runs.size(); ++i) {
    const char* what = VariantName(static_cast<Variant>(i));
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(runs[i].weights[t], mem.weights[t]) << what << ", table " << t;
      EXPECT_EQ(runs[i].state[t], mem.state[t]) << what << ", table " << t;
    }
  }
  // Every Forward after the first used the pipelined input dist (both pipelined variants).
  EXPECT_EQ(runs[1].prefetched_forwards, kSteps - 1);
  EXPECT_EQ(runs[2].prefetched_forwards, kSteps - 1);
  EXPECT_EQ(runs[3].prefetched_forwards, 0);

  // Stalls of the training steps after the first (which has no prefetched batch), over all
  // ranks.
  auto sync_reads = [](const Trained& r) {
    return SumOverRanks(r.last.sync_reads - r.after_first.sync_reads - r.eval_sync_reads);
  };
  const int64_t off = sync_reads(runs[1]), on = sync_reads(runs[2]), nopipe = sync_reads(runs[3]);
  const int64_t used = SumOverRanks(runs[2].last.prefetch_used - runs[2].after_first.prefetch_used);
  const int64_t misses = SumOverRanks(runs[2].last.misses - runs[2].after_first.misses);
  const int64_t written = SumOverRanks(runs[2].last.rows_written);
  if (World()->rank() == 0) {
    std::printf("  %dx%d %s %s (k %d, %s): steps 2..%d: %lld misses, sync reads: prefetch off "
                "%lld, on %lld (%lld served by prefetch), no pipelining %lld; %lld rows written "
                "back\n",
                4 / n, n, ShardingTypeName(type),
                sync == ReplicaSync::kExact ? "exact" : "average", k, SyncRowsName(sync_rows),
                kSteps,
                static_cast<long long>(misses), static_cast<long long>(off),
                static_cast<long long>(on), static_cast<long long>(used),
                static_cast<long long>(nopipe), static_cast<long long>(written));
  }
  // sync_rows all: the cache holds the shard, so nothing is evicted; the misses are the rows'
  // first lookups (never written, still looked up in RocksDB).
  if (sync_rows != SyncRows::kAll) {
    EXPECT_GT(written, 0) << "the caches must evict and write back, or nothing is read";
  }
  EXPECT_GT(off, 0);
  EXPECT_GT(used, 0);
  // Every miss of steps 2.. was read ahead (the own group's rows by the hint; in exact mode the
  // other replicas' rows from the exact sync's all-gather; in average mode the sync's union,
  // exchanged by the syncing step's Forward) or copied from the write-back buffers.
  EXPECT_EQ(on, 0);
  if (sync == ReplicaSync::kExact) {
    EXPECT_EQ(nopipe, off) << "without a pipelined input dist nothing can be hinted";
  } else {
    // Without pipelining the batches' rows cannot be hinted, but the sync's still are.
    EXPECT_LT(nopipe, off);
  }
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [n, type, sync, k, sync_rows] = info.param;
  std::string name = std::to_string(4 / n) + "x" + std::to_string(n) + "_" +
                     ShardingTypeName(type) + "_" +
                     (sync == ReplicaSync::kExact ? "exact" : "average");
  if (sync == ReplicaSync::kAverage) {
    name += "_k" + std::to_string(k) + "_" + SyncRowsName(sync_rows);
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ShardedTierPrefetchTest,
    ::testing::Values(
        Param{2, ShardingType::kRowWise, ReplicaSync::kExact, 2, SyncRows::kTouched},
        Param{2, ShardingType::kGrid, ReplicaSync::kExact, 2, SyncRows::kTouched},
        Param{2, ShardingType::kRowWise, ReplicaSync::kAverage, 2, SyncRows::kTouched},
        Param{2, ShardingType::kRowWise, ReplicaSync::kAverage, 1, SyncRows::kTouched},
        Param{2, ShardingType::kGrid, ReplicaSync::kAverage, 3, SyncRows::kTouched},
        Param{2, ShardingType::kRowWise, ReplicaSync::kAverage, 2, SyncRows::kAll},
        Param{1, ShardingType::kTableWise, ReplicaSync::kAverage, 2, SyncRows::kTouched},
        Param{4, ShardingType::kRowWise, ReplicaSync::kExact, 2, SyncRows::kTouched},
        Param{4, ShardingType::kTableWise, ReplicaSync::kExact, 2, SyncRows::kTouched},
        Param{4, ShardingType::kGrid, ReplicaSync::kExact, 2, SyncRows::kTouched}),
    Name);

// Average mode with k = 1 (every Forward, evaluations too, exchanges the next sync's rows) and
// evaluation Forwards between steps while the next training batch is in flight: the evaluation
// must not push that batch's staged rows out of the stores (Forward hands over no sync rows
// while it keeps a batch in flight; with them, 200 of 2,134 misses here were read
// synchronously). The evaluations' own read-only tier steps still drain the write-back buffers
// once in a while, so a few reads remain (3 here; exact mode with evaluations has such reads
// too: 11 in its 2x2 row-wise case).
TEST(ShardedTierPrefetchTest, EvaluationForwardsKeepTheNextBatchStaged) {
  SharedTempDir tmp;
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok()) << grid.status();
  std::vector<Trained> runs;
  for (Variant v : {Variant::kMemory, Variant::kNoPrefetch, Variant::kPrefetch}) {
    runs.push_back(Train(*grid,
                         Options(ShardingType::kRowWise, ReplicaSync::kAverage, 2,
                                 tmp.path() + "/" + std::to_string(static_cast<int>(v)), v, 1),
                         /*evals=*/true));
    ASSERT_TRUE(runs.back().ok) << VariantName(v);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(runs[i].weights[t], runs[0].weights[t]) << VariantName(static_cast<Variant>(i));
      EXPECT_EQ(runs[i].state[t], runs[0].state[t]) << VariantName(static_cast<Variant>(i));
    }
  }
  auto sync_reads = [](const Trained& r) {
    return SumOverRanks(r.last.sync_reads - r.after_first.sync_reads - r.eval_sync_reads);
  };
  const int64_t off = sync_reads(runs[1]), on = sync_reads(runs[2]);
  if (World()->rank() == 0) {
    std::printf("  with evaluations: training sync reads after step 1: prefetch off %lld, on %lld\n",
                static_cast<long long>(off), static_cast<long long>(on));
  }
  EXPECT_GT(off, 0);
  EXPECT_LT(on * 50, off) << "under 2% of the misses prefetch off reads synchronously";
}

// Exact mode, prefetch on, against one process's EmbeddingCollection trained on the global
// batches (all in memory): the same model up to the reduction order of the row gradients
// (the same tolerances as sharded_embedding_test, whose ExactTest ties the in-memory sharded
// model to one rank; the bit-exact check above ties the tiered runs to that).
TEST(ShardedTierPrefetchTest, PrefetchedRunMatchesOneProcess) {
  SharedTempDir tmp;
  auto grid = ProcessGrid::Create(World(), {.group_size = 4});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so =
      Options(ShardingType::kRowWise, ReplicaSync::kExact, 4, tmp.path(), Variant::kPrefetch);
  Trained tier = Train(*grid, so);
  ASSERT_TRUE(tier.ok);
  EmbeddingCollectionOptions one = so.collection;
  one.tables[kTiered].storage = TableStorage{};
  auto ref = EmbeddingCollection::Create(one, DeviceContext::Cpu());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int64_t od = (*ref)->output_dim();
  for (int step = 1; step <= kSteps; ++step) {
    tt::GlobalBatch gb = Batch(one, step);
    std::vector<float> out(gb.global.batch_size * od);
    ASSERT_TRUE((*ref)->Forward(gb.global, out.data()).ok());
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    ASSERT_TRUE((*ref)->BackwardUpdate(grad.data(), 0.5f, step).ok());
  }
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = one.tables[t];
    std::vector<float> w(c.num_rows * c.dim), s(c.num_rows);
    ASSERT_TRUE((*ref)->store(t).ReadRows(0, c.num_rows, w.data(), s.data()).ok());
    tt::ExpectClose(tier.weights[t].data(), w.data(), w.size(), 2e-5, 1e-6, c.name + " weights");
    tt::ExpectClose(tier.state[t].data(), s.data(), s.size(), 2e-5, 1e-6, c.name + " state");
  }
}

}  // namespace
}  // namespace tessera
