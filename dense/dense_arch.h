// DenseArch: everything of a DLRM or DCNv2 model that is not an embedding table: the bottom MLP
// over dense features, the interaction with the pooled embeddings, and the top MLP down to one
// logit. Data-parallel; knows nothing about tables or ranks.
//   DLRM:  bottom (ReLU after every layer) -> dot interaction -> top (no ReLU on the logit)
//   DCNv2: bottom -> concat [bottom, emb] -> cross network -> top
// Parameter names follow PyTorch: bottom_mlp.<i>.*, top_mlp.<i>.*, cross.<l>.*.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer.h"
#include "core/device.h"
#include "dense/cross_network.h"
#include "dense/mlp.h"
#include "dense/parameter.h"

namespace tessera {

enum class InteractionType { kDot, kDcn };

struct DenseArchOptions {
  int64_t num_dense = 13;
  int64_t num_embeddings = 26;        // F
  int64_t embedding_dim = 16;         // d; the bottom MLP's last size must equal it for kDot
  std::vector<int64_t> bottom_mlp;    // e.g. {512, 256, 64}
  std::vector<int64_t> top_mlp;       // e.g. {512, 256, 1}; last must be 1
  InteractionType interaction = InteractionType::kDot;
  int dcn_num_layers = 3;
  int64_t dcn_low_rank = 0;           // 0: full rank
};

class DenseArch {
 public:
  // Returns InvalidArgument naming the field for inconsistent sizes.
  static absl::StatusOr<std::unique_ptr<DenseArch>> Create(const DenseArchOptions& options,
                                                           const DeviceContext& ctx);
  void Init(uint64_t seed);
  // dense [batch, num_dense], emb [batch, F * d] -> logits [batch] (owned by the arch).
  absl::Status Forward(const float* dense, const float* emb, int64_t batch, const float** logits);
  // d_logits [batch] -> d_emb [batch, F * d]; writes every parameter's grad.
  absl::Status Backward(const float* d_logits, float* d_emb);
  // All parameters in a fixed order: bottom, cross, top.
  std::vector<Parameter*> parameters();
  const DenseArchOptions& options() const { return options_; }

 private:
  DenseArch() = default;
  DenseArchOptions options_;
  DeviceContext ctx_;
  std::unique_ptr<Mlp> bottom_, top_;
  std::unique_ptr<CrossNetwork> cross_;
  const float* dense_ = nullptr;
  const float* emb_ = nullptr;
  int64_t batch_ = 0;
  Buffer interaction_out_, d_interaction_, d_top_, d_bottom_;
};

}  // namespace tessera
