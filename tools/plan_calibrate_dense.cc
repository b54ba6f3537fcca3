// GEMM and cross-layer rates of `tessera-plan calibrate` (tools/plan_calibrate.h): every Linear
// layer shape, dot interaction and DCNv2 cross layer of the configs calibrated for, timed
// through the trainer's own kernels (LinearForward / LinearBackward, DotInteractionForward /
// Backward, CrossNetwork), so their fused passes are inside the rates.

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/buffer.h"
#include "core/status.h"
#include "dense/cross_network.h"
#include "dense/dense_arch.h"
#include "dense/interaction.h"
#include "dense/loss.h"
#include "dense/mlp.h"
#include "planner/dense_cost.h"
#include "tools/plan_calibrate_internal.h"
#include "trainer/auto_plan.h"
#include "trainer/config.h"
#include "trainer/model.h"

namespace tessera {
namespace calibrate_internal {
namespace {

using Shape = std::tuple<int64_t, int64_t, int64_t>;

void Fill(Buffer* buf, int mod) {
  float* p = buf->data<float>();
  for (int64_t i = 0; i < buf->numel(); ++i) {
    p[i] = 0.01f * static_cast<float>((i % mod) - mod / 2);
  }
}

// One Linear layer (batch b, in -> out, ReLU) with its buffers: LinearForward and LinearBackward
// (with or without the input gradient) timed, as the trainer's Linear runs them.
struct LinearBench {
  static absl::StatusOr<LinearBench> Create(const DeviceContext& ctx, int64_t b, int64_t in,
                                            int64_t out) {
    LinearBench l{.ctx = ctx, .b = b, .in = in, .out = out};
    for (auto [buf, rows, cols] : {std::tuple{&l.x, b, in}, {&l.w, out, in}, {&l.bias, 1, out},
                                   {&l.y, b, out}, {&l.dy, b, out}, {&l.dw, out, in},
                                   {&l.db, 1, out}, {&l.dx, b, in}}) {
      TESSERA_ASSIGN_OR_RETURN(*buf, Buffer::Allocate(ctx.device, DType::kF32, {rows, cols}));
    }
    if (!ctx.is_cuda()) {
      for (Buffer* buf : {&l.x, &l.w, &l.bias, &l.dy}) Fill(buf, 13);
    }
    return l;
  }
  absl::StatusOr<double> Forward(const CalibrateOptions& o) {
    IntervalTimer t(o.cpu_clock && !ctx.is_cuda());
    TESSERA_RETURN_IF_ERROR(LinearForward(ctx, x.data<float>(), w.data<float>(),
                                          bias.data<float>(), b, in, out, Activation::kRelu,
                                          y.data<float>()));
    TESSERA_RETURN_IF_ERROR(Sync(ctx));
    return t.Seconds();
  }
  absl::StatusOr<double> Backward(const CalibrateOptions& o, bool with_dx) {
    IntervalTimer t(o.cpu_clock && !ctx.is_cuda());
    TESSERA_RETURN_IF_ERROR(LinearBackward(ctx, x.data<float>(), w.data<float>(), y.data<float>(),
                                           dy.data<float>(), b, in, out, Activation::kRelu,
                                           dw.data<float>(), db.data<float>(),
                                           with_dx ? dx.data<float>() : nullptr));
    TESSERA_RETURN_IF_ERROR(Sync(ctx));
    return t.Seconds();
  }
  DeviceContext ctx = DeviceContext::Cpu();
  int64_t b = 0, in = 0, out = 0;
  Buffer x, w, bias, y, dy, dw, db, dx;
};

// The dot interaction of F features of dim d over b samples: forward and backward timed.
struct DotBench {
  static absl::StatusOr<DotBench> Create(const DeviceContext& ctx, int64_t b, int64_t f,
                                         int64_t dim) {
    DotBench t{.ctx = ctx, .b = b, .f = f, .dim = dim};
    const int64_t out_dim = DotInteractionOutputDim(f, dim);
    for (auto [buf, cols] : {std::pair{&t.bottom, dim}, {&t.emb, f * dim}, {&t.y, out_dim},
                             {&t.dy, out_dim}, {&t.dbottom, dim}, {&t.demb, f * dim}}) {
      TESSERA_ASSIGN_OR_RETURN(*buf, Buffer::Allocate(ctx.device, DType::kF32, {b, cols}));
    }
    if (!ctx.is_cuda()) {
      Fill(&t.bottom, 7);
      Fill(&t.emb, 7);
      Fill(&t.dy, 5);
    }
    return t;
  }
  absl::StatusOr<double> Forward(const CalibrateOptions& o) {
    IntervalTimer w(o.cpu_clock && !ctx.is_cuda());
    TESSERA_RETURN_IF_ERROR(DotInteractionForward(ctx, bottom.data<float>(), emb.data<float>(), b,
                                                  f, dim, y.data<float>()));
    TESSERA_RETURN_IF_ERROR(Sync(ctx));
    return w.Seconds();
  }
  absl::StatusOr<double> Backward(const CalibrateOptions& o) {
    IntervalTimer w(o.cpu_clock && !ctx.is_cuda());
    TESSERA_RETURN_IF_ERROR(DotInteractionBackward(ctx, bottom.data<float>(), emb.data<float>(),
                                                   dy.data<float>(), b, f, dim,
                                                   dbottom.data<float>(), demb.data<float>()));
    TESSERA_RETURN_IF_ERROR(Sync(ctx));
    return w.Seconds();
  }
  DeviceContext ctx = DeviceContext::Cpu();
  int64_t b = 0, f = 0, dim = 0;
  Buffer bottom, emb, y, dy, dbottom, demb;
};

// `layers` DCNv2 cross layers of (b, dim, rank) as one CrossNetwork (CPU only): forward and
// backward timed (the backward's gradient input copied in first, untimed: Backward overwrites it).
struct CrossBench {
  static absl::StatusOr<CrossBench> Create(const DeviceContext& ctx, int64_t b, int64_t dim,
                                           int64_t rank, int layers) {
    CrossBench c;
    c.b = b;
    CrossNetworkOptions co;
    co.in_dim = dim;
    co.num_layers = layers;
    co.low_rank = rank;
    TESSERA_ASSIGN_OR_RETURN(c.net, CrossNetwork::Create("calibrate_cross", co, ctx));
    c.net->Init(5);
    for (Buffer* buf : {&c.x0, &c.dy0, &c.dy, &c.dx0}) {
      TESSERA_ASSIGN_OR_RETURN(*buf, Buffer::Allocate(ctx.device, DType::kF32, {b, dim}));
    }
    Fill(&c.x0, 7);
    Fill(&c.dy0, 5);
    return c;
  }
  absl::StatusOr<double> Forward(const CalibrateOptions& o) {
    IntervalTimer t(o.cpu_clock);
    const float* y = nullptr;
    TESSERA_RETURN_IF_ERROR(net->Forward(x0.data<float>(), b, &y));
    return t.Seconds();
  }
  absl::StatusOr<double> Backward(const CalibrateOptions& o) {
    std::copy_n(dy0.data<float>(), dy0.numel(), dy.data<float>());
    IntervalTimer t(o.cpu_clock);
    TESSERA_RETURN_IF_ERROR(net->Backward(dy.data<float>(), dx0.data<float>()));
    return t.Seconds();
  }
  int64_t b = 0;
  std::unique_ptr<CrossNetwork> net;
  Buffer x0, dy0, dy, dx0;
};

// (batch, in, out) of every Linear layer of the configs' dense arch, (batch, F, d) of their
// dot interactions in `dots` and (batch, dim, low rank) of their cross layers in `crosses`.
absl::StatusOr<std::set<Shape>> LayerShapes(const CalibrateOptions& o, std::set<Shape>* dots,
                                            std::set<Shape>* crosses) {
  std::set<Shape> shapes;
  for (const std::string& path : o.configs) {
    TESSERA_ASSIGN_OR_RETURN(Config c, LoadConfig(path));
    DenseArchOptions da = DenseOptionsFromConfig(c);
    TESSERA_ASSIGN_OR_RETURN(auto arch, DenseArch::Create(da, DeviceContext::Cpu()));
    const int64_t b = c.data.batch_size;
    if (da.interaction == InteractionType::kDot)
      dots->insert({b, da.num_embeddings, da.embedding_dim});
    if (da.interaction == InteractionType::kDcn)
      crosses->insert({b, arch->interaction_dim(), da.dcn_low_rank});
    int64_t in = da.num_dense;
    for (int64_t w : da.bottom_mlp) {
      shapes.insert({b, in, w});
      in = w;
    }
    in = arch->interaction_dim();
    for (int64_t w : da.top_mlp) {
      shapes.insert({b, in, w});
      in = w;
    }
  }
  if (shapes.empty()) shapes.insert({2048, 256, 512});
  return shapes;
}

// Forward, input-gradient and weight-gradient GEMM rates of each layer shape through
// LinearForward / LinearBackward (ReLU layers: the trainer's fused bias + activation passes).
absl::Status MeasureGemm(const CalibrateOptions& o, const DeviceContext& ctx,
                         planner::DeviceProfile* d, std::set<Shape>* crosses) {
  std::set<Shape> dots;
  TESSERA_ASSIGN_OR_RETURN(auto shapes, LayerShapes(o, &dots, crosses));
  // Forward points first, then the input- and weight-gradient points: GemmFlopsPerSec takes the
  // first point nearest in m n k, and the three shapes of one layer have the same product.
  std::vector<planner::GemmPoint> fwd_points, dx_points, dw_points;
  for (const auto& [b, in, out] : shapes) {
    TESSERA_ASSIGN_OR_RETURN(LinearBench l, LinearBench::Create(ctx, b, in, out));
    auto fwd = [&] { return l.Forward(o); };
    auto bwd = [&](bool with_dx) { return l.Backward(o, with_dx); };
    const double flops = 2.0 * b * in * out;
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<double> ts,
        InterleavedMedianSeconds(o.seconds_per_point / 4, 1.25 * o.seconds_per_point,
                                 {fwd, [&] { return bwd(false); }, [&] { return bwd(true); }}));
    const double tf = ts[0], tw = ts[1], twx = ts[2];
    // dx alone: the difference, floored at a tenth of the weight-gradient time (noise).
    const double tx = std::max(twx - tw, 0.1 * tw);
    fwd_points.push_back({b, out, in, flops / tf});  // forward: y[b, out] = x[b, in] W^T
    dx_points.push_back({b, in, out, flops / tx});   // input gradient: dx[b, in] = dz[b, out] W
    dw_points.push_back({out, in, b, flops / tw});   // weight gradient: dW[out, in] = dz^T x
    Progress(
        o, absl::StrFormat("%s linear %dx%dx%d: fwd %.1f, dx %.1f, dW+db %.1f GFLOP/s", d->kind, b,
                           in, out, flops / tf / 1e9, flops / tx / 1e9, flops / tw / 1e9));
  }
  // The dot interaction: per sample a (F + 1) x (F + 1) x d product (the estimator prices it as
  // 2 b (F + 1)^2 d flops at the rate of shape (F + 1, F + 1, d)), its backward the same flops at
  // shape (F + 1, d, F + 1).
  for (const auto& [b, f, dim] : dots) {
    const int64_t v = f + 1;
    TESSERA_ASSIGN_OR_RETURN(DotBench t, DotBench::Create(ctx, b, f, dim));
    auto forward = [&] { return t.Forward(o); };
    auto backward = [&] { return t.Backward(o); };
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<double> ts,
        InterleavedMedianSeconds(o.seconds_per_point / 4, o.seconds_per_point, {forward, backward}));
    const double tf = ts[0], tb = ts[1];
    const double flops = 2.0 * b * v * v * dim;
    fwd_points.push_back({v, v, dim, flops / tf});
    dx_points.push_back({v, dim, v, flops / tb});
    Progress(o, absl::StrFormat(
                    "%s dot interaction batch %d, %d x %d x %d: %.1f GFLOP/s (%.3f ms), "
                    "backward %.1f GFLOP/s (%.3f ms)",
                    d->kind, b, v, v, dim, flops / tf / 1e9, 1e3 * tf, flops / tb / 1e9, 1e3 * tb));
  }
  std::vector<planner::GemmPoint> points = std::move(fwd_points);
  points.insert(points.end(), dx_points.begin(), dx_points.end());
  points.insert(points.end(), dw_points.begin(), dw_points.end());
  // Timed through LinearForward / LinearBackward and the dot interaction's own kernels: the
  // bias + ReLU passes are inside the rates (DeviceProfile::gemm_fused_passes).
  d->gemm_fused_passes = true;
  d->gemm_peak_flops_per_s = 0;
  for (const auto& p : points)
    d->gemm_peak_flops_per_s = std::max(d->gemm_peak_flops_per_s, p.flops_per_s);
  d->gemm = std::move(points);
  return absl::OkStatus();
}


// Cross layers timed whole, one CrossNetwork layer at each shape: its forward (the GEMM and the
// combine pass x0 * inner + x) and backward (the column pass, dW, dx), rates over the layer's
// GEMM flops (planner::CrossLayerFlops). Where the configs calibrated for have no full-rank
// (low-rank) cross layer, a default one: a full-rank layer of the 26 Kaggle features at dim 16
// (dim 432), a low-rank one of the MLPerf DCNv2 reference (dim 3456 = 27 x 128, rank 512), both
// at batch 2048; the planner prices other shapes at the nearest point of their kind.
absl::Status MeasureCross(const CalibrateOptions& o, const DeviceContext& ctx,
                          std::set<Shape> crosses, planner::DeviceProfile* d) {
  // CrossNetwork runs on the CPU only (dense/cross_network.h): a GPU profile keeps the Linear
  // pricing of its cross layers.
  if (ctx.is_cuda()) return absl::OkStatus();
  // A full-rank and a low-rank point always (the defaults where the configs have none of a kind).
  bool full = false, low = false;
  for (const auto& [b, dim, rank] : crosses) (rank > 0 ? low : full) = true;
  if (!full) crosses.insert({2048, 432, 0});
  if (!low) crosses.insert({2048, 3456, 512});
  for (const auto& [b, dim, rank] : crosses) {
    TESSERA_ASSIGN_OR_RETURN(CrossBench c, CrossBench::Create(ctx, b, dim, rank, 1));
    auto fwd = [&] { return c.Forward(o); };
    auto bwd = [&] { return c.Backward(o); };
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<double> ts,
        InterleavedMedianSeconds(o.seconds_per_point / 4, o.seconds_per_point, {fwd, bwd}));
    const double tf = ts[0], tb = ts[1];
    const double flops = planner::CrossLayerFlops(b, dim, rank);
    d->cross.push_back({b, dim, rank, flops / tf, 2 * flops / tb});
    Progress(o, absl::StrFormat("%s cross layer %dx%d rank %d: fwd %.1f GFLOP/s (%.3f ms), "
                                "bwd %.1f GFLOP/s (%.3f ms)",
                                d->kind, b, dim, rank, flops / tf / 1e9, 1e3 * tf,
                                2 * flops / tb / 1e9, 1e3 * tb));
  }
  return absl::OkStatus();
}

