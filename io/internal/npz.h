// The members of an uncompressed .npz archive (np.savez: a ZIP file of ZIP_STORED .npy members),
// located through the ZIP central directory so that every member can be parsed in place from a
// memory map (io/ internal). ZIP64 archives (np.savez writes members with force_zip64, and a
// day of MLPerf multi-hot data is tens of GB) are read through their ZIP64 records.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::io_internal {

struct ZipMember {
  std::string name;       // "0.npy"
  int64_t offset = 0;     // of the member's bytes in the archive
  int64_t size = 0;       // bytes (stored: compressed size == uncompressed size)
};

// Lists the members of the ZIP archive [data, data + size) named `path`. DataLoss naming the
// file for: no end-of-central-directory record (not a ZIP file, or truncated), a central
// directory or local header outside the file, a member that is compressed (np.savez_compressed:
// it cannot be memory-mapped; re-save it with np.savez), encrypted or split across disks.
absl::StatusOr<std::vector<ZipMember>> ListZipMembers(const std::string& path, const char* data,
                                                      size_t size);

}  // namespace tessera::io_internal
