// CPU twin of BCE with logits. The batch is cut into fixed blocks of kBlock samples (independent
// of the thread count); each block's loss is summed in double by one thread and the block sums
// are added in block order, so the loss has the same bits for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {

constexpr int64_t kBlock = 1024;

struct BlockResult {
  double loss = 0.0;
  int64_t first_bad_label = -1;
};

}  // namespace

absl::StatusOr<double> BceWithLogitsCpu(const DeviceContext& ctx, const float* logits,
                                        const float* labels, int64_t batch, float* d_logits) {
  const int64_t blocks = (batch + kBlock - 1) / kBlock;
  thread_local std::vector<BlockResult> results;  // grows only: no allocation per step
  if (static_cast<int64_t>(results.size()) < blocks) results.resize(blocks);
  // Worker threads must write the calling thread's array (a thread_local named inside the lambda
  // would be their own).
  BlockResult* block_results = results.data();
  const double inv_batch = 1.0 / static_cast<double>(batch);
  // Four blocks (~4 K exp + log1p, ~100 us) at least per thread: a batch of 2048 stays on one.
  ParallelFor(blocks, 4, [&](int64_t k0, int64_t k1, int) {
    for (int64_t k = k0; k < k1; ++k) {
      BlockResult res;
      for (int64_t i = k * kBlock, end = std::min(batch, (k + 1) * kBlock); i < end; ++i) {
        const double z = logits[i], y = labels[i];
        if (!(y >= 0.0 && y <= 1.0) && res.first_bad_label < 0) res.first_bad_label = i;
        // max(z, 0) - z y + log(1 + exp(-|z|)): exp never overflows, and log1p keeps the tiny
        // tail for large |z|; the sigmoid is formed from the same e without overflow.
        const double e = std::exp(-std::fabs(z));
        res.loss += std::max(z, 0.0) - z * y + std::log1p(e);
        if (d_logits != nullptr) {
          const double sig = z >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
          d_logits[i] = static_cast<float>((sig - y) * inv_batch);
        }
      }
      block_results[k] = res;
    }
  });
  double total = 0.0;
  for (int64_t k = 0; k < blocks; ++k) {
    if (block_results[k].first_bad_label >= 0) {
      const int64_t i = block_results[k].first_bad_label;
      return absl::InvalidArgumentError(absl::StrCat("BceWithLogits: labels[", i, "] = ",
                                                     labels[i], " is outside [0, 1]"));
    }
    total += block_results[k].loss;
  }
  return total * inv_batch;
}

absl::Status ScaleGradientCpu(float* d, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) d[i] *= scale;
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
