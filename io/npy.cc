#include "io/npy.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

static_assert(std::endian::native == std::endian::little,
              "the .npy reader maps little-endian data as is; add byte swaps for this host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

struct DtypeInfo {
  NpyDtype dtype;
  const char* descr;  // what numpy writes on a little-endian host
  const char* name;
  int size;
};

constexpr DtypeInfo kDtypes[] = {
    {NpyDtype::kBool, "|b1", "bool", 1},         {NpyDtype::kInt8, "|i1", "int8", 1},
    {NpyDtype::kUInt8, "|u1", "uint8", 1},       {NpyDtype::kInt16, "<i2", "int16", 2},
    {NpyDtype::kUInt16, "<u2", "uint16", 2},     {NpyDtype::kInt32, "<i4", "int32", 4},
    {NpyDtype::kUInt32, "<u4", "uint32", 4},     {NpyDtype::kInt64, "<i8", "int64", 8},
    {NpyDtype::kUInt64, "<u8", "uint64", 8},     {NpyDtype::kFloat16, "<f2", "float16", 2},
    {NpyDtype::kFloat32, "<f4", "float32", 4},   {NpyDtype::kFloat64, "<f8", "float64", 8},
};

const DtypeInfo& Info(NpyDtype d) {
  for (const DtypeInfo& i : kDtypes)
    if (i.dtype == d) return i;
  return kDtypes[0];  // unreachable: every enumerator is listed
}

// A tiny tokenizer for the header's Python literal. Only what numpy writes is accepted:
// a dict of three keys with string, bool and tuple-of-int values.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view s) : s_(s) {}

  void SkipSpace() {
    while (i_ < s_.size() && absl::ascii_isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    SkipSpace();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool String(std::string* out) {
    SkipSpace();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    const char q = s_[i_++];
    size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(i_, end - i_));
    i_ = end + 1;
    return true;
  }
  bool Bool(bool* out) {
    SkipSpace();
    if (s_.substr(i_, 4) == "True") {
      *out = true;
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      *out = false;
      i_ += 5;
      return true;
    }
    return false;
  }
  bool Int(int64_t* out) {
    SkipSpace();
    size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && absl::ascii_isdigit(static_cast<unsigned char>(s_[i_]))) {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      v = v * 10 + (s_[i_++] - '0');
    }
    if (i_ == start) return false;
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 longs
    *out = v;
    return true;
  }
  // "(a, b, )" or "()" or "(a,)"
  bool Tuple(std::vector<int64_t>* out) {
    if (!Consume('(')) return false;
    out->clear();
    while (!Consume(')')) {
      int64_t v;
      if (!Int(&v)) return false;
      out->push_back(v);
      if (!Consume(',') && !Peek(')')) return false;
    }
    return true;
  }
  bool AtEnd() {
    SkipSpace();
    return i_ == s_.size();
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::DataLossError(absl::StrCat(name, ": not a valid .npy array: ", what));
}

}  // namespace

int NpyDtypeSize(NpyDtype dtype) { return Info(dtype).size; }
const char* NpyDtypeDescr(NpyDtype dtype) { return Info(dtype).descr; }
const char* NpyDtypeName(NpyDtype dtype) { return Info(dtype).name; }

