// Shared by the libFuzzer targets (fuzz/README.md): a scratch file for readers that take paths,
// and the checks every target makes on what the code under test returns.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tessera::fuzz {

// A file in $TMPDIR (default /tmp), one per process, rewritten for every input.
class ScratchFile {
 public:
  explicit ScratchFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/tessera_fuzz_" +
            std::to_string(::getpid()) + suffix;
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  const std::string& Write(const uint8_t* data, size_t size) {
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return path_;
  }

 private:
  std::string path_;
};

// Every error message must be printable: input bytes are escaped (core/escape.h), so a control
// byte in a message is a finding (the target aborts, libFuzzer keeps the input).
inline void CheckMessage(const absl::Status& status) {
  for (char c : status.message()) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      std::fprintf(stderr, "control byte 0x%02x in an error message: %s\n", u,
                   status.ToString().c_str());
      std::abort();
    }
  }
}

}  // namespace tessera::fuzz
