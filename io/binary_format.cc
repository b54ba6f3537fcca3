#include "io/binary_format.h"

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "io/criteo_gzip.h"
#include "io/internal/mapped_file.h"
#include "io/internal/one_hot_batch.h"
#include "io/internal/reader_checks.h"

namespace tessera {

static_assert(std::endian::native == std::endian::little,
              "the binary record format is little-endian; add byte swaps for this host");

using io_internal::MappedFile;

namespace {

constexpr int64_t kFixedHeaderBytes = 64;
constexpr int64_t kHeaderAlign = 4096;

int64_t HeaderBytesFor(int64_t num_sparse) {
  int64_t used = kFixedHeaderBytes + 8 * num_sparse;
  return (used + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
}

// FNV-1a, continued from `h`.
uint32_t Fnv1a(uint32_t h, const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 16777619u;
  return h;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Checksum over the meaningful header bytes with the checksum field (offset 28) taken as 0.
uint32_t HeaderChecksum(const char* header, int64_t num_sparse) {
  const char zeros[4] = {0, 0, 0, 0};
  uint32_t h = Fnv1a(2166136261u, header, 28);
  h = Fnv1a(h, zeros, 4);
  return Fnv1a(h, header + 32, static_cast<size_t>(kFixedHeaderBytes - 32 + 8 * num_sparse));
}

absl::StatusOr<BinaryFileInfo> ParseHeader(const std::string& path, const char* data, size_t size) {
  if (size < static_cast<size_t>(kFixedHeaderBytes) ||
      std::memcmp(data, kBinaryMagic, sizeof(kBinaryMagic)) != 0) {
    return absl::DataLossError(
        absl::StrCat(path,
                     ": not a Tessera binary record file (bad magic; convert text with "
                     "`tessera-data convert`)"));
  }
  BinaryFileInfo info;
  info.version = Load<uint32_t>(data + 8);
  if (info.version != kBinaryVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": binary format version ", info.version,
                                                   ", this build reads version ", kBinaryVersion));
  }
  info.header_bytes = Load<uint32_t>(data + 12);
  info.num_dense = Load<uint32_t>(data + 16);
  info.num_sparse = Load<uint32_t>(data + 20);
  info.record_bytes = Load<uint32_t>(data + 24);
  const uint64_t records = Load<uint64_t>(data + 32);
  if (info.num_sparse > 100000 || info.num_dense > 100000 ||
      info.header_bytes != HeaderBytesFor(info.num_sparse) ||
      info.record_bytes != 4 * (1 + info.num_dense + info.num_sparse) ||
      static_cast<size_t>(info.header_bytes) > size) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt header (sizes inconsistent)"));
  }
  if (HeaderChecksum(data, info.num_sparse) != Load<uint32_t>(data + 28)) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt header (checksum mismatch)"));
  }
  // The record count comes from the file: compared by division, so a huge count cannot
  // overflow the multiplication (found by fuzz/binary_reader_fuzz.cc).
  const uint64_t record_bytes = static_cast<uint64_t>(info.record_bytes);
  const uint64_t payload = size - static_cast<uint64_t>(info.header_bytes);
  if (records > payload / record_bytes || records * record_bytes != payload) {
    const uint64_t header = static_cast<uint64_t>(info.header_bytes);
    const std::string expected =
        records <= (UINT64_MAX - header) / record_bytes
            ? absl::StrCat(header + records * record_bytes)
            : std::string("more than 2^64");
    return absl::DataLossError(absl::StrCat(path, ": file is ", size, " bytes, the header says ",
                                            records, " records = ", expected,
                                            " bytes (truncated or appended to)"));
  }
  info.num_records = static_cast<int64_t>(records);
  info.rows_per_feature.resize(info.num_sparse);
  for (int64_t k = 0; k < info.num_sparse; ++k) {
    info.rows_per_feature[k] = static_cast<int64_t>(Load<uint64_t>(data + 64 + 8 * k));
  }
  return info;
}

