// Safetensors files (https://github.com/huggingface/safetensors), the format Tessera exports
// models and writes checkpoint shards in:
//   8 bytes   N, little-endian uint64: the header length
//   N bytes   JSON object {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
//             ..., "__metadata__": {"<key>": "<string>"}}, padded with spaces to a multiple of 8
//   rest      the tensors' raw little-endian bytes; [b, e) is relative to the end of the header
// Tessera writes tensors in name order, contiguously, and the header lists them in that order.
// docs/FORMATS.md has the layout, Tessera's tensor names and how PyTorch loads a file.
//
// SafetensorsWriter streams: the caller declares every tensor (name, dtype, shape) up front, so
// the header and every tensor's place in the file are fixed, then writes each tensor's bytes in
// as many pieces as it likes, in any order (e.g. a multi-GB table in row ranges). Everything goes
// to "<path>.tmp"; Finish() checks every byte was written, fsyncs and renames onto <path>. A
// writer destroyed before Finish() succeeds removes the tmp file, so a failed run never leaves a
// file at <path> that looks valid (an existing file at <path> is only replaced by Finish()).
//
// SafetensorsFile maps a file read-only and validates the header completely (sizes, offsets in
// range and contiguous, known dtypes, shapes that match byte counts); errors are DataLoss naming
// the file and the tensor. Tensor data pointers stay valid for the object's lifetime and are
// always aligned to their dtype: they point into the mapping where the file's layout allows
// (Tessera's files: header padded to 8, tensors in name order), else to an aligned copy the
// object owns (e.g. an unpadded header from another writer).
// Thread-safety: a SafetensorsWriter may take Write calls for disjoint ranges from several threads
// (pwrite); SafetensorsFile is immutable after Open.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// kU64: a dynamic table's keys; kU16: its admission counters (checkpoints).
enum class SafetensorsDtype { kF32, kF16, kBF16, kI64, kI32, kU64, kU16 };

// Bytes per element (4, 2, 2, 8, 4, 8, 2) and the header spelling ("F32", "F16", "BF16", "I64",
// "I32", "U64", "U16").
int64_t DtypeSize(SafetensorsDtype dtype);
std::string_view DtypeName(SafetensorsDtype dtype);

// One tensor of a file to write.
struct TensorSpec {
  std::string name;  // must not be empty or "__metadata__"; unique within a file
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // each dim >= 0; {} is a scalar (one element)

  int64_t num_elements() const;
  int64_t num_bytes() const { return num_elements() * DtypeSize(dtype); }
};

class SafetensorsWriter {
 public:
  // Creates "<path>.tmp" (truncating a stale one) and writes the header for `tensors` (sorted by
  // name) and `metadata`. InvalidArgument for bad names/shapes, duplicates; Internal/NotFound for
  // I/O failures (naming the path).
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, std::vector<TensorSpec> tensors,
      const std::map<std::string, std::string>& metadata = {});

  // Removes the tmp file unless Finish() succeeded.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes `num_bytes` bytes from `data` at byte `offset` inside tensor `name`'s data.
  // InvalidArgument for an unknown name, a range outside the tensor, or a range that overlaps one
  // already written; Internal for I/O errors.
  absl::Status Write(std::string_view name, int64_t offset, const void* data, int64_t num_bytes);
  // Writes the whole tensor `name` (num_bytes() bytes from `data`).
  absl::Status WriteTensor(std::string_view name, const void* data);
  // Writes rows [row_begin, row_end) of a tensor whose first dim is rows: `data` holds those
  // rows contiguously (row size = product of the other dims times the dtype size).
  absl::Status WriteRows(std::string_view name, int64_t row_begin, int64_t row_end,
                         const void* data);

  // Checks every tensor was written completely (FailedPrecondition naming the first that was
  // not), then fsyncs, closes and renames the tmp file onto `path` and fsyncs the directory.
  // After an error the tmp file is removed and nothing exists at `path` that was not there before.
  absl::Status Finish();

  // Tensors in file order (sorted by name), and the file's final path.
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsWriter() = default;
  struct Entry {
    int64_t begin = 0;  // absolute file offset of the tensor's first byte
    int64_t size = 0;
    std::map<int64_t, int64_t> written;  // relative [begin -> end) ranges, merged
    int64_t written_bytes = 0;
  };
  // Records the first I/O error; Finish() then fails with it.
  absl::Status Fail(absl::Status status);
  void RemoveTmp();

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool finished_ = false;
  std::mutex mu_;             // guards entries_' written ranges and error_
  absl::Status error_;
  std::vector<TensorSpec> tensors_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// Writes a whole file from in-memory tensors: `data[i]` holds tensors[i].num_bytes() bytes.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                              const std::vector<const void*>& data,
                              const std::map<std::string, std::string>& metadata = {});

// One tensor of an open file.
struct TensorView {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the mapping; num_bytes bytes
  int64_t num_bytes = 0;

  int64_t num_elements() const { return num_bytes / DtypeSize(dtype); }
  const float* f32() const { return static_cast<const float*>(data); }
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. NotFound if it does not exist; DataLoss "<path>: <tensor>: ..."
  // for a corrupt or unsupported file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates an in-memory copy of a file (`bytes` must outlive the object); `source_name` is
  // used in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(std::string_view bytes,
                                                                     std::string source_name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Tensors in data order (ascending offsets).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const TensorView* Find(std::string_view name) const;
  // The tensor called `name`, checked: NotFound if absent; InvalidArgument naming the file and
  // tensor if its dtype or shape differ from the expected ones.
  absl::StatusOr<const TensorView*> Get(std::string_view name, SafetensorsDtype dtype,
                                        const std::vector<int64_t>& shape) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  absl::Status Parse(std::string_view bytes);

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies_;  // misaligned tensors' data
};

}  // namespace tessera
