// DenseArch: everything of a DLRM or DCNv2 model that is not an embedding table: the bottom MLP
// over dense features, the interaction with the pooled embeddings, and the top MLP down to one
// logit. Data-parallel; knows nothing about tables or ranks.
//   DLRM:  bottom (ReLU after every layer) -> dot interaction -> top (no ReLU on the logit)
//   DCNv2: bottom -> concat [bottom, emb] -> cross network -> top
// Parameter names follow PyTorch: bottom_mlp.<i>.*, top_mlp.<i>.*, cross.<l>.*.
// The top MLP's input is DotInteractionOutputDim(F, d) wide for kDot and bottom_mlp.back() + F d
// (the cross network's width) for kDcn. Backward is hand-written: top -> interaction (or cross
// network, then the split of its input gradient) -> bottom; no autograd.
// Owns its parameters and activation buffers (grown to the largest batch seen, so steady-state
// steps do not allocate). The inputs of Forward must stay alive until Backward. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/enum_names.h"
#include "dense/cross_network.h"
#include "dense/mlp.h"
#include "dense/parameter.h"

namespace tessera {

enum class InteractionType { kDot, kDcn };
// The config's model.type spells them "dlrm" (dot interaction) and "dcnv2".
inline constexpr EnumName<InteractionType> kInteractionTypeNames[] = {
    {InteractionType::kDot, "dlrm"}, {InteractionType::kDcn, "dcnv2"}};
inline const char* InteractionTypeName(InteractionType t) {
  return NameIn(kInteractionTypeNames, t);
}
inline absl::StatusOr<InteractionType> ParseInteractionType(const std::string& name) {
  return ParseIn(kInteractionTypeNames, name, "model type");
}

struct DenseArchOptions {
  int64_t num_dense = 13;
  int64_t num_embeddings = 26;        // F
  int64_t embedding_dim = 16;         // d; the bottom MLP's last size must equal it for kDot
  std::vector<int64_t> bottom_mlp;    // e.g. {512, 256, 64}
  std::vector<int64_t> top_mlp;       // e.g. {512, 256, 1}; last must be 1
  InteractionType interaction = InteractionType::kDot;
  int dcn_num_layers = 3;
  int64_t dcn_low_rank = 0;           // 0: full rank
  // GEMM inputs of the bottom and top MLPs (mlp.h): kBf16 = bf16 with fp32 accumulation and fp32
  // master weights (CPU: oneDNN; CUDA: cuBLAS). The interaction and cross network stay fp32.
  DenseDtype dense_dtype = DenseDtype::kFp32;
};

// What a DenseArch of some options holds, in f32 elements, counted before anything is
// allocated, so a caller can compare it with the memory it has (trainer/internal/memory_check.h).
struct DenseArchFootprint {
  struct Part {
    int64_t params = 0;                  // weights + biases
    int64_t activations_per_sample = 0;  // its Forward/Backward buffers per sample of a batch
  };
  Part bottom_mlp;
  Part cross;        // the cross network (kDcn; zeros for kDot)
  Part top_mlp;
  Part interaction;  // the interaction's output and gradients (no parameters)

