// Binary cross-entropy with logits, mean over the batch (PyTorch's BCEWithLogitsLoss):
//   loss = mean_b [ max(z, 0) - z y + log(1 + exp(-|z|)) ]      (numerically stable form)
//   dloss/dz_b = (sigmoid(z_b) - y_b) / batch
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/device.h"

namespace tessera {

// Returns the mean loss (accumulated in double, in fixed blocks, so the bits do not depend on the
// thread count) and, when d_logits is non-null, writes the gradient of the mean loss. Labels may
// be soft (any value in [0, 1]). Errors: InvalidArgument for null logits/labels, batch < 1, or a
// label outside [0, 1] (naming its index and value); Unimplemented for kCuda for now.
absl::StatusOr<double> BceWithLogits(const DeviceContext& ctx, const float* logits,
                                     const float* labels, int64_t batch, float* d_logits);

// d_logits[i] *= scale for i in [0, batch), in ctx's memory (a step over several ranks rescales
// its local mean's gradient to the global mean's). The same float multiply on both twins, so the
// same bits. InvalidArgument for null d_logits with batch > 0 or batch < 0.
absl::Status ScaleGradient(const DeviceContext& ctx, float* d_logits, int64_t batch, float scale);

}  // namespace tessera
