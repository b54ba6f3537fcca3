#include "trainer/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace tessera {
namespace {

std::atomic<int> stop_signal{0};
const char* program_name = "tessera";

void WriteErr(const char* s) {
  ssize_t r = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)r;
}

void OnStopSignal(int sig) {
  int expected = 0;
  if (stop_signal.compare_exchange_strong(expected, sig)) {
    WriteErr("\n");
    WriteErr(program_name);
    WriteErr(": ");
    WriteErr(StopSignalName(sig));
    WriteErr(": stopping after the current step; a checkpoint and the model will be written "
             "(send it again to exit at once, losing this run's progress since the last "
             "checkpoint)\n");
    return;
  }
  // Second signal: leave now, with the status the default action would give.
  WriteErr("\n");
  WriteErr(program_name);
  WriteErr(": exiting at once\n");
  ::_exit(128 + sig);
}

}  // namespace

void InstallStopSignalHandlers(const char* program) {
  program_name = program;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = &OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int StopSignalReceived() { return stop_signal.load(std::memory_order_relaxed); }

void SetStopSignalForTesting(int sig) { stop_signal.store(sig); }

const char* StopSignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace tessera
