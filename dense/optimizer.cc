// Dense optimizers: state management, validation, the host-side scalars of each step, and the
// dispatch of the per-tensor update to its CPU or CUDA twin.
#include "dense/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "dense/internal/common.h"
#include "dense/internal/kernels.h"
#include "dense/internal/optimizer_rules.h"

namespace tessera {
namespace {

using dense_internal::DenseStepScalars;

constexpr char kCudaFile[] = "dense/optimizer_cuda.cu";

// The per-tensor steps, dispatched to the CPU or CUDA twin.
absl::Status SgdStep(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                     const float* g) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return dense_internal::SgdStepCuda(ctx, s, n, w, g);
#endif
  return dense_internal::SgdStepCpu(ctx, s, n, w, g);
}
absl::Status AdagradStep(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                         const float* g, float* sum) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return dense_internal::AdagradStepCuda(ctx, s, n, w, g, sum);
#endif
  return dense_internal::AdagradStepCpu(ctx, s, n, w, g, sum);
}
absl::Status AdamStep(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                      const float* g, float* m, float* v) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return dense_internal::AdamStepCuda(ctx, s, n, w, g, m, v);
#endif
  return dense_internal::AdamStepCpu(ctx, s, n, w, g, m, v);
}

const char* TypeName(DenseOptimizerType type) {
  switch (type) {
    case DenseOptimizerType::kSgd: return "sgd";
    case DenseOptimizerType::kAdagrad: return "adagrad";
    case DenseOptimizerType::kAdam: return "adam";
  }
  return "?";
}

absl::Status ValidateOptions(const DenseOptimizerOptions& o) {
  auto bad = [](const char* field, float value, const char* rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("DenseOptimizerOptions.", field, " = ", value, " ", rule));
  };
  if (!(o.weight_decay >= 0.0f && std::isfinite(o.weight_decay))) {
    return bad("weight_decay", o.weight_decay, "must be finite and >= 0");
  }
  if (o.type == DenseOptimizerType::kSgd) return absl::OkStatus();
  if (!(o.eps > 0.0f && std::isfinite(o.eps))) return bad("eps", o.eps, "must be finite and > 0");
  if (o.type == DenseOptimizerType::kAdagrad) {
    if (!(o.adagrad_initial >= 0.0f && std::isfinite(o.adagrad_initial))) {
      return bad("adagrad_initial", o.adagrad_initial, "must be finite and >= 0");
    }
    return absl::OkStatus();
  }
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f)) return bad("beta1", o.beta1, "must be in [0, 1)");
  if (!(o.beta2 >= 0.0f && o.beta2 < 1.0f)) return bad("beta2", o.beta2, "must be in [0, 1)");
  return absl::OkStatus();
}

class DenseOptimizerImpl : public DenseOptimizer {
 public:
  DenseOptimizerImpl(const DenseOptimizerOptions& options, std::vector<Parameter*> params,
                     const DeviceContext& ctx)
      : options_(options), params_(std::move(params)), ctx_(ctx) {}

