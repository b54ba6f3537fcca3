// EscapeBytes: input bytes made safe to quote in an error message. Printable ASCII stays as it
// is, so does well-formed UTF-8 (names with accents, emoji; not U+FEFF); a backslash is doubled; \n \r \t
// are written so; every other byte (controls, DEL, C1 controls, malformed UTF-8) becomes \xNN.
// At most `max_bytes` input bytes are shown, then "..." (a multi-byte character is not split).
// Messages never carry raw control characters to a terminal or a log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

inline std::string EscapeBytes(std::string_view in, size_t max_bytes = 64) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(in.size() < max_bytes ? in.size() : max_bytes);
  auto hex = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  size_t i = 0;
  while (i < in.size() && i < max_bytes) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence of 2 to 4 bytes (no overlong forms, surrogates or C1
    // controls, nor the invisible byte-order mark U+FEFF) is kept whole.
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool ok = len > 0 && i + len <= in.size();
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(in[i + k]) & 0xC0) == 0x80;
    if (ok) {
      const unsigned char c1 = static_cast<unsigned char>(in[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 >= 0x90) || (c == 0xC2 && c1 < 0xA0) ||
          (c == 0xEF && c1 == 0xBB && static_cast<unsigned char>(in[i + 2]) == 0xBF))
        ok = false;
    }
    if (!ok) {
      hex(c);
      ++i;
      continue;
    }
    out.append(in.data() + i, len);
    i += len;
  }
  if (i < in.size()) out += "...";
  return out;
}

}  // namespace tessera
