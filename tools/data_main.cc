// tessera-data: converts Criteo text to binary records and inspects record files.
//   tessera-data convert --input day_0.tsv[,day_1.tsv] --output train.bin
//                        (--rows 1460,583,... | --rows-preset kaggle|terabyte)
//                        [--format tsv|csv] [--on-bad-record fail|skip] [--max-bad-records N]
//   tessera-data inspect train.bin [--head N]
//   tessera-data read --input day_0.gz[,...] (--rows ... | --rows-preset ...) [--threads N]
//                     [--max-records N]      the reader alone: records/s (docs/PERFORMANCE.md)
//   tessera-data read --mlperf-dir D --days 0-22 (--rows ... | --rows-preset ...)
// Flags may be spelt with dashes or underscores (--rows-preset, --rows_preset).
// Exit status 0 on success, 1 on any error (one message naming the file:line or value), 2 on bad
// usage.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/timer.h"
#include "io/binary_format.h"
#include "io/criteo_gzip.h"
#include "io/criteo_text.h"
#include "io/mlperf_npy.h"
#include "io/reader.h"
#include "tools/help.h"

ABSL_FLAG(std::string, input, "", "convert: Criteo text file(s), comma-separated, read in order");
ABSL_FLAG(std::string, output, "", "convert: the binary record file to write");
ABSL_FLAG(std::string, rows, "", "convert: 26 table sizes C1..C26, comma-separated");
ABSL_FLAG(std::string, rows_preset, "", "convert: kaggle or terabyte (instead of --rows)");
ABSL_FLAG(std::string, format, "tsv", "convert: tsv or csv");
ABSL_FLAG(std::string, on_bad_record, "fail", "convert: fail or skip");
ABSL_FLAG(int64_t, max_bad_records, 1000, "convert: with skip, fail past this many bad records");
ABSL_FLAG(int64_t, head, 3, "inspect: records to print");
ABSL_FLAG(int, threads, 2, "read: parser threads of the gzip reader");
ABSL_FLAG(int64_t, max_records, 0, "read: stop after this many records (0 = all)");
ABSL_FLAG(int64_t, batch_size, 2048, "read: records per batch");
ABSL_FLAG(std::string, mlperf_dir, "", "read: folder of MLPerf day_<d>_*.npy files");
ABSL_FLAG(std::string, days, "0", "read: MLPerf days, e.g. 0-22");

