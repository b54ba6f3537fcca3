#include "io/criteo_text.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/escape.h"
#include "core/logging.h"
#include "core/status.h"
#include "io/internal/criteo_parse.h"
#include "io/internal/mapped_file.h"
#include "io/internal/one_hot_batch.h"
#include "io/internal/reader_checks.h"

namespace tessera {

using io_internal::CriteoLineParser;
using io_internal::FieldError;
using io_internal::MappedFile;

namespace {

constexpr size_t kMaxSkippedMessages = 16;
constexpr int kMaxSkipWarnings = 5;

// A line [begin, end) of a file; `next` is where the following line starts.
struct Line {
  size_t begin, end, next;
};

inline Line LineAt(const MappedFile& file, size_t offset) {
  const char* base = file.data();
  const void* nl = std::memchr(base + offset, '\n', file.size() - offset);
  size_t end =
      nl == nullptr ? file.size() : static_cast<size_t>(static_cast<const char*>(nl) - base);
  return {offset, end, nl == nullptr ? end : end + 1};
}

inline bool IsBlank(const MappedFile& file, const Line& line) {
  return line.end == line.begin || (line.end == line.begin + 1 && file.data()[line.begin] == '\r');
}

}  // namespace

struct CriteoTextReader::State {
  struct File {
    MappedFile map;
    size_t data_begin = 0;   // after the CSV header, if any
    int64_t first_line = 1;  // line number of data_begin
    int64_t records = 0;
  };
  // A position in the stream: the next line to look at and the global index of the next record.
  struct Position {
    size_t file = 0;
    size_t offset = 0;
    int64_t line = 1;
    int64_t index = 0;
  };

  CriteoTextOptions options;
  std::unique_ptr<CriteoLineParser> parser;
  std::vector<File> files;
  int64_t total = 0;
  int64_t shard_begin = 0, shard_end = 0;
  Position start, pos;

  ReaderStats stats;
  int64_t bad_this_pass = 0;
  std::vector<std::string> skipped_messages;
  // Staging for one batch (see Next).
  std::vector<float> labels, dense;
  std::vector<uint32_t> ids;

