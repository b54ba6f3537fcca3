#include "io/internal/criteo_parse.h"

#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/escape.h"

namespace tessera::io_internal {
namespace {

// Most Criteo integers are small counts; a table makes the common case one load instead of a
// log1p call (13 per record add up at millions of records per second).
constexpr int64_t kTableSize = 1 << 14;

const std::array<float, kTableSize>& Log1pTable() {
  static const std::array<float, kTableSize> table = [] {
    std::array<float, kTableSize> t{};
    for (int64_t i = 0; i < kTableSize; ++i) t[i] = static_cast<float>(std::log1p(double(i)));
    return t;
  }();
  return table;
}

std::string FieldName(int field) {
  if (field == 0) return "label";
  if (field <= kCriteoNumDense) return absl::StrCat("I", field);
  return absl::StrCat("C", field - kCriteoNumDense);
}

// Hex digit values; kNotHexBit marks every other byte, so a field is checked by OR-ing its bytes.
constexpr uint32_t kNotHexBit = 0x100;
constexpr std::array<uint32_t, 256> kHexValue = [] {
  std::array<uint32_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if (c >= '0' && c <= '9') {
      t[c] = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      t[c] = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      t[c] = c - 'A' + 10;
    } else {
      t[c] = kNotHexBit;
    }
  }
  return t;
}();

// Parses a decimal integer with optional sign; in CSV also an integral float (`12.0`, `12.`).
// Returns kNone, kNotInteger or kOutOfRange.
inline FieldErrorKind ParseInteger(const char* p, const char* end, bool csv, int64_t* out) {
  bool neg = false;
  if (p < end && (*p == '-' || *p == '+')) {
    neg = *p == '-';
    ++p;
  }
  if (p == end || static_cast<unsigned>(*p - '0') > 9) return FieldErrorKind::kNotInteger;
  uint64_t v = 0;
  bool overflow = false;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (; p < end; ++p) {
    unsigned d = static_cast<unsigned>(*p - '0');
    if (d > 9) break;
    if (v > (kMax - d) / 10) overflow = true;
    v = v * 10 + d;
  }
  if (p < end) {
    if (!csv || *p != '.') return FieldErrorKind::kNotInteger;
    for (++p; p < end; ++p) {
      if (*p != '0') return FieldErrorKind::kNotInteger;
    }
  }
  if (overflow) return FieldErrorKind::kOutOfRange;
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return FieldErrorKind::kNone;
}

}  // namespace

float CriteoDenseTransform(int64_t x) {
  if (x <= 0) return 0.0f;
  if (x < kTableSize) return Log1pTable()[x];
  return static_cast<float>(std::log1p(static_cast<double>(x)));
}

std::string FieldErrorMessage(const FieldError& error) {
  // Input bytes are escaped: a binary file read as text must not put control bytes on a terminal.
  const std::string shown = EscapeBytes(error.value, 64);
  switch (error.kind) {
    case FieldErrorKind::kNone:
      return "ok";
    case FieldErrorKind::kBadLabel:
      // A whole line in the label field: the file's separator is not the one read with.
      if (error.value.find(',') != std::string::npos) {
        return absl::StrCat("field label: '", shown, "' is not 0 or 1; the line looks "
                            "comma-separated: read it as CSV (data.format: criteo_csv, or "
                            "tessera-data convert --format csv)");
      }
      if (error.value.find('\t') != std::string::npos) {
        return absl::StrCat("field label: '", shown, "' is not 0 or 1; the line looks "
                            "tab-separated: read it as TSV (data.format: criteo_tsv, or "
                            "tessera-data convert --format tsv)");
      }
      return absl::StrCat("field label: '", shown, "' is not 0 or 1");
    case FieldErrorKind::kNotInteger:
      return absl::StrCat("field ", FieldName(error.field), ": '", shown, "' is not an integer");
    case FieldErrorKind::kOutOfRange:
      return absl::StrCat("field ", FieldName(error.field), ": '", shown,
                          "' is out of range for a 64-bit integer");
    case FieldErrorKind::kNotHex:
      return absl::StrCat("field ", FieldName(error.field), ": '", shown,
                          "' is not a hex id of 1 to 8 digits");
    case FieldErrorKind::kTooManyFields:
      return absl::StrCat(error.field, " fields, expected at most ", kCriteoNumFields);
  }
  return "unknown error";
}

