#include "io/criteo_gzip.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/status.h"
#include "io/internal/criteo_parse.h"
#include "io/internal/one_hot_batch.h"
#include "io/internal/reader_checks.h"

namespace tessera {

using io_internal::CriteoLineParser;
using io_internal::FieldError;

namespace {

constexpr int kMaxSkipWarnings = 5;

// Whole lines of one file, as the inflater cuts them.
struct TextChunk {
  int64_t seq = 0;
  size_t file = 0;
  int64_t first_line = 1;  // line number of the chunk's first line in its file
  std::string text;
  absl::Status error;      // an I/O or gzip error after the text (ends the stream)
  bool end = false;        // the end of the stream (no text)
};

// The records of one chunk, parsed.
struct ParsedChunk {
  int64_t n = 0;
  std::vector<float> labels, dense;
  std::vector<uint32_t> ids;           // [n * 26], sample-major
  int64_t bad = 0;                     // records dropped (kSkip)
  std::vector<std::string> messages;   // "path:line: ..." of the dropped records (first few)
  std::string last_message;            // of the last dropped or failing record
  absl::Status error;                  // kFail: the first bad record (after the n good ones);
                                       // or the chunk's I/O error
  bool end = false;
};

}  // namespace

struct CriteoGzipReader::State {
  CriteoGzipOptions options;
  std::vector<std::string> files;  // this shard's
  std::unique_ptr<CriteoLineParser> parser;

  // Shared between the threads, under `mu`.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::map<int64_t, TextChunk> raw;        // waiting for a parser
  std::map<int64_t, ParsedChunk> parsed;   // waiting for the consumer
  int64_t in_flight = 0;                   // chunks made and not yet consumed
  std::vector<std::thread> threads;
  std::atomic<int64_t> text_bytes{0};

  // Consumer side.
  int64_t next_seq = 0;
  ParsedChunk current;
  int64_t current_pos = 0;
  bool have_current = false, finished = false;
  absl::Status sticky;  // an error delivered once is delivered again until Rewind
  ReaderStats stats;
  int64_t bad_this_pass = 0;
  std::vector<float> labels, dense;  // staging for one batch
  std::vector<uint32_t> ids;

  void Start();
  void Stop();
  void Inflate();
  void Parse();
  bool Push(TextChunk chunk);  // false when stopping
  ParsedChunk ParseChunk(const TextChunk& chunk) const;
};

void CriteoGzipReader::State::Start() {
  stop = false;
  raw.clear();
  parsed.clear();
  in_flight = 0;
  next_seq = 0;
  have_current = false;
  finished = false;
  sticky = absl::OkStatus();
  bad_this_pass = 0;
  threads.emplace_back([this] { Inflate(); });
  for (int i = 0; i < options.parse_threads; ++i) threads.emplace_back([this] { Parse(); });
}

void CriteoGzipReader::State::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();
  threads.clear();
}

bool CriteoGzipReader::State::Push(TextChunk chunk) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return stop || in_flight < options.max_chunks_in_flight; });
  if (stop) return false;
  ++in_flight;
  raw.emplace(chunk.seq, std::move(chunk));
  cv.notify_all();
  return true;
}

void CriteoGzipReader::State::Inflate() {
  int64_t seq = 0;
  const size_t want = static_cast<size_t>(options.chunk_bytes);
  std::string carry;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& path = files[f];
    gzFile gz = gzopen(path.c_str(), "rb");
    TextChunk fail;
    fail.file = f;
    if (gz == nullptr) {
      fail.seq = seq;
      fail.error = absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
      Push(std::move(fail));
      return;
    }
    gzbuffer(gz, 1 << 18);
    int64_t line = 1, file_bytes = 0;
    carry.clear();
    bool eof = false;
    while (!eof) {
      TextChunk c;
      c.seq = seq;
      c.file = f;
      c.first_line = line;
      c.text = std::move(carry);
      carry = std::string();
      const size_t have = c.text.size();
      c.text.resize(std::max(want, have + (64 << 10)));
      size_t filled = have;
      // Fill the chunk; gzread takes at most INT_MAX bytes per call.
      while (filled < c.text.size()) {
        const int got = gzread(gz, c.text.data() + filled,
                               static_cast<unsigned>(c.text.size() - filled));
        if (got < 0) break;
        filled += got;
        file_bytes += got;
        if (got == 0) break;
      }
      int err = Z_OK;
      const char* msg = gzerror(gz, &err);
      if (err != Z_OK && err != Z_STREAM_END && !(err == Z_BUF_ERROR && !gzeof(gz))) {
        const bool truncated = err == Z_BUF_ERROR;
        c.error = absl::DataLossError(absl::StrCat(
            path, ": ", truncated ? "truncated gzip stream (the file ends mid-stream)"
                                  : absl::StrCat("corrupt gzip data (", msg, ")"),
            " after ", file_bytes, " bytes of text"));
      }
      eof = !c.error.ok() || gzeof(gz) || filled < c.text.size();
      c.text.resize(filled);
      if (!eof) {
        // Cut after the last newline; the rest starts the next chunk.
        const void* nl = memrchr(c.text.data(), '\n', c.text.size());
        const size_t cut = nl == nullptr ? c.text.size()
                                         : static_cast<const char*>(nl) - c.text.data() + 1;
        carry.assign(c.text, cut, std::string::npos);
        c.text.resize(cut);
      }
      line += std::count(c.text.begin(), c.text.end(), '\n');
      text_bytes.fetch_add(static_cast<int64_t>(c.text.size()), std::memory_order_relaxed);
      const bool failed = !c.error.ok();
      if (!c.text.empty() || failed) {
        ++seq;
        if (!Push(std::move(c))) {
          gzclose(gz);
          return;
        }
      }
      if (failed) {
        gzclose(gz);
        return;
      }
    }
    gzclose(gz);
  }
  TextChunk end;
  end.seq = seq;
  end.end = true;
  Push(std::move(end));
}

