// Device measurements of `tessera-plan calibrate` (tools/plan_calibrate.h): copy bandwidth,
// per-call overhead, gather / scatter-update rates by row size, GEMM rates by layer shape.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/status.h"
#include "embedding/embedding_collection.h"
#include "embedding/pooled_lookup.h"
#include "io/zipf.h"
#include "planner/profile_quality.h"
#include "tools/plan_calibrate_internal.h"
#include "trainer/cuda_sparse_arch.h"
#include "trainer/sparse_arch.h"

namespace tessera {
namespace calibrate_internal {

// plan_calibrate_internal.h
void EvictCaches(const CalibrateOptions& o, const DeviceContext& ctx, std::vector<float>* buf,
                 int64_t bytes) {
  if (bytes < 0) bytes = o.evict_bytes;
  if (ctx.is_cuda() || bytes <= 0) return;
  buf->resize(static_cast<size_t>(bytes / 4));
  float* p = buf->data();
  for (size_t i = 0; i < buf->size(); i += 16) p[i] += 1.0f;  // one write per cache line
}

// plan_calibrate_internal.h
void WarmInput(const DeviceContext& ctx, const void* p, int64_t bytes) {
  if (ctx.is_cuda() || p == nullptr) return;
  const volatile char* c = static_cast<const volatile char*>(p);
  char sink = 0;
  for (int64_t i = 0; i < bytes; i += 64) sink = static_cast<char>(sink + c[i]);
  (void)sink;
}

// plan_calibrate_internal.h
void WarmInput(const DeviceContext& ctx, const KeyedJagged& batch) {
  WarmInput(ctx, batch.values.data(), static_cast<int64_t>(batch.values.size() * sizeof(int64_t)));
  WarmInput(ctx, batch.offsets.data(),
            static_cast<int64_t>(batch.offsets.size() * sizeof(int64_t)));
  WarmInput(ctx, batch.weights.data(), static_cast<int64_t>(batch.weights.size() * sizeof(float)));
}

// plan_calibrate_internal.h
KeyedJagged MakeBatch(int64_t rows, int64_t batch, int64_t pooling, bool hot, double exponent,
                      uint64_t stream) {
  KeyedJagged kj;
  kj.num_features = 1;
  kj.batch_size = batch;
  kj.offsets.resize(batch + 1);
  for (int64_t b = 0; b <= batch; ++b) kj.offsets[b] = b * pooling;
  kj.values.resize(batch * pooling);
  CounterRng rng(hot ? 11 : 12, stream);
  ZipfSampler zipf(rows, exponent);
  const uint64_t mask = static_cast<uint64_t>(rows) - 1;
  for (int64_t& v : kj.values) {
    uint64_t r = hot ? static_cast<uint64_t>(zipf.Sample(rng))
                     : static_cast<uint64_t>(rng.NextUniformDouble() * rows);
    if (hot) r = (r * 0x9E3779B97F4A7C15ull) & mask;
    v = static_cast<int64_t>(r & mask);
  }
  return kj;
}

// plan_calibrate_internal.h
absl::Status Sync(const DeviceContext& ctx) {
  return ctx.is_cuda() ? CudaSynchronize(ctx) : absl::OkStatus();
}

}  // namespace calibrate_internal

namespace {

using calibrate_internal::IntervalTimer;
using calibrate_internal::Sync;
using calibrate_internal::MedianSeconds;
using calibrate_internal::EvictCaches;
using calibrate_internal::WarmInput;
using calibrate_internal::MakeBatch;
using calibrate_internal::Progress;


absl::StatusOr<std::unique_ptr<SparseArch>> MakeTable(int64_t rows, int64_t dim,
                                                      const DeviceContext& ctx) {
  EmbeddingCollectionOptions eo;
  TableConfig t;
  t.name = "calibrate";
  t.num_rows = rows;
  t.dim = dim;
  t.features = {0};
  eo.tables = {t};
  eo.num_features = 1;
  eo.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
  eo.seed = 1;
  if (ctx.is_cuda()) {
    TESSERA_ASSIGN_OR_RETURN(auto cuda, CudaSparseArch::Create(eo, ctx));
    return std::unique_ptr<SparseArch>(std::move(cuda));
  }
  TESSERA_ASSIGN_OR_RETURN(auto local, EmbeddingCollection::Create(eo, ctx));
  return std::unique_ptr<SparseArch>(std::make_unique<LocalSparseArch>(std::move(local)));
}


// Mean distinct ids per batch.
double MeanDistinct(const std::vector<KeyedJagged>& batches) {
  double sum = 0;
  for (const KeyedJagged& kj : batches) {
    std::vector<int64_t> v = kj.values;
    std::sort(v.begin(), v.end());
    sum += static_cast<double>(std::unique(v.begin(), v.end()) - v.begin());
  }
  return batches.empty() ? 0 : sum / static_cast<double>(batches.size());
}

// Median seconds of Forward and BackwardUpdate over batches of `pooling` ids per bag, cycling
// up to o.distinct_batches of them (alternating, caches evicted before each call); `distinct`:
// the mean distinct ids of the batches used.
struct CallTimes {
  double fwd = 0, bwd = 0, distinct = 0;
};
// `evict_update` false: no eviction between the Forward and its BackwardUpdate (the update
// finds the rows the forward gathered still cached, as in training when little runs between).
// `evict_forward` false: none before the Forward either (a table that stays in the LLC).
// `evict_bytes` >= 0: the eviction pass's size instead of o.evict_bytes.
absl::StatusOr<CallTimes> TimeCalls(const CalibrateOptions& o, const DeviceContext& ctx,
                                    SparseArch& table, int64_t rows, int64_t dim, int64_t pooling,
                                    bool hot, float* out, const float* grad,
                                    bool evict_update = true, bool evict_forward = true,
                                    int64_t evict_bytes = -1) {
  // The batches cycled (o.distinct_batches), each made when first used: a short point uses a
  // few of them (a 32-id batch of 64k ids takes longer to draw than to time).
  const size_t num_batches = static_cast<size_t>(std::max(1, o.distinct_batches));
  std::vector<KeyedJagged> batches;
  CallTimes ct;
  std::vector<float> flush;
  int64_t step = 0;
  std::vector<double> fwd, bwd;
  Stopwatch total;
  // Two untimed steps first (first-touch of the scratch buffers).
  while (fwd.size() < 5 || total.ElapsedSeconds() < 2 * o.seconds_per_point) {
    const size_t i = static_cast<size_t>(step) % num_batches;
    if (i == batches.size()) {
      batches.push_back(MakeBatch(rows, o.batch_size, pooling, hot, o.zipf_exponent,
                                  i + 100 * static_cast<uint64_t>(dim) + 7919 * pooling));
    }
    const KeyedJagged& kj = batches[i];
    if (evict_forward) {
      EvictCaches(o, ctx, &flush, evict_bytes);
      WarmInput(ctx, kj);
    }
    IntervalTimer w(o.cpu_clock && !ctx.is_cuda());
    TESSERA_RETURN_IF_ERROR(table.Forward(kj, out));
    TESSERA_RETURN_IF_ERROR(Sync(ctx));
    const double f = w.Seconds();
    if (evict_update) {
      EvictCaches(o, ctx, &flush, evict_bytes);
      WarmInput(ctx, grad, o.batch_size * dim * static_cast<int64_t>(sizeof(float)));
    }
    w.Reset();
    TESSERA_RETURN_IF_ERROR(table.BackwardUpdate(grad, 1e-4f, step + 1));
    TESSERA_RETURN_IF_ERROR(Sync(ctx));
    const double b = w.Seconds();
    if (++step > 2) {
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  ct.distinct = MeanDistinct(batches);
  std::sort(fwd.begin(), fwd.end());
  std::sort(bwd.begin(), bwd.end());
  ct.fwd = fwd[fwd.size() / 2];
  ct.bwd = bwd[bwd.size() / 2];
  return ct;
}

// Gather (Forward) and scatter-update (BackwardUpdate) costs for each dim, split as the
// estimator prices them (planner/profile.h RowRatePoint), from three runs of B bags:
//   hot ids, p1 = o.pooling per bag (h1), cold ids, p1 per bag (c1), hot ids, P = o.multi_pooling
//   per bag (hP)
//   gather:  t = B bag_s + ids / rate  ->  per id (hP - h1) / (B (P - p1)), bag_s = (h1 - B p1
//            per id) / B, cold per id (c1 - B bag_s) / (B p1) (the bag cost does not depend on
//            where the rows are)
//   update:  t = ids id_s + distinct / rate, solved from h1 and a fourth run of P ids per bag
//            over 256 rows (dup: ids >> distinct; the distinct counts are counted), cold from
//            c1 with that id_s.
// Noise can make a split negative: then bag_s / id_s = 0 and the rate is the per-id one.
absl::Status MeasureRowRates(const CalibrateOptions& o, const DeviceContext& ctx,
                             planner::DeviceProfile* d) {
  for (int64_t dim : o.dims) {
    int64_t rows = 1;
    while (rows * 2 * dim * 4 <= o.table_bytes) rows *= 2;
    TESSERA_ASSIGN_OR_RETURN(auto table, MakeTable(rows, dim, ctx));
    TESSERA_ASSIGN_OR_RETURN(Buffer out,
                             Buffer::Allocate(ctx.device, DType::kF32, {o.batch_size, dim}));
    TESSERA_ASSIGN_OR_RETURN(Buffer grad,
                             Buffer::Allocate(ctx.device, DType::kF32, {o.batch_size, dim}));
    std::vector<float> g(static_cast<size_t>(o.batch_size * dim));
    CounterRng grng(3, static_cast<uint64_t>(dim));
    for (float& x : g) x = static_cast<float>(grng.NextUniformDouble() - 0.5) * 1e-3f;
    if (ctx.is_cuda()) {
      TESSERA_RETURN_IF_ERROR(CudaMemcpy(grad.raw(), g.data(), g.size() * sizeof(float)));
    } else {
      std::copy(g.begin(), g.end(), grad.data<float>());
    }
    const int64_t p1 = o.pooling, p = std::max<int64_t>(p1 + 1, o.multi_pooling);
    const double b = static_cast<double>(o.batch_size);
    TESSERA_ASSIGN_OR_RETURN(CallTimes h1, TimeCalls(o, ctx, *table, rows, dim, p1, true,
                                                     out.data<float>(), grad.data<float>()));
    TESSERA_ASSIGN_OR_RETURN(CallTimes c1, TimeCalls(o, ctx, *table, rows, dim, p1, false,
                                                     out.data<float>(), grad.data<float>()));
    TESSERA_ASSIGN_OR_RETURN(CallTimes hp, TimeCalls(o, ctx, *table, rows, dim, p, true,
                                                     out.data<float>(), grad.data<float>()));
    // Duplicates: P ids per bag over the first kDupRows rows (uniform), so the ids outnumber the
    // distinct rows ~P B / kDupRows times and the update's per-id term dominates; after the
    // light pass (o.light_evict_bytes: the per-id work's scratch is reused every step).
    constexpr int64_t kDupRows = 256;
    TESSERA_ASSIGN_OR_RETURN(CallTimes dup, TimeCalls(o, ctx, *table, kDupRows, dim, p, false,
                                                      out.data<float>(), grad.data<float>(), true,
                                                      true, o.light_evict_bytes));
    // Warm: the multi-hot run again without the eviction before the update (its distinct rows,
    // ~20k at batch 2048 x 32, fit in the LLC), and the light pass before the forward: the rate
    // of a table the LLC keeps between steps, which the step reuses as it does its scratch (the
    // full pass there made skewed's hot table's update 52-60 ns per row against 45).
    TESSERA_ASSIGN_OR_RETURN(CallTimes warm,
                             TimeCalls(o, ctx, *table, rows, dim, p, true, out.data<float>(),
                                       grad.data<float>(), /*evict_update=*/false,
                                       /*evict_forward=*/true, o.light_evict_bytes));
    planner::RowRatePoint gather{dim * 4, 0, 0}, update{dim * 4, 0, 0};
    const double ids1 = b * p1;
    double id_hot = (hp.fwd - h1.fwd) / (b * (p - p1));
    double bag = (h1.fwd - ids1 * id_hot) / b;
    if (!(id_hot > 0) || !(bag > 0)) {
      bag = 0;
      id_hot = h1.fwd / ids1;
    }
    gather.bag_s = bag;
    gather.hot_rows_per_s = 1.0 / id_hot;
    gather.cold_rows_per_s = ids1 / std::max(c1.fwd - b * bag, 0.1 * c1.fwd);
    // Cached: a table of at most a quarter of the LLC, uniform ids, never evicted (a small
    // table of a model, which stays in the LLC between steps): one-id and P-id bags, split as
    // above. CPU only (a GPU's L2 is not measured).
    double cached_bag = 0, cached_id = 0;
    if (!ctx.is_cuda() && d->llc_bytes > 0) {
      int64_t small = 1;
      while (small * 2 * dim * 4 <= d->llc_bytes / 4 && small * 2 <= rows) small *= 2;
      TESSERA_ASSIGN_OR_RETURN(auto cached, MakeTable(small, dim, ctx));
      TESSERA_ASSIGN_OR_RETURN(CallTimes k1, TimeCalls(o, ctx, *cached, small, dim, p1, false,
                                                       out.data<float>(), grad.data<float>(),
                                                       false, false));
      TESSERA_ASSIGN_OR_RETURN(CallTimes kp, TimeCalls(o, ctx, *cached, small, dim, p, false,
                                                       out.data<float>(), grad.data<float>(),
                                                       false, false));
      cached_id = (kp.fwd - k1.fwd) / (b * (p - p1));
      cached_bag = (k1.fwd - ids1 * cached_id) / b;
      if (!(cached_id > 0) || !(cached_bag > 0)) {
        cached_bag = 0;
        cached_id = k1.fwd / ids1;
      }
      gather.cached_bag_s = cached_bag;
      gather.cached_rows_per_s = 1.0 / cached_id;
    }
    // u1 = p1 B x + D1 y, uDup = P B x + DDup y (x = id_s, y = seconds per distinct row).
    const double det = ids1 * dup.distinct - p * b * h1.distinct;
    double id_s = det != 0 ? (h1.bwd * dup.distinct - dup.bwd * h1.distinct) / det : -1;
    double row_hot = id_s >= 0 ? (h1.bwd - ids1 * id_s) / h1.distinct : -1;
    if (!(id_s >= 0) || !(row_hot > 0)) {
      id_s = 0;
      row_hot = h1.bwd / h1.distinct;
    }
    update.id_s = id_s;
    update.hot_rows_per_s = 1.0 / row_hot;
    update.cold_rows_per_s = c1.distinct / std::max(c1.bwd - ids1 * id_s, 0.1 * c1.bwd);
    const double ids_p = b * p;
    update.warm_rows_per_s = warm.distinct / std::max(warm.bwd - ids_p * id_s, 0.1 * warm.bwd);
    // Never slower than the evicted rate: the warm run differs only in what is cached.
    update.warm_rows_per_s = std::max(update.warm_rows_per_s, update.hot_rows_per_s);
    Progress(o, absl::StrFormat(
                    "%s dim %d (table %d rows, %.0f MiB): gather %.0f ns/bag + %.1f ns/id "
                    "(zipf) %.1f (uniform), %.0f ns/bag + %.1f ns/id (in the LLC); update "
                    "%.1f ns/id + %.1f ns/row (zipf) %.1f "
                    "(uniform), %.1f (zipf %d, rows cached from the forward); distinct per "
                    "batch %.0f / %.0f / %.0f (zipf 1, uniform 1, zipf %d)",
                    d->kind, dim, rows, rows * dim * 4 / 1048576.0, 1e9 * bag, 1e9 * id_hot,
                    1e9 / gather.cold_rows_per_s, 1e9 * cached_bag, 1e9 * cached_id,
                    1e9 * id_s, 1e9 * row_hot,
                    1e9 / update.cold_rows_per_s, 1e9 / update.warm_rows_per_s, p, h1.distinct,
                    c1.distinct, hp.distinct, p));
    d->gather.push_back(gather);
    d->scatter_update.push_back(update);
  }
  return absl::OkStatus();
}

// The largest cache sysfs lists for cpu0 (32 MiB when it lists none). A VM may list its host's.
int64_t SysfsLlcBytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in(absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", i, "/size"));
    std::string v;
    if (!(in >> v) || v.empty()) continue;
    int64_t mult = 1;
    if (v.back() == 'K') mult = 1024;
    if (v.back() == 'M') mult = 1 << 20;
    if (mult > 1) v.pop_back();
    best = std::max<int64_t>(best, std::atoll(v.c_str()) * mult);
  }
  return best > 0 ? best : int64_t{32} << 20;
}

// Last-level cache bytes: o.llc_bytes when given (calibrate measures it once,
// MeasureEffectiveLlc), else sysfs's; CUDA: o.cuda_llc_bytes (the runtime API Tessera wraps has no
// L2 query).
int64_t LlcBytes(const CalibrateOptions& o, const DeviceContext& ctx) {
  if (ctx.is_cuda()) return o.cuda_llc_bytes;
  return o.llc_bytes > 0 ? o.llc_bytes : SysfsLlcBytes();
}

// Per-call overhead: a one-bag, one-id forward + backward of a small table (the fixed cost the
// trainer pays per table per phase), as seconds per call.
absl::Status MeasureLaunchOverhead(const CalibrateOptions& o, const DeviceContext& ctx,
                                   planner::DeviceProfile* d) {
  TESSERA_ASSIGN_OR_RETURN(auto table, MakeTable(1024, 16, ctx));
  KeyedJagged kj = MakeBatch(1024, 1, 1, false, 1.05, 7);
  TESSERA_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(ctx.device, DType::kF32, {1, 16}));
  TESSERA_ASSIGN_OR_RETURN(Buffer grad, Buffer::Allocate(ctx.device, DType::kF32, {1, 16}));
  int64_t step = 0;
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point / 4, [&]() -> absl::StatusOr<double> {
        IntervalTimer w(o.cpu_clock && !ctx.is_cuda());
        TESSERA_RETURN_IF_ERROR(table->Forward(kj, out.data<float>()));
        TESSERA_RETURN_IF_ERROR(table->BackwardUpdate(grad.data<float>(), 0.0f, ++step));
        TESSERA_RETURN_IF_ERROR(Sync(ctx));
        return w.Seconds();
      }));
  d->launch_overhead_s = s / 2;
  Progress(o, absl::StrFormat("%s per-call overhead %.2f us", d->kind, 1e6 * d->launch_overhead_s));
  return absl::OkStatus();
}

