// ZipfSampler: draws k in [0, n) with P(k) proportional to (k + 1)^-exponent, in O(1) time and
// O(1) memory for any n up to 2^62, by rejection-inversion (W. Hörmann, G. Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", ACM TOMACS
// 6(3), 1996). About 1.1 uniforms per draw on average. Rank 0 is the most frequent. Exponent 0
// is the uniform distribution over [0, n) (h is constant and every proposal is accepted).
// Thread-safety: Sample is const; share one sampler across threads with one rng each.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera {

class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent >= 0.
  ZipfSampler(int64_t n, double exponent);

  // One draw; `rng` provides NextUniformDouble() in [0, 1) (e.g. CounterRng).
  template <typename Rng>
  int64_t Sample(Rng& rng) const {
    while (true) {
      const double u = h_integral_n_ + rng.NextUniformDouble() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double kd = std::floor(x + 0.5);
      if (kd < 1) kd = 1;
      if (kd > n_) kd = static_cast<double>(n_);
      if (kd - x <= s_ || u >= HIntegral(kd + 0.5) - H(kd)) return static_cast<int64_t>(kd) - 1;
    }
  }

  int64_t n() const { return n_; }
  double exponent() const { return exponent_; }

 private:
  // h(x) = x^-e on the support [1, n]; HIntegral is its antiderivative with HIntegral(1) = 0.
  double H(double x) const { return std::exp(-exponent_ * std::log(x)); }
  double HIntegral(double x) const;
  double HIntegralInverse(double y) const;

  int64_t n_;
  double exponent_;
  double h_integral_x1_, h_integral_n_, s_;
};

}  // namespace tessera