ParsedChunk CriteoGzipReader::State::ParseChunk(const TextChunk& c) const {
  ParsedChunk p;
  p.error = c.error;
  p.end = c.end;
  const char* s = c.text.data();
  const char* e = s + c.text.size();
  const int64_t cap = std::count(c.text.begin(), c.text.end(), '\n') + 1;
  p.labels.resize(cap);
  p.dense.resize(cap * kCriteoNumDense);
  p.ids.resize(cap * kCriteoNumSparse);
  int64_t line = c.first_line;
  for (const char* at = s; at < e; ++line) {
    const char* nl = static_cast<const char*>(std::memchr(at, '\n', e - at));
    const char* end = nl == nullptr ? e : nl;
    std::string_view text(at, end - at);
    at = nl == nullptr ? e : nl + 1;
    if (text.empty() || text == "\r") continue;
    FieldError err = parser->Parse(text, &p.labels[p.n], &p.dense[p.n * kCriteoNumDense],
                                   &p.ids[p.n * kCriteoNumSparse]);
    if (err.ok()) {
      ++p.n;
      continue;
    }
    std::string msg =
        absl::StrCat(files[c.file], ":", line, ": ", io_internal::FieldErrorMessage(err));
    if (options.on_bad_record == BadRecordPolicy::kFail) {
      p.error = absl::InvalidArgumentError(msg);
      break;
    }
    ++p.bad;
    if (p.messages.size() < kMaxSkipWarnings) p.messages.push_back(msg);
    p.last_message = std::move(msg);
  }
  return p;
}

void CriteoGzipReader::State::Parse() {
  while (true) {
    TextChunk chunk;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !raw.empty(); });
      if (stop) return;
      chunk = std::move(raw.begin()->second);
      raw.erase(raw.begin());
    }
    ParsedChunk p = ParseChunk(chunk);
    {
      std::lock_guard<std::mutex> lock(mu);
      parsed.emplace(chunk.seq, std::move(p));
    }
    cv.notify_all();
  }
}

bool AnyGzipPath(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (p.size() >= 3 && p.compare(p.size() - 3, 3, ".gz") == 0) return true;
  }
  return false;
}

absl::StatusOr<CriteoGzipOptions> GzipOptionsFrom(const CriteoTextOptions& text) {
  if (text.format != CriteoTextFormat::kTsv) {
    return absl::InvalidArgumentError("gzip-compressed Criteo data is read as TSV only");
  }
  CriteoGzipOptions o;
  o.paths = text.paths;
  o.batch_size = text.batch_size;
  o.rows_per_feature = text.rows_per_feature;
  o.on_bad_record = text.on_bad_record;
  o.max_bad_records = text.max_bad_records;
  o.shard_index = text.shard_index;
  o.num_shards = text.num_shards;
  return o;
}

CriteoGzipReader::CriteoGzipReader(std::unique_ptr<State> state) : state_(std::move(state)) {}

CriteoGzipReader::~CriteoGzipReader() { state_->Stop(); }

