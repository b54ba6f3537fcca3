// The Criteo TSV/CSV reader on arbitrary file bytes. The first byte picks the format, the batch
// size and the bad-record policy; the rest is the file. Every batch is read to the end, then once
// more after Rewind.
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "io/batch.h"
#include "io/criteo_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  static fuzz::ScratchFile file(".txt");
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  CriteoTextOptions o;
  o.paths = {file.Write(data + 1, size - 1)};
  o.format = (mode & 1) ? CriteoTextFormat::kCsv : CriteoTextFormat::kTsv;
  o.batch_size = 1 + ((mode >> 1) & 7);
  o.on_bad_record = (mode & 16) ? BadRecordPolicy::kSkip : BadRecordPolicy::kFail;
  o.max_bad_records = (mode & 32) ? 2 : 1000;
  // Small tables, and one of 2^32 rows (the largest allowed), so ids reduce both ways.
  o.rows_per_feature = std::vector<int64_t>(kCriteoNumSparse, 7);
  o.rows_per_feature[0] = int64_t{1} << 32;
  auto reader = CriteoTextReader::Open(o);
  if (!reader.ok()) {
    fuzz::CheckMessage(reader.status());
    return 0;
  }
  for (int pass = 0; pass < 2; ++pass) {
    Batch b;
    for (int i = 0; i < 100000; ++i) {
      absl::StatusOr<bool> more = (*reader)->Next(&b);
      if (!more.ok()) {
        fuzz::CheckMessage(more.status());
        break;
      }
      if (!*more) break;
    }
    if (!(*reader)->Rewind().ok()) break;
  }
  return 0;
}
