#include "io/internal/criteo_parse.h"

#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

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

inline int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

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
  std::string_view v = error.value;
  std::string shown(v.substr(0, 64));
  if (v.size() > 64) shown += "...";
  switch (error.kind) {
    case FieldErrorKind::kNone:
      return "ok";
    case FieldErrorKind::kBadLabel:
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

FieldError CriteoLineParser::Parse(std::string_view line, float* label, float* dense,
                                   uint32_t* ids) const {
  const char* p = line.data();
  const char* end = p + line.size();
  if (end > p && end[-1] == '\r') --end;
  FieldError err;
  int field = 0;
  while (true) {
    const char* q = p;
    while (q < end && *q != sep_) ++q;
    if (field >= kCriteoNumFields) {
      // Count the fields for the message; the line is bad either way.
      int n = field + 1;
      for (const char* r = q; r < end; ++r) n += (*r == sep_);
      err.kind = FieldErrorKind::kTooManyFields;
      err.field = n;
      err.value = std::string_view();
      return err;
    }
    if (field == 0) {
      int64_t v = -1;
      if (q - p == 1 && (*p == '0' || *p == '1')) {
        v = *p - '0';
      } else if (csv_ && q > p) {
        if (ParseInteger(p, q, true, &v) != FieldErrorKind::kNone) v = -1;
      }
      if (v != 0 && v != 1) {
        err.kind = FieldErrorKind::kBadLabel;
        err.value = std::string_view(p, q - p);
        return err;
      }
      *label = static_cast<float>(v);
    } else if (field <= kCriteoNumDense) {
      float d = 0.0f;
      if (q > p) {
        int64_t v;
        FieldErrorKind kind = ParseInteger(p, q, csv_, &v);
        if (kind != FieldErrorKind::kNone) {
          err.kind = kind;
          err.field = field;
          err.value = std::string_view(p, q - p);
          return err;
        }
        d = CriteoDenseTransform(v);
      }
      dense[field - 1] = d;
    } else {
      const int k = field - 1 - kCriteoNumDense;
      uint32_t id = 0;
      if (q > p) {
        const int64_t len = q - p;
        uint32_t v = 0;
        bool bad = len > 8;
        for (const char* r = p; r < q && !bad; ++r) {
          int h = HexDigit(*r);
          bad = h < 0;
          v = (v << 4) | static_cast<uint32_t>(h);
        }
        if (bad) {
          err.kind = FieldErrorKind::kNotHex;
          err.field = field;
          err.value = std::string_view(p, q - p);
          return err;
        }
        id = Reduce(k, v);
      }
      ids[k] = id;
    }
    ++field;
    if (q >= end) break;
    p = q + 1;
  }
  // Short row: the missing trailing fields are empty.
  for (; field < kCriteoNumFields; ++field) {
    if (field <= kCriteoNumDense) {
      dense[field - 1] = 0.0f;
    } else {
      ids[field - 1 - kCriteoNumDense] = 0;
    }
  }
  return err;
}

}  // namespace tessera::io_internal
