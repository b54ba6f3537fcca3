// DenseArch end to end (bottom MLP -> dot interaction or DCNv2 cross network -> top MLP) against
// a float64 twin assembled from the layer twins in tests/dense/reference.h; reproducibility of
// whole training steps; option validation.
#include <cstring>
#include <vector>

#include "dense/dense_arch.h"
#include "dense/interaction.h"
#include "dense/loss.h"
#include "dense/optimizer.h"
#include "gtest/gtest.h"
#include "tests/dense/reference.h"

namespace tessera {
namespace {

using testing::ExpectClose;
using testing::RandomVec;
using testing::RoundToFloat;
using testing::ToDouble;
using testing::ToFloat;
using testing::Vec;

// The whole arch in double, with the float arch's parameters.
struct RefArch {
  DenseArchOptions o;
  testing::RefMlp bottom, top;
  testing::RefCross cross;
  Vec bottom_out, emb;
  int64_t batch = 0;

  RefArch(DenseArch& arch)
      : o(arch.options()),
        bottom(o.num_dense, o.bottom_mlp, true),
        top(arch.interaction_dim(), o.top_mlp, false),
        cross(o.bottom_mlp.back() + o.num_embeddings * o.embedding_dim, o.dcn_low_rank,
              o.interaction == InteractionType::kDcn ? o.dcn_num_layers : 0) {
    auto params = arch.parameters();
    size_t next = 0;
    auto take = [&]() {
      Parameter* p = params.at(next++);
      return ToDouble(p->value.data<float>(), p->value.numel());
    };
    for (auto& l : bottom.layers) l.w = take(), l.b = take();
    for (int l = 0; l < cross.layers; ++l) {
      if (cross.rank == 0) {
        cross.w[l] = take();
      } else {
        cross.v[l] = take();
        cross.u[l] = take();
      }
      cross.b[l] = take();
    }
    for (auto& l : top.layers) l.w = take(), l.b = take();
    EXPECT_EQ(next, params.size());
  }

