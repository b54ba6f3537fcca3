#include "dense/library_versions.h"

#include "dense/internal/dnnl_gemm.h"

extern "C" char* openblas_get_config(void);

namespace tessera {

std::string BlasLibraryVersion() {
  const char* c = openblas_get_config();
  std::string s = c == nullptr ? "" : c;
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

std::string OneDnnLibraryVersion() { return dense_internal::DnnlVersion(); }

}  // namespace tessera
