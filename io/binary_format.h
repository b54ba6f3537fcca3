// Binary records: fixed-size, preprocessed samples for fast repeated epochs (mmap, no parsing).
//
// File layout (little-endian; docs/DATA.md "Binary records" is the reference):
//   header, header_bytes long (a multiple of 4096, so records start page-aligned):
//     0  char[8]  magic "TSRRECS\0"
//     8  uint32   version (1)
//    12  uint32   header_bytes
//    16  uint32   num_dense
//    20  uint32   num_sparse
//    24  uint32   record_bytes = 4 * (1 + num_dense + num_sparse)
//    28  uint32   checksum: FNV-1a 32 of bytes [0, 64 + 8 * num_sparse) with this field as 0
//    32  uint64   num_records
//    40  byte[24] reserved, zero
//    64  uint64   rows_per_feature[num_sparse]: the table sizes the ids were reduced with
//     .. zero padding
//   records, num_records of them, record_bytes each:
//     float32 label (0 or 1), float32 dense[num_dense], uint32 id[num_sparse] (id < rows)
//
// The rows a file was made with are part of its meaning (id = hash mod rows): a reader given
// other rows rejects the file, naming the first table that differs.
//
// Thread-safety: a reader or writer has one user at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/criteo_text.h"
#include "io/reader.h"

namespace tessera {

inline constexpr char kBinaryMagic[8] = {'T', 'S', 'R', 'R', 'E', 'C', 'S', '\0'};
inline constexpr uint32_t kBinaryVersion = 1;

// What a file's header says.
struct BinaryFileInfo {
  uint32_t version = 0;
  int64_t header_bytes = 0;
  int64_t num_dense = 0;
  int64_t num_sparse = 0;
  int64_t record_bytes = 0;
  int64_t num_records = 0;
  std::vector<int64_t> rows_per_feature;
};

// Reads and checks the header of `path`: DataLoss for a bad magic, checksum or a size that does
// not match num_records (truncated or over-long file), InvalidArgument for an unknown version,
// NotFound for a missing file.
absl::StatusOr<BinaryFileInfo> ReadBinaryHeader(const std::string& path);

// Writes a binary record file. Records go to `path + ".tmp"`; Finish() writes the header and
// renames the file into place, so a crashed conversion never leaves a file that looks complete.
class BinaryRecordWriter {
 public:
  // `rows_per_feature` (one value per sparse feature, each >= 1 and <= 2^32) goes into the
  // header; num_dense >= 0.
  static absl::StatusOr<std::unique_ptr<BinaryRecordWriter>> Create(
      const std::string& path, int64_t num_dense, std::vector<int64_t> rows_per_feature);
  ~BinaryRecordWriter();  // an unfinished file is removed

  // Appends one record. REQUIRES: label is 0 or 1, ids[k] < rows_per_feature[k] (checked;
  // InvalidArgument otherwise), dense has num_dense values.
  absl::Status Append(float label, const float* dense, const uint32_t* ids);
  // Writes the header, flushes and renames. Returns the number of records written.
  absl::StatusOr<int64_t> Finish();

 private:
  BinaryRecordWriter() = default;
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  int64_t num_dense_ = 0;
  std::vector<int64_t> rows_;
  int64_t header_bytes_ = 0;
  int64_t records_ = 0;
  std::vector<char> record_;
};

struct BinaryReaderOptions {
  // Files read in this order as one stream; all must have the same num_dense and rows. Required.
  std::vector<std::string> paths;
  // Samples per batch (the last batch of a shard may be smaller). Default: 2048.
  int64_t batch_size = 2048;
  // The model's table sizes. Empty: accept the files' own. Otherwise they must equal the
  // header's, or Open fails with InvalidArgument naming the first table that differs.
  std::vector<int64_t> rows_per_feature;
  // This reader's contiguous slice of the records, as for CriteoTextOptions. Default: 0 of 1.
  int shard_index = 0;
  int num_shards = 1;
};

// Reads binary record files into one-hot batches (num_sparse features, one id per bag).
// Corrupt records (label not 0/1, id >= rows) are DataLoss errors naming file and record index.
class BinaryReader : public BatchReader {
 public:
  static absl::StatusOr<std::unique_ptr<BinaryReader>> Open(BinaryReaderOptions options);
  ~BinaryReader() override;

  absl::StatusOr<bool> Next(Batch* batch) override;
  absl::Status Rewind() override;
  ReaderStats stats() const override;

  // The header of the first file (rows, num_dense, ...); num_records is that of all files.
  const BinaryFileInfo& info() const;
  // Records in this shard and in all files.
  int64_t num_records() const;
  int64_t total_records() const;

 private:
  struct State;
  explicit BinaryReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

struct ConvertStats {
  int64_t records_written = 0;
  int64_t bad_records_skipped = 0;
};

// Converts Criteo text (all of `text`'s files, ignoring its shard and batch fields) into one
// binary record file at `output_path`, hashing with text.rows_per_feature and applying its
// bad-record policy. Files ending in ".gz" are decompressed on the fly (io/criteo_gzip.h):
// the same lines give the same records and ids as the uncompressed text.
absl::StatusOr<ConvertStats> ConvertCriteoTextToBinary(const CriteoTextOptions& text,
                                                       const std::string& output_path);

}  // namespace tessera
