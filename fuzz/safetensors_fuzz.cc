// The safetensors reader on arbitrary bytes (in memory). Every tensor it accepts is read whole,
// through the typed pointer its dtype implies, so an out-of-range or misaligned view is caught
// by ASan/UBSan.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "trainer/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto file = SafetensorsFile::FromBuffer(bytes, "fuzz.safetensors");
  if (!file.ok()) {
    fuzz::CheckMessage(file.status());
    return 0;
  }
  volatile uint64_t sink = 0;
  for (const TensorView& t : (*file)->tensors()) {
    if ((*file)->Find(t.name) == nullptr) std::abort();
    const int64_t n = t.num_elements();
    switch (t.dtype) {
      case SafetensorsDtype::kF32:
        for (int64_t i = 0; i < n; ++i) sink = sink + static_cast<uint64_t>(t.f32()[i] != 0.0f);
        break;
      case SafetensorsDtype::kI64:
        for (int64_t i = 0; i < n; ++i) sink = sink + static_cast<const int64_t*>(t.data)[i];
        break;
      case SafetensorsDtype::kI32:
        for (int64_t i = 0; i < n; ++i) sink = sink + static_cast<const int32_t*>(t.data)[i];
        break;
      default:
        for (int64_t i = 0; i < n; ++i) sink = sink + static_cast<const uint16_t*>(t.data)[i];
    }
    absl::StatusOr<const TensorView*> got = (*file)->Get(t.name, SafetensorsDtype::kF32, {1});
    if (!got.ok()) fuzz::CheckMessage(got.status());
  }
  return 0;
}