absl::Status SameRows(const std::string& path, const std::vector<int64_t>& file_rows,
                      const std::vector<int64_t>& want, const std::string& want_source) {
  if (file_rows.size() != want.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": has ", file_rows.size(), " sparse features, ", want_source, " has ", want.size()));
  }
  for (size_t k = 0; k < want.size(); ++k) {
    if (file_rows[k] != want[k]) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ids were hashed with ", file_rows[k], " rows for sparse feature ",
                       k, " but ", want_source, " has ", want[k],
                       " rows; re-convert the text with the model's rows_per_feature"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BinaryFileInfo> ReadBinaryHeader(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(MappedFile map, MappedFile::Open(path));
  return ParseHeader(path, map.data(), map.size());
}

// ---------------------------------------------------------------------------------------------
// Writer

absl::StatusOr<std::unique_ptr<BinaryRecordWriter>> BinaryRecordWriter::Create(
    const std::string& path, int64_t num_dense, std::vector<int64_t> rows_per_feature) {
  if (num_dense < 0) return absl::InvalidArgumentError("num_dense < 0");
  for (size_t k = 0; k < rows_per_feature.size(); ++k) {
    if (rows_per_feature[k] < 1 || rows_per_feature[k] > (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows_per_feature[", k, "] = ", rows_per_feature[k], ", expected 1..2^32"));
    }
  }
  std::unique_ptr<BinaryRecordWriter> w(new BinaryRecordWriter());
  w->path_ = path;
  w->tmp_path_ = path + ".tmp";
  w->num_dense_ = num_dense;
  w->rows_ = std::move(rows_per_feature);
  w->header_bytes_ = HeaderBytesFor(static_cast<int64_t>(w->rows_.size()));
  w->record_.resize(4 * (1 + num_dense + w->rows_.size()));
  w->file_ = std::fopen(w->tmp_path_.c_str(), "wb");
  if (w->file_ == nullptr) {
    return absl::InternalError(
        absl::StrCat(w->tmp_path_, ": cannot create: ", std::strerror(errno)));
  }
  std::setvbuf(w->file_, nullptr, _IOFBF, 1 << 20);
  // Placeholder header; Finish() rewrites it with the record count.
  std::vector<char> zeros(w->header_bytes_, 0);
  if (std::fwrite(zeros.data(), 1, zeros.size(), w->file_) != zeros.size()) {
    return absl::InternalError(absl::StrCat(w->tmp_path_, ": write failed"));
  }
  return w;
}

BinaryRecordWriter::~BinaryRecordWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

absl::Status BinaryRecordWriter::Append(float label, const float* dense, const uint32_t* ids) {
  if (file_ == nullptr) return absl::FailedPreconditionError("writer already finished");
  if (label != 0.0f && label != 1.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("record ", records_, ": label ", label, " is not 0 or 1"));
  }
  const int64_t num_sparse = static_cast<int64_t>(rows_.size());
  for (int64_t k = 0; k < num_sparse; ++k) {
    if (static_cast<int64_t>(ids[k]) >= rows_[k]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "record ", records_, ": id ", ids[k], " of sparse feature ", k, " >= rows ", rows_[k]));
    }
  }
  char* p = record_.data();
  Store<float>(p, label);
  std::memcpy(p + 4, dense, 4 * num_dense_);
  std::memcpy(p + 4 + 4 * num_dense_, ids, 4 * num_sparse);
  if (std::fwrite(p, 1, record_.size(), file_) != record_.size()) {
    return absl::InternalError(absl::StrCat(tmp_path_, ": write failed: ", std::strerror(errno)));
  }
  ++records_;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BinaryRecordWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError("writer already finished");
  const int64_t num_sparse = static_cast<int64_t>(rows_.size());
  std::vector<char> header(header_bytes_, 0);
  std::memcpy(header.data(), kBinaryMagic, sizeof(kBinaryMagic));
  Store<uint32_t>(header.data() + 8, kBinaryVersion);
  Store<uint32_t>(header.data() + 12, static_cast<uint32_t>(header_bytes_));
  Store<uint32_t>(header.data() + 16, static_cast<uint32_t>(num_dense_));
  Store<uint32_t>(header.data() + 20, static_cast<uint32_t>(num_sparse));
  Store<uint32_t>(header.data() + 24, static_cast<uint32_t>(record_.size()));
  Store<uint64_t>(header.data() + 32, static_cast<uint64_t>(records_));
  for (int64_t k = 0; k < num_sparse; ++k) {
    Store<uint64_t>(header.data() + 64 + 8 * k, static_cast<uint64_t>(rows_[k]));
  }
  Store<uint32_t>(header.data() + 28, HeaderChecksum(header.data(), num_sparse));
  bool ok = std::fflush(file_) == 0 && std::fseek(file_, 0, SEEK_SET) == 0 &&
            std::fwrite(header.data(), 1, header.size(), file_) == header.size();
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    return absl::InternalError(absl::StrCat(tmp_path_, ": write failed: ", std::strerror(errno)));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_path_.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp_path_, " to ", path_, ": ", std::strerror(errno)));
  }
  return records_;
}

