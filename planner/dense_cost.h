// The dense model's share of the estimator (estimator.h): forward and backward seconds of the
// bottom MLP, the interaction and the top MLP for one rank's batch, the dense parameter count
// and the activation bytes, from the device profile's GEMM and copy rates. It does not depend on
// the placement: every rank runs the whole dense model on its own B samples.
//   Linear in -> out, B samples: forward GEMM (B, out, in), input gradient (B, in, out), weight
//     gradient (out, in, B), each at its own shape's rate (GemmFlopsPerSec), plus bias, ReLU
//     and its gradient (3 B out x 4 bytes at the copy rate) and one launch overhead per GEMM
//   dot interaction over F + 1 vectors of d: forward Z = E E^T (shape (F+1, F+1, d)), backward
//     (dZ + dZ^T) E (shape (F+1, d, F+1)), the same flops; plus the packing of the triangle
//   DCNv2: per cross layer its GEMM flops at the profile's nearest cross point's rates (the layer
//     timed whole); without cross points a Linear dim -> dim (or dim -> r -> dim when low-rank)
//     plus the combine passes at the copy rate
//   the arch timed whole: a shape calibrate timed (a dense_arch point with forward_s and
//     backward_s) is priced by those times, carried to the run's batch by the layer model's
//     ratio when the point's batch differs (the point nearest in batch); any other shape by the
//     layer model times the timed points' whole-over-layer-model ratio of its interaction kind,
//     interpolated in log(MACs per sample) (TimedDenseArchRatio); without timed points, the
//     profile's dense_arch scale (the arch over its parts, DenseArchPoint) of its own shape,
//     else the median scale of the points of the same interaction kind (of all points when its
//     kind has none), 1 without points
//   dense optimizer: read-modify-write of weights, gradients and state at the copy rate
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "planner/inputs.h"
#include "planner/profile.h"

namespace tessera::planner {

struct DenseCost {
  double forward_s = 0;
  double backward_s = 0;  // the dense optimizer step included
  int64_t params = 0;
  double activation_bytes = 0;  // B samples' activations and their gradients
};

// `features`: embedding bags per sample (all tables); `emb_out_dim`: the pooled embedding
// output's width per sample (sum over features of their table's dim); `b`: samples per rank.
DenseCost ComputeDenseCost(const DeviceProfile& d, const DenseShape& ds, int64_t b,
                           int64_t features, int64_t emb_out_dim);

// The dense_arch key of a shape: interaction, bottom MLP, features, d, pooled width, cross
// layers, top MLP ("dot bottom 13-512-256-64 f8 d64 e512 top 512-256-1").
std::string DenseShapeKey(const DenseShape& ds, int64_t features, int64_t emb_out_dim);

// The shape, features and pooled width a DenseShapeKey names; nullopt for a key it cannot read.
struct KeyedDenseShape {
  DenseShape shape;
  int64_t features = 0;
  int64_t emb_out_dim = 0;
};
std::optional<KeyedDenseShape> ParseDenseShapeKey(const std::string& key);

// Multiply-adds per sample of the arch's forward (its Linear layers and the interaction).
double DenseMacsPerSample(const DenseShape& ds, int64_t features, int64_t emb_out_dim);

// For a shape calibrate did not time: the timed points of its interaction kind, each its whole
// times over the layer model of its own shape, interpolated linearly in log(MACs per sample)
// (held beyond the ends); false when the profile has no such point. The layer model's rates
// come from each layer timed alone with warm caches, which small layers profit from most:
// skewed's 64-wide arch ran 1.4x its layer model whole, kaggle's 512-wide 1.0x.
bool TimedDenseArchRatio(const DeviceProfile& d, const DenseShape& ds, int64_t features,
                         int64_t emb_out_dim, double* forward, double* backward);

// The dense_arch point with `key`'s own whole times nearest in batch to `b`; nullptr when none.
const DenseArchPoint* TimedDenseArch(const DeviceProfile& d, const std::string& key, int64_t b);

// The forward and backward scales ComputeDenseCost applies for `key` when neither the shape nor
// its kind has whole times (see above).
void DenseArchScale(const DeviceProfile& d, const std::string& key, double* forward,
                    double* backward);

}  // namespace tessera::planner
