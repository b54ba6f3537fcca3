#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace tessera {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_rank{-1};
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetLogRank(int rank) { g_rank = rank; }

namespace internal {
LogLine::~LogLine() {
  static const char* kNames[] = {"debug", "info", "warning", "error"};
  std::string line;
  int rank = g_rank.load();
  if (rank >= 0) line += "[rank " + std::to_string(rank) + "] ";
  line += kNames[static_cast<int>(level_)];
  line += ": ";
  line += stream_.str();
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace internal

}  // namespace tessera