// Streaming copy bandwidth (read + write bytes per second) over 2 x 256 MiB (CPU only; the
// CUDA entry takes a device-to-device copy).
absl::Status MeasureCopy(const CalibrateOptions& o, const DeviceContext& ctx,
                         planner::DeviceProfile* d) {
  const int64_t n = int64_t{64} << 20;  // floats
  TESSERA_ASSIGN_OR_RETURN(Buffer a, Buffer::Allocate(ctx.device, DType::kF32, {n}));
  TESSERA_ASSIGN_OR_RETURN(Buffer b, Buffer::Allocate(ctx.device, DType::kF32, {n}));
  if (!ctx.is_cuda()) {
    float* pa = a.data<float>();
    ParallelFor(n, 1 << 16, [&](int64_t lo, int64_t hi, int) {
      for (int64_t i = lo; i < hi; ++i) pa[i] = static_cast<float>(i & 1023);
    });
  }
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point, [&]() -> absl::StatusOr<double> {
        IntervalTimer w(o.cpu_clock && !ctx.is_cuda());
        if (ctx.is_cuda()) {
          TESSERA_RETURN_IF_ERROR(CudaCopyDeviceToDevice(ctx, b.raw(), a.raw(), n * 4));
          TESSERA_RETURN_IF_ERROR(CudaSynchronize(ctx));
        } else {
          const float* pa = a.data<float>();
          float* pb = b.data<float>();
          ParallelFor(n, 1 << 16,
                      [&](int64_t lo, int64_t hi, int) { std::copy(pa + lo, pa + hi, pb + lo); });
        }
        return w.Seconds();
      }));
  d->copy_bytes_per_s = 2.0 * n * 4 / s;
  Progress(o, absl::StrFormat("%s copy %.1f GB/s", d->kind, d->copy_bytes_per_s / 1e9));
  return absl::OkStatus();
}

