// The dense CUDA twins against the CPU twins on the same random inputs: Linear (forward, both
// backward GEMMs, bias gradient, ReLU mask), dot interaction, DCNv2 cross network (full and low
// rank), BCE with logits, the three dense optimizers, the row plumbing, and whole DenseArch
// steps (DLRM and DCNv2). Device outputs are poisoned with NaN first.
//
// Tolerances: cuBLAS and OpenBLAS sum GEMM products in different orders (blocking, FMA), so
// GEMM-derived values agree to ~k * 2^-24 relative to the size of the terms: for k <= 512 and
// O(1) values rtol 1e-4 with atol 1e-5 (5e-4 / 5e-5 through several stacked layers). Elementwise
// ops (optimizers, plumbing) run the same formula: rtol 1e-6, atol 1e-7. The loss is a double
// sum: 1e-9 relative.
#include <memory>
#include <vector>

#include "dense/cross_network.h"
#include "dense/dense_arch.h"
#include "dense/interaction.h"
#include "dense/internal/kernels.h"
#include "dense/loss.h"
#include "dense/mlp.h"
#include "dense/optimizer.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_testing::CudaTest;
using cuda_testing::ExpectNear;
using cuda_testing::Poisoned;
using cuda_testing::RandomFloats;
using cuda_testing::ToDevice;
using cuda_testing::ToHost;

constexpr double kGemmRtol = 1e-4, kGemmAtol = 1e-5;
constexpr double kDeepRtol = 5e-4, kDeepAtol = 5e-5;
constexpr double kElemRtol = 1e-6, kElemAtol = 1e-7;

class DenseCuda : public CudaTest {};

TEST_F(DenseCuda, LinearForwardBackwardMatchCpu) {
  for (Activation act : {Activation::kRelu, Activation::kNone}) {
    const int64_t batch = 300, in = 70, out = 45;  // not multiples of 32: tile edges
    const auto x = RandomFloats(batch * in, 1), w = RandomFloats(out * in, 2),
               b = RandomFloats(out, 3), dy = RandomFloats(batch * out, 4);
    std::vector<float> y(batch * out), dy_c = dy, dw(out * in), db(out), dx(batch * in);
    ASSERT_TRUE(
        LinearForward(cpu(), x.data(), w.data(), b.data(), batch, in, out, act, y.data()).ok());
    ASSERT_TRUE(LinearBackward(cpu(), x.data(), w.data(), y.data(), dy_c.data(), batch, in, out,
                               act, dw.data(), db.data(), dx.data())
                    .ok());
    Buffer gx = ToDevice(x), gw = ToDevice(w), gb = ToDevice(b), gy = Poisoned<float>(batch * out),
           gdy = ToDevice(dy), gdw = Poisoned<float>(out * in), gdb = Poisoned<float>(out),
           gdx = Poisoned<float>(batch * in);
    ASSERT_TRUE(LinearForward(gpu(), gx.data<float>(), gw.data<float>(), gb.data<float>(), batch,
                              in, out, act, gy.data<float>())
                    .ok());
    ASSERT_TRUE(LinearBackward(gpu(), gx.data<float>(), gw.data<float>(), gy.data<float>(),
                               gdy.data<float>(), batch, in, out, act, gdw.data<float>(),
                               gdb.data<float>(), gdx.data<float>())
                    .ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    ExpectNear(ToHost<float>(gy, batch * out), y, kGemmRtol, kGemmAtol, "y");
    ExpectNear(ToHost<float>(gdy, batch * out), dy_c, kGemmRtol, kGemmAtol, "dz");
    ExpectNear(ToHost<float>(gdw, out * in), dw, kGemmRtol, kGemmAtol, "dw");
    ExpectNear(ToHost<float>(gdb, out), db, kGemmRtol, kGemmAtol, "db");
    ExpectNear(ToHost<float>(gdx, batch * in), dx, kGemmRtol, kGemmAtol, "dx");
  }
}

TEST_F(DenseCuda, BiasGradientOfALongNarrowLayerIsDeterministic) {
  // out = 1 (the logit layer) over many chunks: the chunked column sum, twice, same bits.
  const int64_t batch = 70000, in = 8, out = 1;
  const auto x = RandomFloats(batch * in, 5), w = RandomFloats(out * in, 6),
             dy = RandomFloats(batch * out, 7);
  std::vector<float> dy_c = dy, dw(out * in), db(out), first;
  ASSERT_TRUE(LinearBackward(cpu(), x.data(), w.data(), nullptr, dy_c.data(), batch, in, out,
                             Activation::kNone, dw.data(), db.data(), nullptr)
                  .ok());
  Buffer gx = ToDevice(x), gw = ToDevice(w), gdw = Poisoned<float>(in);
  for (int run = 0; run < 2; ++run) {
    Buffer gdy = ToDevice(dy), gdb = Poisoned<float>(1);
    ASSERT_TRUE(LinearBackward(gpu(), gx.data<float>(), gw.data<float>(), nullptr,
                               gdy.data<float>(), batch, in, out, Activation::kNone,
                               gdw.data<float>(), gdb.data<float>(), nullptr)
                    .ok());
    const std::vector<float> got = ToHost<float>(gdb, 1);
    ExpectNear(got, db, 1e-6, 1e-6, "db");
    if (run == 0) first = got;
    EXPECT_EQ(first[0], got[0]);
  }
}

TEST_F(DenseCuda, DotInteractionMatchesCpu) {
  const int64_t batch = 257, nf = 26, d = 16;
  const int64_t out_dim = DotInteractionOutputDim(nf, d);
  const auto bottom = RandomFloats(batch * d, 1), emb = RandomFloats(batch * nf * d, 2),
             d_out = RandomFloats(batch * out_dim, 3);
  std::vector<float> out(batch * out_dim), d_bottom(batch * d), d_emb(batch * nf * d);
  ASSERT_TRUE(
      DotInteractionForward(cpu(), bottom.data(), emb.data(), batch, nf, d, out.data()).ok());
  ASSERT_TRUE(DotInteractionBackward(cpu(), bottom.data(), emb.data(), d_out.data(), batch, nf, d,
                                     d_bottom.data(), d_emb.data())
                  .ok());
  Buffer gb = ToDevice(bottom), ge = ToDevice(emb), gdo = ToDevice(d_out),
         go = Poisoned<float>(batch * out_dim), gdb = Poisoned<float>(batch * d),
         gde = Poisoned<float>(batch * nf * d);
  ASSERT_TRUE(DotInteractionForward(gpu(), gb.data<float>(), ge.data<float>(), batch, nf, d,
                                    go.data<float>())
                  .ok());
  ASSERT_TRUE(DotInteractionBackward(gpu(), gb.data<float>(), ge.data<float>(), gdo.data<float>(),
                                     batch, nf, d, gdb.data<float>(), gde.data<float>())
                  .ok());
  ASSERT_TRUE(CudaSynchronize(gpu()).ok());
  ExpectNear(ToHost<float>(go, batch * out_dim), out, kGemmRtol, kGemmAtol, "out");
  ExpectNear(ToHost<float>(gdb, batch * d), d_bottom, kGemmRtol, kGemmAtol, "d_bottom");
  ExpectNear(ToHost<float>(gde, batch * nf * d), d_emb, kGemmRtol, kGemmAtol, "d_emb");
}

void ExpectParamsNear(const std::vector<Parameter*>& got, const std::vector<Parameter*>& want,
                      double rtol, double atol, bool grads) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const Buffer& g = grads ? got[i]->grad : got[i]->value;
    const Buffer& w = grads ? want[i]->grad : want[i]->value;
    const std::vector<float> wv(w.data<float>(), w.data<float>() + w.numel());
    ExpectNear(ToHost<float>(g, g.numel()), wv, rtol, atol, want[i]->name + (grads ? ".grad" : ""));
  }
}

