// Criteo click logs as text: the Kaggle / 1TB TSV layout and the comma-separated variant.
//
// A record is one line: label, I1..I13 (integers), C1..C26 (hex ids).
//   TSV: 40 tab-separated fields, no header (Kaggle train.txt, 1TB day_N).
//   CSV: 40 comma-separated fields after an optional header line whose first field is `label`
//        (pandas output: integers may be written as integral floats, `12.0`).
// Quirks accepted: empty fields (missing values), rows with fewer than 40 fields (the missing
// trailing fields are empty), negative integers, CRLF line ends, a last line without newline.
// Blank lines are ignored (they are not records).
//
// Preprocessing (fixed; docs/DATA.md):
//   dense   I_j  -> log(1 + max(x, 0)) as float; empty -> 0
//   label        -> 0 or 1 (TSV: `0`/`1`; CSV also `0.0`/`1.0`)
//   sparse  C_k  -> the hex value as uint32, mod rows_per_feature[k]; empty -> 0
// Bad records (InvalidArgument "path:line: field I3: 'abc' is not an integer"):
//   a label other than 0/1, an integer field that is not a (CSV: integral) decimal integer or
//   does not fit int64, a categorical that is not 1..8 hex digits, more than 40 fields.
// Under BadRecordPolicy::kSkip such records are dropped and counted; more than max_bad_records
// of them in one pass over the data is an error that names the last one.
//
// Sharding: the files are one stream of records in the order given. Shard s of S reads the
// contiguous record range [N*s/S, N*(s+1)/S) of the N records (non-blank lines, headers
// excluded, bad ones included), so the shards concatenate to the whole stream and their sizes
// differ by at most one. Open() counts lines in every file for this (memchr speed).
//
// Thread-safety: one consumer per reader (see BatchReader).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/reader.h"

namespace tessera {

inline constexpr int kCriteoNumDense = 13;
inline constexpr int kCriteoNumSparse = 26;
inline constexpr int kCriteoNumFields = 1 + kCriteoNumDense + kCriteoNumSparse;

enum class CriteoTextFormat { kTsv, kCsv };

struct CriteoTextOptions {
  // Files read in this order as one stream. Required (at least one).
  std::vector<std::string> paths;
  // Field separator and number syntax. Default: kTsv.
  CriteoTextFormat format = CriteoTextFormat::kTsv;
  // Samples per batch (the last batch of a shard may be smaller). Default: 2048.
  int64_t batch_size = 2048;
  // Rows of each categorical feature's table, C1..C26; every value in [1, 2^32]. Required
  // (CriteoRowsPreset gives the published lists).
  std::vector<int64_t> rows_per_feature;
  // What to do with a bad record. Default: kFail.
  BadRecordPolicy on_bad_record = BadRecordPolicy::kFail;
  // kSkip: more than this many bad records in one pass is an error. Default: 1000.
  int64_t max_bad_records = 1000;
  // This reader's slice of the record stream: shard_index in [0, num_shards). Default: 0 of 1.
  int shard_index = 0;
  int num_shards = 1;
};

// One parsed record.
struct CriteoRecord {
  float label = 0;
  float dense[kCriteoNumDense] = {};
  uint32_t ids[kCriteoNumSparse] = {};  // already reduced mod rows_per_feature
};

// The published rows-per-table lists (../shared/data/criteo/CARDINALITIES.md):
//   "kaggle"        Criteo Kaggle (dlrm), 26 tables, sum 33,762,577
//   "terabyte"      Criteo 1TB as in MLPerf DLRM-DCNv2 (ids capped at 40M), sum 204,184,588
// NotFound for any other name (the message lists the known ones).
absl::StatusOr<std::vector<int64_t>> CriteoRowsPreset(std::string_view name);

// OK when `rows` holds 26 values in [1, 2^32]; InvalidArgument naming the bad entry otherwise.
absl::Status ValidateCriteoRows(const std::vector<int64_t>& rows);

// Parses one line (no line terminator; a trailing '\r' is allowed) into `record`. `rows` points
// at 26 table sizes. Returns InvalidArgument "field I3: 'abc' is not an integer" (no file:line;
// the reader adds it). `record` is unspecified on error.
absl::Status ParseCriteoLine(std::string_view line, CriteoTextFormat format, const int64_t* rows,
                             CriteoRecord* record);

class CriteoTextReader : public BatchReader {
 public:
  // Validates the options, maps every file and counts its records, and positions the reader at
  // the start of its shard. NotFound for a missing file, InvalidArgument for bad options or a
  // malformed CSV header.
  static absl::StatusOr<std::unique_ptr<CriteoTextReader>> Open(CriteoTextOptions options);
  ~CriteoTextReader() override;

  // Fills `batch` with up to batch_size good records: dense [B, 13], labels [B], and 26 sparse
  // features with one id per bag.
  absl::StatusOr<bool> Next(Batch* batch) override;
  // Back to the start of this shard; the per-pass bad-record count restarts at 0.
  absl::Status Rewind() override;
  // Cumulative since Open (across passes).
  ReaderStats stats() const override;

  // The next good record of the shard, or false at its end. Errors as for Next.
  absl::StatusOr<bool> NextRecord(CriteoRecord* record);

  // Records in this shard (good and bad) and in all files.
  int64_t num_records() const;
  int64_t total_records() const;
  // The messages ("path:line: ...") of the first 16 records skipped under kSkip.
  const std::vector<std::string>& skipped_messages() const;

 private:
  struct State;
  explicit CriteoTextReader(std::unique_ptr<State> state);
  // NextRecord without counting the record in stats().records.
  absl::StatusOr<bool> ReadRecord(CriteoRecord* record);
  std::unique_ptr<State> state_;
};

}  // namespace tessera
