// BatchReader: a source of batches (Criteo text, binary records, synthetic). Readers keep the
// order of their source unless asked to shuffle; the last batch of a source may be smaller.
// Thread-safety: one consumer; PrefetchingReader (prefetch.h) moves a reader onto its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/enum_names.h"
#include "io/batch.h"

namespace tessera {

enum class BadRecordPolicy { kFail, kSkip };
inline constexpr EnumName<BadRecordPolicy> kBadRecordPolicyNames[] = {
    {BadRecordPolicy::kFail, "fail"}, {BadRecordPolicy::kSkip, "skip"}};
// "fail" / "skip" (data.on_bad_record); Parse: InvalidArgument naming the value otherwise.
inline const char* BadRecordPolicyName(BadRecordPolicy p) {
  return NameIn(kBadRecordPolicyNames, p);
}
inline absl::StatusOr<BadRecordPolicy> ParseBadRecordPolicy(const std::string& name) {
  return ParseIn(kBadRecordPolicyNames, name, "bad record policy");
}

struct ReaderStats {
  int64_t records = 0;              // records delivered in batches
  int64_t bad_records_skipped = 0;  // records dropped under BadRecordPolicy::kSkip
};

class BatchReader {
 public:
  virtual ~BatchReader() = default;
  // Fills `batch` with the next batch. Returns false at the end of the data (batch untouched),
  // InvalidArgument/DataLoss naming file:line for bad records under kFail (or past the skip cap).
  virtual absl::StatusOr<bool> Next(Batch* batch) = 0;
  // Starts again from the beginning (next epoch).
  virtual absl::Status Rewind() = 0;
  virtual ReaderStats stats() const = 0;
};

}  // namespace tessera
