// Writers of .npy / .npz bytes for tests (no numpy needed): WriteNpy makes a file exactly as
// np.save would, WriteNpz an uncompressed ZIP of members as np.savez would (ZIP_STORED, CRC-32,
// no ZIP64: test archives are small).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "io/npy.h"

namespace tessera::testing_io {

// The .npy bytes of an array whose raw little-endian elements are `raw`.
inline std::string NpyBytes(NpyDtype dtype, const std::vector<int64_t>& shape,
                            const std::string& raw, bool fortran_order = false) {
  return EncodeNpyHeader(dtype, shape, fortran_order) + raw;
}

template <typename T>
std::string RawBytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline uint32_t Crc32(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char ch : s) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

// An uncompressed ZIP archive of (name, bytes) members, as np.savez writes.
inline std::string ZipBytes(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out, central;
  auto put16 = [](std::string* s, uint16_t v) { s->append(reinterpret_cast<char*>(&v), 2); };
  auto put32 = [](std::string* s, uint32_t v) { s->append(reinterpret_cast<char*>(&v), 4); };
  for (const auto& [name, bytes] : members) {
    const uint32_t offset = static_cast<uint32_t>(out.size()), crc = Crc32(bytes);
    const uint32_t size = static_cast<uint32_t>(bytes.size());
    put32(&out, 0x04034b50);
    put16(&out, 20), put16(&out, 0), put16(&out, 0), put16(&out, 0), put16(&out, 0x21);
    put32(&out, crc), put32(&out, size), put32(&out, size);
    put16(&out, static_cast<uint16_t>(name.size())), put16(&out, 0);
    out += name;
    out += bytes;
    put32(&central, 0x02014b50);
    put16(&central, 20), put16(&central, 20), put16(&central, 0), put16(&central, 0);
    put16(&central, 0), put16(&central, 0x21);
    put32(&central, crc), put32(&central, size), put32(&central, size);
    put16(&central, static_cast<uint16_t>(name.size())), put16(&central, 0), put16(&central, 0);
    put16(&central, 0), put16(&central, 0), put32(&central, 0), put32(&central, offset);
    central += name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(&out, 0x06054b50);
  put16(&out, 0), put16(&out, 0);
  put16(&out, static_cast<uint16_t>(members.size())), put16(&out, static_cast<uint16_t>(members.size()));
  put32(&out, static_cast<uint32_t>(central.size())), put32(&out, cd_offset);
  put16(&out, 0);
  return out;
}

}  // namespace tessera::testing_io
