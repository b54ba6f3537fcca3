// The dense model's cost (dense_cost.h).
#include "planner/dense_cost.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera::planner {

namespace {

// One Linear layer in -> out for `b` samples: forward and backward seconds. Each GEMM at the
// rate of its own shape (tools/plan_calibrate_device.cc measures the three): forward
// y[b, out] = x W^T (b, out, in), input gradient dx[b, in] (b, in, out), weight gradient
// dW[out, in] (out, in, b).
void LinearCost(const DeviceProfile& d, int64_t b, int64_t in, int64_t out, double* fwd,
                double* bwd) {
  const double flops = 2.0 * b * in * out;
  // Bias + ReLU and its gradient: inside the measured rates when they were timed through the
  // Linear layer (gemm_fused_passes), else passes over [b, out] at the copy rate.
  const double elem = d.gemm_fused_passes ? 0.0 : 3.0 * b * out * 4 / d.copy_bytes_per_s;
  *fwd += flops / GemmFlopsPerSec(d, b, out, in) + elem + d.launch_overhead_s;
  *bwd += flops / GemmFlopsPerSec(d, b, in, out) + flops / GemmFlopsPerSec(d, out, in, b) + elem +
          2 * d.launch_overhead_s;
}

// The layer model alone: the arch's forward and backward from the GEMM, cross and copy rates, no
// dense_arch scale, no optimizer.
DenseCost LayerModelDenseCost(const DeviceProfile& d, const DenseShape& ds, int64_t b,
                              int64_t features, int64_t emb_out_dim) {
  const int64_t f = features;
  double fwd = 0, bwd = 0, act = 0;
  int64_t params = 0;
  int64_t prev = ds.num_dense;
  for (int64_t w : ds.bottom_mlp) {
    LinearCost(d, b, prev, w, &fwd, &bwd);
    params += prev * w + w;
    act += 2.0 * b * w * 4;
    prev = w;
  }
  const int64_t bottom_out = ds.bottom_mlp.empty() ? ds.num_dense : ds.bottom_mlp.back();
  int64_t inter_dim;
  if (ds.interaction == Interaction::kDot) {
    const int64_t v = f + 1;
    inter_dim = ds.embedding_dim + v * (v - 1) / 2;
    // Forward Z = E E^T per sample (shape (v, v, d)); backward d_E = (dZ + dZ^T) E (shape
    // (v, d, v)), the same flops, each at its own shape's rate.
    const double flops = 2.0 * b * v * v * ds.embedding_dim;
    // The interaction's output written (forward) and its gradient read and scattered
    // (backward): inside the rates calibrate times DotInteractionForward / Backward with.
    const double pass = d.gemm_fused_passes ? 0.0 : b * inter_dim * 4.0 / d.copy_bytes_per_s;
    fwd += flops / GemmFlopsPerSec(d, v, v, ds.embedding_dim) + pass;
    bwd += flops / GemmFlopsPerSec(d, v, ds.embedding_dim, v) + 2 * pass;
  } else {
    const int64_t dim = bottom_out + emb_out_dim;
    inter_dim = dim;
    const int64_t r = ds.dcn_low_rank;
    const CrossPoint* timed = NearestCrossPoint(d, b, dim, r);
    for (int l = 0; l < ds.dcn_num_layers; ++l) {
      params += r > 0 ? 2 * dim * r + dim : dim * dim + dim;
      if (timed != nullptr) {
        // The layer timed whole (calibrate): its GEMM flops at the nearest cross shape's rates.
        const double flops = CrossLayerFlops(b, dim, r);
        fwd += flops / timed->forward_flops_per_s;
        bwd += 2 * flops / timed->backward_flops_per_s;
      } else {
        if (r > 0) {
          LinearCost(d, b, dim, r, &fwd, &bwd);
          LinearCost(d, b, r, dim, &fwd, &bwd);
        } else {
          LinearCost(d, b, dim, dim, &fwd, &bwd);
        }
        // x0 * (W x + b) + x and its gradient: passes over [b, dim] of their own (not Linear's).
        const double cross = 3.0 * b * dim * 4 / d.copy_bytes_per_s;
        fwd += cross;
        bwd += cross;
      }
      act += 3.0 * b * dim * 4;
    }
  }
  act += 2.0 * b * inter_dim * 4 + 2.0 * b * emb_out_dim * 4;
  prev = inter_dim;
  for (int64_t w : ds.top_mlp) {
    LinearCost(d, b, prev, w, &fwd, &bwd);
    params += prev * w + w;
    act += 2.0 * b * w * 4;
    prev = w;
  }
  DenseCost c;
  c.forward_s = fwd;
  c.backward_s = bwd;
  c.params = params;
  c.activation_bytes = act;
  return c;
}

}  // namespace

