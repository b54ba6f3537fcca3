// Criteo 1TB as shipped: day_0.gz ... day_23.gz, gzip-compressed TSV (the layout and
// preprocessing of io/criteo_text.h, so the same line gives the same record and the same ids),
// read directly without unpacking to disk.
//
// Threads: one inflater per reader decompresses the files in order with zlib (gzread; a
// multi-member gzip and a plain uncompressed file are read too) into chunks of whole lines;
// `parse_threads` workers parse chunks in parallel with the text reader's parser; Next hands
// out the parsed records in file order. At most `max_chunks_in_flight` chunks exist at once, so
// memory stays bounded (about that many times chunk_bytes of text plus the parsed records).
// docs/PERFORMANCE.md "Criteo 1TB gzip reader" measures it against the trainer.
//
// Sharding: a gzip stream cannot be split without decompressing it, so shard s of S reads whole
// files: those with index i % S == s (with one file, only shard 0 has data). For record-exact
// rank slices, convert once (`tessera-data convert --input day_0.gz ...`) and train on the binary
// records.
// Errors: a missing file is NotFound at Open; a corrupt or truncated gzip stream is DataLoss
// naming the file and the uncompressed bytes read before it; bad records follow
// CriteoTextOptions::on_bad_record with messages "day_0.gz:1234: field I3: ..." (line numbers
// of the uncompressed text).
// Thread-safety: one consumer (BatchReader); the reader owns its threads and joins them on
// Rewind and destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "io/criteo_text.h"
#include "io/reader.h"

namespace tessera {

struct CriteoGzipOptions {
  // Files read in this order as one stream (.gz, or plain text). Required.
  std::vector<std::string> paths;
  // Samples per batch (the last batch of a shard may be smaller). Default: 2048.
  int64_t batch_size = 2048;
  // Rows of each categorical feature's table, C1..C26, as for CriteoTextOptions. Required.
  std::vector<int64_t> rows_per_feature;
  // Bad records: as CriteoTextOptions. Defaults: kFail, 1000.
  BadRecordPolicy on_bad_record = BadRecordPolicy::kFail;
  int64_t max_bad_records = 1000;
  // Whole files per shard (see above). Default: 0 of 1.
  int shard_index = 0;
  int num_shards = 1;
  // Threads parsing decompressed text (the inflater is one more). Default: 2: the inflater
  // produces ~1.5-2x what one parser consumes (docs/PERFORMANCE.md).
  int parse_threads = 2;
  // Uncompressed text per chunk (cut at a line end). Default: 4 MiB (~17k Criteo lines).
  int64_t chunk_bytes = 4 << 20;
  // Chunks decompressed ahead of the consumer, parsed or not. Default: 8.
  int max_chunks_in_flight = 8;
};

// True when any of `paths` ends in ".gz": such a list is read with CriteoGzipReader (by the
// trainer's data sources and by ConvertCriteoTextToBinary).
bool AnyGzipPath(const std::vector<std::string>& paths);

// CriteoGzipOptions with the files, rows, batch size, bad-record policy and shard of `text`
// (TSV only: InvalidArgument for kCsv).
absl::StatusOr<CriteoGzipOptions> GzipOptionsFrom(const CriteoTextOptions& text);

class CriteoGzipReader : public BatchReader {
 public:
  // Validates the options, checks that every file exists and starts the threads.
  static absl::StatusOr<std::unique_ptr<CriteoGzipReader>> Open(CriteoGzipOptions options);
  ~CriteoGzipReader() override;

  // dense [B, 13], labels [B], 26 one-id bags, as CriteoTextReader.
  absl::StatusOr<bool> Next(Batch* batch) override;
  // Stops the threads and starts again from the first file; the per-pass bad count restarts.
  absl::Status Rewind() override;
  ReaderStats stats() const override;
  // Uncompressed bytes decompressed since Open (all passes).
  int64_t text_bytes() const;

 private:
  struct State;
  explicit CriteoGzipReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera
