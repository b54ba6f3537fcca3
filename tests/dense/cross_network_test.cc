// DCNv2 cross network, full and low rank, against the float64 twin (tests/dense/reference.h);
// the twin against finite differences; parameter names, init and errors.
#include <cmath>
#include <cstring>
#include <vector>

#include "dense/cross_network.h"
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

// Copies the network's (initialised) parameters into the twin.
void LoadTwin(CrossNetwork& net, testing::RefCross* ref) {
  auto params = net.parameters();
  const int per = ref->rank == 0 ? 2 : 3;
  ASSERT_EQ(params.size(), static_cast<size_t>(per * ref->layers));
  for (int l = 0; l < ref->layers; ++l) {
    auto get = [&](int i) {
      return ToDouble(params[l * per + i]->value.data<float>(), params[l * per + i]->value.numel());
    };
    if (ref->rank == 0) {
      ref->w[l] = get(0);
    } else {
      ref->v[l] = get(0);
      ref->u[l] = get(1);
    }
    ref->b[l] = get(per - 1);
  }
}

void RandomBiases(CrossNetwork& net, uint64_t seed) {
  // Init leaves biases at zero; random ones make the test see the bias path.
  for (Parameter* p : net.parameters()) {
    if (p->value.shape().size() != 1) continue;
    const std::vector<float> b = ToFloat(RandomVec(p->value.numel(), seed++, 0.3));
    std::memcpy(p->value.raw(), b.data(), p->value.bytes());
  }
}

struct Case {
  int64_t batch, dim, rank;
  int layers;
};
class CrossVsTwin : public ::testing::TestWithParam<Case> {};