// Each config's dense arch timed whole (CPU): DenseArch::Forward + the loss, and Backward, caches
// evicted before each forward (untimed; in a step the lookup runs there), in the same rounds as
// its parts timed one by one (each Linear layer's forward and backward with the input gradient,
// the dot interaction's or the cross network's forward and backward): the DenseArchPoint scales
// are the whole's median over the sum of the parts' medians. One round holds both, so a drift of
// the machine's speed falls on both alike (timed minutes apart, their ratio moved 0.87-1.37 on a
// VM where either alone moved 1.3x). The layer model prices the parts at the GEMM rates; the
// scale carries what the whole adds (the activations flowing through the LLC, the caches the
// lookup evicted, the small layers' fixed costs).
absl::Status MeasureDenseArch(const CalibrateOptions& o, const DeviceContext& ctx,
                              planner::DeviceProfile* d) {
  if (ctx.is_cuda()) return absl::OkStatus();
  std::vector<float> flush;
  for (const std::string& path : o.configs) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DenseArchRun> run, DenseArchRun::Create(path, ctx));
    const std::string& key = run->key();
    const int64_t b = run->batch();
    bool seen = false;
    for (const planner::DenseArchPoint& a : d->dense_arch) seen |= a.shape == key && a.batch == b;
    if (seen) continue;
    const DenseArchOptions& da = run->options();
    using Op = std::function<absl::StatusOr<double>()>;
    std::vector<Op> fwd_ops, bwd_ops;
    fwd_ops.push_back([&]() -> absl::StatusOr<double> {
      EvictCaches(o, ctx, &flush, o.light_evict_bytes);
      IntervalTimer t(o.cpu_clock);
      TESSERA_RETURN_IF_ERROR(run->ForwardLoss().status());
      return t.Seconds();
    });
    bwd_ops.push_back([&]() -> absl::StatusOr<double> {
      IntervalTimer t(o.cpu_clock);
      TESSERA_RETURN_IF_ERROR(run->Backward());
      return t.Seconds();
    });
    // The parts, as the layer model lists them.
    std::vector<LinearBench> linears;
    int64_t prev = da.num_dense;
    for (int64_t w : da.bottom_mlp) {
      TESSERA_ASSIGN_OR_RETURN(LinearBench l, LinearBench::Create(ctx, b, prev, w));
      linears.push_back(std::move(l));
      prev = w;
    }
    prev = run->arch().interaction_dim();
    for (int64_t w : da.top_mlp) {
      TESSERA_ASSIGN_OR_RETURN(LinearBench l, LinearBench::Create(ctx, b, prev, w));
      linears.push_back(std::move(l));
      prev = w;
    }
    for (LinearBench& l : linears) {
      fwd_ops.push_back([&] { return l.Forward(o); });
      bwd_ops.push_back([&] { return l.Backward(o, true); });
    }
    std::optional<DotBench> dot;
    std::optional<CrossBench> cross;
    if (da.interaction == InteractionType::kDot) {
      TESSERA_ASSIGN_OR_RETURN(dot, DotBench::Create(ctx, b, da.num_embeddings, da.embedding_dim));
      fwd_ops.push_back([&] { return dot->Forward(o); });
      bwd_ops.push_back([&] { return dot->Backward(o); });
    } else if (da.dcn_num_layers > 0) {
      TESSERA_ASSIGN_OR_RETURN(cross, CrossBench::Create(ctx, b, run->arch().interaction_dim(),
                                                         da.dcn_low_rank, da.dcn_num_layers));
      fwd_ops.push_back([&] { return cross->Forward(o); });
      bwd_ops.push_back([&] { return cross->Backward(o); });
    }
    std::vector<Op> ops = fwd_ops;
    ops.insert(ops.end(), bwd_ops.begin(), bwd_ops.end());
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<double> ts,
        InterleavedMedianSeconds(o.seconds_per_point / 4, 3 * o.seconds_per_point, ops));
    const size_t nf = fwd_ops.size();
    double parts_fwd = 0, parts_bwd = 0;
    for (size_t i = 1; i < nf; ++i) parts_fwd += ts[i];
    for (size_t i = nf + 1; i < ts.size(); ++i) parts_bwd += ts[i];
    planner::DenseArchPoint a;
    a.shape = key;
    a.batch = b;
    a.forward_scale = ts[0] / std::max(parts_fwd, 1e-9);
    a.backward_scale = ts[nf] / std::max(parts_bwd, 1e-9);
    a.forward_s = ts[0];
    a.backward_s = ts[nf];
    d->dense_arch.push_back(a);
    Progress(o, absl::StrFormat("%s dense arch %s, batch %d: forward %.2f ms (%.2fx its parts), "
                                "backward %.2f ms (%.2fx)",
                                d->kind, key, b, 1e3 * ts[0], a.forward_scale, 1e3 * ts[nf],
                                a.backward_scale));
  }
  return absl::OkStatus();
}

}  // namespace