std::string DenseShapeKey(const DenseShape& ds, int64_t features, int64_t emb_out_dim) {
  std::string key = absl::StrCat(ds.interaction == Interaction::kDot ? "dot" : "dcn", " bottom ",
                                 ds.num_dense, "-", absl::StrJoin(ds.bottom_mlp, "-"), " f",
                                 features, " d", ds.embedding_dim, " e", emb_out_dim);
  if (ds.interaction == Interaction::kDcn) {
    absl::StrAppend(&key, " cross ", ds.dcn_num_layers, "r", ds.dcn_low_rank);
  }
  absl::StrAppend(&key, " top ", absl::StrJoin(ds.top_mlp, "-"));
  return key;
}

std::optional<KeyedDenseShape> ParseDenseShapeKey(const std::string& key) {
  std::vector<std::string> w = absl::StrSplit(key, ' ', absl::SkipEmpty());
  KeyedDenseShape k;
  size_t i = 0;
  auto ints = [](const std::string& s, std::vector<int64_t>* out) {
    for (absl::string_view part : absl::StrSplit(s, '-', absl::SkipEmpty())) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(part, &v) || v <= 0) return false;
      out->push_back(v);
    }
    return true;
  };
  auto number = [](const std::string& s, char tag, int64_t* out) {
    return s.size() > 1 && s[0] == tag && absl::SimpleAtoi(s.substr(1), out) && *out > 0;
  };
  if (w.size() < 7 || (w[0] != "dot" && w[0] != "dcn") || w[1] != "bottom") return std::nullopt;
  k.shape.interaction = w[0] == "dot" ? Interaction::kDot : Interaction::kDcn;
  std::vector<int64_t> bottom;
  if (!ints(w[2], &bottom) || bottom.empty()) return std::nullopt;
  k.shape.num_dense = bottom[0];
  k.shape.bottom_mlp.assign(bottom.begin() + 1, bottom.end());
  int64_t d = 0;
  if (!number(w[3], 'f', &k.features) || !number(w[4], 'd', &d) ||
      !number(w[5], 'e', &k.emb_out_dim)) {
    return std::nullopt;
  }
  k.shape.embedding_dim = d;
  i = 6;
  k.shape.dcn_num_layers = 0;
  if (k.shape.interaction == Interaction::kDcn) {
    if (i + 1 >= w.size() || w[i] != "cross") return std::nullopt;
    const std::vector<std::string> lr = absl::StrSplit(w[i + 1], 'r');
    int64_t layers = 0, rank = -1;
    if (lr.size() != 2 || !absl::SimpleAtoi(lr[0], &layers) || !absl::SimpleAtoi(lr[1], &rank) ||
        layers < 0 || rank < 0) {
      return std::nullopt;
    }
    k.shape.dcn_num_layers = static_cast<int>(layers);
    k.shape.dcn_low_rank = rank;
    i += 2;
  }
  if (i + 2 != w.size() || w[i] != "top" || !ints(w[i + 1], &k.shape.top_mlp)) return std::nullopt;
  return k;
}

double DenseMacsPerSample(const DenseShape& ds, int64_t features, int64_t emb_out_dim) {
  double macs = 0;
  int64_t prev = ds.num_dense;
  for (int64_t w : ds.bottom_mlp) macs += static_cast<double>(prev) * w, prev = w;
  const int64_t bottom_out = ds.bottom_mlp.empty() ? ds.num_dense : ds.bottom_mlp.back();
  int64_t inter_dim;
  if (ds.interaction == Interaction::kDot) {
    const double v = static_cast<double>(features + 1);
    macs += v * v * static_cast<double>(ds.embedding_dim);
    inter_dim = ds.embedding_dim + (features + 1) * features / 2;
  } else {
    const double dim = static_cast<double>(bottom_out + emb_out_dim);
    const double r = static_cast<double>(ds.dcn_low_rank);
    macs += ds.dcn_num_layers * (r > 0 ? 2 * dim * r : dim * dim);
    inter_dim = bottom_out + emb_out_dim;
  }
  prev = inter_dim;
  for (int64_t w : ds.top_mlp) macs += static_cast<double>(prev) * w, prev = w;
  return macs;
}

void DenseArchScale(const DeviceProfile& d, const std::string& key, double* forward,
                    double* backward) {
  *forward = *backward = 1;
  // The same shape: its own point (the largest batch timed when several).
  const DenseArchPoint* exact = nullptr;
  for (const DenseArchPoint& a : d.dense_arch) {
    if (a.shape == key && (exact == nullptr || a.batch > exact->batch)) exact = &a;
  }
  if (exact != nullptr) {
    *forward = exact->forward_scale;
    *backward = exact->backward_scale;
    return;
  }
  // Another shape: the median of the points of its interaction kind (a DLRM's parts are its
  // layers and the dot interaction, a DCNv2's its layers and the cross network), else of all.
  const std::string kind = key.substr(0, key.find(' '));
  std::vector<double> f, b;
  for (const DenseArchPoint& a : d.dense_arch) {
    if (a.shape.substr(0, a.shape.find(' ')) != kind) continue;
    f.push_back(a.forward_scale);
    b.push_back(a.backward_scale);
  }
  if (f.empty()) {
    for (const DenseArchPoint& a : d.dense_arch) {
      f.push_back(a.forward_scale);
      b.push_back(a.backward_scale);
    }
  }
  if (f.empty()) return;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  *forward = median(f);
  *backward = median(b);
}

