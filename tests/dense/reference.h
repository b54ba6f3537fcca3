// Float64 twins of the dense layers for the tests: plain loops in double, written from the
// formulas in the headers (not from the kernels), plus helpers to compare float results against
// them and to check their backward passes by central finite differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"

namespace tessera::testing {

using Vec = std::vector<double>;

// n values uniform in [-scale, scale), a pure function of (seed, n).
inline Vec RandomVec(int64_t n, uint64_t seed, double scale = 1.0) {
  CounterRng rng(seed, 7);
  Vec v(n);
  for (auto& x : v) x = scale * (2.0 * rng.NextUniformDouble() - 1.0);
  return v;
}
inline std::vector<float> ToFloat(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }
inline Vec ToDouble(const float* p, int64_t n) { return Vec(p, p + n); }
// Rounds to float and back, so the twin sees exactly the float inputs.
inline Vec RoundToFloat(const Vec& v) { return ToDouble(ToFloat(v).data(), v.size()); }

// Expects |got[i] - want[i]| <= tol * (|want[i]| + rms(want)) for every i. The rms term keeps a
// cancelled (near-zero) entry from demanding a relative accuracy float cannot give.
inline void ExpectClose(const float* got, const Vec& want, double tol, const std::string& what) {
  double rms = 0;
  for (double w : want) rms += w * w;
  rms = std::sqrt(rms / std::max<size_t>(1, want.size()));
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (std::fabs(want[i]) + rms))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                      << " (err " << err << ", tol " << tol << ", rms " << rms << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " entries off";
}
inline void ExpectClose(const std::vector<float>& got, const Vec& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ExpectClose(got.data(), want, tol, what);
}

// Central finite differences of f at x: df/dx_i ~ (f(x + h e_i) - f(x - h e_i)) / 2h.
inline Vec NumericGradient(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}
// Expects analytic and numeric gradients to agree to `tol` relative to the larger magnitude.
inline void ExpectGradientsAgree(const Vec& analytic, const Vec& numeric, double tol,
                                 const std::string& what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double scale = std::max({1.0, std::fabs(analytic[i]), std::fabs(numeric[i])});
    EXPECT_NEAR(analytic[i], numeric[i], tol * scale) << what << "[" << i << "]";
  }
}
inline double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- Linear / MLP: y = act(x W^T + b), W [out, in] -------------------------------------------
struct RefLinear {
  int64_t in = 0, out = 0;
  bool relu = false;
  Vec w, b;          // parameters
  Vec x, y;          // saved by Forward
  Vec dw, db;        // written by Backward
  int64_t batch = 0;

  Vec Forward(const Vec& xin, int64_t nb) {
    x = xin;
    batch = nb;
    y.assign(nb * out, 0.0);
    for (int64_t r = 0; r < nb; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double s = b[o];
        for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
        y[r * out + o] = relu ? std::max(s, 0.0) : s;
      }
    }
    return y;
  }
  // Returns dx; writes dw, db.
  Vec Backward(Vec dy) {
    if (relu) {
      for (size_t i = 0; i < dy.size(); ++i) dy[i] = y[i] > 0 ? dy[i] : 0.0;
    }
    dw.assign(out * in, 0.0);
    db.assign(out, 0.0);
    Vec dx(batch * in, 0.0);
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        const double g = dy[r * out + o];
        db[o] += g;
        for (int64_t i = 0; i < in; ++i) {
          dw[o * in + i] += g * x[r * in + i];
          dx[r * in + i] += g * w[o * in + i];
        }
      }
    }
    return dx;
  }
};

struct RefMlp {
  std::vector<RefLinear> layers;
  RefMlp() = default;
  RefMlp(int64_t in, const std::vector<int64_t>& sizes, bool relu_last) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      RefLinear l;
      l.in = i == 0 ? in : sizes[i - 1];
      l.out = sizes[i];
      l.relu = relu_last || i + 1 < sizes.size();
      layers.push_back(l);
    }
  }
  Vec Forward(Vec x, int64_t nb) {
    for (auto& l : layers) x = l.Forward(x, nb);
    return x;
  }
  Vec Backward(Vec dy) {
    for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) dy = layers[i].Backward(dy);
    return dy;
  }
};

// ---- DLRM dot interaction ----------------------------------------------------------------------
inline int64_t RefDotWidth(int64_t nf, int64_t d) { return d + nf * (nf + 1) / 2; }
// Z row i of sample b: 0 is the bottom output, i >= 1 is embedding i - 1.
inline double RefZ(const Vec& bottom, const Vec& emb, int64_t b, int64_t nf, int64_t d, int64_t i,
                   int64_t k) {
  return i == 0 ? bottom[b * d + k] : emb[(b * nf + i - 1) * d + k];
}
inline Vec RefDotForward(const Vec& bottom, const Vec& emb, int64_t nb, int64_t nf, int64_t d) {
  const int64_t w = RefDotWidth(nf, d);
  Vec out(nb * w);
  for (int64_t b = 0; b < nb; ++b) {
    int64_t o = b * w;
    for (int64_t k = 0; k < d; ++k) out[o++] = bottom[b * d + k];
    for (int64_t i = 1; i <= nf; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        double s = 0;
        for (int64_t k = 0; k < d; ++k) {
          s += RefZ(bottom, emb, b, nf, d, i, k) * RefZ(bottom, emb, b, nf, d, j, k);
        }
        out[o++] = s;
      }
    }
  }
  return out;
}
inline void RefDotBackward(const Vec& bottom, const Vec& emb, const Vec& d_out, int64_t nb,
                           int64_t nf, int64_t d, Vec* d_bottom, Vec* d_emb) {
  const int64_t w = RefDotWidth(nf, d);
  d_bottom->assign(nb * d, 0.0);
  d_emb->assign(nb * nf * d, 0.0);
  auto dz = [&](int64_t b, int64_t i, int64_t k) -> double& {
    return i == 0 ? (*d_bottom)[b * d + k] : (*d_emb)[(b * nf + i - 1) * d + k];
  };
  for (int64_t b = 0; b < nb; ++b) {
    int64_t o = b * w;
    for (int64_t k = 0; k < d; ++k) dz(b, 0, k) += d_out[o++];
    for (int64_t i = 1; i <= nf; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        const double g = d_out[o++];
        for (int64_t k = 0; k < d; ++k) {
          dz(b, i, k) += g * RefZ(bottom, emb, b, nf, d, j, k);
          dz(b, j, k) += g * RefZ(bottom, emb, b, nf, d, i, k);
        }
      }
    }
  }
}

