#include "io/internal/npz.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::io_internal {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr size_t kEocdBytes = 22, kLocatorBytes = 20, kZip64EocdBytes = 56;
constexpr size_t kCentralBytes = 46, kLocalBytes = 30;

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": not a valid .npz (ZIP) archive: ", what));
}

}  // namespace

absl::StatusOr<std::vector<ZipMember>> ListZipMembers(const std::string& path, const char* data,
                                                      size_t size) {
  // The end-of-central-directory record sits in the last 22 + 65535 (comment) bytes.
  if (size < kEocdBytes) return Corrupt(path, "shorter than a ZIP end record (truncated?)");
  int64_t eocd = -1;
  const size_t lowest = size > kEocdBytes + 65535 ? size - kEocdBytes - 65535 : 0;
  for (size_t at = size - kEocdBytes + 1; at-- > lowest;) {
    if (Load<uint32_t>(data + at) == kEocdSig) {
      eocd = static_cast<int64_t>(at);
      break;
    }
  }
  if (eocd < 0) {
    return Corrupt(path, "no end-of-central-directory record (not a ZIP file, or truncated)");
  }
  const char* e = data + eocd;
  if (Load<uint16_t>(e + 4) != 0 || Load<uint16_t>(e + 6) != 0) {
    return Corrupt(path, "a multi-disk archive");
  }
  uint64_t entries = Load<uint16_t>(e + 10);
  uint64_t cd_size = Load<uint32_t>(e + 12);
  uint64_t cd_offset = Load<uint32_t>(e + 16);
  if (entries == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
    // ZIP64: the locator precedes the end record and points at the ZIP64 end record.
    if (eocd < static_cast<int64_t>(kLocatorBytes) ||
        Load<uint32_t>(data + eocd - kLocatorBytes) != kZip64LocatorSig) {
      return Corrupt(path, "ZIP64 sizes without a ZIP64 locator");
    }
    const uint64_t z = Load<uint64_t>(data + eocd - kLocatorBytes + 8);
    if (z + kZip64EocdBytes > size || Load<uint32_t>(data + z) != kZip64EocdSig) {
      return Corrupt(path, "the ZIP64 end record lies outside the file");
    }
    entries = Load<uint64_t>(data + z + 32);
    cd_size = Load<uint64_t>(data + z + 40);
    cd_offset = Load<uint64_t>(data + z + 48);
  }
  if (cd_offset + cd_size > size) {
    return Corrupt(path, absl::StrCat("the central directory [", cd_offset, ", ",
                                      cd_offset + cd_size, ") lies outside the file of ", size,
                                      " bytes (truncated)"));
  }
  std::vector<ZipMember> out;
  size_t at = cd_offset;
  const size_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < entries; ++i) {
    if (at + kCentralBytes > cd_end || Load<uint32_t>(data + at) != kCentralSig) {
      return Corrupt(path, absl::StrCat("central directory entry ", i, " is damaged"));
    }
    const char* c = data + at;
    const uint16_t flags = Load<uint16_t>(c + 8), method = Load<uint16_t>(c + 10);
    uint64_t csize = Load<uint32_t>(c + 20), usize = Load<uint32_t>(c + 24);
    const uint16_t name_len = Load<uint16_t>(c + 28), extra_len = Load<uint16_t>(c + 30);
    const uint16_t comment_len = Load<uint16_t>(c + 32);
    uint64_t local = Load<uint32_t>(c + 42);
    if (at + kCentralBytes + name_len + extra_len + comment_len > cd_end) {
      return Corrupt(path, absl::StrCat("central directory entry ", i, " runs past its end"));
    }
    ZipMember m;
    m.name.assign(c + kCentralBytes, name_len);
    // ZIP64 extra field (id 1): the 8-byte values of whichever 32-bit fields are 0xffffffff, in
    // the order uncompressed size, compressed size, local header offset.
    const char* x = c + kCentralBytes + name_len;
    const char* x_end = x + extra_len;
    while (x + 4 <= x_end) {
      const uint16_t id = Load<uint16_t>(x), len = Load<uint16_t>(x + 2);
      const char* v = x + 4;
      if (v + len > x_end) break;
      if (id == 1) {
        const char* v_end = v + len;
        if (usize == 0xffffffffu && v + 8 <= v_end) usize = Load<uint64_t>(v), v += 8;
        if (csize == 0xffffffffu && v + 8 <= v_end) csize = Load<uint64_t>(v), v += 8;
        if (local == 0xffffffffu && v + 8 <= v_end) local = Load<uint64_t>(v), v += 8;
      }
      x += 4 + len;
    }
    if (flags & 1) return Corrupt(path, absl::StrCat("member ", m.name, " is encrypted"));
    if (method != 0) {
      return absl::DataLossError(absl::StrCat(
          path, ": member ", m.name, " is compressed (ZIP method ", method,
          ", as np.savez_compressed writes): it cannot be memory-mapped; re-save with np.savez"));
    }
    if (csize != usize) {
      return Corrupt(path, absl::StrCat("stored member ", m.name, " has compressed size ", csize,
                                        " != size ", usize));
    }
    if (local + kLocalBytes > size || Load<uint32_t>(data + local) != kLocalSig) {
      return Corrupt(path, absl::StrCat("the local header of ", m.name, " is damaged"));
    }
    const uint64_t begin = local + kLocalBytes + Load<uint16_t>(data + local + 26) +
                           Load<uint16_t>(data + local + 28);
    if (begin + usize > size) {
      return Corrupt(path, absl::StrCat("member ", m.name, " [", begin, ", ", begin + usize,
                                        ") runs past the end of the file (", size,
                                        " bytes: truncated)"));
    }
    m.offset = static_cast<int64_t>(begin);
    m.size = static_cast<int64_t>(usize);
    out.push_back(std::move(m));
    at += kCentralBytes + name_len + extra_len + comment_len;
  }
  return out;
}

}  // namespace tessera::io_internal