TEST_F(DenseCuda, CrossNetworkMatchesCpu) {
  for (int64_t rank : {int64_t{0}, int64_t{8}}) {
    CrossNetworkOptions o;
    o.in_dim = 40;
    o.num_layers = 3;
    o.low_rank = rank;
    CrossNetwork c_cpu("cross", o, cpu()), c_gpu("cross", o, gpu());
    c_cpu.Init(11);
    c_gpu.Init(11);
    // Non-zero biases (Init zeroes them), the same on both.
    auto pc = c_cpu.parameters(), pg = c_gpu.parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      if (pc[i]->value.shape().size() != 1) continue;
      const auto b = RandomFloats(pc[i]->value.numel(), 20 + i, -0.3f, 0.3f);
      std::copy(b.begin(), b.end(), pc[i]->value.data<float>());
      ASSERT_TRUE(CudaMemcpy(pg[i]->value.raw(), b.data(), sizeof(float) * b.size()).ok());
    }
    const int64_t batch = 333;
    const auto x0 = RandomFloats(batch * o.in_dim, 1), dy = RandomFloats(batch * o.in_dim, 2);
    const float* y = nullptr;
    std::vector<float> dy_c = dy, dx0(batch * o.in_dim);
    ASSERT_TRUE(c_cpu.Forward(x0.data(), batch, &y).ok());
    const std::vector<float> y_cpu(y, y + batch * o.in_dim);
    ASSERT_TRUE(c_cpu.Backward(dy_c.data(), dx0.data()).ok());
    Buffer gx0 = ToDevice(x0), gdy = ToDevice(dy), gdx0 = Poisoned<float>(batch * o.in_dim);
    const float* gy = nullptr;
    ASSERT_TRUE(c_gpu.Forward(gx0.data<float>(), batch, &gy).ok());
    ExpectNear(ToHost(gy, batch * o.in_dim), y_cpu, kDeepRtol, kDeepAtol, "y");
    ASSERT_TRUE(c_gpu.Backward(gdy.data<float>(), gdx0.data<float>()).ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    ExpectNear(ToHost<float>(gdx0, batch * o.in_dim), dx0, kDeepRtol, kDeepAtol, "dx0");
    ExpectParamsNear(pg, pc, kDeepRtol, kDeepAtol, /*grads=*/true);
  }
}

