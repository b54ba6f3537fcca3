// The twins behind the dense entry points. Each op has a CPU twin in dense/<op>_cpu.cc (the
// reference the tests trust) and a CUDA twin with the same signature in dense/<op>_cuda.cu; the
// dispatching entry point (dense/<op>.cc) picks one by ctx.device and is the only place that
// knows whether the CUDA path is built. Kernels take plain views: pointers into memory of
// ctx.device and sizes; the caller owns memory, checks arguments and keeps pointers alive.
//
// Until a CUDA twin is written its entry point returns Unimplemented for kCuda; the *Cuda
// declarations below fix the signatures the twins must have.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "dense/mlp.h"

namespace tessera::dense_internal {

// ---- Linear (dense/linear_cpu.cc) -------------------------------------------------------------
// y[batch, out] = act(x[batch, in] w[out, in]^T + b): one GEMM, then bias and activation in one
// pass over y.
absl::Status LinearForwardCpu(const DeviceContext& ctx, const float* x, const float* w,
                              const float* b, int64_t batch, int64_t in, int64_t out,
                              Activation act, float* y);
absl::Status LinearForwardCuda(const DeviceContext& ctx, const float* x, const float* w,
                               const float* b, int64_t batch, int64_t in, int64_t out,
                               Activation act, float* y);
// dy[batch, out] becomes dz (ReLU mask applied in place, using y); db = column sums of dz;
// dw[out, in] = dz^T x; dx[batch, in] = dz w when dx is non-null.
absl::Status LinearBackwardCpu(const DeviceContext& ctx, const float* x, const float* w,
                               const float* y, float* dy, int64_t batch, int64_t in, int64_t out,
                               Activation act, float* dw, float* db, float* dx);
absl::Status LinearBackwardCuda(const DeviceContext& ctx, const float* x, const float* w,
                                const float* y, float* dy, int64_t batch, int64_t in,
                                int64_t out, Activation act, float* dw, float* db, float* dx);

// bf16 dense math on the CPU (model.dense_dtype: bf16; dense/linear_cpu.cc): the same contract
// with the three products' inputs rounded to bf16 (round to nearest even) and multiplied by
// oneDNN with fp32 accumulation; bias, ReLU, the mask and db in fp32. The forward keeps the bf16 x and W in `s` for the backward.
// Activations between two bf16 layers stay bf16 (Mlp): a layer with `s->bf16_out` also rounds
// its output to bf16 in the bias pass (s->y, the next layer's rounded input, the same bits as
// rounding the fp32 output there) and the next layer takes it as x16 instead of rounding an fp32 x. The backward's mask
// then reads s->y. Their gradient stays bf16 too (as under torch.autocast, where the gradient
// between two bf16 matmuls is bf16): the next layer's input-gradient product writes it rounded to
// bf16 (oneDNN's bf16 destination) into s->dy, and this layer's mask pass reads it there, masks
// it in place (dz, already the bf16 GEMM input) and sums db from it in fp32/double.
// Unimplemented without oneDNN.
struct Bf16Operands {
  std::vector<uint16_t> x, w, dy, y;
  const uint16_t* x16 = nullptr;  // the last forward's bf16 input (s->x or the caller's x16)
  bool bf16_out = false;
};
// x16 (bf16 [batch, in]) replaces x when non-null. Writes y (fp32) unless s->bf16_out, then s->y.
absl::Status LinearForwardBf16Cpu(const float* x, const uint16_t* x16, const float* w,
                                  const float* b, int64_t batch, int64_t in, int64_t out,
                                  Activation act, float* y, Bf16Operands* s);
// y: the forward's fp32 output (unused when s->bf16_out: the mask reads s->y). dy null: the
// gradient is bf16 in s->dy (s->bf16_out only; see above). dx16 non-null: dx is written there as
// bf16 (the previous bf16 layer's s->dy) instead of to dx.
absl::Status LinearBackwardBf16Cpu(const float* y, float* dy, int64_t batch, int64_t in,
                                   int64_t out, Activation act, float* dw, float* db, float* dx,
                                   uint16_t* dx16, Bf16Operands* s);
// Their CUDA twin (dense/linear_cuda.cu): the operands rounded to bf16 on the device (round to
// nearest even, as the CPU's), the products by cuBLAS with bf16 inputs, fp32 accumulation
// (CUBLAS_COMPUTE_32F) and fp32 outputs; bias, ReLU, its mask and db as LinearForwardCuda /
// LinearBackwardCuda. `s` holds the forward's device bf16 x and W (and the backward's dz), grown
// as needed. Pointers are device memory of ctx.
struct Bf16OperandsCuda {
  Buffer x, w, dy;
};
absl::Status LinearForwardBf16Cuda(const DeviceContext& ctx, const float* x, const float* w,
                                   const float* b, int64_t batch, int64_t in, int64_t out,
                                   Activation act, float* y, Bf16OperandsCuda* s);
absl::Status LinearBackwardBf16Cuda(const DeviceContext& ctx, const float* y, float* dy,
                                    int64_t batch, int64_t in, int64_t out, Activation act,
                                    float* dw, float* db, float* dx, Bf16OperandsCuda* s);

// ---- Dot interaction (dense/interaction_cpu.cc); contract in dense/interaction.h ---------------
absl::Status DotInteractionForwardCpu(const DeviceContext& ctx, const float* bottom,
                                      const float* emb, int64_t batch, int64_t num_embeddings,
                                      int64_t dim, float* out);
absl::Status DotInteractionForwardCuda(const DeviceContext& ctx, const float* bottom,
                                       const float* emb, int64_t batch, int64_t num_embeddings,
                                       int64_t dim, float* out);
absl::Status DotInteractionBackwardCpu(const DeviceContext& ctx, const float* bottom,
                                       const float* emb, const float* d_out, int64_t batch,
                                       int64_t num_embeddings, int64_t dim, float* d_bottom,
                                       float* d_emb);
absl::Status DotInteractionBackwardCuda(const DeviceContext& ctx, const float* bottom,
                                        const float* emb, const float* d_out, int64_t batch,
                                        int64_t num_embeddings, int64_t dim, float* d_bottom,
                                        float* d_emb);
// bf16 embeddings and d_emb (the bf16 hand-off; CPU only): the bits of the fp32 twins given the
// widened emb, with d_emb rounded to nearest even (dense/internal/bf16_rows.h).
absl::Status DotInteractionForwardBf16Cpu(const DeviceContext& ctx, const float* bottom,
                                          const uint16_t* emb, int64_t batch,
                                          int64_t num_embeddings, int64_t dim, float* out);
absl::Status DotInteractionBackwardBf16Cpu(const DeviceContext& ctx, const float* bottom,
                                           const uint16_t* emb, const float* d_out,
                                           int64_t batch, int64_t num_embeddings, int64_t dim,
                                           float* d_bottom, uint16_t* d_emb);

// ---- DCNv2 cross layer (dense/cross_network_cpu.cc) ---------------------------------------------
// One layer's parameters: full rank (rank == 0) uses w [dim, dim]; low rank uses v [rank, dim]
// and u [dim, rank]. b [dim] always.
struct CrossLayerParams {
  int64_t dim = 0;
  int64_t rank = 0;
  const float* w = nullptr;
  const float* v = nullptr;
  const float* u = nullptr;
  const float* b = nullptr;
};
struct CrossLayerGrads {
  float* dw = nullptr;  // full rank
  float* dv = nullptr;  // low rank
  float* du = nullptr;  // low rank
  float* db = nullptr;
};
// inner[batch, dim] = W x_l + b (full) or U (V x_l) + b with low[batch, rank] = V x_l (low rank);
// x_next = x0 * inner + x_l.
absl::Status CrossLayerForwardCpu(const DeviceContext& ctx, const CrossLayerParams& p,
                                  const float* x0, const float* xl, int64_t batch, float* inner,
                                  float* low, float* x_next);
absl::Status CrossLayerForwardCuda(const DeviceContext& ctx, const CrossLayerParams& p,
                                   const float* x0, const float* xl, int64_t batch, float* inner,
                                   float* low, float* x_next);
// g[batch, dim] holds dL/dx_{l+1} on entry and dL/dx_l (this layer's path only) on return.
// dx0 gets g * inner added (or assigned when `assign_dx0`). Writes the layer's grads. Scratch:
// d_inner [batch, dim] and, low rank, d_low [batch, rank].
absl::Status CrossLayerBackwardCpu(const DeviceContext& ctx, const CrossLayerParams& p,
                                   const float* x0, const float* xl, const float* inner,
                                   const float* low, int64_t batch, float* g, bool assign_dx0,
                                   float* dx0, float* d_inner, float* d_low,
                                   const CrossLayerGrads& grads);
absl::Status CrossLayerBackwardCuda(const DeviceContext& ctx, const CrossLayerParams& p,
                                    const float* x0, const float* xl, const float* inner,
                                    const float* low, int64_t batch, float* g, bool assign_dx0,
                                    float* dx0, float* d_inner, float* d_low,
                                    const CrossLayerGrads& grads);

// ---- Row plumbing (dense/row_ops_cpu.cc); dispatchers without suffix in dense/row_ops.cc --------
// out[b] = [a[b] (a_cols), c[b] (c_cols)] for each of `batch` rows.
absl::Status ConcatColumnsCpu(const DeviceContext& ctx, const float* a, int64_t a_cols,
                              const float* c, int64_t c_cols, int64_t batch, float* out);
absl::Status ConcatColumnsCuda(const DeviceContext& ctx, const float* a, int64_t a_cols,
                               const float* c, int64_t c_cols, int64_t batch, float* out);
// The inverse: a[b] = in[b][0, a_cols), c[b] = in[b][a_cols, a_cols + c_cols).
absl::Status SplitColumnsCpu(const DeviceContext& ctx, const float* in, int64_t a_cols,
                             int64_t c_cols, int64_t batch, float* a, float* c);
absl::Status SplitColumnsCuda(const DeviceContext& ctx, const float* in, int64_t a_cols,
                              int64_t c_cols, int64_t batch, float* a, float* c);
// The same with c in bf16 (the DCN input's embeddings in the bf16 hand-off; CPU only): Concat
// widens c as it copies it, Split rounds it to nearest even as it writes it
// (dense/internal/bf16_rows.h).
absl::Status ConcatColumnsBf16Cpu(const DeviceContext& ctx, const float* a, int64_t a_cols,
                                  const uint16_t* c, int64_t c_cols, int64_t batch, float* out);
absl::Status SplitColumnsBf16Cpu(const DeviceContext& ctx, const float* in, int64_t a_cols,
                                 int64_t c_cols, int64_t batch, float* a, uint16_t* c);
// y[i] += x[i] for i < n (elementwise; any thread count gives the same bits).
absl::Status AddInPlaceCpu(const DeviceContext& ctx, const float* x, int64_t n, float* y);
absl::Status AddInPlaceCuda(const DeviceContext& ctx, const float* x, int64_t n, float* y);
// dst[i] = src[i] for i < n.
absl::Status CopyFloatsCpu(const DeviceContext& ctx, const float* src, int64_t n, float* dst);
absl::Status CopyFloatsCuda(const DeviceContext& ctx, const float* src, int64_t n, float* dst);
// Dispatchers of the four fp32 ops above (callers check their arguments).
absl::Status ConcatColumns(const DeviceContext& ctx, const float* a, int64_t a_cols,
                           const float* c, int64_t c_cols, int64_t batch, float* out);
absl::Status SplitColumns(const DeviceContext& ctx, const float* in, int64_t a_cols,
                          int64_t c_cols, int64_t batch, float* a, float* c);
absl::Status AddInPlace(const DeviceContext& ctx, const float* x, int64_t n, float* y);
absl::Status CopyFloats(const DeviceContext& ctx, const float* src, int64_t n, float* dst);
// The bf16 pair's dispatchers: Unimplemented (NoBf16CudaTwin) on a CUDA context.
absl::Status ConcatColumnsBf16(const DeviceContext& ctx, const float* a, int64_t a_cols,
                               const uint16_t* c, int64_t c_cols, int64_t batch, float* out);
absl::Status SplitColumnsBf16(const DeviceContext& ctx, const float* in, int64_t a_cols,
                              int64_t c_cols, int64_t batch, float* a, uint16_t* c);

// ---- Loss (dense/loss_cpu.cc); contract in dense/loss.h -----------------------------------------
absl::StatusOr<double> BceWithLogitsCpu(const DeviceContext& ctx, const float* logits,
                                        const float* labels, int64_t batch, float* d_logits);
absl::StatusOr<double> BceWithLogitsCuda(const DeviceContext& ctx, const float* logits,
                                         const float* labels, int64_t batch, float* d_logits);
absl::Status ScaleGradientCpu(float* d, int64_t n, float scale);
absl::Status ScaleGradientCuda(const DeviceContext& ctx, float* d, int64_t n, float scale);

// ---- Dense optimizers (dense/optimizer_cpu.cc); rules in dense/internal/optimizer_rules.h ------
struct DenseStepScalars;  // optimizer_rules.h
absl::Status SgdStepCpu(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                        const float* g);
absl::Status SgdStepCuda(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                         float* w, const float* g);
absl::Status AdagradStepCpu(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                            float* w, const float* g, float* sum);
absl::Status AdagradStepCuda(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                             float* w, const float* g, float* sum);
absl::Status AdamStepCpu(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                         float* w, const float* g, float* m, float* v);
absl::Status AdamStepCuda(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                          float* w, const float* g, float* m, float* v);

}  // namespace tessera::dense_internal
