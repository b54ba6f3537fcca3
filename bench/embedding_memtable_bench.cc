// RocksDB CPU per row for the tier's access pattern, with the memtable the tier uses
// (internal::RowDbOptions: hashed, whole-key prefix, rows updated in place) against the
// alternatives it was chosen over. The numbers behind the "memtable" and "in-place updates" rows
// of docs/TIER.md's options table.
//
// Setup: one database, 25,000 rows of 260 bytes (dim 64 + 1 AdaGrad float) written once. One
// iteration = one tier step: 530 distinct rows drawn from those 25k (sorted), read with MultiGet
// (256 keys per call), then written back in one WriteBatch, as the prefetch thread and the
// write-back writer do. Counters: thread CPU µs per row read and per row written, the memtables'
// size at the end, and the process's minor page faults per step.
//   BM_Memtable/0   as shipped: HashLinkList + inplace_update_support
//   BM_Memtable/1   HashLinkList, every write appends a new version
//   BM_Memtable/2   RocksDB's default skiplist memtable
// Run: build/bin/embedding_memtable_bench   (the database lives under TESSERA_TIER_BENCH_DIR,
// default /tmp)
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/status.h"
#include "embedding/internal/rocksdb_rows.h"
#include "embedding/tiered_row_store.h"
#include "rocksdb/db.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/write_batch.h"

namespace tessera {
namespace {

constexpr int64_t kRows = 25000;
constexpr int64_t kPerStep = 530;
constexpr size_t kValueBytes = 260;

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

long MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void BM_Memtable(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const char* dir_env = std::getenv("TESSERA_TIER_BENCH_DIR");
  const std::string path =
      std::string(dir_env ? dir_env : "/tmp") + "/tessera_memtable_bench_" + std::to_string(variant);
  TieredRowStoreOptions o;
  o.path = path;
  o.num_rows = kRows;
  o.dim = 64;
  o.state_dim = 1;
  rocksdb::Options opt = internal::RowDbOptions(o);
  if (variant >= 1) opt.inplace_update_support = false;
  if (variant == 2) {
    opt.memtable_factory = std::make_shared<rocksdb::SkipListFactory>();
    opt.prefix_extractor.reset();
    opt.allow_concurrent_memtable_write = true;
  }
  rocksdb::DestroyDB(path, opt);
  rocksdb::DB* raw = nullptr;
  TESSERA_CHECK(rocksdb::DB::Open(opt, path, &raw).ok()) << "cannot open " << path;
  std::unique_ptr<rocksdb::DB> db(raw);
  const rocksdb::WriteOptions wo = internal::RowWriteOptions();
  const rocksdb::ReadOptions ro = internal::RowReadOptions();
  const std::string value(kValueBytes, 'x');
  // Rows scattered over a 100M-row table, as a hashed id space would place them.
  std::vector<int64_t> ids(kRows);
  for (int64_t r = 0; r < kRows; ++r) ids[r] = (r * 2654435761LL) % 100000000;
  {
    rocksdb::WriteBatch b;
    char key[internal::kRowKeyBytes];
    for (int64_t id : ids) {
      internal::EncodeRowKey(0, id, key);
      b.Put(rocksdb::Slice(key, sizeof(key)), value);
    }
    TESSERA_CHECK(db->Write(wo, &b).ok());
  }
  std::mt19937_64 rng(1);
  double read_s = 0, write_s = 0;
  int64_t rows = 0;
  const long faults_before = MinorFaults();
  rocksdb::WriteBatch batch;
  for (auto _ : state) {
    std::vector<int64_t> pick(kPerStep);
    for (auto& p : pick) p = ids[rng() % kRows];
    std::sort(pick.begin(), pick.end());  // sorted rows = sorted keys (big-endian)
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
    std::vector<char> key_bytes(pick.size() * internal::kRowKeyBytes);
    std::vector<rocksdb::Slice> slices(pick.size());
    for (size_t i = 0; i < pick.size(); ++i) {
      internal::EncodeRowKey(0, pick[i], &key_bytes[i * internal::kRowKeyBytes]);
      slices[i] = rocksdb::Slice(&key_bytes[i * internal::kRowKeyBytes], internal::kRowKeyBytes);
    }
    std::vector<rocksdb::PinnableSlice> values(pick.size());
    std::vector<rocksdb::Status> statuses(pick.size());
    const double t0 = ThreadCpuSeconds();
    for (size_t i = 0; i < pick.size(); i += 256) {
      const size_t n = std::min<size_t>(256, pick.size() - i);
      db->MultiGet(ro, db->DefaultColumnFamily(), n, slices.data() + i, values.data() + i,
                   statuses.data() + i, /*sorted_input=*/true);
    }
    const double t1 = ThreadCpuSeconds();
    for (const auto& s : statuses) TESSERA_CHECK(s.ok()) << s.ToString();
    batch.Clear();
    for (const auto& k : slices) batch.Put(k, value);
    const double t2 = ThreadCpuSeconds();
    TESSERA_CHECK(db->Write(wo, &batch).ok());
    const double t3 = ThreadCpuSeconds();
    read_s += t1 - t0;
    write_s += t3 - t2;
    rows += static_cast<int64_t>(pick.size());
  }
  uint64_t mem = 0;
  db->GetIntProperty("rocksdb.cur-size-all-mem-tables", &mem);
  state.counters["read_us_per_row"] = 1e6 * read_s / static_cast<double>(rows);
  state.counters["write_us_per_row"] = 1e6 * write_s / static_cast<double>(rows);
  state.counters["memtable_MiB"] = static_cast<double>(mem) / (1 << 20);
  state.counters["faults_per_step"] = static_cast<double>(MinorFaults() - faults_before) /
                                      static_cast<double>(state.iterations());
  db.reset();
  rocksdb::DestroyDB(path, opt);
}
BENCHMARK(BM_Memtable)->Arg(0)->Arg(1)->Arg(2)->Iterations(2000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