TEST_F(DenseCuda, BceMatchesCpuAndReportsABadLabel) {
  const int64_t batch = 5000;  // several blocks, the last partial
  auto logits = RandomFloats(batch, 1, -8.0f, 8.0f);
  auto labels = RandomFloats(batch, 2, 0.0f, 1.0f);
  for (int64_t i = 0; i < batch; i += 3) labels[i] = labels[i] < 0.5f ? 0.0f : 1.0f;
  std::vector<float> d(batch);
  auto want = BceWithLogits(cpu(), logits.data(), labels.data(), batch, d.data());
  ASSERT_TRUE(want.ok());
  Buffer gl = ToDevice(logits), gy = ToDevice(labels), gd = Poisoned<float>(batch);
  auto got = BceWithLogits(gpu(), gl.data<float>(), gy.data<float>(), batch, gd.data<float>());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, *want, 1e-9 * std::fabs(*want));
  ExpectNear(ToHost<float>(gd, batch), d, 1e-6, 1e-9, "d_logits");
  labels[4321] = 1.5f;
  Buffer bad = ToDevice(labels);
  auto err = BceWithLogits(gpu(), gl.data<float>(), bad.data<float>(), batch, nullptr);
  EXPECT_EQ(err.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(err.status().message().find("labels[4321] = 1.5"), std::string::npos) << err.status();
}

// The multi-rank step's rescale of the loss gradient: the same float multiply, the same bits.
TEST_F(DenseCuda, ScaleGradientMatchesCpuBitForBit) {
  const int64_t n = 70000;  // many blocks, the last partial
  auto d = RandomFloats(n, 3, -1.0f, 1.0f);
  Buffer g = ToDevice(d);
  const float scale = 0.3779f;
  ASSERT_TRUE(ScaleGradient(cpu(), d.data(), n, scale).ok());
  ASSERT_TRUE(ScaleGradient(gpu(), g.data<float>(), n, scale).ok());
  EXPECT_EQ(ToHost<float>(g, n), d);
}

TEST_F(DenseCuda, OptimizersMatchCpu) {
  for (DenseOptimizerType type :
       {DenseOptimizerType::kSgd, DenseOptimizerType::kAdagrad, DenseOptimizerType::kAdam}) {
    DenseOptimizerOptions o;
    o.type = type;
    o.weight_decay = 0.01f;
    o.adagrad_initial = 0.1f;
    Parameter pc = *MakeParameter("p", {33, 17}, Device::kCpu);
    Parameter pg = *MakeParameter("p", {33, 17}, Device::kCuda);
    const int64_t n = 33 * 17;
    const auto w = RandomFloats(n, 3);
    std::copy(w.begin(), w.end(), pc.value.data<float>());
    ASSERT_TRUE(CudaMemcpy(pg.value.raw(), w.data(), sizeof(float) * n).ok());
    auto oc = CreateDenseOptimizer(o, {&pc}, cpu());
    auto og = CreateDenseOptimizer(o, {&pg}, gpu());
    ASSERT_TRUE(oc.ok() && og.ok());
    for (int step = 0; step < 3; ++step) {
      const auto g = RandomFloats(n, 10 + step);
      std::copy(g.begin(), g.end(), pc.grad.data<float>());
      ASSERT_TRUE(CudaMemcpy(pg.grad.raw(), g.data(), sizeof(float) * n).ok());
      ASSERT_TRUE((*oc)->Step(0.01f).ok());
      ASSERT_TRUE((*og)->Step(0.01f).ok());
    }
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    const std::vector<float> want(pc.value.data<float>(), pc.value.data<float>() + n);
    ExpectNear(ToHost<float>(pg.value, n), want, kElemRtol * 10, kElemAtol * 10, "w");
    ExpectParamsNear((*og)->state(), (*oc)->state(), kElemRtol * 10, kElemAtol * 10, false);
  }
}

