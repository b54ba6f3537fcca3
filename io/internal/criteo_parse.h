// The hand-written Criteo line parser behind io/criteo_text.h (io/ internal). One pass over the
// line, no allocation, no locale; errors are returned as a small struct and turned into text
// only when a record is bad.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/criteo_text.h"

namespace tessera::io_internal {

enum class FieldErrorKind { kNone, kBadLabel, kNotInteger, kOutOfRange, kNotHex, kTooManyFields };

struct FieldError {
  FieldErrorKind kind = FieldErrorKind::kNone;
  int field = 0;           // 0 = label, 1..13 = I1..I13, 14..39 = C1..C26; fields seen if too many
  std::string_view value;  // the offending field's text (points into the line)
  bool ok() const { return kind == FieldErrorKind::kNone; }
};

// "field I3: 'abc' is not an integer" (the value is truncated to 64 characters).
std::string FieldErrorMessage(const FieldError& error);

// log(1 + max(x, 0)) as float, exact to float rounding (a table for small x, log1p beyond).
float CriteoDenseTransform(int64_t x);

class CriteoLineParser {
 public:
  // `rows` holds 26 table sizes in [1, 2^32] (validated by the caller).
  CriteoLineParser(CriteoTextFormat format, const int64_t* rows);

  // Parses `line` (no '\n'; a trailing '\r' is ignored). Writes label, 13 dense and 26 ids.
  FieldError Parse(std::string_view line, float* label, float* dense, uint32_t* ids) const;

 private:
  uint32_t Reduce(int k, uint32_t value) const;

  char sep_;
  bool csv_;
  uint32_t rows32_[kCriteoNumSparse];   // rows, or 0 for 2^32 (no reduction)
  uint64_t fastmod_[kCriteoNumSparse];  // Lemire's fastmod constant for rows32_
};

}  // namespace tessera::io_internal
