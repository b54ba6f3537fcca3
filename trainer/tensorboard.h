// TensorBoard event files, written by hand in TensorBoard's own format (no protobuf library):
// a file of TFRecords, each one serialized `Event` protocol buffer.
//
// TFRecord framing (tensorflow/docs, api_guides/python/python_io.md, "TFRecords Format
// Details"), little-endian:
//   uint64 length, uint32 masked_crc32c(length), byte data[length], uint32 masked_crc32c(data)
// with CRC-32C (Castagnoli) and masked_crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
//
// Messages (tensorflow/core/util/event.proto and framework/summary.proto), only the fields used:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first event of a file carries file_version "brain.Event:2"; every other one a summary of
// scalars. TensorBoard's readers (tensorboard.backend.event_processing.event_accumulator, the
// data server) show them as scalar plots; tests/trainer/tensorboard_check.py reads ours back.
//
// Thread-safety: an EventFileWriter has one user at a time; the functions are pure.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `data`, continuing from `crc`
// (0 to start). crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);
// TFRecord's masked form of a CRC.
uint32_t MaskCrc32c(uint32_t crc);

// One record framed as above.
std::string FrameTfRecord(std::string_view data);
// Splits `file` (the bytes of a TFRecord file) into its records, checking both CRCs of each.
// DataLoss naming `source` and the record's offset for a truncated file or a CRC mismatch.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ParseTfRecords(std::string_view file,
                                                                      const std::string& source);

using Scalars = std::vector<std::pair<std::string, float>>;  // (tag, value)

// Serialized Event messages.
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarsEvent(double wall_time, int64_t step, const Scalars& scalars);

// What an Event holds, decoded (for tests): the fields above; unknown fields are skipped.
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  Scalars scalars;
};
// DataLoss for a message that does not parse.
[[nodiscard]] absl::StatusOr<DecodedEvent> DecodeEvent(std::string_view bytes);

// An event file "events.out.tfevents.<seconds>.<host>.<pid>" in a directory. Each Write is
// flushed, so a crashed run keeps everything written so far; a resumed run starts a new file
// in the same directory (TensorBoard merges the files of a directory by step).
class EventFileWriter {
 public:
  // Creates the file in `dir` (which must exist) and writes the file-version event.
  // InvalidArgument naming the path when it cannot be created.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one event with `scalars` at `step` (wall time now). Internal naming the path when
  // the write fails.
  [[nodiscard]] absl::Status WriteScalars(int64_t step, const Scalars& scalars);
  const std::string& path() const { return path_; }

 private:
  EventFileWriter() = default;
  absl::Status Append(const std::string& event);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace tessera