// ---------------------------------------------------------------------------------------------
// Reader

struct BinaryReader::State {
  struct File {
    MappedFile map;
    BinaryFileInfo info;
    int64_t first_index = 0;  // global index of its first record
  };
  BinaryReaderOptions options;
  BinaryFileInfo info;
  std::vector<File> files;
  int64_t total = 0, shard_begin = 0, shard_end = 0, next = 0;
  ReaderStats stats;
  std::vector<uint32_t> ids;  // staging, row-major
};

BinaryReader::BinaryReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
BinaryReader::~BinaryReader() = default;

absl::StatusOr<std::unique_ptr<BinaryReader>> BinaryReader::Open(BinaryReaderOptions options) {
  if (options.paths.empty()) return absl::InvalidArgumentError("no input files given");
  TESSERA_RETURN_IF_ERROR(
      io_internal::CheckBatchAndShard(options.batch_size, options.shard_index, options.num_shards));
  auto state = std::make_unique<State>();
  for (const std::string& path : options.paths) {
    State::File file;
    TESSERA_ASSIGN_OR_RETURN(file.map, MappedFile::Open(path));
    TESSERA_ASSIGN_OR_RETURN(file.info, ParseHeader(path, file.map.data(), file.map.size()));
    if (!options.rows_per_feature.empty()) {
      TESSERA_RETURN_IF_ERROR(
          SameRows(path, file.info.rows_per_feature, options.rows_per_feature, "the model"));
    } else if (!state->files.empty()) {
      TESSERA_RETURN_IF_ERROR(SameRows(path, file.info.rows_per_feature,
                                       state->files[0].info.rows_per_feature, options.paths[0]));
    }
    if (!state->files.empty() && file.info.num_dense != state->files[0].info.num_dense) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": has ", file.info.num_dense,
                                                     " dense features, ", options.paths[0], " has ",
                                                     state->files[0].info.num_dense));
    }
    file.first_index = state->total;
    state->total += file.info.num_records;
    state->files.push_back(std::move(file));
  }
  state->info = state->files[0].info;
  state->info.num_records = state->total;
  state->shard_begin = state->total * options.shard_index / options.num_shards;
  state->shard_end = state->total * (options.shard_index + 1) / options.num_shards;
  state->next = state->shard_begin;
  state->options = std::move(options);
  return std::unique_ptr<BinaryReader>(new BinaryReader(std::move(state)));
}

