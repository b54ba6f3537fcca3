// Helpers for the CUDA-twin tests: a fixture that skips without a device and owns a CudaContext,
// host <-> device copies, NaN poisoning of outputs (so an element a kernel fails to write shows
// up as a mismatch), and tolerance comparisons that name the first bad entries.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace tessera::cuda_testing {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: this CUDA-twin test needs a GPU (run bench/gpu_check.sh "
                      "on a machine with one)";
    }
    auto c = CudaContext::Create(CudaContextOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    cuda_ = std::move(c).value();
  }
  const DeviceContext& gpu() const { return cuda_->context(); }
  DeviceContext cpu() const { return DeviceContext::Cpu(); }

  std::unique_ptr<CudaContext> cuda_;
};

// A device copy of `v` (owning Buffer of 1-D shape).
template <typename T>
Buffer ToDevice(const std::vector<T>& v) {
  const DType dt =
      sizeof(T) == 8 ? DType::kI64 : (std::is_same_v<T, float> ? DType::kF32 : DType::kI32);
  auto b =
      Buffer::Allocate(Device::kCuda, dt, {static_cast<int64_t>(std::max<size_t>(1, v.size()))});
  TESSERA_CHECK_OK(b.status());
  if (!v.empty()) {
    TESSERA_CHECK_OK(CudaMemcpy(b->raw(), v.data(), sizeof(T) * v.size()));
  }
  return std::move(b).value();
}

// A device buffer of n elements of T filled with 0xFF bytes: NaN for floats, -1 for integers.
template <typename T>
Buffer Poisoned(int64_t n) {
  std::vector<T> host(static_cast<size_t>(std::max<int64_t>(1, n)));
  std::memset(host.data(), 0xFF, sizeof(T) * host.size());
  return ToDevice(host);
}

template <typename T>
std::vector<T> ToHost(const Buffer& b, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  if (n > 0) {
    TESSERA_CHECK_OK(CudaMemcpy(host.data(), b.raw(), sizeof(T) * n));
  }
  return host;
}
template <typename T>
std::vector<T> ToHost(const T* device, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  if (n > 0) {
    TESSERA_CHECK_OK(CudaMemcpy(host.data(), device, sizeof(T) * n));
  }
  return host;
}

// n floats uniform in [lo, hi) (never all zero), a pure function of (seed, n).
inline std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  CounterRng rng(seed, 11);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * rng.NextUniform();
  return v;
}

// Expects |got - want| <= atol + rtol * |want| everywhere (NaN fails), reporting up to 5 entries.
inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                       double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(static_cast<double>(want[i])))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu " << want[i]
                      << " (rtol " << rtol << ", atol " << atol << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " entries off";
}

}  // namespace tessera::cuda_testing