  // Allocates the state tensors, each filled with its initial value.
  absl::Status AllocateState() {
    std::vector<std::string> names;
    if (options_.type == DenseOptimizerType::kAdagrad) names = {"sum"};
    if (options_.type == DenseOptimizerType::kAdam) names = {"exp_avg", "exp_avg_sq"};
    const float init =
        options_.type == DenseOptimizerType::kAdagrad ? options_.adagrad_initial : 0.0f;
    for (Parameter* p : params_) {
      for (const std::string& n : names) {
        Parameter s;
        s.name = absl::StrCat(p->name, ".", n);
        TESSERA_ASSIGN_OR_RETURN(
            s.value, Buffer::Allocate(p->value.device(), DType::kF32, p->value.shape()));
        if (init != 0.0f) {
          std::vector<float> host(static_cast<size_t>(s.value.numel()), init);
          if (s.value.device() == Device::kCpu) {
            std::copy(host.begin(), host.end(), s.value.data<float>());
          } else {
            TESSERA_RETURN_IF_ERROR(CudaMemcpy(s.value.raw(), host.data(), s.value.bytes()));
          }
        }
        state_.push_back(std::move(s));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Step(float lr) override {
    if (!(lr >= 0.0f && std::isfinite(lr))) {
      return absl::InvalidArgumentError(
          absl::StrCat("DenseOptimizer(", TypeName(options_.type), ")::Step: lr = ", lr,
                       " must be finite and >= 0"));
    }
#if !TESSERA_HAVE_CUDA
    if (ctx_.is_cuda()) return dense_internal::NoCudaTwin("DenseOptimizer::Step", kCudaFile);
#endif
    DenseStepScalars s;
    s.lr = lr;
    s.weight_decay = options_.weight_decay;
    s.eps = options_.eps;
    s.beta1 = options_.beta1;
    s.beta2 = options_.beta2;
    const int64_t t = steps_ + 1;
    if (options_.type == DenseOptimizerType::kAdam) {
      const double bc1 = 1.0 - std::pow(static_cast<double>(options_.beta1), t);
      const double bc2 = 1.0 - std::pow(static_cast<double>(options_.beta2), t);
      s.step_size = static_cast<float>(static_cast<double>(lr) / bc1);
      s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter* p = params_[i];
      const int64_t n = p->value.numel();
      float* w = p->value.data<float>();
      const float* g = p->grad.data<float>();
      switch (options_.type) {
        case DenseOptimizerType::kSgd:
          TESSERA_RETURN_IF_ERROR(SgdStep(ctx_, s, n, w, g));
          break;
        case DenseOptimizerType::kAdagrad:
          TESSERA_RETURN_IF_ERROR(
              AdagradStep(ctx_, s, n, w, g, state_[i].value.data<float>()));
          break;
        case DenseOptimizerType::kAdam:
          TESSERA_RETURN_IF_ERROR(AdamStep(
              ctx_, s, n, w, g, state_[2 * i].value.data<float>(),
              state_[2 * i + 1].value.data<float>()));
          break;
      }
    }
    steps_ = t;
    return absl::OkStatus();
  }

  std::vector<Parameter*> state() override {
    std::vector<Parameter*> out;
    for (Parameter& s : state_) out.push_back(&s);
    return out;
  }
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t steps) override { steps_ = steps; }

 private:
  DenseOptimizerOptions options_;
  std::vector<Parameter*> params_;
  DeviceContext ctx_;
  std::vector<Parameter> state_;  // per parameter, in order: its state tensors
  int64_t steps_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DenseOptimizer>> CreateDenseOptimizer(
    const DenseOptimizerOptions& options, std::vector<Parameter*> params,
    const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(ValidateOptions(options));
  std::set<const Parameter*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter* p = params[i];
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("CreateDenseOptimizer: params[", i,
                                                     "] is null"));
    }
    if (!seen.insert(p).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CreateDenseOptimizer: parameter '", p->name, "' is listed twice (it would be "
          "updated twice per step)"));
    }
    if (p->value.empty() || p->value.dtype() != DType::kF32 || p->grad.empty() ||
        p->grad.dtype() != DType::kF32 || p->grad.numel() != p->value.numel() ||
        p->value.device() != ctx.device || p->grad.device() != ctx.device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CreateDenseOptimizer: parameter '", p->name, "' needs f32 value and grad of equal ",
          "size on ", DeviceName(ctx.device), " (value ", p->value.DebugString(), ", grad ",
          p->grad.DebugString(), ")"));
    }
  }
  auto opt = std::make_unique<DenseOptimizerImpl>(options, std::move(params), ctx);
  TESSERA_RETURN_IF_ERROR(opt->AllocateState());
  return std::unique_ptr<DenseOptimizer>(std::move(opt));
}

}  // namespace tessera