// The sharded collection's row-by-row copies (CPU only; the CUDA entry keeps 0: the copy rate):
// a [2048, 8 x 64] float output whose 8 feature blocks of 64 columns are packed row by row into
// a buffer (the backward dist's gradient pack: read + write) and written back into the output
// (the output dist's unpack of each column's first partial, AddPartials `first`: read the block
// + write the output), as sharding/internal/output_dist.cc does them; bytes read + written per
// second of both, each half timed after the cache eviction (in a step the dense work runs
// between them) with its input warmed (the gradients the dense backward just wrote, the blocks
// the all-to-all just received).
absl::Status MeasurePack(const CalibrateOptions& o, const DeviceContext& ctx,
                         planner::DeviceProfile* d) {
  if (ctx.is_cuda()) return absl::OkStatus();
  constexpr int64_t kBags = 2048, kFeatures = 8, kWidth = 64, kOd = kFeatures * kWidth;
  std::vector<float> out(kBags * kOd), packed(kBags * kOd), flush;
  for (int64_t i = 0; i < kBags * kOd; ++i) out[i] = static_cast<float>(i & 1023);
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point / 2, [&]() -> absl::StatusOr<double> {
        EvictCaches(o, ctx, &flush);
        WarmInput(ctx, out.data(), static_cast<int64_t>(out.size() * sizeof(float)));
        double t = 0;
        {
          IntervalTimer w(o.cpu_clock);
          float* p = packed.data();
          for (int64_t f = 0; f < kFeatures; ++f) {
            for (int64_t i = 0; i < kBags; ++i) {
              std::memcpy(p, out.data() + i * kOd + f * kWidth, kWidth * sizeof(float));
              p += kWidth;
            }
          }
          t = w.Seconds();
        }
        EvictCaches(o, ctx, &flush);
        WarmInput(ctx, packed.data(), static_cast<int64_t>(packed.size() * sizeof(float)));
        IntervalTimer w(o.cpu_clock);
        for (int64_t f = 0; f < kFeatures; ++f) {
          const float* src = packed.data() + f * kBags * kWidth;
          float* dst = out.data() + f * kWidth;
          for (int64_t i = 0; i < kBags; ++i) {
            std::memcpy(dst + i * kOd, src + i * kWidth, kWidth * sizeof(float));
          }
        }
        return t + w.Seconds();
      }));
  // Pack and unpack: read + write of every value.
  const double bytes = (2.0 + 2.0) * kBags * kOd * 4;
  d->pack_bytes_per_s = bytes / s;
  Progress(o, absl::StrFormat("%s row pack/unpack %.1f GB/s", d->kind, d->pack_bytes_per_s / 1e9));
  return absl::OkStatus();
}