  int64_t params() const { return bottom_mlp.params + cross.params + top_mlp.params; }
  int64_t activations_per_sample() const {
    return bottom_mlp.activations_per_sample + cross.activations_per_sample +
           top_mlp.activations_per_sample + interaction.activations_per_sample;
  }
};

class DenseArch {
 public:
  // Validate's errors; InvalidArgument naming the field when a count reaches kMaxFootprint.
  // Every count, params() and activations_per_sample() are below kMaxFootprint, so a caller may
  // multiply them by up to 64 (bytes per element, batch factors aside) without overflow.
  static constexpr int64_t kMaxFootprint = int64_t{1} << 56;
  [[nodiscard]] static absl::StatusOr<DenseArchFootprint> Footprint(
      const DenseArchOptions& options);
  // Returns InvalidArgument naming the field for inconsistent sizes, and Unimplemented for a
  // CUDA context in a build without the CUDA path, or dense_dtype kBf16 on a CPU context in a
  // build without oneDNN.
  static absl::StatusOr<std::unique_ptr<DenseArch>> Create(const DenseArchOptions& options,
                                                           const DeviceContext& ctx);
  // Create's checks alone.
  static absl::Status Validate(const DenseArchOptions& options);
  // Weights as each layer documents (Linear: DLRM's normal init; cross: Xavier normal), drawn from
  // (seed, parameter name), so the same seed gives the same model on any rank or device.
  void Init(uint64_t seed);
  // dense [batch, num_dense], emb [batch, F * d] -> logits [batch] (owned by the arch, valid until
  // the next Forward). Errors: InvalidArgument (null pointers, batch < 1), ResourceExhausted,
  // Unimplemented on kCuda in a build without CUDA (NoCudaPath).
  absl::Status Forward(const float* dense, const float* emb, int64_t batch, const float** logits);
  // d_logits [batch] -> d_emb [batch, F * d] (overwritten); writes every parameter's grad
  // (overwritten, not accumulated). Uses the inputs of the last Forward (FailedPrecondition
  // without one).
  absl::Status Backward(const float* d_logits, float* d_emb);
  // The bf16 hand-off from tables with output_dtype bf16: emb [batch, F * d] bf16, widened as
  // the interaction reads it (kDot: inside its kernels, a sample at a time; kDcn: as the concat
  // [bottom, emb] copies it into the cross network's input), and BackwardBf16 writes d_emb in
  // bf16, rounded to nearest even as the interaction (kDot) or the split of the cross network's
  // input gradient (kDcn) writes it. The logits, every parameter grad and d_emb have the bits
  // of Forward fed the widened emb and Backward's d_emb rounded, for any thread count.
  // Forward's and Backward's errors; Unimplemented on kCuda. Backward after ForwardBf16, or
  // BackwardBf16 after Forward, is FailedPrecondition (d_emb comes in the emb's dtype).
  absl::Status ForwardBf16(const float* dense, const uint16_t* emb, int64_t batch,
                           const float** logits);
  absl::Status BackwardBf16(const float* d_logits, uint16_t* d_emb);
  // All parameters in a fixed order: bottom, cross, top.
  std::vector<Parameter*> parameters();
  // Optional: Backward calls `ready` with each parameter as soon as its grad is final: the top
  // MLP's layers (last first, weight then bias), the cross network's (last layer first), then
  // the bottom MLP's. Empty (default): no calls.
  void set_grad_ready_callback(GradReadyCallback ready);
  const DenseArchOptions& options() const { return options_; }
  // Width of the top MLP's input.
  int64_t interaction_dim() const;

 private:
  DenseArch() = default;
  // Forward / Backward with exactly one of emb (fp32) and emb16 (bf16) non-null (d_emb alike).
  absl::Status ForwardWith(const char* op, const float* dense, const float* emb,
                           const uint16_t* emb16, int64_t batch, const float** logits);
  absl::Status BackwardWith(const char* op, const float* d_logits, float* d_emb,
                            uint16_t* d_emb16);
  DenseArchOptions options_;
  DeviceContext ctx_;
  std::unique_ptr<Mlp> bottom_, top_;
  std::unique_ptr<CrossNetwork> cross_;
  const float* dense_ = nullptr;
  const float* emb_ = nullptr;
  const uint16_t* emb16_ = nullptr;  // the last Forward's bf16 emb (ForwardBf16), else null
  const float* bottom_out_ = nullptr;
  int64_t batch_ = 0;
  Buffer interaction_out_, d_interaction_, d_top_, d_bottom_;
  Buffer d_cross_;  // kDcn: gradient of the cross network's input [batch, cross dim]
};

}  // namespace tessera
