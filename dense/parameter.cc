#include "dense/parameter.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<Parameter> MakeParameter(std::string name, std::vector<int64_t> shape,
                                        Device device) {
  // value + grad, f32: the element count times 8 must fit before anything is allocated.
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && elements > std::numeric_limits<int64_t>::max() / 8 / d))
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": shape [", absl::StrJoin(shape, ", "), "] is negative or overflows"));
    elements *= d;
  }
  auto allocate = [&]() -> absl::StatusOr<Buffer> {
    absl::StatusOr<Buffer> b = Buffer::Allocate(device, DType::kF32, shape);
    if (!b.ok())
      return absl::ResourceExhaustedError(absl::StrCat(
          name, ": cannot allocate ", elements * 4, " bytes for shape [",
          absl::StrJoin(shape, ", "), "] (", b.status().message(), ")"));
    return b;
  };
  Parameter p;
  TESSERA_ASSIGN_OR_RETURN(p.value, allocate());
  TESSERA_ASSIGN_OR_RETURN(p.grad, allocate());
  p.name = std::move(name);
  return p;
}

}  // namespace tessera