  // Moves `pos` to the start of file `f`.
  void EnterFile(size_t f) {
    pos.file = f;
    if (f < files.size()) {
      pos.offset = files[f].data_begin;
      pos.line = files[f].first_line;
    }
  }
};

absl::StatusOr<std::vector<int64_t>> CriteoRowsPreset(std::string_view name) {
  if (name == "kaggle") {
    return std::vector<int64_t>{1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
                                93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
                                2173,  4,    7046547,  18,      15,  286181, 105,     142572};
  }
  if (name == "terabyte") {
    return std::vector<int64_t>{40000000, 39060,  17295,    7424,    20265,  3,        7122,
                                1543,     63,     40000000, 3067956, 405282, 10,       2209,
                                11938,    155,    4,        976,     14,     40000000, 40000000,
                                40000000, 590152, 12973,    108,     36};
  }
  return absl::NotFoundError(absl::StrCat("unknown rows preset '", EscapeBytes(name),
                                          "'; known presets: kaggle, terabyte"));
}

absl::Status ValidateCriteoRows(const std::vector<int64_t>& rows) {
  if (rows.size() != kCriteoNumSparse) {
    return absl::InvalidArgumentError(absl::StrCat("rows_per_feature has ", rows.size(),
                                                   " values, expected ", kCriteoNumSparse,
                                                   " (one per categorical column C1..C26)"));
  }
  for (int k = 0; k < kCriteoNumSparse; ++k) {
    if (rows[k] < 1 || rows[k] > (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat("rows_per_feature[", k, "] (C", k + 1,
                                                     ") = ", rows[k], ", expected 1..2^32"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseCriteoLine(std::string_view line, CriteoTextFormat format, const int64_t* rows,
                             CriteoRecord* record) {
  CriteoLineParser parser(format, rows);
  FieldError err = parser.Parse(line, &record->label, record->dense, record->ids);
  if (!err.ok()) return absl::InvalidArgumentError(io_internal::FieldErrorMessage(err));
  return absl::OkStatus();
}

CriteoTextReader::CriteoTextReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
CriteoTextReader::~CriteoTextReader() = default;

absl::StatusOr<std::unique_ptr<CriteoTextReader>> CriteoTextReader::Open(
    CriteoTextOptions options) {
  if (options.paths.empty()) return absl::InvalidArgumentError("no input files given");
  TESSERA_RETURN_IF_ERROR(
      io_internal::CheckBatchAndShard(options.batch_size, options.shard_index, options.num_shards));
  if (options.max_bad_records < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_bad_records = ", options.max_bad_records, ", expected >= 0"));
  }
  TESSERA_RETURN_IF_ERROR(ValidateCriteoRows(options.rows_per_feature));

  auto state = std::make_unique<State>();
  state->parser =
      std::make_unique<CriteoLineParser>(options.format, options.rows_per_feature.data());
  for (const std::string& path : options.paths) {
    State::File file;
    TESSERA_ASSIGN_OR_RETURN(file.map, MappedFile::Open(path));
    // A UTF-8 byte-order mark at the start (some editors and exporters write one) is not data.
    size_t offset = file.map.size() >= 3 && std::memcmp(file.map.data(), "\xEF\xBB\xBF", 3) == 0
                        ? 3
                        : 0;
    int64_t line_no = 1;
    // The CSV header: a first line whose first field is `label`.
    if (options.format == CriteoTextFormat::kCsv && offset < file.map.size()) {
      Line first = LineAt(file.map, offset);
      std::string_view text(file.map.data() + first.begin, first.end - first.begin);
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      if (text.substr(0, 6) == "label," || text == "label") {
        int64_t columns = 1 + std::count(text.begin(), text.end(), ',');
        if (columns != kCriteoNumFields) {
          return absl::InvalidArgumentError(absl::StrCat(path, ":1: CSV header has ", columns,
                                                         " columns, expected ", kCriteoNumFields,
                                                         " (label,I1..I13,C1..C26)"));
        }
        offset = first.next;
        line_no = 2;
      }
    }
    file.data_begin = offset;
    file.first_line = line_no;
    int64_t records = 0;
    while (offset < file.map.size()) {
      Line line = LineAt(file.map, offset);
      records += !IsBlank(file.map, line);
      offset = line.next;
    }
    file.records = records;
    state->total += records;
    state->files.push_back(std::move(file));
  }

  const int64_t n = state->total;
  state->shard_begin = n * options.shard_index / options.num_shards;
  state->shard_end = n * (options.shard_index + 1) / options.num_shards;

  // Walk to the first record of the shard: whole files first, then lines.
  State::Position& pos = state->pos;
  int64_t before = 0;
  size_t f = 0;
  while (f < state->files.size() && before + state->files[f].records <= state->shard_begin) {
    before += state->files[f].records;
    ++f;
  }
  state->EnterFile(f);
  pos.index = before;
  if (f < state->files.size()) {
    const MappedFile& map = state->files[f].map;
    while (pos.index < state->shard_begin) {
      Line line = LineAt(map, pos.offset);
      pos.index += !IsBlank(map, line);
      pos.offset = line.next;
      ++pos.line;
    }
  }
  state->start = pos;
  state->options = std::move(options);
  return std::unique_ptr<CriteoTextReader>(new CriteoTextReader(std::move(state)));
}

absl::StatusOr<bool> CriteoTextReader::NextRecord(CriteoRecord* record) {
  TESSERA_ASSIGN_OR_RETURN(bool more, ReadRecord(record));
  state_->stats.records += more;
  return more;
}

absl::StatusOr<bool> CriteoTextReader::ReadRecord(CriteoRecord* record) {
  State& s = *state_;
  State::Position& pos = s.pos;
  while (pos.index < s.shard_end) {
    // The record counts say a record exists ahead, so the file loop always finds one.
    if (pos.file >= s.files.size()) return absl::InternalError("record index past the last file");
    const MappedFile& map = s.files[pos.file].map;
    if (pos.offset >= map.size()) {
      s.EnterFile(pos.file + 1);
      continue;
    }
    Line line = LineAt(map, pos.offset);
    const int64_t line_no = pos.line;
    pos.offset = line.next;
    ++pos.line;
    if (IsBlank(map, line)) continue;
    ++pos.index;
    FieldError err =
        s.parser->Parse(std::string_view(map.data() + line.begin, line.end - line.begin),
                        &record->label, record->dense, record->ids);
    if (err.ok()) return true;

    std::string msg =
        absl::StrCat(map.path(), ":", line_no, ": ", io_internal::FieldErrorMessage(err));
    if (s.options.on_bad_record == BadRecordPolicy::kFail) {
      return absl::InvalidArgumentError(msg);
    }
    ++s.bad_this_pass;
    ++s.stats.bad_records_skipped;
    if (s.bad_this_pass > s.options.max_bad_records) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than max_bad_records = ", s.options.max_bad_records,
                       " bad records in one pass; the last: ", msg));
    }
    if (s.bad_this_pass <= kMaxSkipWarnings) {
      TESSERA_LOG(WARNING) << "skipping bad record " << msg;
    }
    if (s.skipped_messages.size() < kMaxSkippedMessages) s.skipped_messages.push_back(msg);
  }
  return false;
}

absl::StatusOr<bool> CriteoTextReader::Next(Batch* batch) {
  State& s = *state_;
  const int64_t cap = s.options.batch_size;
  // Stage the batch in the reader's own buffers, so `batch` stays untouched when the shard turns
  // out to hold no further good record.
  s.labels.resize(cap);
  s.dense.resize(cap * kCriteoNumDense);
  s.ids.resize(cap * kCriteoNumSparse);
  int64_t b = 0;
  std::string origin;  // the first record's file:line
  State::Position& pos = s.pos;
  while (b < cap && pos.index < s.shard_end) {
    // Inline of NextRecord writing straight into the staging rows.
    if (pos.file >= s.files.size()) return absl::InternalError("record index past the last file");
    const MappedFile& map = s.files[pos.file].map;
    if (pos.offset >= map.size()) {
      s.EnterFile(pos.file + 1);
      continue;
    }
    Line line = LineAt(map, pos.offset);
    if (IsBlank(map, line)) {
      pos.offset = line.next;
      ++pos.line;
      continue;
    }
    FieldError err =
        s.parser->Parse(std::string_view(map.data() + line.begin, line.end - line.begin),
                        &s.labels[b], &s.dense[b * kCriteoNumDense], &s.ids[b * kCriteoNumSparse]);
    if (err.ok()) {
      if (b == 0) origin = absl::StrCat(map.path(), ":", pos.line);
      pos.offset = line.next;
      ++pos.line;
      ++pos.index;
      ++b;
      continue;
    }
    // Bad record: let ReadRecord re-parse it and apply the policy, so there is one copy of it.
    CriteoRecord scratch;
    TESSERA_ASSIGN_OR_RETURN(bool more, ReadRecord(&scratch));
    if (more) {
      // NextRecord skipped the bad line and returned the good record after it.
      if (b == 0) origin = absl::StrCat(s.files[pos.file].map.path(), ":", pos.line - 1);
      s.labels[b] = scratch.label;
      std::copy_n(scratch.dense, kCriteoNumDense, &s.dense[b * kCriteoNumDense]);
      std::copy_n(scratch.ids, kCriteoNumSparse, &s.ids[b * kCriteoNumSparse]);
      ++b;
    }
  }
  if (b == 0) return false;
  io_internal::BeginOneHotBatch(b, kCriteoNumDense, batch);
  std::copy_n(s.labels.data(), b, batch->labels.data());
  std::copy_n(s.dense.data(), b * kCriteoNumDense, batch->dense.data());
  io_internal::FinishOneHotBatch(b, kCriteoNumSparse, s.ids.data(), batch);
  batch->origin = std::move(origin);
  s.stats.records += b;
  return true;
}

absl::Status CriteoTextReader::Rewind() {
  state_->pos = state_->start;
  state_->bad_this_pass = 0;
  return absl::OkStatus();
}

ReaderStats CriteoTextReader::stats() const { return state_->stats; }
int64_t CriteoTextReader::num_records() const { return state_->shard_end - state_->shard_begin; }
int64_t CriteoTextReader::total_records() const { return state_->total; }
const std::vector<std::string>& CriteoTextReader::skipped_messages() const {
  return state_->skipped_messages;
}

}  // namespace tessera