TEST_P(CrossVsTwin, ForwardAndBackwardMatchFloat64Twin) {
  const Case c = GetParam();
  CrossNetworkOptions o;
  o.in_dim = c.dim;
  o.num_layers = c.layers;
  o.low_rank = c.rank;
  CrossNetwork net("cross", o, DeviceContext::Cpu());
  net.Init(7);
  RandomBiases(net, 100);
  testing::RefCross ref(c.dim, c.rank, c.layers);
  LoadTwin(net, &ref);

  const Vec x0 = RoundToFloat(RandomVec(c.batch * c.dim, 1));
  const std::vector<float> x0f = ToFloat(x0);
  const float* y = nullptr;
  ASSERT_TRUE(net.Forward(x0f.data(), c.batch, &y).ok());
  // Products of a few layers of sums of <= 200 terms in float: ~1e-6 relative; tolerance 1e-4.
  ExpectClose(y, ref.Forward(x0, c.batch), 1e-4, "y");

  const Vec dy = RoundToFloat(RandomVec(c.batch * c.dim, 2));
  std::vector<float> dyf = ToFloat(dy), dx0(c.batch * c.dim, 77.0f);
  ASSERT_TRUE(net.Backward(dyf.data(), dx0.data()).ok());
  ExpectClose(dx0, ref.Backward(dy), 1e-4, "dx0");
  auto params = net.parameters();
  const int per = c.rank == 0 ? 2 : 3;
  for (int l = 0; l < c.layers; ++l) {
    if (c.rank == 0) {
      ExpectClose(params[l * per]->grad.data<float>(), ref.dw[l], 1e-4, params[l * per]->name);
    } else {
      ExpectClose(params[l * per]->grad.data<float>(), ref.dv[l], 1e-4, params[l * per]->name);
      ExpectClose(params[l * per + 1]->grad.data<float>(), ref.du[l], 1e-4,
                  params[l * per + 1]->name);
    }
    ExpectClose(params[l * per + per - 1]->grad.data<float>(), ref.db[l], 1e-4,
                params[l * per + per - 1]->name);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossVsTwin,
                         ::testing::Values(Case{17, 24, 0, 3}, Case{17, 24, 5, 3},
                                           Case{40, 70, 0, 1}, Case{9, 70, 16, 2},
                                           Case{3, 300, 0, 2}, Case{3, 300, 32, 3}));

TEST(CrossNetworkTest, TwinBackwardMatchesFiniteDifferences) {
  for (int64_t rank : {0, 2}) {
    const int64_t nb = 3, d = 4;
    const int layers = 2;
    testing::RefCross ref(d, rank, layers);
    for (int l = 0; l < layers; ++l) {
      ref.w[l] = RandomVec(d * d, 10 + l);
      ref.v[l] = RandomVec(rank * d, 20 + l);
      ref.u[l] = RandomVec(d * rank, 30 + l);
      ref.b[l] = RandomVec(d, 40 + l);
    }
    const Vec x0 = RandomVec(nb * d, 1), r = RandomVec(nb * d, 2);
    ref.Forward(x0, nb);
    const Vec dx0 = ref.Backward(r);
    auto loss_with = [&](auto set) {
      return [&, set](const Vec& p) {
        testing::RefCross t = ref;
        set(t, p);
        return testing::Dot(t.Forward(x0, nb), r);
      };
    };
    auto loss_x = [&](const Vec& x) {
      testing::RefCross t = ref;
      return testing::Dot(t.Forward(x, nb), r);
    };
    const std::string tag = rank == 0 ? "full " : "low rank ";
    testing::ExpectGradientsAgree(dx0, testing::NumericGradient(loss_x, x0), 1e-6, tag + "dx0");
    for (int l = 0; l < layers; ++l) {
      testing::ExpectGradientsAgree(
          ref.db[l],
          testing::NumericGradient(loss_with([l](testing::RefCross& t, const Vec& p) {
            t.b[l] = p;
          }), ref.b[l]),
          1e-6, tag + "db");
      if (rank == 0) {
        testing::ExpectGradientsAgree(
            ref.dw[l],
            testing::NumericGradient(loss_with([l](testing::RefCross& t, const Vec& p) {
              t.w[l] = p;
            }), ref.w[l]),
            1e-6, tag + "dW");
      } else {
        testing::ExpectGradientsAgree(
            ref.dv[l],
            testing::NumericGradient(loss_with([l](testing::RefCross& t, const Vec& p) {
              t.v[l] = p;
            }), ref.v[l]),
            1e-6, tag + "dV");
        testing::ExpectGradientsAgree(
            ref.du[l],
            testing::NumericGradient(loss_with([l](testing::RefCross& t, const Vec& p) {
              t.u[l] = p;
            }), ref.u[l]),
            1e-6, tag + "dU");
      }
    }
  }
}

TEST(CrossNetworkTest, ParameterNamesShapesAndInit) {
  CrossNetworkOptions o;
  o.in_dim = 432;
  o.num_layers = 2;
  o.low_rank = 64;
  CrossNetwork low("cross", o, DeviceContext::Cpu());
  low.Init(1);
  auto p = low.parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0]->name, "cross.0.V.weight");
  EXPECT_EQ(p[0]->value.shape(), (std::vector<int64_t>{64, 432}));
  EXPECT_EQ(p[1]->name, "cross.0.U.weight");
  EXPECT_EQ(p[1]->value.shape(), (std::vector<int64_t>{432, 64}));
  EXPECT_EQ(p[2]->name, "cross.0.bias");
  EXPECT_EQ(p[5]->name, "cross.1.bias");
  // Xavier normal: std sqrt(2 / (432 + 64)); 27648 draws give the sample std within 2%.
  double s2 = 0;
  for (int64_t i = 0; i < p[0]->value.numel(); ++i) {
    s2 += double(p[0]->value.data<float>()[i]) * p[0]->value.data<float>()[i];
  }
  EXPECT_NEAR(std::sqrt(s2 / p[0]->value.numel()), std::sqrt(2.0 / 496), 0.02 * std::sqrt(2.0 / 496));
  for (int64_t i = 0; i < p[2]->value.numel(); ++i) EXPECT_EQ(p[2]->value.data<float>()[i], 0.0f);

  o.low_rank = 0;
  CrossNetwork full("cross", o, DeviceContext::Cpu());
  auto q = full.parameters();
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0]->name, "cross.0.weight");
  EXPECT_EQ(q[0]->value.shape(), (std::vector<int64_t>{432, 432}));
  EXPECT_EQ(q[3]->name, "cross.1.bias");
}

TEST(CrossNetworkTest, ErrorsNameTheProblem) {
  CrossNetworkOptions o;
  o.in_dim = 8;
  o.num_layers = 0;
  absl::Status st = CrossNetwork::Validate(o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_layers = 0"), std::string::npos) << st;
  o.num_layers = 1;
  o.low_rank = -1;
  EXPECT_NE(CrossNetwork::Validate(o).message().find("low_rank = -1"), std::string::npos);
  o.low_rank = 0;
  CrossNetwork net("cross", o, DeviceContext::Cpu());
  std::vector<float> buf(16);
  st = net.Backward(buf.data(), buf.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  const float* y = nullptr;
  st = net.Forward(nullptr, 2, &y);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x0 is null"), std::string::npos) << st;
}

}  // namespace
}  // namespace tessera
