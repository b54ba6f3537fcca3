// DenseArch's gradient-ready callback (the hook data-parallel training starts its bucketed
// all-reduce from): every parameter is reported exactly once per Backward, in the documented
// order (top MLP last layer first, then the cross network last layer first, then the bottom
// MLP), and when it is reported its grad already holds its final value. An error from the
// callback stops the Backward and is returned.
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dense/dense_arch.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) {
  CounterRng rng(seed, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.NextUniform() - 0.5f;
  return v;
}

void CheckCallbacks(InteractionType type, int64_t low_rank) {
  DenseArchOptions o;
  o.num_dense = 5;
  o.num_embeddings = 3;
  o.embedding_dim = 4;
  o.bottom_mlp = {6, 4};
  o.top_mlp = {7, 5, 1};
  o.interaction = type;
  o.dcn_num_layers = 2;
  o.dcn_low_rank = low_rank;
  auto arch = DenseArch::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(arch.ok()) << arch.status();
  (*arch)->Init(3);
  const int64_t b = 9;
  std::vector<float> dense = Random(b * 5, 1), emb = Random(b * 12, 2), dl = Random(b, 3);
  std::vector<float> d_emb(b * 12);
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> at_callback;
  (*arch)->set_grad_ready_callback([&](Parameter& p) {
    order.push_back(p.name);
    const float* g = p.grad.data<float>();
    at_callback[p.name].assign(g, g + p.grad.numel());
    return absl::OkStatus();
  });
  const float* logits = nullptr;
  for (int step = 0; step < 2; ++step) {  // the second step must not see stale grads either
    order.clear();
    ASSERT_TRUE((*arch)->Forward(dense.data(), emb.data(), b, &logits).ok());
    ASSERT_TRUE((*arch)->Backward(dl.data(), d_emb.data()).ok());
    std::vector<Parameter*> params = (*arch)->parameters();
    ASSERT_EQ(order.size(), params.size());
    for (Parameter* p : params) {
      const float* g = p->grad.data<float>();
      EXPECT_EQ(at_callback[p->name], std::vector<float>(g, g + p->grad.numel())) << p->name;
    }
    // Documented order: top (last layer first, weight then bias), cross (last layer first),
    // bottom (last layer first).
    std::vector<std::string> want = {"top_mlp.2.weight", "top_mlp.2.bias", "top_mlp.1.weight",
                                     "top_mlp.1.bias", "top_mlp.0.weight", "top_mlp.0.bias"};
    if (type == InteractionType::kDcn) {
      for (int l = 1; l >= 0; --l) {
        const std::string c = "cross." + std::to_string(l) + ".";
        if (low_rank == 0) {
          want.insert(want.end(), {c + "weight", c + "bias"});
        } else {
          want.insert(want.end(), {c + "V.weight", c + "U.weight", c + "bias"});
        }
      }
    }
    want.insert(want.end(), {"bottom_mlp.1.weight", "bottom_mlp.1.bias", "bottom_mlp.0.weight",
                             "bottom_mlp.0.bias"});
    EXPECT_EQ(order, want);
    dense = Random(b * 5, 10 + step);
  }
  // An error from the callback ends the Backward with it.
  (*arch)->set_grad_ready_callback(
      [](Parameter& p) { return absl::InternalError("stop at " + p.name); });
  ASSERT_TRUE((*arch)->Forward(dense.data(), emb.data(), b, &logits).ok());
  absl::Status s = (*arch)->Backward(dl.data(), d_emb.data());
  EXPECT_EQ(s.message(), "stop at top_mlp.2.weight");
  // Cleared: no calls.
  (*arch)->set_grad_ready_callback(nullptr);
  ASSERT_TRUE((*arch)->Forward(dense.data(), emb.data(), b, &logits).ok());
  EXPECT_TRUE((*arch)->Backward(dl.data(), d_emb.data()).ok());
}

TEST(GradReadyTest, Dlrm) { CheckCallbacks(InteractionType::kDot, 0); }
TEST(GradReadyTest, Dcnv2FullRank) { CheckCallbacks(InteractionType::kDcn, 0); }
TEST(GradReadyTest, Dcnv2LowRank) { CheckCallbacks(InteractionType::kDcn, 2); }

}  // namespace
}  // namespace tessera