TEST_F(DenseCuda, RowPlumbingMatchesCpu) {
  const int64_t batch = 77, ac = 13, cc = 29;
  const auto a = RandomFloats(batch * ac, 1), c = RandomFloats(batch * cc, 2);
  std::vector<float> cat(batch * (ac + cc)), sa(batch * ac), sc(batch * cc);
  ASSERT_TRUE(
      dense_internal::ConcatColumns(cpu(), a.data(), ac, c.data(), cc, batch, cat.data()).ok());
  Buffer ga = ToDevice(a), gc = ToDevice(c), gcat = Poisoned<float>(batch * (ac + cc)),
         gsa = Poisoned<float>(batch * ac), gsc = Poisoned<float>(batch * cc);
  ASSERT_TRUE(dense_internal::ConcatColumns(gpu(), ga.data<float>(), ac, gc.data<float>(), cc,
                                            batch, gcat.data<float>())
                  .ok());
  ExpectNear(ToHost<float>(gcat, batch * (ac + cc)), cat, 0, 0, "concat");
  ASSERT_TRUE(dense_internal::SplitColumns(gpu(), gcat.data<float>(), ac, cc, batch,
                                           gsa.data<float>(), gsc.data<float>())
                  .ok());
  ExpectNear(ToHost<float>(gsa, batch * ac), a, 0, 0, "split a");
  ExpectNear(ToHost<float>(gsc, batch * cc), c, 0, 0, "split c");
  std::vector<float> sum = c;
  ASSERT_TRUE(dense_internal::AddInPlace(cpu(), c.data(), batch * cc, sum.data()).ok());
  ASSERT_TRUE(
      dense_internal::AddInPlace(gpu(), gc.data<float>(), batch * cc, gsc.data<float>()).ok());
  ExpectNear(ToHost<float>(gsc, batch * cc), sum, 0, 0, "add");
  Buffer copy = Poisoned<float>(batch * ac);
  ASSERT_TRUE(
      dense_internal::CopyFloats(gpu(), ga.data<float>(), batch * ac, copy.data<float>()).ok());
  ExpectNear(ToHost<float>(copy, batch * ac), a, 0, 0, "copy");
}

class DenseArchCuda : public CudaTest, public ::testing::WithParamInterface<InteractionType> {};

TEST_P(DenseArchCuda, StepMatchesCpu) {
  DenseArchOptions o;
  o.num_dense = 13;
  o.num_embeddings = 8;
  o.embedding_dim = 16;
  o.bottom_mlp = {64, 16};
  o.top_mlp = {64, 32, 1};
  o.interaction = GetParam();
  o.dcn_num_layers = 2;
  o.dcn_low_rank = 4;
  auto ac = DenseArch::Create(o, cpu());
  auto ag = DenseArch::Create(o, gpu());
  ASSERT_TRUE(ac.ok() && ag.ok());
  (*ac)->Init(5);
  (*ag)->Init(5);
  const int64_t batch = 512, ew = o.num_embeddings * o.embedding_dim;
  const auto dense = RandomFloats(batch * o.num_dense, 1, 0.0f, 2.0f);
  const auto emb = RandomFloats(batch * ew, 2, -0.5f, 0.5f);
  const auto d_logits = RandomFloats(batch, 3, -0.01f, 0.01f);
  const float* lc = nullptr;
  const float* lg = nullptr;
  std::vector<float> d_emb(batch * ew);
  ASSERT_TRUE((*ac)->Forward(dense.data(), emb.data(), batch, &lc).ok());
  const std::vector<float> logits(lc, lc + batch);
  ASSERT_TRUE((*ac)->Backward(d_logits.data(), d_emb.data()).ok());
  Buffer gd = ToDevice(dense), ge = ToDevice(emb), gdl = ToDevice(d_logits),
         gde = Poisoned<float>(batch * ew);
  ASSERT_TRUE((*ag)->Forward(gd.data<float>(), ge.data<float>(), batch, &lg).ok());
  ExpectNear(ToHost(lg, batch), logits, kDeepRtol, kDeepAtol, "logits");
  ASSERT_TRUE((*ag)->Backward(gdl.data<float>(), gde.data<float>()).ok());
  ASSERT_TRUE(CudaSynchronize(gpu()).ok());
  ExpectNear(ToHost<float>(gde, batch * ew), d_emb, kDeepRtol, 1e-7, "d_emb");
  // Gradients are ~1e-3 (small d_logits), sums over 512 samples: where the terms nearly cancel,
  // cuBLAS' and OpenBLAS' orders differ by about sqrt(512) 2^-24 |partial sums| (partial sums up
  // to ~0.1: ~1.3e-7), so atol 1e-6 (rtol covers the rest); a wrong index moves one by ~1e-3.
  ExpectParamsNear((*ag)->parameters(), (*ac)->parameters(), kDeepRtol, 1e-6, true);
}

INSTANTIATE_TEST_SUITE_P(Interactions, DenseArchCuda,
                         ::testing::Values(InteractionType::kDot, InteractionType::kDcn));

}  // namespace
}  // namespace tessera
