// Records per second of the io/ readers: Criteo TSV parsing, binary records, synthetic
// generation. The text input is the shared Kaggle sample repeated to ~100k records (in the page
// cache after the first pass), so the numbers measure parsing, not the disk.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "benchmark/benchmark.h"
#include "io/binary_format.h"
#include "io/criteo_text.h"
#include "io/synthetic.h"

namespace tessera {
namespace {

constexpr int kRepeat = 100;  // x 1000 records

const std::string& TsvPath() {
  static const std::string path = [] {
    // bench/ -> the repo root -> ../shared, next to the repo (bench binaries get no define).
    const std::filesystem::path shared =
        std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "shared";
    std::ifstream in(shared / "data/criteo/kaggle_train_head1000.tsv");
    if (!in) std::fprintf(stderr, "cannot read %s\n", (shared / "data/criteo").c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string rows = ss.str();
    if (!rows.empty() && rows.back() != '\n') rows += '\n';
    std::string p = "/tmp/tessera_io_bench_" + std::to_string(getpid()) + ".tsv";
    std::ofstream out(p, std::ios::binary);
    for (int i = 0; i < kRepeat; ++i) out << rows;
    return p;
  }();
  return path;
}

const std::string& BinPath() {
  static const std::string path = [] {
    std::string p = "/tmp/tessera_io_bench_" + std::to_string(getpid()) + ".bin";
    CriteoTextOptions o;
    o.paths = {TsvPath()};
    o.rows_per_feature = *CriteoRowsPreset("kaggle");
    auto st = ConvertCriteoTextToBinary(o, p);
    if (!st.ok()) std::fprintf(stderr, "%s\n", st.status().ToString().c_str());
    return p;
  }();
  return path;
}

struct Cleanup {
  ~Cleanup() {
    std::remove(("/tmp/tessera_io_bench_" + std::to_string(getpid()) + ".tsv").c_str());
    std::remove(("/tmp/tessera_io_bench_" + std::to_string(getpid()) + ".bin").c_str());
  }
} cleanup;

void BM_CriteoTsvParse(benchmark::State& state) {
  CriteoTextOptions o;
  o.paths = {TsvPath()};
  o.rows_per_feature = *CriteoRowsPreset("kaggle");
  o.batch_size = state.range(0);
  auto reader = *CriteoTextReader::Open(o);
  Batch b;
  int64_t records = 0;
  for (auto _ : state) {
    auto more = reader->Next(&b);
    if (!*more) {
      state.PauseTiming();
      (void)reader->Rewind();
      state.ResumeTiming();
      continue;
    }
    records += b.batch_size;
  }
  state.counters["records/s"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CriteoTsvParse)->Arg(2048);

void BM_BinaryRead(benchmark::State& state) {
  BinaryReaderOptions o;
  o.paths = {BinPath()};
  o.batch_size = state.range(0);
  auto reader = *BinaryReader::Open(o);
  Batch b;
  int64_t records = 0;
  for (auto _ : state) {
    auto more = reader->Next(&b);
    if (!*more) {
      (void)reader->Rewind();
      continue;
    }
    records += b.batch_size;
  }
  state.counters["records/s"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BinaryRead)->Arg(2048);

// Arg 0: quickstart (8 features, 10k-100k rows, pooling 1-4); arg 1: Criteo Kaggle shapes
// (26 features, kaggle rows, pooling 1).
void BM_SyntheticGenerate(benchmark::State& state) {
  SyntheticDataOptions d;
  if (state.range(0) == 0) {
    d.rows_per_feature = {10000, 20000, 50000, 100000, 10000, 30000, 100000, 50000};
    d.pooling = {1, 2, 3, 4, 1, 2, 3, 4};
  } else {
    d.rows_per_feature = *CriteoRowsPreset("kaggle");
  }
  SyntheticStreamOptions s;
  s.num_samples = int64_t{1} << 40;
  s.batch_size = 2048;
  auto reader = *SyntheticReader::Open(d, s);
  Batch b;
  int64_t records = 0;
  for (auto _ : state) {
    (void)reader->Next(&b);
    records += b.batch_size;
  }
  state.counters["records/s"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SyntheticGenerate)->Arg(0)->Arg(1);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
