// The binary record reader on arbitrary file bytes. The first byte's bit 0 repairs the header
// checksum (so the fuzzer gets past it to the sizes and records), bit 1 gives the reader the
// model's rows (13 dense, 26 tables of 7 rows) instead of accepting the file's own; the rest is
// the file.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "io/batch.h"
#include "io/binary_format.h"

namespace {

// FNV-1a 32 of bytes [0, 64 + 8 * num_sparse) with the checksum field (bytes 28..31) as 0, as
// io/binary_format.h lays out.
void RepairChecksum(std::string* f) {
  if (f->size() < 64) return;
  uint32_t num_sparse;
  std::memcpy(&num_sparse, f->data() + 20, 4);
  const uint64_t end = 64 + 8 * static_cast<uint64_t>(num_sparse);
  if (end > f->size()) return;
  std::memset(&(*f)[28], 0, 4);
  uint32_t h = 2166136261u;
  for (uint64_t i = 0; i < end; ++i) {
    h ^= static_cast<unsigned char>((*f)[i]);
    h *= 16777619u;
  }
  std::memcpy(&(*f)[28], &h, 4);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  static fuzz::ScratchFile file(".bin");
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode & 1) RepairChecksum(&bytes);
  BinaryReaderOptions o;
  o.paths = {file.Write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())};
  o.batch_size = 1 + ((mode >> 2) & 7);
  if (mode & 2) o.rows_per_feature = std::vector<int64_t>(26, 7);
  auto header = ReadBinaryHeader(o.paths[0]);
  if (!header.ok()) fuzz::CheckMessage(header.status());
  auto reader = BinaryReader::Open(o);
  if (!reader.ok()) {
    fuzz::CheckMessage(reader.status());
    return 0;
  }
  Batch b;
  for (int i = 0; i < 100000; ++i) {
    absl::StatusOr<bool> more = (*reader)->Next(&b);
    if (!more.ok()) {
      fuzz::CheckMessage(more.status());
      break;
    }
    if (!*more) break;
  }
  return 0;
}
