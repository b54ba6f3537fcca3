// The two embedding phases of tessera-bench's mlperf-mini (configs/bench/mlperf_mini.yaml: the
// 26 MLPerf tables capped at 2M rows, dim 128, the multi-hot sizes halved, batch 1024, Zipf(1.05)
// synthetic ids, row-wise AdaGrad), each timed beside the machine's limit for the same rows in
// the same run, interleaved iteration by iteration so that the load of a shared machine hits
// both alike:
//   BM_PooledLookup     EmbeddingCollection::Forward (tessera-bench's "lookup" phase) beside
//                       gather_rows/s: a bare random gather of the same rows into the same pooled
//                       output (one flat loop over all ids, software prefetch, no checks).
//   BM_EmbeddingUpdate  EmbeddingCollection::BackwardUpdate ("emb update": sort, segment sums,
//                       row-wise AdaGrad) beside scatter_rows/s: a bare scatter-update
//                       w[slot] -= lr * g of one contiguous gradient row per unique slot of the
//                       same batch, in the same (increasing slot) order, with prefetch.
//   BM_UpdateFloor      Where the update's time goes below the kernel, three bare loops over the
//                       same batches, interleaved: the scatter-update above; "sum": per unique
//                       slot, the sum of its ids' own output-gradient rows (read from d_out, as the
//                       update must), then w -= lr * sum, sorted runs given (no sort timed); "sum
//                       +state": the same with row-wise AdaGrad's state line read and written;
//                       "by table": "sum +state" with the output gradient laid out table-major
//                       (each table's [bag, dim] block contiguous, a copy made at setup), what a
//                       dense backward that wrote d_emb that way would give.
//                       Counters: each loop's rows/s and its fraction of the scatter's rate. A
//                       kernel that sorts the ids and reads every id's gradient cannot beat "sum
//                       +state"; if that is below 0.67 of the scatter, so is the update.
// The limits' prefetch is the benchmark's `ahead` argument: 4, 8, 16 rows ahead into L1, or 0:
// into L2 16 rows ahead and into L1 2 ahead. Take the best limit (the lowest of_limit) across
// them: a limit is at its best, not at one setting.
// Counters: rows/s (ids looked up, or unique rows updated, per second of the kernel), the
// limit's rows/s, and of_limit = kernel rate / limit rate (the item-4 goals of issue 12: the
// lookup >= 0.80, the update >= 1 / 1.5 = 0.67). Needs ~7 GB of memory (the tables and state).
//   BM_Phases16         16-bit tables (storage.dtype fp16 / bf16, issue 12 item 3) against the
//                       fp32 tables above, interleaved: each iteration runs one batch's lookup
//                       and update on the fp32 collection, then the same batch on a collection
//                       of the same tables stored in 16 bits, each phase timed on the process
//                       CPU clock. Counters: each side's lookup and update ms per batch and the
//                       speedups (fp32 time / 16-bit time). Needs ~3.5 GB more. Its `out`
//                       argument gives the 16-bit tables bf16 pooled outputs and gradients
//                       (output_dtype bf16, FBGEMM's output_dtype), against the same fp32 side:
//                       1, the bf16 hand-off (ForwardBf16 into a bf16 output, BackwardUpdateBf16
//                       from a bf16 d_out: what the trainer runs); 2, through the fp32 API (the
//                       bf16 outputs widened into the fp32 output, d_out rounded to bf16 first:
//                       what the trainer ran before the hand-off).
//   OMP_NUM_THREADS=1 build/bin/embedding_phase_bench --benchmark_filter='/threads:1'
//   OMP_NUM_THREADS=1 build/bin/embedding_phase_bench --benchmark_filter='BM_Phases16'
//   build/bin/embedding_phase_bench --benchmark_filter='BM_Phases16/dtype:2/.*/out:[12]'
//   (TESSERA_PHASE_BENCH_MAX_ROWS=500000 caps the tables lower where memory is short.)
//   OMP_NUM_THREADS=1 build/bin/embedding_phase_bench --benchmark_filter='BM_UpdateFloor'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "embedding/embedding_collection.h"
#include "io/batch.h"
#include "io/synthetic.h"
#include "trainer/presets.h"  // header-only lists (table rows, multi-hot sizes)