  Vec Forward(const Vec& dense, const Vec& e, int64_t nb) {
    batch = nb;
    emb = e;
    bottom_out = bottom.Forward(dense, nb);
    if (o.interaction == InteractionType::kDot) {
      return top.Forward(
          testing::RefDotForward(bottom_out, emb, nb, o.num_embeddings, o.embedding_dim), nb);
    }
    return top.Forward(cross.Forward(Concat(nb), nb), nb);
  }
  Vec Concat(int64_t nb) const {
    const int64_t a = o.bottom_mlp.back(), c = o.num_embeddings * o.embedding_dim;
    Vec x;
    for (int64_t r = 0; r < nb; ++r) {
      x.insert(x.end(), bottom_out.begin() + r * a, bottom_out.begin() + (r + 1) * a);
      x.insert(x.end(), emb.begin() + r * c, emb.begin() + (r + 1) * c);
    }
    return x;
  }
  // Returns d_emb; leaves the parameter grads in the layer twins.
  Vec Backward(const Vec& d_logits) {
    const Vec dz = top.Backward(d_logits);
    Vec d_bottom, d_emb;
    if (o.interaction == InteractionType::kDot) {
      testing::RefDotBackward(bottom_out, emb, dz, batch, o.num_embeddings, o.embedding_dim,
                              &d_bottom, &d_emb);
    } else {
      const Vec dx0 = cross.Backward(dz);
      const int64_t a = o.bottom_mlp.back(), c = o.num_embeddings * o.embedding_dim;
      for (int64_t r = 0; r < batch; ++r) {
        d_bottom.insert(d_bottom.end(), dx0.begin() + r * (a + c), dx0.begin() + r * (a + c) + a);
        d_emb.insert(d_emb.end(), dx0.begin() + r * (a + c) + a, dx0.begin() + (r + 1) * (a + c));
      }
    }
    bottom.Backward(d_bottom);
    return d_emb;
  }
  // Parameter grads in DenseArch::parameters() order.
  std::vector<Vec> Grads() const {
    std::vector<Vec> g;
    for (auto& l : bottom.layers) g.push_back(l.dw), g.push_back(l.db);
    for (int l = 0; l < cross.layers; ++l) {
      if (cross.rank == 0) {
        g.push_back(cross.dw[l]);
      } else {
        g.push_back(cross.dv[l]);
        g.push_back(cross.du[l]);
      }
      g.push_back(cross.db[l]);
    }
    for (auto& l : top.layers) g.push_back(l.dw), g.push_back(l.db);
    return g;
  }
};

DenseArchOptions DlrmOptions() {
  DenseArchOptions o;
  o.num_dense = 13;
  o.num_embeddings = 8;
  o.embedding_dim = 16;
  o.bottom_mlp = {64, 16};
  o.top_mlp = {64, 32, 1};
  o.interaction = InteractionType::kDot;
  return o;
}

DenseArchOptions DcnOptions(int64_t low_rank) {
  DenseArchOptions o;
  o.num_dense = 13;
  o.num_embeddings = 6;
  o.embedding_dim = 8;
  o.bottom_mlp = {32, 8};
  o.top_mlp = {32, 16, 1};
  o.interaction = InteractionType::kDcn;
  o.dcn_num_layers = 3;
  o.dcn_low_rank = low_rank;
  return o;
}

class ArchVsTwin : public ::testing::TestWithParam<int> {};

TEST_P(ArchVsTwin, ForwardBackwardMatchFloat64Twin) {
  const DenseArchOptions o =
      GetParam() == 0 ? DlrmOptions() : DcnOptions(GetParam() == 1 ? 0 : 4);
  auto arch_or = DenseArch::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(arch_or.ok()) << arch_or.status();
  DenseArch& arch = **arch_or;
  arch.Init(2024);
  RefArch ref(arch);
  const int64_t nb = 37, ew = o.num_embeddings * o.embedding_dim;
  const Vec dense = RoundToFloat(RandomVec(nb * o.num_dense, 1));
  const Vec emb = RoundToFloat(RandomVec(nb * ew, 2, 0.5));
  const std::vector<float> df = ToFloat(dense), ef = ToFloat(emb);
  const float* logits = nullptr;
  ASSERT_TRUE(arch.Forward(df.data(), ef.data(), nb, &logits).ok());
  // Float32 through ~6 layers of sums of <= 100 terms: errors ~1e-6 relative; tolerance 2e-4.
  constexpr double kTol = 2e-4;
  ExpectClose(logits, ref.Forward(dense, emb, nb), kTol, "logits");

  const Vec d_logits = RoundToFloat(RandomVec(nb, 3));
  const std::vector<float> dlf = ToFloat(d_logits);
  std::vector<float> d_emb(nb * ew, 123.0f);
  ASSERT_TRUE(arch.Backward(dlf.data(), d_emb.data()).ok());
  ExpectClose(d_emb, ref.Backward(d_logits), kTol, "d_emb");
  const auto grads = ref.Grads();
  const auto params = arch.parameters();
  ASSERT_EQ(grads.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectClose(params[i]->grad.data<float>(), grads[i], kTol, params[i]->name);
  }
  // d_logits is the caller's and must be left alone.
  EXPECT_EQ(dlf, ToFloat(d_logits));
}

INSTANTIATE_TEST_SUITE_P(DotDcnFullDcnLowRank, ArchVsTwin, ::testing::Values(0, 1, 2));

TEST(DenseArchTest, ParameterNamesInOrder) {
  auto arch = DenseArch::Create(DcnOptions(4), DeviceContext::Cpu());
  ASSERT_TRUE(arch.ok());
  std::vector<std::string> names;
  for (Parameter* p : (*arch)->parameters()) names.push_back(p->name);
  const std::vector<std::string> want = {
      "bottom_mlp.0.weight", "bottom_mlp.0.bias", "bottom_mlp.1.weight", "bottom_mlp.1.bias",
      "cross.0.V.weight",    "cross.0.U.weight",  "cross.0.bias",        "cross.1.V.weight",
      "cross.1.U.weight",    "cross.1.bias",      "cross.2.V.weight",    "cross.2.U.weight",
      "cross.2.bias",        "top_mlp.0.weight",  "top_mlp.0.bias",      "top_mlp.1.weight",
      "top_mlp.1.bias",      "top_mlp.2.weight",  "top_mlp.2.bias"};
  EXPECT_EQ(names, want);
  auto dot = DenseArch::Create(DlrmOptions(), DeviceContext::Cpu());
  ASSERT_TRUE(dot.ok());
  EXPECT_EQ((*dot)->interaction_dim(), DotInteractionOutputDim(8, 16));
  EXPECT_EQ((*dot)->parameters()[4]->value.shape(),
            (std::vector<int64_t>{64, DotInteractionOutputDim(8, 16)}));
}

// Three training steps (forward, BCE, backward, Adam) from a fresh arch; returns every
// parameter's bits, the logits and d_emb of the last step.
std::vector<float> TrainBits(const DenseArchOptions& o, int64_t nb) {
  auto arch_or = DenseArch::Create(o, DeviceContext::Cpu());
  EXPECT_TRUE(arch_or.ok());
  DenseArch& arch = **arch_or;
  arch.Init(7);
  DenseOptimizerOptions oo;
  oo.type = DenseOptimizerType::kAdam;
  auto opt = CreateDenseOptimizer(oo, arch.parameters(), DeviceContext::Cpu());
  EXPECT_TRUE(opt.ok());
  const int64_t ew = o.num_embeddings * o.embedding_dim;
  std::vector<float> out, d_logits(nb), d_emb(nb * ew), labels(nb);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> dense = ToFloat(RandomVec(nb * o.num_dense, 10 + step));
    const std::vector<float> emb = ToFloat(RandomVec(nb * ew, 20 + step, 0.3));
    for (int64_t i = 0; i < nb; ++i) labels[i] = (i + step) % 3 == 0;
    const float* logits = nullptr;
    EXPECT_TRUE(arch.Forward(dense.data(), emb.data(), nb, &logits).ok());
    EXPECT_TRUE(BceWithLogits(DeviceContext::Cpu(), logits, labels.data(), nb, d_logits.data()).ok());
    EXPECT_TRUE(arch.Backward(d_logits.data(), d_emb.data()).ok());
    EXPECT_TRUE((*opt)->Step(0.01f).ok());
    if (step == 2) out.insert(out.end(), logits, logits + nb);
  }
  out.insert(out.end(), d_emb.begin(), d_emb.end());
  for (Parameter* p : arch.parameters()) {
    out.insert(out.end(), p->value.data<float>(), p->value.data<float>() + p->value.numel());
  }
  return out;
}

TEST(DenseArchTest, TwoRunsGiveTheSameBits) {
  DenseArchOptions dot = DlrmOptions();
  dot.num_embeddings = 26;
  dot.top_mlp = {128, 64, 1};
  for (const DenseArchOptions& o : {dot, DcnOptions(0), DcnOptions(4)}) {
    const std::vector<float> a = TrainBits(o, 256), b = TrainBits(o, 256);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  }
}

TEST(DenseArchTest, FootprintCountsWhatCreateAllocates) {
  const std::vector<DenseArchOptions> all = {DlrmOptions(), DcnOptions(0), DcnOptions(4)};
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(i);
    const DenseArchOptions& o = all[i];
    auto f = DenseArch::Footprint(o);
    ASSERT_TRUE(f.ok()) << f.status();
    auto arch = DenseArch::Create(o, DeviceContext::Cpu());
    ASSERT_TRUE(arch.ok()) << arch.status();
    int64_t params = 0;
    for (Parameter* p : (*arch)->parameters()) params += p->value.numel();
    EXPECT_EQ(f->params(), params);
    EXPECT_GT(f->activations_per_sample(), 0);
  }
}