// ---- DCNv2 cross network: x_{l+1} = x0 * (W x_l + b) + x_l, W = U V for low rank -------------
struct RefCross {
  int64_t dim = 0, rank = 0;
  int layers = 0;
  std::vector<Vec> w, v, u, b;       // parameters per layer (w: full; v, u: low rank)
  std::vector<Vec> dw, dv, du, db;   // grads per layer
  std::vector<Vec> xs, inner, low;   // saved activations
  int64_t batch = 0;

  RefCross(int64_t d, int64_t r, int nl) : dim(d), rank(r), layers(nl) {
    w.resize(nl), v.resize(nl), u.resize(nl), b.resize(nl);
    dw.resize(nl), dv.resize(nl), du.resize(nl), db.resize(nl);
  }
  // y[nb, n] = x[nb, k] M^T for M [n, k].
  static Vec MatT(const Vec& x, const Vec& m, int64_t nb, int64_t k, int64_t n) {
    Vec y(nb * n, 0.0);
    for (int64_t r = 0; r < nb; ++r)
      for (int64_t o = 0; o < n; ++o) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += x[r * k + i] * m[o * k + i];
        y[r * n + o] = s;
      }
    return y;
  }
  // y[nb, k] = g[nb, n] M for M [n, k].
  static Vec Mat(const Vec& g, const Vec& m, int64_t nb, int64_t n, int64_t k) {
    Vec y(nb * k, 0.0);
    for (int64_t r = 0; r < nb; ++r)
      for (int64_t o = 0; o < n; ++o)
        for (int64_t i = 0; i < k; ++i) y[r * k + i] += g[r * n + o] * m[o * k + i];
    return y;
  }
  // [n, k] = g[nb, n]^T x[nb, k].
  static Vec Outer(const Vec& g, const Vec& x, int64_t nb, int64_t n, int64_t k) {
    Vec y(n * k, 0.0);
    for (int64_t r = 0; r < nb; ++r)
      for (int64_t o = 0; o < n; ++o)
        for (int64_t i = 0; i < k; ++i) y[o * k + i] += g[r * n + o] * x[r * k + i];
    return y;
  }

  Vec Forward(const Vec& x0, int64_t nb) {
    batch = nb;
    xs.assign(1, x0);
    inner.assign(layers, Vec());
    low.assign(layers, Vec());
    for (int l = 0; l < layers; ++l) {
      const Vec& xl = xs[l];
      if (rank == 0) {
        inner[l] = MatT(xl, w[l], nb, dim, dim);
      } else {
        low[l] = MatT(xl, v[l], nb, dim, rank);
        inner[l] = MatT(low[l], u[l], nb, rank, dim);
      }
      Vec next(nb * dim);
      for (int64_t r = 0; r < nb; ++r)
        for (int64_t c = 0; c < dim; ++c) {
          double& in = inner[l][r * dim + c];
          in += b[l][c];
          next[r * dim + c] = x0[r * dim + c] * in + xl[r * dim + c];
        }
      xs.push_back(next);
    }
    return xs.back();
  }
  // Returns dx0; writes the grads.
  Vec Backward(Vec g) {
    const Vec& x0 = xs[0];
    Vec dx0(batch * dim, 0.0);
    for (int l = layers - 1; l >= 0; --l) {
      Vec di(batch * dim);
      db[l].assign(dim, 0.0);
      for (int64_t r = 0; r < batch; ++r)
        for (int64_t c = 0; c < dim; ++c) {
          const int64_t i = r * dim + c;
          di[i] = g[i] * x0[i];
          db[l][c] += di[i];
          dx0[i] += g[i] * inner[l][i];
        }
      Vec through;
      if (rank == 0) {
        dw[l] = Outer(di, xs[l], batch, dim, dim);
        through = Mat(di, w[l], batch, dim, dim);
      } else {
        du[l] = Outer(di, low[l], batch, dim, rank);
        Vec dl = Mat(di, u[l], batch, dim, rank);
        dv[l] = Outer(dl, xs[l], batch, rank, dim);
        through = Mat(dl, v[l], batch, rank, dim);
      }
      for (size_t i = 0; i < g.size(); ++i) g[i] += through[i];
    }
    for (size_t i = 0; i < g.size(); ++i) dx0[i] += g[i];
    return dx0;
  }
};

}  // namespace tessera::testing
