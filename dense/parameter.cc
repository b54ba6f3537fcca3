#include "dense/parameter.h"

#include <utility>

#include "core/status.h"

namespace tessera {

Parameter MakeParameter(std::string name, std::vector<int64_t> shape, Device device) {
  Parameter p;
  auto value = Buffer::Allocate(device, DType::kF32, shape);
  TESSERA_CHECK(value.ok()) << name << ": " << value.status().ToString();
  auto grad = Buffer::Allocate(device, DType::kF32, shape);
  TESSERA_CHECK(grad.ok()) << name << ": " << grad.status().ToString();
  p.name = std::move(name);
  p.value = std::move(value).value();
  p.grad = std::move(grad).value();
  return p;
}

}  // namespace tessera
