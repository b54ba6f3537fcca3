// Error helpers. Debian's Abseil (20220623) has no status macros, so they live here once.
//
// TESSERA_RETURN_IF_ERROR(expr): returns the absl::Status of `expr` from the enclosing function
//   when it is not OK.
// TESSERA_ASSIGN_OR_RETURN(lhs, expr): evaluates an absl::StatusOr<T>; on error returns its
//   status, otherwise moves the value into `lhs` (which may be a declaration: `auto x`).
// TESSERA_CHECK(cond) << "message": a broken invariant is a bug, not an error to return; it
//   prints file:line, the condition and the message, then aborts.
#pragma once

#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TESSERA_STATUS_CONCAT_INNER(a, b) a##b
#define TESSERA_STATUS_CONCAT(a, b) TESSERA_STATUS_CONCAT_INNER(a, b)

#define TESSERA_RETURN_IF_ERROR(expr)                    \
  do {                                                   \
    ::absl::Status tessera_status_ = (expr);             \
    if (!tessera_status_.ok()) return tessera_status_;   \
  } while (0)

#define TESSERA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL(TESSERA_STATUS_CONCAT(tessera_statusor_, __LINE__), lhs, expr)

namespace tessera::internal {

// Collects the message of a failed TESSERA_CHECK and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace tessera::internal

#define TESSERA_CHECK(cond) \
  if (cond) {               \
  } else                    \
    ::tessera::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define TESSERA_CHECK_OK(expr)                                                        \
  if (::absl::Status tessera_check_st_ = (expr); tessera_check_st_.ok()) {            \
  } else                                                                              \
    ::tessera::internal::CheckFailure(__FILE__, __LINE__, #expr).stream()             \
        << tessera_check_st_.ToString() << " "