absl::StatusOr<bool> BinaryReader::Next(Batch* batch) {
  State& s = *state_;
  if (s.next >= s.shard_end) return false;
  const int64_t n = std::min(s.options.batch_size, s.shard_end - s.next);
  const int64_t nd = s.info.num_dense, ns = s.info.num_sparse;
  const int64_t* rows = s.info.rows_per_feature.data();
  io_internal::BeginOneHotBatch(n, nd, batch);
  s.ids.resize(n * ns);
  size_t f = 0;
  while (f + 1 < s.files.size() && s.files[f + 1].first_index <= s.next) ++f;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t index = s.next + b;
    while (index >= s.files[f].first_index + s.files[f].info.num_records) ++f;
    const State::File& file = s.files[f];
    const int64_t local = index - file.first_index;
    if (b == 0) batch->origin = absl::StrCat(file.map.path(), ": record ", local);
    const char* rec = file.map.data() + file.info.header_bytes + local * file.info.record_bytes;
    float label = Load<float>(rec);
    std::memcpy(&batch->dense[b * nd], rec + 4, 4 * nd);
    uint32_t* ids = &s.ids[b * ns];
    std::memcpy(ids, rec + 4 + 4 * nd, 4 * ns);
    bool bad = label != 0.0f && label != 1.0f;
    for (int64_t k = 0; k < ns; ++k) bad |= static_cast<int64_t>(ids[k]) >= rows[k];
    if (bad) {
      s.next += b;
      return absl::DataLossError(absl::StrCat(file.map.path(), ": record ", local,
                                              " is corrupt (label not 0/1 or an id >= rows)"));
    }
    batch->labels[b] = label;
  }
  io_internal::FinishOneHotBatch(n, static_cast<int>(ns), s.ids.data(), batch);
  s.next += n;
  s.stats.records += n;
  return true;
}

absl::Status BinaryReader::Rewind() {
  state_->next = state_->shard_begin;
  return absl::OkStatus();
}

ReaderStats BinaryReader::stats() const { return state_->stats; }
const BinaryFileInfo& BinaryReader::info() const { return state_->info; }
int64_t BinaryReader::num_records() const { return state_->shard_end - state_->shard_begin; }
int64_t BinaryReader::total_records() const { return state_->total; }

// ---------------------------------------------------------------------------------------------
// Converter

namespace {

// The gzip path of the converter: batches from the threaded reader, written record by record.
absl::StatusOr<ConvertStats> ConvertCriteoGzip(const CriteoTextOptions& text,
                                               const std::string& output_path) {
  TESSERA_ASSIGN_OR_RETURN(CriteoGzipOptions o, GzipOptionsFrom(text));
  o.batch_size = 8192;
  TESSERA_ASSIGN_OR_RETURN(auto reader, CriteoGzipReader::Open(std::move(o)));
  TESSERA_ASSIGN_OR_RETURN(
      auto writer, BinaryRecordWriter::Create(output_path, kCriteoNumDense, text.rows_per_feature));
  Batch b;
  uint32_t ids[kCriteoNumSparse];
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(bool more, reader->Next(&b));
    if (!more) break;
    for (int64_t i = 0; i < b.batch_size; ++i) {
      for (int f = 0; f < kCriteoNumSparse; ++f) {
        ids[f] = static_cast<uint32_t>(b.sparse.values[f * b.batch_size + i]);
      }
      TESSERA_RETURN_IF_ERROR(
          writer->Append(b.labels[i], &b.dense[i * kCriteoNumDense], ids));
    }
  }
  ConvertStats stats;
  TESSERA_ASSIGN_OR_RETURN(stats.records_written, writer->Finish());
  stats.bad_records_skipped = reader->stats().bad_records_skipped;
  return stats;
}

}  // namespace

absl::StatusOr<ConvertStats> ConvertCriteoTextToBinary(const CriteoTextOptions& text,
                                                       const std::string& output_path) {
  CriteoTextOptions opts = text;
  opts.shard_index = 0;
  opts.num_shards = 1;
  if (AnyGzipPath(opts.paths)) return ConvertCriteoGzip(opts, output_path);
  TESSERA_ASSIGN_OR_RETURN(auto reader, CriteoTextReader::Open(opts));
  TESSERA_ASSIGN_OR_RETURN(
      auto writer, BinaryRecordWriter::Create(output_path, kCriteoNumDense, opts.rows_per_feature));
  CriteoRecord record;
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(bool more, reader->NextRecord(&record));
    if (!more) break;
    TESSERA_RETURN_IF_ERROR(writer->Append(record.label, record.dense, record.ids));
  }
  ConvertStats stats;
  TESSERA_ASSIGN_OR_RETURN(stats.records_written, writer->Finish());
  stats.bad_records_skipped = reader->stats().bad_records_skipped;
  return stats;
}

}  // namespace tessera
