#include "io/zipf.h"

#include "core/status.h"

namespace tessera {
namespace {

// log1p(x) / x and expm1(x) / x, continuous through x = 0 (exponent 1 is the limit case).
double Log1pOverX(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double Expm1OverX(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

}  // namespace

ZipfSampler::ZipfSampler(int64_t n, double exponent) : n_(n), exponent_(exponent) {
  TESSERA_CHECK(n >= 1) << "ZipfSampler needs n >= 1, got " << n;
  TESSERA_CHECK(exponent >= 0) << "ZipfSampler needs exponent >= 0, got " << exponent;
  h_integral_x1_ = HIntegral(1.5) - 1.0;
  h_integral_n_ = HIntegral(static_cast<double>(n) + 0.5);
  s_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
}

// (x^(1-e) - 1) / (1 - e), written so that e -> 1 gives log(x) without cancellation.
double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Expm1OverX((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::HIntegralInverse(double y) const {
  double t = y * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;  // rounding at the far end of the support
  return std::exp(Log1pOverX(t) * y);
}

}  // namespace tessera