absl::StatusOr<std::unique_ptr<CriteoGzipReader>> CriteoGzipReader::Open(
    CriteoGzipOptions options) {
  if (options.paths.empty()) return absl::InvalidArgumentError("no input files given");
  TESSERA_RETURN_IF_ERROR(
      io_internal::CheckBatchAndShard(options.batch_size, options.shard_index, options.num_shards));
  if (options.max_bad_records < 0 || options.parse_threads < 1 || options.chunk_bytes < 1 ||
      options.max_chunks_in_flight < 1) {
    return absl::InvalidArgumentError(
        "max_bad_records >= 0, parse_threads >= 1, chunk_bytes >= 1 and "
        "max_chunks_in_flight >= 1 are required");
  }
  TESSERA_RETURN_IF_ERROR(ValidateCriteoRows(options.rows_per_feature));
  auto state = std::make_unique<State>();
  for (size_t i = 0; i < options.paths.size(); ++i) {
    const std::string& path = options.paths[i];
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a data file"));
    }
    if (static_cast<int>(i % options.num_shards) == options.shard_index) {
      state->files.push_back(path);
    }
  }
  state->parser =
      std::make_unique<CriteoLineParser>(CriteoTextFormat::kTsv, options.rows_per_feature.data());
  state->options = std::move(options);
  state->Start();
  return std::unique_ptr<CriteoGzipReader>(new CriteoGzipReader(std::move(state)));
}

absl::StatusOr<bool> CriteoGzipReader::Next(Batch* batch) {
  State& s = *state_;
  if (!s.sticky.ok()) return s.sticky;
  if (s.finished) return false;
  const int64_t cap = s.options.batch_size;
  int64_t b = 0;
  // Stage in the reader's buffers, so `batch` stays untouched when no record is left.
  s.labels.resize(cap);
  s.dense.resize(cap * kCriteoNumDense);
  s.ids.resize(cap * kCriteoNumSparse);
  while (b < cap) {
    if (!s.have_current) {
      {
        std::unique_lock<std::mutex> lock(s.mu);
        s.cv.wait(lock, [&] { return s.parsed.count(s.next_seq) > 0; });
        auto it = s.parsed.find(s.next_seq);
        s.current = std::move(it->second);
        s.parsed.erase(it);
        --s.in_flight;
      }
      s.cv.notify_all();
      ++s.next_seq;
      s.current_pos = 0;
      s.have_current = true;
      // Skipped records are counted when their chunk is reached, in order.
      if (s.current.bad > 0) {
        s.bad_this_pass += s.current.bad;
        s.stats.bad_records_skipped += s.current.bad;
        for (const std::string& m : s.current.messages) {
          if (s.bad_this_pass - s.current.bad < kMaxSkipWarnings) {
            TESSERA_LOG(WARNING) << "skipping bad record " << m;
          }
        }
        if (s.bad_this_pass > s.options.max_bad_records) {
          s.sticky = absl::InvalidArgumentError(
              absl::StrCat("more than max_bad_records = ", s.options.max_bad_records,
                           " bad records in one pass; the last: ", s.current.last_message));
          return s.sticky;
        }
      }
    }
    ParsedChunk& c = s.current;
    const int64_t take = std::min(cap - b, c.n - s.current_pos);
    if (take > 0) {
      std::copy_n(&c.labels[s.current_pos], take, &s.labels[b]);
      std::copy_n(&c.dense[s.current_pos * kCriteoNumDense], take * kCriteoNumDense,
                  &s.dense[b * kCriteoNumDense]);
      std::copy_n(&c.ids[s.current_pos * kCriteoNumSparse], take * kCriteoNumSparse,
                  &s.ids[b * kCriteoNumSparse]);
      b += take;
      s.current_pos += take;
    }
    if (s.current_pos < c.n) continue;  // the batch is full
    if (!c.error.ok()) {
      s.sticky = c.error;
      return s.sticky;
    }
    s.have_current = false;
    if (c.end) {
      s.finished = true;
      break;
    }
  }
  if (b == 0) return false;
  io_internal::BeginOneHotBatch(b, kCriteoNumDense, batch);
  std::copy_n(s.labels.data(), b, batch->labels.data());
  std::copy_n(s.dense.data(), b * kCriteoNumDense, batch->dense.data());
  io_internal::FinishOneHotBatch(b, kCriteoNumSparse, s.ids.data(), batch);
  s.stats.records += b;
  return true;
}

absl::Status CriteoGzipReader::Rewind() {
  state_->Stop();
  state_->Start();
  return absl::OkStatus();
}

ReaderStats CriteoGzipReader::stats() const { return state_->stats; }
int64_t CriteoGzipReader::text_bytes() const { return state_->text_bytes.load(); }

}  // namespace tessera