// Binary search (CPU only): std::lower_bound of 4096 present keys, in a shuffled order, over a
// sorted array of 4096 distinct row ids (column-split row-wise AdaGrad's sibling lookup in
// sharding/internal/shard_update.cc), as seconds per halving step (12 per search).
absl::Status MeasureSearch(const CalibrateOptions& o, const DeviceContext& ctx,
                           planner::DeviceProfile* d) {
  if (ctx.is_cuda()) return absl::OkStatus();
  constexpr int64_t kRows = 4096;
  std::vector<int64_t> rows(kRows), keys(kRows);
  for (int64_t i = 0; i < kRows; ++i) rows[i] = 3 * i + (i * 7919) % 3;
  CounterRng rng(13, 0);
  for (int64_t i = 0; i < kRows; ++i) keys[i] = rows[rng.NextBelow(kRows)];
  volatile int64_t sink = 0;
  TESSERA_ASSIGN_OR_RETURN(
      double s, MedianSeconds(o.seconds_per_point / 4, [&]() -> absl::StatusOr<double> {
        IntervalTimer w(o.cpu_clock);
        int64_t sum = 0;
        for (int64_t k : keys) sum += std::lower_bound(rows.begin(), rows.end(), k) - rows.begin();
        sink = sink + sum;
        return w.Seconds();
      }));
  d->search_step_s = s / (kRows * std::log2(static_cast<double>(kRows)));
  Progress(o, absl::StrFormat("%s binary search %.2f ns per step", d->kind, 1e9 * d->search_step_s));
  return absl::OkStatus();
}


}  // namespace

