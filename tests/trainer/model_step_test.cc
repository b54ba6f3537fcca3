// A whole training step of DLRM and DCNv2 (embedding lookup, dense forward, loss, hand-written
// backward, fused embedding update, dense update) against a float64 twin of the model written
// here: the gradient the step applied, (w_before - w_after) / lr under SGD, must equal the
// central finite-difference gradient of the float64 loss for every parameter.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"
#include "trainer/model.h"

namespace tessera {
namespace {

constexpr int kF = 3;          // sparse features, one table each
constexpr int64_t kRows = 11;  // rows per table
constexpr int64_t kDim = 4;
constexpr int64_t kDense = 3;
constexpr int64_t kBatch = 6;
constexpr float kLr = 0.1f;

// Parameters as doubles, by name: "embedding.t<i>.weight" and the dense names.
using Params = std::map<std::string, std::vector<double>>;

Config MakeConfig(InteractionType type, int64_t low_rank) {
  Config c;
  c.seed = 99;
  c.model.interaction = type;
  c.model.num_dense = kDense;
  c.model.embedding_dim = kDim;
  c.model.bottom_mlp = {5, kDim};
  c.model.top_mlp = {6, 1};
  c.model.dcn_num_layers = 2;
  c.model.dcn_low_rank = low_rank;
  for (int f = 0; f < kF; ++f) {
    TableConfig t;
    t.name = "t" + std::to_string(f);
    t.num_rows = kRows;
    t.dim = kDim;
    t.features = {f};
    t.init.scale = 0.5f;  // large enough that the interaction terms matter
    c.model.tables.push_back(t);
  }
  c.optimizer.embedding.type = RowOptimizerType::kSgd;
  c.optimizer.embedding_lr = kLr;
  c.optimizer.dense.type = DenseOptimizerType::kSgd;
  c.optimizer.dense_lr = kLr;
  c.optimizer.schedule.base_lr = 1.0f;
  return c;
}

Batch MakeBatch() {
  Batch b;
  b.batch_size = kBatch;
  b.num_dense = kDense;
  CounterRng rng(5, 6);
  for (int64_t i = 0; i < kBatch * kDense; ++i) b.dense.push_back(2.0f * rng.NextUniform());
  for (int64_t i = 0; i < kBatch; ++i) b.labels.push_back(i % 3 == 0 ? 1.0f : 0.0f);
  b.sparse.num_features = kF;
  b.sparse.batch_size = kBatch;
  b.sparse.offsets = {0};
  for (int f = 0; f < kF; ++f) {
    for (int64_t s = 0; s < kBatch; ++s) {
      int64_t len = (f + s) % 4;  // empty bags, singletons and repeats
      for (int64_t k = 0; k < len; ++k) b.sparse.values.push_back(rng.NextBelow(kRows));
      b.sparse.offsets.push_back(static_cast<int64_t>(b.sparse.values.size()));
    }
  }
  b.sparse.values.push_back(b.sparse.values[0]);  // a duplicate id inside the last bag
  b.sparse.offsets.back() += 1;
  return b;
}

Params Snapshot(Model& m) {
  Params p;
  for (int t = 0; t < m.sparse().num_tables(); ++t) {
    const TableConfig& tc = m.sparse().table(t);
    std::vector<float> rows(tc.num_rows * tc.dim);
    EXPECT_TRUE(m.sparse().ReadRows(t, 0, tc.num_rows, rows.data()).ok());
    p["embedding." + tc.name + ".weight"].assign(rows.begin(), rows.end());
  }
  for (Parameter* q : m.dense_parameters()) {
    const float* v = q->value.data<float>();
    p[q->name].assign(v, v + q->value.numel());
  }
  return p;
}

// y[o] = sum_i W[o, i] x[i] + b[o], optional ReLU.
std::vector<double> Linear(const Params& p, const std::string& name, const std::vector<double>& x,
                           bool relu) {
  const std::vector<double>& w = p.at(name + ".weight");
  const std::vector<double>& b = p.at(name + ".bias");
  size_t out = b.size(), in = x.size();
  std::vector<double> y(out);
  for (size_t o = 0; o < out; ++o) {
    double s = b[o];
    for (size_t i = 0; i < in; ++i) s += w[o * in + i] * x[i];
    y[o] = relu ? std::max(0.0, s) : s;
  }
  return y;
}

std::vector<double> MatVec(const std::vector<double>& w, size_t rows, const std::vector<double>& x) {
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < x.size(); ++i) y[r] += w[r * x.size() + i] * x[i];
  return y;
}

// The float64 twin: mean BCE-with-logits loss of the batch.
double ReferenceLoss(const Params& p, const Batch& b, InteractionType type, int64_t low_rank,
                     int layers) {
  double total = 0;
  for (int64_t s = 0; s < kBatch; ++s) {
    std::vector<double> x(b.dense.begin() + s * kDense, b.dense.begin() + (s + 1) * kDense);
    x = Linear(p, "bottom_mlp.0", x, true);
    x = Linear(p, "bottom_mlp.1", x, true);
    std::vector<std::vector<double>> z = {x};
    for (int f = 0; f < kF; ++f) {
      const std::vector<double>& table = p.at("embedding.t" + std::to_string(f) + ".weight");
      std::vector<double> e(kDim, 0.0);
      int64_t bag = f * kBatch + s;
      for (int64_t j = b.sparse.offsets[bag]; j < b.sparse.offsets[bag + 1]; ++j)
        for (int64_t k = 0; k < kDim; ++k) e[k] += table[b.sparse.values[j] * kDim + k];
      z.push_back(e);
    }
    std::vector<double> inter;
    if (type == InteractionType::kDot) {
      inter = z[0];
      for (size_t i = 1; i < z.size(); ++i)
        for (size_t j = 0; j < i; ++j) {
          double d = 0;
          for (int64_t k = 0; k < kDim; ++k) d += z[i][k] * z[j][k];
          inter.push_back(d);
        }
    } else {
      std::vector<double> x0;
      for (const auto& v : z) x0.insert(x0.end(), v.begin(), v.end());
      std::vector<double> xl = x0;
      const size_t n = x0.size();
      for (int l = 0; l < layers; ++l) {
        std::string name = "cross." + std::to_string(l);
        std::vector<double> u;
        if (low_rank > 0) {
          u = MatVec(p.at(name + ".V.weight"), low_rank, xl);
          u = MatVec(p.at(name + ".U.weight"), n, u);
        } else {
          u = MatVec(p.at(name + ".weight"), n, xl);
        }
        const std::vector<double>& bias = p.at(name + ".bias");
        for (size_t i = 0; i < n; ++i) xl[i] = x0[i] * (u[i] + bias[i]) + xl[i];
      }
      inter = xl;
    }
    std::vector<double> h = Linear(p, "top_mlp.0", inter, true);
    double zlogit = Linear(p, "top_mlp.1", h, false)[0];
    double y = b.labels[s];
    total += std::max(zlogit, 0.0) - zlogit * y + std::log1p(std::exp(-std::fabs(zlogit)));
  }
  return total / kBatch;
}

void CheckStep(InteractionType type, int64_t low_rank) {
  Config c = MakeConfig(type, low_rank);
  auto model = Model::Create(c, DeviceContext::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  Batch batch = MakeBatch();
  Params before = Snapshot(**model);
  const int layers = c.model.dcn_num_layers;

  double ref_loss = ReferenceLoss(before, batch, type, low_rank, layers);
  auto loss = (*model)->TrainStep(batch, 0);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, ref_loss, 1e-5 * std::max(1.0, std::fabs(ref_loss)));
  Params after = Snapshot(**model);

  // Tolerance: float32 forward/backward against float64 central differences (h = 1e-6, error
  // ~1e-10), with the applied gradient recovered from a float32 difference of weights of size
  // ~1 divided by lr = 0.1 (~1e-6): 2e-4 absolute plus 1e-3 relative covers both with margin.
  int checked = 0;
  double max_abs_grad = 0;
  for (auto& [name, values] : before) {
    for (size_t i = 0; i < values.size(); ++i) {
      Params plus = before, minus = before;
      const double h = 1e-6;
      plus[name][i] += h;
      minus[name][i] -= h;
      double g_ref = (ReferenceLoss(plus, batch, type, low_rank, layers) -
                      ReferenceLoss(minus, batch, type, low_rank, layers)) /
                     (2 * h);
      double g_step = (values[i] - after[name][i]) / kLr;
      ASSERT_NEAR(g_step, g_ref, 2e-4 + 1e-3 * std::fabs(g_ref)) << name << "[" << i << "]";
      max_abs_grad = std::max(max_abs_grad, std::fabs(g_ref));
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(max_abs_grad, 1e-3);  // the step really moved something
}

TEST(ModelStepTest, DlrmStepMatchesFloat64Twin) { CheckStep(InteractionType::kDot, 0); }
TEST(ModelStepTest, Dcnv2FullRankStepMatchesFloat64Twin) { CheckStep(InteractionType::kDcn, 0); }
TEST(ModelStepTest, Dcnv2LowRankStepMatchesFloat64Twin) { CheckStep(InteractionType::kDcn, 3); }

}  // namespace
}  // namespace tessera
