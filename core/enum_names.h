// EnumName: one spelling per enumerator. An enum that a config, plan file or tool names in text
// declares, right beside itself, one table of {value, name} pairs, and its Parse/Name pair reads
// that table (NameIn / ParseIn below); so do the config's reader and emitter
// (trainer/internal/config_reader.h ReadEnum, trainer/internal/config_emit.cc). A name is then
// written once, and reordering an enum's enumerators changes no mapping: nothing depends on an
// enumerator's position.
//
// Contract of a table: every entry has a distinct value and a distinct, non-empty name; the
// table's order is the order in which messages list the names. An enumerator missing from its
// table has the name "?" and cannot be parsed (each table's round trip is tested in
// tests/core/enum_names_test.cc). Header-only, constexpr where it can be; no allocation except
// for messages.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/escape.h"

namespace tessera {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `names`; "?" when the table lacks it.
template <typename E, size_t N>
constexpr const char* NameIn(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

// The entry spelled exactly `name` (case-sensitive), or nullopt.
template <typename E, size_t N>
constexpr std::optional<E> FindIn(const EnumName<E> (&names)[N], absl::string_view name) {
  for (const EnumName<E>& n : names)
    if (name == n.name) return n.value;
  return std::nullopt;
}

// The names in table order joined by `sep` ("a, b, c"); with `last_sep` the final pair is
// joined by it instead ("a, b or c").
template <typename E, size_t N>
std::string NameList(const EnumName<E> (&names)[N], absl::string_view sep = ", ",
                     absl::string_view last_sep = {}) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == N && !last_sep.empty() ? last_sep : sep);
    absl::StrAppend(&out, names[i].name);
  }
  return out;
}

// The value spelled `name`, or InvalidArgument
// "<what>: unknown value '<name>' (expected a, b or c)" (the name escaped, core/escape.h).
template <typename E, size_t N>
absl::StatusOr<E> ParseIn(const EnumName<E> (&names)[N], absl::string_view name,
                          absl::string_view what) {
  if (std::optional<E> v = FindIn(names, name)) return *v;
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown value '", EscapeBytes(std::string(name)), "' (expected ",
                   NameList(names, ", ", " or "), ")"));
}

}  // namespace tessera