namespace tessera {
namespace {

constexpr int64_t kDim = 128;
constexpr int64_t kMaxRows = 2000000;
// TESSERA_PHASE_BENCH_MAX_ROWS: a lower row cap where memory is short (default kMaxRows).
int64_t MaxRows() {
  const char* v = std::getenv("TESSERA_PHASE_BENCH_MAX_ROWS");
  return v != nullptr && std::atoll(v) > 0 ? std::atoll(v) : kMaxRows;
}
constexpr int64_t kBatchSize = 1024;
// tessera-bench's default --batches: distinct batches cycled.
constexpr int kBatches = 64;
constexpr float kLr = 0.005f;

struct Setup {
  EmbeddingCollectionOptions options;  // the fp32 collection's
  std::unique_ptr<EmbeddingCollection> collection;
  std::vector<Batch> batches;
  std::vector<float> out;   // [kBatchSize, output_dim]
  std::vector<float> d_out;  // same shape: a fixed output gradient
  std::vector<uint16_t> out16, d_out16;  // the bf16 hand-off's: out's shape, d_out rounded
  // Per batch and table: the distinct ids (increasing) of the batch, for the scatter-update.
  std::vector<std::vector<std::vector<int64_t>>> unique;
  std::vector<float> scatter_grad;  // [max unique of a table, kDim]
  // Per batch and table: the bags of each unique slot's ids, in (bag, position) order
  // (run_bags[run_starts[u] .. run_starts[u + 1])), for BM_UpdateFloor.
  std::vector<std::vector<std::vector<int64_t>>> run_starts;
  std::vector<std::vector<std::vector<int32_t>>> run_bags;
  std::vector<float> d_out_by_table;  // d_out table-major: [table][bag][kDim]
  int64_t ids_per_batch = 0;
};

Setup& GetSetup() {
  static Setup* s = [] {
    auto* s = new Setup;
    const auto rows = *TableRowsPreset("criteo_1tb_mlperf");
    const auto pooling = *PoolingPreset("mlperf_multi_hot_half");
    EmbeddingCollectionOptions o;
    o.num_features = static_cast<int>(rows.size());
    o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
    o.seed = 1;
    SyntheticDataOptions data;
    for (int t = 0; t < o.num_features; ++t) {
      TableConfig table;
      table.name = absl::StrCat("t", t);
      table.num_rows = std::min(rows[t], MaxRows());
      table.dim = kDim;
      table.features = {t};
      o.tables.push_back(table);
      data.rows_per_feature.push_back(table.num_rows);
    }
    data.pooling = pooling;
    data.zipf_exponent = 1.05;
    data.seed = 1;
    s->options = o;
    auto collection = EmbeddingCollection::Create(o, DeviceContext::Cpu());
    TESSERA_CHECK_OK(collection.status());
    s->collection = std::move(collection).value();
    SyntheticStreamOptions stream;
    stream.num_samples = kBatchSize * kBatches;
    stream.batch_size = kBatchSize;
    auto reader = SyntheticReader::Open(data, stream);
    TESSERA_CHECK_OK(reader.status());
    s->batches.resize(kBatches);
    for (Batch& b : s->batches) TESSERA_CHECK_OK((*reader)->Next(&b).status());
    s->ids_per_batch = static_cast<int64_t>(s->batches[0].sparse.values.size());
    const int64_t width = s->collection->output_dim();
    s->out.resize(kBatchSize * width);
    s->d_out.resize(kBatchSize * width);
    CounterRng rng(3, 0);
    for (float& g : s->d_out) g = (rng.NextUniform() - 0.5f) * 0.02f;
    s->out16.resize(s->out.size());
    s->d_out16.resize(s->d_out.size());
    RowValuesFromFloat(RowDtype::kBf16, s->d_out.data(), static_cast<int64_t>(s->d_out.size()),
                       s->d_out16.data());
    const int tables = s->collection->num_tables();
    s->d_out_by_table.resize(s->d_out.size());
    for (int t = 0; t < tables; ++t) {
      for (int64_t bag = 0; bag < kBatchSize; ++bag) {
        const float* src = s->d_out.data() + bag * width + s->collection->feature_column(t);
        std::copy(src, src + kDim, s->d_out_by_table.data() + (t * kBatchSize + bag) * kDim);
      }
    }
    size_t max_unique = 0;
    s->unique.resize(kBatches);
    s->run_starts.resize(kBatches);
    s->run_bags.resize(kBatches);
    for (int i = 0; i < kBatches; ++i) {
      const KeyedJagged& kj = s->batches[i].sparse;
      for (int f = 0; f < kj.num_features; ++f) {
        std::vector<int64_t> u(kj.values.begin() + kj.feature_begin(f),
                               kj.values.begin() + kj.feature_end(f));
        std::sort(u.begin(), u.end());
        u.erase(std::unique(u.begin(), u.end()), u.end());
        max_unique = std::max(max_unique, u.size());
        // (slot, bag) pairs of the feature's ids, sorted: the runs of the update's sort.
        const int64_t* off = kj.feature_offsets(f);
        std::vector<std::pair<int64_t, int32_t>> ids;
        for (int64_t bag = 0; bag < kj.batch_size; ++bag) {
          for (int64_t j = off[bag]; j < off[bag + 1]; ++j) {
            ids.push_back({kj.values[j], static_cast<int32_t>(bag)});
          }
        }
        std::stable_sort(ids.begin(), ids.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<int64_t> starts;
        std::vector<int32_t> bags;
        for (size_t e = 0; e < ids.size(); ++e) {
          if (e == 0 || ids[e].first != ids[e - 1].first) starts.push_back(e);
          bags.push_back(ids[e].second);
        }
        starts.push_back(static_cast<int64_t>(ids.size()));
        s->run_starts[i].push_back(std::move(starts));
        s->run_bags[i].push_back(std::move(bags));
        s->unique[i].push_back(std::move(u));
      }
    }
    s->scatter_grad.resize(max_unique * kDim);
    for (float& g : s->scatter_grad) g = (rng.NextUniform() - 0.5f) * 0.02f;
    return s;
  }();
  return *s;
}

// Prefetches the `floats` floats at p (a row: kDim; a row's AdaGrad state: 1) into L1.
__attribute__((always_inline)) inline void Prefetch(const float* p, bool write,
                                                    int64_t floats = kDim) {
  for (int64_t k = 0; k < floats; k += 16) __builtin_prefetch(p + k, write ? 1 : 0, 3);
}

// The same into L2 only.
__attribute__((always_inline)) inline void PrefetchL2(const float* p, int64_t floats) {
  for (int64_t k = 0; k < floats; k += 16) __builtin_prefetch(p + k, 0, 2);
}

// The limits' prefetch for row i of n rows w + idx[k] * floats: `ahead` > 0: into L1 `ahead`
// rows ahead; `ahead` == 0: into L2 kFar rows ahead, then into L1 kNear rows ahead (as the
// update kernel does; measured faster for the scatter-update, docs/PERFORMANCE.md).
constexpr int64_t kFar = 16, kNear = 2;
__attribute__((always_inline)) inline void PrefetchAhead(const float* w, const int64_t* idx,
                                                         int64_t i, int64_t n, int ahead,
                                                         bool write, int64_t floats = kDim) {
  if (ahead > 0) {
    if (i + ahead < n) Prefetch(w + idx[i + ahead] * floats, write, floats);
    return;
  }
  if (i + kFar < n) PrefetchL2(w + idx[i + kFar] * floats, floats);
  if (i + kNear < n) Prefetch(w + idx[i + kNear] * floats, write, floats);
}

// The gather limit: every id of the batch, feature by feature, its row added into its bag's
// output, rows prefetched as PrefetchAhead says. Bags are visited through the same offsets.
__attribute__((target_clones("avx512f", "avx2", "default"))) void BareGather(Setup& s,
                                                                           const Batch& b,
                                                                           int ahead) {
  EmbeddingCollection& c = *s.collection;
  const KeyedJagged& kj = b.sparse;
  const int64_t width = c.output_dim();
  for (int f = 0; f < kj.num_features; ++f) {
    const float* w = c.store(f).weights();
    const int64_t* ids = kj.values.data();
    const int64_t* off = kj.feature_offsets(f);
    const int64_t last = off[kj.batch_size];
    float* out = s.out.data() + c.feature_column(f);
    for (int64_t bag = 0; bag < kj.batch_size; ++bag) {
      float acc[kDim] = {};
      for (int64_t j = off[bag]; j < off[bag + 1]; ++j) {
        PrefetchAhead(w, ids, j, last, ahead, false);
        const float* row = w + ids[j] * kDim;
        for (int k = 0; k < kDim; ++k) acc[k] += row[k];
      }
      std::copy(acc, acc + kDim, out + bag * width);
    }
  }
}

// The scatter-update limit: w[slot] -= lr * g[u] for the batch's distinct slots of each table.
__attribute__((target_clones("avx512f", "avx2", "default"))) void BareScatter(Setup& s, int batch,
                                                                            int ahead) {
  EmbeddingCollection& c = *s.collection;
  const float* g = s.scatter_grad.data();
  for (int t = 0; t < c.num_tables(); ++t) {
    float* w = c.store(t).weights();
    const std::vector<int64_t>& u = s.unique[batch][t];
    const int64_t n = static_cast<int64_t>(u.size());
    for (int64_t i = 0; i < n; ++i) {
      PrefetchAhead(w, u.data(), i, n, ahead, true);
      float* __restrict row = w + u[i] * kDim;
      const float* __restrict gi = g + i * kDim;
      for (int k = 0; k < kDim; ++k) row[k] -= kLr * gi[k];
    }
  }
}

// The floor loops: per unique slot of each table, the sum of its ids' gradient rows (d_out, the
// bag's row; gradient rows prefetched `ahead` ids ahead, 8 for ahead 0), then w[slot] -= lr *
// sum, or with `adagrad` the row-wise AdaGrad step on the table's state (v += sum of squares /
// dim, w -= lr / (sqrt(v) + eps) * sum). Rows and state prefetched as in BareScatter.
__attribute__((target_clones("avx512f", "avx2", "default"))) void BareSumScatter(Setup& s,
                                                                               int batch,
                                                                               int ahead,
                                                                               bool adagrad,
                                                                               bool by_table) {
  EmbeddingCollection& c = *s.collection;
  const int64_t width = c.output_dim();
  for (int t = 0; t < c.num_tables(); ++t) {
    float* w = c.store(t).weights();
    float* state = c.store(t).state();
    const std::vector<int64_t>& u = s.unique[batch][t];
    const int64_t* starts = s.run_starts[batch][t].data();
    const int32_t* bags = s.run_bags[batch][t].data();
    // d_out's [bag, width] rows, or (by_table) the table's own contiguous [bag, kDim] block.
    const float* grad = by_table ? s.d_out_by_table.data() + t * kBatchSize * kDim
                                 : s.d_out.data() + c.feature_column(t);
    const int64_t stride = by_table ? kDim : width;
    const int64_t n = static_cast<int64_t>(u.size());
    const int64_t last = starts[n];
    const int64_t grad_ahead = ahead > 0 ? ahead : 8;
    for (int64_t i = 0; i < n; ++i) {
      PrefetchAhead(w, u.data(), i, n, ahead, true);
      if (adagrad) PrefetchAhead(state, u.data(), i, n, ahead, true, /*floats=*/1);
      float g[kDim] = {};
      for (int64_t e = starts[i]; e < starts[i + 1]; ++e) {
        if (e + grad_ahead < last) Prefetch(grad + bags[e + grad_ahead] * stride, false);
        const float* __restrict gi = grad + bags[e] * stride;
        for (int k = 0; k < kDim; ++k) g[k] += gi[k];
      }
      float scale = kLr;
      if (adagrad) {
        // 16 partial sums (vectorized without reassociating a single chain).
        float part[16] = {};
        for (int k = 0; k < kDim; k += 16) {
          for (int l = 0; l < 16; ++l) part[l] += g[k + l] * g[k + l];
        }
        float sq = 0;
        for (float p : part) sq += p;
        state[u[i]] += sq / kDim;
        scale = kLr / (std::sqrt(state[u[i]]) + 1e-8f);
      }
      float* __restrict row = w + u[i] * kDim;
      for (int k = 0; k < kDim; ++k) row[k] -= scale * g[k];
    }
  }
}

int64_t UniqueRows(const Setup& s, int batch) {
  int64_t n = 0;
  for (const auto& u : s.unique[batch]) n += static_cast<int64_t>(u.size());
  return n;
}

// Args: threads, prefetch distance of the limit's loop (ids).
void BM_PooledLookup(benchmark::State& state) {
  Setup& s = GetSetup();
  SetNumThreads(static_cast<int>(state.range(0)));
  const int ahead = static_cast<int>(state.range(1));
  double kernel_s = 0, limit_s = 0;
  int64_t iter = 0;
  for (auto _ : state) {
    // Each batch is seen by both loops once per cycle, half a cycle apart.
    const Batch& b = s.batches[iter % kBatches];
    const Batch& l = s.batches[(iter + kBatches / 2) % kBatches];
    Stopwatch w;
    TESSERA_CHECK_OK(s.collection->Forward(b.sparse, s.out.data()));
    const double k = w.ElapsedSeconds();
    benchmark::DoNotOptimize(s.out.data());
    w.Reset();
    BareGather(s, l, ahead);
    limit_s += w.ElapsedSeconds();
    benchmark::DoNotOptimize(s.out.data());
    kernel_s += k;
    state.SetIterationTime(k);
    ++iter;
  }
  const double ids = double(iter) * s.ids_per_batch;
  state.counters["rows/s"] = ids / kernel_s;
  state.counters["gather_rows/s"] = ids / limit_s;
  state.counters["of_limit"] = limit_s / kernel_s;
}

void BM_EmbeddingUpdate(benchmark::State& state) {
  Setup& s = GetSetup();
  SetNumThreads(static_cast<int>(state.range(0)));
  const int ahead = static_cast<int>(state.range(1));
  double kernel_s = 0, limit_s = 0;
  int64_t iter = 0, rows_k = 0, rows_l = 0;
  for (auto _ : state) {
    const int bi = static_cast<int>(iter % kBatches);
    const int li = static_cast<int>((iter + kBatches / 2) % kBatches);
    // Both updates follow the Forward of their batch, as in a training step (untimed).
    TESSERA_CHECK_OK(s.collection->Forward(s.batches[bi].sparse, s.out.data()));
    Stopwatch w;
    TESSERA_CHECK_OK(s.collection->BackwardUpdate(s.d_out.data(), kLr, iter + 1));
    const double k = w.ElapsedSeconds();
    TESSERA_CHECK_OK(s.collection->Forward(s.batches[li].sparse, s.out.data()));
    w.Reset();
    BareScatter(s, li, ahead);
    limit_s += w.ElapsedSeconds();
    kernel_s += k;
    rows_k += UniqueRows(s, bi);
    rows_l += UniqueRows(s, li);
    state.SetIterationTime(k);
    ++iter;
  }
  // The pending Forward of the limit's batch ends with the next benchmark's first Forward.
  state.counters["rows/s"] = rows_k / kernel_s;
  state.counters["scatter_rows/s"] = rows_l / limit_s;
  state.counters["of_limit"] = (rows_k / kernel_s) / (rows_l / limit_s);
  state.counters["ids/row"] = double(iter) * s.ids_per_batch / rows_k;
}

// Args: threads (of the collection's Forward, untimed), prefetch distance (ids / slots).
void BM_UpdateFloor(benchmark::State& state) {
  Setup& s = GetSetup();
  SetNumThreads(static_cast<int>(state.range(0)));
  const int ahead = static_cast<int>(state.range(1));
  constexpr int kLoops = 4;
  double t[kLoops] = {};  // scatter, sum, sum + state, sum + state (gradient by table)
  int64_t rows[kLoops] = {};
  int64_t iter = 0;
  for (auto _ : state) {
    double total = 0;
    for (int loop = 0; loop < kLoops; ++loop) {
      // Each loop follows the Forward of its batch, a quarter of the cycle apart (untimed).
      const int bi = static_cast<int>((iter + loop * kBatches / kLoops) % kBatches);
      TESSERA_CHECK_OK(s.collection->Forward(s.batches[bi].sparse, s.out.data()));
      Stopwatch w;
      if (loop == 0) {
        BareScatter(s, bi, ahead);
      } else {
        BareSumScatter(s, bi, ahead, /*adagrad=*/loop >= 2, /*by_table=*/loop == 3);
      }
      const double e = w.ElapsedSeconds();
      t[loop] += e;
      total += e;
      rows[loop] += UniqueRows(s, bi);
    }
    state.SetIterationTime(total);
    ++iter;
  }
  // Each Forward is still pending (no BackwardUpdate followed); the next Forward replaces it.
  const double scatter = rows[0] / t[0];
  state.counters["scatter_rows/s"] = scatter;
  state.counters["sum_rows/s"] = rows[1] / t[1];
  state.counters["sum_state_rows/s"] = rows[2] / t[2];
  state.counters["sum_of_scatter"] = (rows[1] / t[1]) / scatter;
  state.counters["sum_state_of_scatter"] = (rows[2] / t[2]) / scatter;
  state.counters["by_table_rows/s"] = rows[3] / t[3];
  state.counters["by_table_of_scatter"] = (rows[3] / t[3]) / scatter;
}

// The same tables stored as `dtype` with pooled outputs of `out` (created on first use, one at
// a time).
EmbeddingCollection& Collection16(RowDtype dtype, RowDtype out) {
  static std::unique_ptr<EmbeddingCollection> c;
  static RowDtype have = RowDtype::kF32, have_out = RowDtype::kF32;
  if (c == nullptr || have != dtype || have_out != out) {
    c.reset();
    EmbeddingCollectionOptions o = GetSetup().options;
    for (TableConfig& t : o.tables) {
      t.storage.dtype = dtype;
      t.output_dtype = out;
    }
    auto made = EmbeddingCollection::Create(o, DeviceContext::Cpu());
    TESSERA_CHECK_OK(made.status());
    c = std::move(made).value();
    have = dtype;
    have_out = out;
  }
  return *c;
}

double CpuNow() { return PhaseTimes::Now(PhaseTimes::Clock::kProcessCpu); }

// Args: dtype (1 = fp16, 2 = bf16), threads, out (0 = fp32 outputs, 1 = bf16 outputs handed
// off in bf16, 2 = bf16 outputs through the fp32 API).
void BM_Phases16(benchmark::State& state) {
  Setup& s = GetSetup();
  const RowDtype dtype = state.range(0) == 1 ? RowDtype::kF16 : RowDtype::kBf16;
  const RowDtype out = state.range(2) >= 1 ? RowDtype::kBf16 : RowDtype::kF32;
  const bool handoff = state.range(2) == 1;
  EmbeddingCollection& c16 = Collection16(dtype, out);
  SetNumThreads(static_cast<int>(state.range(1)));
  double t[2][2] = {{0, 0}, {0, 0}};  // [fp32, 16-bit][lookup, update]
  int64_t iter = 0;
  for (auto _ : state) {
    const Batch& b = s.batches[iter % kBatches];
    const double before16 = t[1][0] + t[1][1];
    EmbeddingCollection* sides[2] = {s.collection.get(), &c16};
    for (int side = 0; side < 2; ++side) {
      const bool bf16 = side == 1 && handoff;
      const double t0 = CpuNow();
      TESSERA_CHECK_OK(bf16 ? sides[side]->ForwardBf16(b.sparse, s.out16.data())
                            : sides[side]->Forward(b.sparse, s.out.data()));
      const double t1 = CpuNow();
      TESSERA_CHECK_OK(bf16 ? sides[side]->BackwardUpdateBf16(s.d_out16.data(), kLr, iter + 1)
                            : sides[side]->BackwardUpdate(s.d_out.data(), kLr, iter + 1));
      const double t2 = CpuNow();
      benchmark::DoNotOptimize(s.out.data());
      benchmark::DoNotOptimize(s.out16.data());
      t[side][0] += t1 - t0;
      t[side][1] += t2 - t1;
    }
    state.SetIterationTime(t[1][0] + t[1][1] - before16);  // the 16-bit side's CPU time
    ++iter;
  }
  const double ms = 1e3 / static_cast<double>(iter);
  state.counters["f32_lookup_ms"] = t[0][0] * ms;
  state.counters["f32_update_ms"] = t[0][1] * ms;
  state.counters["x16_lookup_ms"] = t[1][0] * ms;
  state.counters["x16_update_ms"] = t[1][1] * ms;
  state.counters["lookup_speedup"] = t[0][0] / t[1][0];
  state.counters["update_speedup"] = t[0][1] / t[1][1];
  state.counters["phases_speedup"] = (t[0][0] + t[0][1]) / (t[1][0] + t[1][1]);
  const char* route = out != RowDtype::kBf16 ? "" : handoff ? " (bf16 hand-off)" : " (fp32 API)";
  state.SetLabel(
      absl::StrCat(RowDtypeName(dtype), " tables, ", RowDtypeName(out), " outputs", route));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int ahead : {0, 4, 8, 16}) b->Args({threads, ahead});
  }
  b->ArgNames({"threads", "ahead"})->UseManualTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_PooledLookup)->Apply(Args);
BENCHMARK(BM_EmbeddingUpdate)->Apply(Args);
BENCHMARK(BM_UpdateFloor)
    ->ArgsProduct({{1}, {0, 4, 8, 16}})
    ->ArgNames({"threads", "ahead"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Phases16)
    ->ArgsProduct({{1, 2}, {1, 2}, {0, 1, 2}})
    ->ArgNames({"dtype", "threads", "out"})
    ->UseManualTime()
    ->Iterations(64)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
