// A minimal JSON reader/writer for safetensors headers only (no JSON library is installed, and a
// header needs a small subset): objects, arrays, strings and non-negative integers. Anything else
// (floats, booleans, null, negative numbers) is rejected, since no valid header contains it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tessera::internal {

struct Json {
  // A named struct, not std::pair<std::string, Json>: pair's constructor constraints need Json
  // complete while Json is being defined, which clang with libstdc++ 12 rejects (a vector of an
  // incomplete element type is fine).
  struct Member;
  enum Kind { kObject, kArray, kString, kInt } kind = kInt;
  std::vector<Member> members;  // object, in file order
  std::vector<Json> items;      // array
  std::string str;              // string (UTF-8)
  uint64_t num = 0;             // integer
};
struct Json::Member {
  std::string key;
  Json value;
};

// Parses `text` as one JSON value. DataLoss "header JSON at byte <i>: <problem>" on error
// (duplicate object keys, nesting deeper than 8 and integers over 64 bits are errors too).
absl::Status ParseJson(std::string_view text, Json* out);

// Appends `s` as a JSON string literal (quotes and escapes; UTF-8 passes through).
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace tessera::internal