const DenseArchPoint* TimedDenseArch(const DeviceProfile& d, const std::string& key, int64_t b) {
  const DenseArchPoint* best = nullptr;
  auto dist = [b](const DenseArchPoint& a) {
    return std::abs(std::log(static_cast<double>(a.batch) / static_cast<double>(b)));
  };
  for (const DenseArchPoint& a : d.dense_arch) {
    if (a.shape != key || a.forward_s <= 0 || a.backward_s <= 0) continue;
    if (best == nullptr || dist(a) < dist(*best)) best = &a;
  }
  return best;
}

bool TimedDenseArchRatio(const DeviceProfile& d, const DenseShape& ds, int64_t features,
                         int64_t emb_out_dim, double* forward, double* backward) {
  // Each timed point of the shape's interaction kind: its whole times over the layer model of
  // its own shape and batch, at its MACs per sample.
  struct Ratio {
    double x, fwd, bwd;
  };
  std::vector<Ratio> r;
  for (const DenseArchPoint& a : d.dense_arch) {
    if (a.forward_s <= 0 || a.backward_s <= 0) continue;
    const std::optional<KeyedDenseShape> k = ParseDenseShapeKey(a.shape);
    if (!k.has_value() || k->shape.interaction != ds.interaction) continue;
    const DenseCost lm = LayerModelDenseCost(d, k->shape, a.batch, k->features, k->emb_out_dim);
    if (!(lm.forward_s > 0) || !(lm.backward_s > 0)) continue;
    r.push_back({std::log(DenseMacsPerSample(k->shape, k->features, k->emb_out_dim)),
                 a.forward_s / lm.forward_s, a.backward_s / lm.backward_s});
  }
  if (r.empty()) return false;
  std::sort(r.begin(), r.end(), [](const Ratio& a, const Ratio& b) { return a.x < b.x; });
  const double x = std::log(DenseMacsPerSample(ds, features, emb_out_dim));
  // Linear in log(MACs per sample) between the two points around x, held beyond the ends.
  if (x <= r.front().x) {
    *forward = r.front().fwd, *backward = r.front().bwd;
  } else if (x >= r.back().x) {
    *forward = r.back().fwd, *backward = r.back().bwd;
  } else {
    size_t hi = 1;
    while (r[hi].x < x) ++hi;
    const Ratio& a = r[hi - 1];
    const Ratio& b = r[hi];
    const double t = b.x > a.x ? (x - a.x) / (b.x - a.x) : 0;
    *forward = a.fwd + t * (b.fwd - a.fwd);
    *backward = a.bwd + t * (b.bwd - a.bwd);
  }
  return true;
}

DenseCost ComputeDenseCost(const DeviceProfile& d, const DenseShape& ds, int64_t b,
                           int64_t features, int64_t emb_out_dim) {
  DenseCost c = LayerModelDenseCost(d, ds, b, features, emb_out_dim);
  const std::string key = DenseShapeKey(ds, features, emb_out_dim);
  if (const DenseArchPoint* timed = TimedDenseArch(d, key, b); timed != nullptr) {
    // The shape's own whole times, carried to b samples by the layer model's ratio.
    double fwd = timed->forward_s, bwd = timed->backward_s;
    if (timed->batch != b) {
      const DenseCost at = LayerModelDenseCost(d, ds, timed->batch, features, emb_out_dim);
      if (at.forward_s > 0) fwd *= c.forward_s / at.forward_s;
      if (at.backward_s > 0) bwd *= c.backward_s / at.backward_s;
    }
    c.forward_s = fwd;
    c.backward_s = bwd;
  } else {
    double fwd_scale = 1, bwd_scale = 1;
    if (!TimedDenseArchRatio(d, ds, features, emb_out_dim, &fwd_scale, &bwd_scale)) {
      DenseArchScale(d, key, &fwd_scale, &bwd_scale);
    }
    c.forward_s *= fwd_scale;
    c.backward_s *= bwd_scale;
  }
  // Dense optimizer: read-modify-write of weights, gradients and state.
  c.backward_s += c.params * 4.0 * (3 + 2 * ds.optimizer_state_floats) / d.copy_bytes_per_s;
  return c;
}

}  // namespace tessera::planner