int64_t NpyArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::ShapeString() const {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<NpyArray> ParseNpy(const std::string& name, const char* data, size_t size) {
  if (size < kMagicBytes + 4 || std::memcmp(data, kMagic, kMagicBytes) != 0) {
    return Bad(name, size < kMagicBytes + 4 ? "shorter than the 10-byte preamble"
                                            : "no \\x93NUMPY magic at the start");
  }
  const int major = static_cast<unsigned char>(data[6]);
  const int minor = static_cast<unsigned char>(data[7]);
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return Bad(name, "shorter than the 12-byte preamble");
    uint32_t len;
    std::memcpy(&len, data + 8, 4);
    header_len = len;
    prefix = 12;
  } else {
    return Bad(name, absl::StrCat("format version ", major, ".", minor,
                                  " (this reader knows 1.0, 2.0 and 3.0)"));
  }
  if (prefix + header_len > size) {
    return Bad(name, absl::StrCat("the header says ", header_len, " bytes but the file has ",
                                  size - prefix, " after the preamble (truncated)"));
  }
  const std::string_view text(data + prefix, header_len);
  const std::string quoted = absl::StrCat(
      "header '", absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())), "'");

  HeaderParser p(text);
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false;
  NpyArray out;
  out.name = name;
  if (!p.Consume('{')) return Bad(name, absl::StrCat(quoted, " is not a dict"));
  while (!p.Consume('}')) {
    std::string key;
    if (!p.String(&key) || !p.Consume(':')) {
      return Bad(name, absl::StrCat(quoted, " is not a dict of quoted keys"));
    }
    if (key == "descr") {
      if (!p.String(&descr)) return Bad(name, absl::StrCat(quoted, ": 'descr' is not a string"));
      have_descr = true;
    } else if (key == "fortran_order") {
      if (!p.Bool(&out.fortran_order)) {
        return Bad(name, absl::StrCat(quoted, ": 'fortran_order' is not True or False"));
      }
      have_order = true;
    } else if (key == "shape") {
      if (!p.Tuple(&out.shape)) {
        return Bad(name, absl::StrCat(quoted, ": 'shape' is not a tuple of non-negative ints"));
      }
      have_shape = true;
    } else {
      return Bad(name, absl::StrCat(quoted, ": unknown key '", key, "'"));
    }
    if (!p.Consume(',') && !p.Peek('}')) {
      return Bad(name, absl::StrCat(quoted, ": expected ',' or '}'"));
    }
  }
  if (!p.AtEnd()) return Bad(name, absl::StrCat(quoted, ": text after the dict"));
  if (!have_descr || !have_order || !have_shape) {
    return Bad(name, absl::StrCat(quoted, ": needs the keys 'descr', 'fortran_order', 'shape'"));
  }
  // '<' little-endian, '|' not applicable (1 byte), '=' native (little here).
  std::string canon = descr;
  if (canon.size() == 3 && canon[0] == '=') canon[0] = canon[2] == '1' ? '|' : '<';
  if (canon.size() == 3 && canon[0] == '<' && canon[2] == '1') canon[0] = '|';
  bool known = false;
  for (const DtypeInfo& i : kDtypes) {
    if (canon == i.descr) {
      out.dtype = i.dtype;
      known = true;
    }
  }
  if (!known) {
    if (!descr.empty() && descr[0] == '>') {
      return Bad(name, absl::StrCat("dtype '", descr, "' is big-endian; save it little-endian"));
    }
    return Bad(name, absl::StrCat("dtype '", descr,
                                  "' is not a plain number type (bool, int8..64, uint8..64, "
                                  "float16/32/64)"));
  }
  // Element count without overflow: every product stays below 2^62.
  const size_t data_begin = prefix + header_len;
  const int64_t have = static_cast<int64_t>(size - data_begin);
  int64_t elements = 1;
  bool overflow = false;
  for (int64_t d : out.shape) {
    if (d != 0 && elements > (int64_t{1} << 62) / d) overflow = true;
    elements *= d;
  }
  const int64_t need = overflow ? -1 : elements * NpyDtypeSize(out.dtype);
  if (overflow || need > have) {
    return Bad(name, absl::StrCat("shape ", out.ShapeString(), " of ", NpyDtypeName(out.dtype),
                                  " needs ", overflow ? "more than 2^62" : absl::StrCat(need),
                                  " data bytes, the file has ", have, " (truncated)"));
  }
  if (need < have) {
    return Bad(name, absl::StrCat("shape ", out.ShapeString(), " of ", NpyDtypeName(out.dtype),
                                  " needs ", need, " data bytes, the file has ", have,
                                  " (trailing bytes)"));
  }
  out.data = data + data_begin;
  out.num_bytes = need;
  return out;
}

std::string EncodeNpyHeader(NpyDtype dtype, const std::vector<int64_t>& shape,
                            bool fortran_order) {
  std::string shape_text;
  if (shape.size() == 1) {
    shape_text = absl::StrCat("(", shape[0], ",)");
  } else {
    shape_text = absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  }
  std::string dict = absl::StrCat("{'descr': '", NpyDtypeDescr(dtype), "', 'fortran_order': ",
                                  fortran_order ? "True" : "False", ", 'shape': ", shape_text,
                                  ", }");
  // Version 1.0 holds headers up to 65535 bytes; pad so that magic + length + dict + '\n' is a
  // multiple of 64, as numpy does.
  const bool v1 = dict.size() + 1 + 10 <= 65535;
  const size_t prefix = v1 ? 10 : 12;
  size_t total = prefix + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicBytes);
  out.push_back(static_cast<char>(v1 ? 1 : 2));
  out.push_back(0);
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>((len >> 8) & 0xff));
  if (!v1) {
    out.push_back(static_cast<char>((len >> 16) & 0xff));
    out.push_back(static_cast<char>((len >> 24) & 0xff));
  }
  return out + dict;
}

}  // namespace tessera
