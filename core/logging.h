// A small logger: TESSERA_LOG(INFO) << "text"; writes one line to stderr with the level and,
// in a multi-rank run, the rank prefix set by SetLogRank. Thread-safe (one write per line).
#pragma once

#include <sstream>

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below `level` are dropped. Default: kInfo.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Prefixes every line with "[rank r] " when r >= 0. Default: -1 (no prefix).
void SetLogRank(int rank);

namespace internal {
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace tessera

#define TESSERA_LOG_LEVEL_DEBUG ::tessera::LogLevel::kDebug
#define TESSERA_LOG_LEVEL_INFO ::tessera::LogLevel::kInfo
#define TESSERA_LOG_LEVEL_WARNING ::tessera::LogLevel::kWarning
#define TESSERA_LOG_LEVEL_ERROR ::tessera::LogLevel::kError
#define TESSERA_LOG(level)                                          \
  if (TESSERA_LOG_LEVEL_##level < ::tessera::GetLogLevel()) {       \
  } else                                                            \
    ::tessera::internal::LogLine(TESSERA_LOG_LEVEL_##level).stream()