CriteoLineParser::CriteoLineParser(CriteoTextFormat format, const int64_t* rows)
    : sep_(format == CriteoTextFormat::kTsv ? '\t' : ','), csv_(format == CriteoTextFormat::kCsv) {
  for (int k = 0; k < kCriteoNumSparse; ++k) {
    if (rows[k] >= (int64_t{1} << 32)) {
      rows32_[k] = 0;
      fastmod_[k] = 0;
    } else {
      rows32_[k] = static_cast<uint32_t>(rows[k]);
      fastmod_[k] = ~uint64_t{0} / rows32_[k] + 1;
    }
  }
}

// Lemire, Kaser, Kurz, "Faster remainder by direct computation" (2019): for 32-bit a and d,
// a mod d = ((M * a mod 2^64) * d) >> 64 with M = floor((2^64 - 1) / d) + 1. A division per
// categorical field would otherwise cost more than parsing it.
inline uint32_t CriteoLineParser::Reduce(int k, uint32_t value) const {
  if (rows32_[k] == 0) return value;
  uint64_t low = fastmod_[k] * value;
  return static_cast<uint32_t>((static_cast<unsigned __int128>(low) * rows32_[k]) >> 64);
}

// One pass per field: each field type scans its own characters up to the separator while it
// parses them (the common shapes, plain integers and hex ids, never look at a byte twice); the
// rare shapes (a `+` sign, CSV's `12.0`, errors) fall back to finding the field end first.
FieldError CriteoLineParser::Parse(std::string_view line, float* label, float* dense,
                                   uint32_t* ids) const {
  const char* p = line.data();
  const char* end = p + line.size();
  if (end > p && end[-1] == '\r') --end;
  FieldError err;
  auto field_end = [&](const char* r) {
    while (r < end && *r != sep_) ++r;
    return r;
  };
  auto fail = [&](FieldErrorKind kind, int field, const char* begin) {
    err.kind = kind;
    err.field = field;
    err.value = std::string_view(begin, field_end(begin) - begin);
    return err;
  };

  // Label.
  const char* q = field_end(p);
  int64_t lv = -1;
  if (q - p == 1 && (*p == '0' || *p == '1')) {
    lv = *p - '0';
  } else if (csv_ && q > p) {
    if (ParseInteger(p, q, true, &lv) != FieldErrorKind::kNone) lv = -1;
  }
  if (lv != 0 && lv != 1) return fail(FieldErrorKind::kBadLabel, 0, p);
  *label = static_cast<float>(lv);
  bool more = q < end;
  p = q + 1;

  // I1..I13.
  int j = 0;
  for (; j < kCriteoNumDense && more; ++j) {
    const char* r = p;
    const bool neg = r < end && *r == '-';
    r += neg;
    const char* digits = r;
    uint64_t v = 0;
    while (r < end && static_cast<unsigned>(*r - '0') <= 9) {
      v = v * 10 + static_cast<unsigned>(*r - '0');
      ++r;
    }
    int64_t x;
    // Fast path: [-]digits (at most 18, so no overflow) or an empty field.
    if ((r == end || *r == sep_) && r - digits <= 18 && (r > digits || !neg)) {
      x = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    } else {
      r = field_end(p);
      FieldErrorKind kind = ParseInteger(p, r, csv_, &x);
      if (kind != FieldErrorKind::kNone) return fail(kind, 1 + j, p);
    }
    dense[j] = CriteoDenseTransform(x);  // empty: x = 0 -> 0
    more = r < end;
    p = r + 1;
  }
  for (; j < kCriteoNumDense; ++j) dense[j] = 0.0f;

  // C1..C26.
  int k = 0;
  for (; k < kCriteoNumSparse && more; ++k) {
    const char* r = p;
    uint32_t v = 0, bad = 0;
    while (r < end && *r != sep_) {
      const uint32_t t = kHexValue[static_cast<unsigned char>(*r)];
      bad |= t;
      v = (v << 4) | (t & 0xF);
      ++r;
    }
    if (r - p > 8 || (bad & kNotHexBit)) {
      return fail(FieldErrorKind::kNotHex, 1 + kCriteoNumDense + k, p);
    }
    ids[k] = r > p ? Reduce(k, v) : 0;
    more = r < end;
    p = r + 1;
  }
  for (; k < kCriteoNumSparse; ++k) ids[k] = 0;

  if (more) {  // a 41st field: count them all for the message
    int n = kCriteoNumFields + 1;
    for (const char* r = p; r < end; ++r) n += (*r == sep_);
    err.kind = FieldErrorKind::kTooManyFields;
    err.field = n;
  }
  return err;
}

}  // namespace tessera::io_internal