namespace tessera {
namespace {

constexpr char kUsage[] =
    "tessera-data: converts Criteo text to Tessera binary records and inspects them "
    "(docs/DATA.md).\n"
    "Commands:\n"
    "  tessera-data convert --input X.tsv --output Y.bin (--rows 1460,583,... | "
    "--rows-preset kaggle)\n"
    "                       [--format tsv|csv] [--on-bad-record fail|skip] "
    "[--max-bad-records N]\n"
    "  tessera-data inspect Y.bin [--head N]\n"
    "  tessera-data read --input X.gz|X.tsv|Y.bin (--rows ... | --rows-preset ...) "
    "[--threads N] [--max-records N]\n"
    "  tessera-data read --mlperf-dir D --days 0-22 (--rows ... | --rows-preset ...)\n"
    "      read: the reader alone, records/s (docs/PERFORMANCE.md)\n";

std::string DataHint(const std::string&) {
  return "tessera-data's flags belong to its commands (convert, inspect, read)";
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "tessera-data: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "tessera-data: %s\n%s\n", message.c_str(), kUsage);
  return 2;
}

absl::StatusOr<std::vector<int64_t>> ParseRows(const std::string& rows, const std::string& preset) {
  if (!rows.empty() && !preset.empty()) {
    return absl::InvalidArgumentError("give --rows or --rows-preset, not both");
  }
  if (!preset.empty()) return CriteoRowsPreset(preset);
  if (rows.empty()) return absl::InvalidArgumentError("--rows or --rows-preset is required");
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(rows, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError("--rows: '" + std::string(part) + "' is not an integer");
    }
    out.push_back(v);
  }
  return out;
}

int Convert() {
  CriteoTextOptions o;
  const std::string input = absl::GetFlag(FLAGS_input), output = absl::GetFlag(FLAGS_output);
  if (input.empty() || output.empty()) return Usage("convert needs --input and --output");
  for (absl::string_view p : absl::StrSplit(input, ',', absl::SkipEmpty())) {
    o.paths.emplace_back(p);
  }
  auto rows = ParseRows(absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_rows_preset));
  if (!rows.ok()) return Fail(rows.status());
  o.rows_per_feature = *rows;
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "tsv") {
    o.format = CriteoTextFormat::kTsv;
  } else if (format == "csv") {
    o.format = CriteoTextFormat::kCsv;
  } else {
    return Usage("--format must be tsv or csv, got '" + format + "'");
  }
  const std::string policy = absl::GetFlag(FLAGS_on_bad_record);
  absl::StatusOr<BadRecordPolicy> parsed_policy = ParseBadRecordPolicy(policy);
  if (!parsed_policy.ok()) {
    return Usage("--on-bad-record must be " + NameList(kBadRecordPolicyNames, ", ", " or ") +
                 ", got '" + policy + "'");
  }
  o.on_bad_record = *parsed_policy;
  o.max_bad_records = absl::GetFlag(FLAGS_max_bad_records);
  Stopwatch watch;
  auto stats = ConvertCriteoTextToBinary(o, output);
  if (!stats.ok()) return Fail(stats.status());
  const double s = watch.ElapsedSeconds();
  std::printf("wrote %lld records to %s in %.2f s (%.0f records/s)",
              static_cast<long long>(stats->records_written), output.c_str(), s,
              s > 0 ? static_cast<double>(stats->records_written) / s : 0.0);
  if (stats->bad_records_skipped > 0) {
    std::printf("; skipped %lld bad records", static_cast<long long>(stats->bad_records_skipped));
  }
  std::printf("\n");
  return 0;
}

int Inspect(const std::string& path) {
  auto info = ReadBinaryHeader(path);
  if (!info.ok()) return Fail(info.status());
  std::printf("file          %s\n", path.c_str());
  std::printf("format        Tessera binary records, version %u\n", info->version);
  std::printf("records       %lld (%lld bytes each, header %lld bytes)\n",
              static_cast<long long>(info->num_records), static_cast<long long>(info->record_bytes),
              static_cast<long long>(info->header_bytes));
  std::printf("dense         %lld\n", static_cast<long long>(info->num_dense));
  std::printf("sparse        %lld, rows:", static_cast<long long>(info->num_sparse));
  for (int64_t r : info->rows_per_feature) std::printf(" %lld", static_cast<long long>(r));
  std::printf("\n");
  BinaryReaderOptions o;
  o.paths = {path};
  o.batch_size = 65536;
  auto reader = BinaryReader::Open(o);
  if (!reader.ok()) return Fail(reader.status());
  Batch b;
  int64_t positives = 0, seen = 0, printed = 0;
  const int64_t head = absl::GetFlag(FLAGS_head);
  while (true) {
    auto more = (*reader)->Next(&b);
    if (!more.ok()) return Fail(more.status());
    if (!*more) break;
    for (int64_t i = 0; i < b.batch_size; ++i) {
      positives += b.labels[i] == 1.0f;
      if (printed < head) {
        std::printf("record %lld: label %g dense", static_cast<long long>(seen + i), b.labels[i]);
        for (int64_t j = 0; j < b.num_dense; ++j)
          std::printf(" %.4g", b.dense[i * b.num_dense + j]);
        std::printf(" ids");
        for (int f = 0; f < b.sparse.num_features; ++f) {
          std::printf(" %lld", static_cast<long long>(b.sparse.values[f * b.batch_size + i]));
        }
        std::printf("\n");
        ++printed;
      }
    }
    seen += b.batch_size;
  }
  std::printf("positives     %lld of %lld (%.2f%%); every record checked (labels, ids < rows)\n",
              static_cast<long long>(positives), static_cast<long long>(seen),
              seen > 0 ? 100.0 * static_cast<double>(positives) / static_cast<double>(seen) : 0.0);
  return 0;
}