// plan_calibrate_internal.h
absl::StatusOr<std::unique_ptr<DenseArchRun>> DenseArchRun::Create(const std::string& config_path,
                                                                    const DeviceContext& ctx) {
  TESSERA_ASSIGN_OR_RETURN(Config c, LoadConfig(config_path));
  std::unique_ptr<DenseArchRun> r(new DenseArchRun());
  const planner::PlanInputs in = PlanInputsFromConfig(c, planner::Topology{});
  const planner::PooledOutput pooled = planner::PooledOutputOf(in);
  r->ctx_ = ctx;
  r->batch_ = std::max<int64_t>(1, c.data.batch_size);
  r->key_ = planner::DenseShapeKey(in.dense, pooled.features, pooled.width);
  r->options_ = DenseOptionsFromConfig(c);
  TESSERA_ASSIGN_OR_RETURN(r->arch_, DenseArch::Create(r->options_, ctx));
  r->arch_->Init(1);
  const int64_t b = r->batch_;
  const int64_t nd = std::max<int64_t>(1, c.model.num_dense);
  r->dense_.resize(b * nd);
  r->emb_.resize(b * pooled.width);
  r->d_emb_.resize(b * pooled.width);
  r->labels_.resize(b);
  r->d_logits_.resize(b);
  for (size_t i = 0; i < r->dense_.size(); ++i) {
    r->dense_[i] = 0.01f * static_cast<float>((i % 11) - 5);
  }
  for (size_t i = 0; i < r->emb_.size(); ++i) r->emb_[i] = 0.01f * static_cast<float>((i % 7) - 3);
  for (int64_t i = 0; i < b; ++i) r->labels_[i] = static_cast<float>(i % 2);
  return r;
}

absl::StatusOr<double> DenseArchRun::ForwardLoss() {
  const float* logits = nullptr;
  TESSERA_RETURN_IF_ERROR(arch_->Forward(dense_.data(), emb_.data(), batch_, &logits));
  return BceWithLogits(ctx_, logits, labels_.data(), batch_, d_logits_.data());
}

absl::Status DenseArchRun::Backward() { return arch_->Backward(d_logits_.data(), d_emb_.data()); }

absl::Status MeasureDense(const CalibrateOptions& o, const DeviceContext& ctx,
                          planner::DeviceProfile* d) {
  std::set<Shape> crosses;
  TESSERA_RETURN_IF_ERROR(MeasureGemm(o, ctx, d, &crosses));
  TESSERA_RETURN_IF_ERROR(MeasureCross(o, ctx, std::move(crosses), d));
  return MeasureDenseArch(o, ctx, d);
}

}  // namespace calibrate_internal
}  // namespace tessera
