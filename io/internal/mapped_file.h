// MappedFile: a read-only memory map of a whole file (io/ internal). An empty file maps to
// (nullptr, 0). Move-only; the mapping is released on destruction. Thread-safety: reading the
// mapped bytes from several threads is safe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::io_internal {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only and advises sequential access. NotFound when the file does not exist,
  // InvalidArgument for a directory, Internal for other system errors (errno text included).
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Release();

  const char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace tessera::io_internal