// Drains one reader as fast as it goes (no trainer) and reports records/s.
int Read() {
  auto rows = ParseRows(absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_rows_preset));
  if (!rows.ok()) return Fail(rows.status());
  const int64_t batch = absl::GetFlag(FLAGS_batch_size);
  std::unique_ptr<BatchReader> reader;
  std::string what;
  const std::string input = absl::GetFlag(FLAGS_input), dir = absl::GetFlag(FLAGS_mlperf_dir);
  std::vector<std::string> paths;
  for (absl::string_view p : absl::StrSplit(input, ',', absl::SkipEmpty())) paths.emplace_back(p);
  CriteoGzipReader* gzip = nullptr;
  if (!dir.empty()) {
    MlperfNpyOptions o;
    o.dir = dir;
    auto days = ParseDayList(absl::GetFlag(FLAGS_days));
    if (!days.ok()) return Fail(days.status());
    o.days = *days;
    o.rows_per_feature = *rows;
    o.batch_size = batch;
    auto r = MlperfNpyReader::Open(o);
    if (!r.ok()) return Fail(r.status());
    what = (*r)->multi_hot() ? "MLPerf multi-hot days" : "MLPerf one-hot days";
    reader = std::move(*r);
  } else if (paths.empty()) {
    return Usage("read needs --input or --mlperf-dir");
  } else if (AnyGzipPath(paths)) {
    CriteoGzipOptions o;
    o.paths = paths;
    o.rows_per_feature = *rows;
    o.batch_size = batch;
    o.parse_threads = absl::GetFlag(FLAGS_threads);
    auto r = CriteoGzipReader::Open(o);
    if (!r.ok()) return Fail(r.status());
    what = "gzip TSV, " + std::to_string(o.parse_threads) + " parser threads + 1 inflater";
    gzip = r->get();
    reader = std::move(*r);
  } else if (ReadBinaryHeader(paths[0]).ok()) {
    BinaryReaderOptions o;
    o.paths = paths;
    o.batch_size = batch;
    auto r = BinaryReader::Open(o);
    if (!r.ok()) return Fail(r.status());
    what = "binary records";
    reader = std::move(*r);
  } else {
    CriteoTextOptions o;
    o.paths = paths;
    o.rows_per_feature = *rows;
    o.batch_size = batch;
    auto r = CriteoTextReader::Open(o);
    if (!r.ok()) return Fail(r.status());
    what = "TSV, 1 thread";
    reader = std::move(*r);
  }
  const int64_t cap = absl::GetFlag(FLAGS_max_records);
  Stopwatch watch;
  Batch b;
  int64_t records = 0;
  while (cap <= 0 || records < cap) {
    auto more = reader->Next(&b);
    if (!more.ok()) return Fail(more.status());
    if (!*more) break;
    records += b.batch_size;
  }
  const double s = watch.ElapsedSeconds();
  std::printf("read %lld records (%s) in %.2f s: %.0f records/s",
              static_cast<long long>(records), what.c_str(), s,
              s > 0 ? static_cast<double>(records) / s : 0.0);
  if (gzip != nullptr) {
    std::printf(", %.0f MB/s of text", s > 0 ? gzip->text_bytes() / s / 1e6 : 0.0);
  }
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  if (tessera::HandleHelp(argc, argv, tessera::kUsage)) return 0;
  tessera::DashesToUnderscores(argc, argv);
  if (!tessera::CheckKnownFlags(argc, argv, "tessera-data", &tessera::DataHint)) return 2;
  absl::SetProgramUsageMessage(tessera::kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) return tessera::Usage("missing command (convert, inspect or read)");
  const std::string command = args[1];
  if (command == "convert") {
    if (args.size() != 2) return tessera::Usage("convert takes no positional arguments");
    return tessera::Convert();
  }
  if (command == "read") {
    if (args.size() != 2) return tessera::Usage("read takes no positional arguments");
    return tessera::Read();
  }
  if (command == "inspect") {
    if (args.size() != 3) return tessera::Usage("inspect takes one file");
    return tessera::Inspect(args[2]);
  }
  return tessera::Usage("unknown command '" + command + "'");
}