namespace calibrate_internal {

absl::StatusOr<planner::DeviceProfile> MeasureDevice(const CalibrateOptions& o,
                                                     const DeviceContext& ctx,
                                                     const std::string& name,
                                                     int64_t memory_bytes) {
  planner::DeviceProfile d;
  d.kind = ctx.is_cuda() ? "cuda" : "cpu";
  d.name = name;
  d.threads = ctx.is_cuda() ? 1 : o.threads;
  d.memory_bytes = memory_bytes;
  TESSERA_RETURN_IF_ERROR(MeasureCopy(o, ctx, &d));
  TESSERA_RETURN_IF_ERROR(MeasurePack(o, ctx, &d));
  TESSERA_RETURN_IF_ERROR(MeasureSearch(o, ctx, &d));
  TESSERA_RETURN_IF_ERROR(MeasurePackIds(o, ctx, &d));
  TESSERA_RETURN_IF_ERROR(MeasureLaunchOverhead(o, ctx, &d));
  d.llc_bytes = LlcBytes(o, ctx);
  Progress(o, absl::StrFormat("%s last-level cache %.1f MiB", d.kind, d.llc_bytes / 1048576.0));
  TESSERA_RETURN_IF_ERROR(MeasureRowRates(o, ctx, &d));
  TESSERA_RETURN_IF_ERROR(MeasureDense(o, ctx, &d));
  return d;
}

// The curve planner::EffectiveLlcBytes reads: the pooled lookup's uniform gather (bags of 32
// ids), dim 64, over tables of 4 MiB doubling up to twice sysfs's size (at most 1 GiB and an
// eighth of `memory_bytes`), each allocated as a store's table, filled and never evicted, so it
// keeps what of it the cache holds; per size the median of 9 calls of fresh ids, two passes
// small to large, the lower median kept. A 2-core Xeon VM that reports 480 MiB: 6.4 ns per id at
// 4 MiB, 17 at 64, 34 at 512 (a few seconds). `curve`, when not null, gets "SIZE: NS" pairs.
absl::StatusOr<int64_t> MeasureEffectiveLlc(const CalibrateOptions& o, int64_t memory_bytes,
                                            std::string* curve) {
  const int64_t reported = SysfsLlcBytes();
  // Bags of 32 ids: the gather, not the per-bag work and the output's writes, is timed.
  constexpr int64_t kDim = 64, kIds = 32768, kPooling = 32, kBags = kIds / kPooling;
  const DeviceContext ctx = DeviceContext::Cpu();
  std::vector<int64_t> sizes;
  const int64_t top = std::min<int64_t>({std::max<int64_t>(2 * reported, int64_t{8} << 20),
                                         int64_t{1} << 30,
                                         std::max<int64_t>(memory_bytes / 8, int64_t{8} << 20)});
  for (int64_t b = int64_t{4} << 20; b <= top; b *= 2) sizes.push_back(b);
  std::vector<double> best(sizes.size(), 0);
  std::vector<int64_t> offsets(kBags + 1), ids(kIds);
  for (int64_t b = 0; b <= kBags; ++b) offsets[b] = b * kPooling;
  std::vector<float> out(kBags * kDim);
  CounterRng rng(0x11c, 1);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t rows = sizes[i] / (kDim * 4);
      // As a table's store allocates it (huge pages where the kernel gives them).
      const size_t bytes = static_cast<size_t>(sizes[i]);
      std::unique_ptr<float, std::function<void(float*)>> table(
          static_cast<float*>(AllocateHost(bytes)), [bytes](float* p) { FreeHost(p, bytes); });
      if (table == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("calibrate: allocating a ", sizes[i] >> 20, " MiB table failed"));
      }
      std::fill(table.get(), table.get() + rows * kDim, 1.0f);
      PooledLookupArgs a;
      a.weights = table.get();
      a.dim = kDim;
      a.offsets = offsets.data();
      a.indices = ids.data();
      a.num_bags = kBags;
      a.out = out.data();
      a.out_stride = kDim;
      std::vector<double> t;
      for (int call = 0; call < 11; ++call) {
        for (int64_t& id : ids) id = static_cast<int64_t>(rng.NextBelow(rows));
        IntervalTimer w(o.cpu_clock);
        TESSERA_RETURN_IF_ERROR(PooledLookupForward(ctx, a));
        if (call >= 2) t.push_back(w.Seconds() / kIds);
      }
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      const double m = t[t.size() / 2];
      best[i] = pass == 0 ? m : std::min(best[i], m);
    }
  }
  if (curve != nullptr) {
    curve->clear();
    for (size_t i = 0; i < sizes.size(); ++i) {
      absl::StrAppendFormat(curve, "%s%d MiB: %.1f", i > 0 ? ", " : "", sizes[i] >> 20,
                            1e9 * best[i]);
    }
  }
  return planner::EffectiveLlcBytes(sizes, best, reported);
}

}  // namespace calibrate_internal
}  // namespace tessera