TEST(DenseArchTest, HugeLayersAreErrorsNotAborts) {
  DenseArchOptions o = DlrmOptions();
  o.bottom_mlp = {int64_t{4} << 60, int64_t{4} << 60, 16};
  auto f = DenseArch::Footprint(o);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("DenseArchOptions.bottom_mlp"), std::string::npos)
      << f.status();
  // A size that does not overflow but cannot be allocated: ResourceExhausted naming the
  // parameter, from Create (no abort in MakeParameter).
  o.bottom_mlp = {int64_t{1} << 40, 16};
  auto arch = DenseArch::Create(o, DeviceContext::Cpu());
  EXPECT_EQ(arch.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(arch.status().message().find("bottom_mlp.0.weight: cannot allocate"),
            std::string::npos)
      << arch.status();
}

TEST(DenseArchTest, ValidationNamesTheField) {
  auto expect_error = [](DenseArchOptions o, const std::string& text) {
    auto st = DenseArch::Create(o, DeviceContext::Cpu()).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(st.message().find(text), std::string::npos) << st;
  };
  DenseArchOptions o = DlrmOptions();
  o.top_mlp = {64, 2};
  expect_error(o, "top_mlp.back() = 2");
  o = DlrmOptions();
  o.bottom_mlp = {64, 32};
  expect_error(o, "bottom_mlp.back() = 32 must equal embedding_dim = 16");
  o = DlrmOptions();
  o.bottom_mlp = {};
  expect_error(o, "bottom_mlp is empty");
  o = DlrmOptions();
  o.top_mlp = {64, 0, 1};
  expect_error(o, "top_mlp[1] = 0");
  o = DcnOptions(0);
  o.dcn_num_layers = 0;
  expect_error(o, "dcn_num_layers = 0");
  o = DcnOptions(-2);
  expect_error(o, "dcn_low_rank = -2");
  o = DcnOptions(0);
  o.bottom_mlp = {32, 5};  // fine for DCN: the cross network takes any bottom width
  EXPECT_TRUE(DenseArch::Create(o, DeviceContext::Cpu()).ok());
  o.num_dense = 0;
  expect_error(o, "num_dense = 0");

  DeviceContext cuda;
  cuda.device = Device::kCuda;
  // A hand-made kCuda context: FailedPrecondition with the CUDA path, Unimplemented without.
  const absl::StatusCode kHandMadeCuda = TESSERA_HAVE_CUDA ? absl::StatusCode::kFailedPrecondition
                                                           : absl::StatusCode::kUnimplemented;
  EXPECT_EQ(DenseArch::Create(DlrmOptions(), cuda).status().code(), kHandMadeCuda);

  auto arch = DenseArch::Create(DlrmOptions(), DeviceContext::Cpu());
  ASSERT_TRUE(arch.ok());
  std::vector<float> buf(64);
  EXPECT_EQ((*arch)->Backward(buf.data(), buf.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  const float* logits = nullptr;
  auto st = (*arch)->Forward(buf.data(), nullptr, 2, &logits);
  EXPECT_NE(st.message().find("emb is null"), std::string::npos) << st;
}

}  // namespace
}  // namespace tessera
