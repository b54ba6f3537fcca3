// NumPy array files: the .npy format (NEP 1, versions 1.0, 2.0 and 3.0) and the arrays stored
// inside an uncompressed .npz archive (np.savez). docs/FORMATS.md "NumPy .npy / .npz" is the
// reference; this is what the MLPerf DLRM-DCNv2 data (io/mlperf_npy.h) is made of.
//
// A .npy file is
//   "\x93NUMPY" major minor, then the header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0),
//   then an ASCII (3.0: UTF-8) Python dict literal
//     {'descr': '<f4', 'fortran_order': False, 'shape': (100, 13), }
//   padded with spaces and a final '\n' so the data starts at a multiple of 64 (older writers:
//   16), then the raw elements, C order (last index fastest) unless fortran_order.
//
// Parsing never copies the data: an NpyArray points into bytes the caller keeps alive (a
// MappedFile). Errors are DataLoss naming `name` (the file, or "archive.npz:member.npy").
// Thread-safety: plain values; parsing has no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

enum class NpyDtype { kBool, kInt8, kUInt8, kInt16, kUInt16, kInt32, kUInt32, kInt64, kUInt64,
                      kFloat16, kFloat32, kFloat64 };

// Bytes per element.
int NpyDtypeSize(NpyDtype dtype);
// The little-endian descr numpy writes for it: "<f4", "|u1", ...
const char* NpyDtypeDescr(NpyDtype dtype);
// A readable name for messages: "float32", "int32", ...
const char* NpyDtypeName(NpyDtype dtype);

// One array as a view into its container's bytes.
struct NpyArray {
  std::string name;            // for messages: the file or "archive.npz:member.npy"
  NpyDtype dtype = NpyDtype::kFloat32;
  std::vector<int64_t> shape;  // () is a scalar (one element)
  bool fortran_order = false;  // true: first index fastest
  const char* data = nullptr;  // the first element (unaligned access is the caller's concern)
  int64_t num_bytes = 0;       // element size * product(shape)

  int64_t num_elements() const;
  // "(100, 13)"
  std::string ShapeString() const;
};

// Parses the .npy bytes [data, data + size) named `name`. DataLoss for: no "\x93NUMPY" magic, an
// unknown version, a header that runs past the end, a malformed header dict (missing or
// unknown keys, bad values), a big-endian or unsupported descr, negative dims, and a data section
// whose size is not exactly what the shape needs ("truncated" or "trailing bytes").
absl::StatusOr<NpyArray> ParseNpy(const std::string& name, const char* data, size_t size);

// The header (magic, version, dict, padding to 64 bytes) numpy would write for such an array:
// version 1.0 when the dict fits, else 2.0. Used by writers and tests that make .npy files.
std::string EncodeNpyHeader(NpyDtype dtype, const std::vector<int64_t>& shape,
                            bool fortran_order = false);

}  // namespace tessera
