// The piece arithmetic of the CUDA backward's run sums (embedding/internal/run_pieces.h, used by
// SumRunsKernel in embedding/pooled_lookup_cuda.cu), on the CPU. The three kernel modes are
// replayed here in their summation order over the same rows under three slot numberings (the
// row itself as in a whole table, first-appearance order as an HBM cache hands out slots, and
// the row behind another table's entries as in a fused pass): every row must get the same pieces
// and so the same bits. The same replay with the first version's cuts (at absolute multiples of
// 256 in the sorted array) gives other bits for some row: the data does reach the cuts, so this
// test would have caught that version (the review's C1).
#include "embedding/internal/run_pieces.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"

namespace tessera::embedding_internal {
namespace {

TEST(RunPieces, CountsAndRanges) {
  EXPECT_EQ(RunExtraPieces(0), 0);
  EXPECT_EQ(RunExtraPieces(1), 0);
  EXPECT_EQ(RunExtraPieces(256), 0);
  EXPECT_EQ(RunExtraPieces(257), 1);
  EXPECT_EQ(RunExtraPieces(512), 1);
  EXPECT_EQ(RunExtraPieces(513), 2);
  // Relative to the run's start, wherever it sits.
  for (int64_t eb : {0, 1, 255, 256, 1000}) {
    const EntryRange p0 = RunPiece(eb, eb + 600, 0), p2 = RunPiece(eb, eb + 600, 2);
    EXPECT_EQ(p0.begin, eb);
    EXPECT_EQ(p0.end, eb + 256);
    EXPECT_EQ(p2.begin, eb + 512);
    EXPECT_EQ(p2.end, eb + 600);
  }
}

TEST(RunPieces, FindExtraPieceWalksEveryPieceOnce) {
  // Runs of 300 (1 extra), 10 (0), 800 (3), 257 (1) entries: heads at 0, 300, 310, 1110.
  const std::vector<int64_t> lens = {300, 10, 800, 257};
  std::vector<int> scan;
  int acc = 0;
  for (int64_t len : lens) {
    for (int64_t e = 0; e < len; ++e) {
      if (e == 0) acc += static_cast<int>(RunExtraPieces(len));
      scan.push_back(acc);
    }
  }
  const int64_t n = static_cast<int64_t>(scan.size());
  ASSERT_EQ(scan.back(), 5);
  const ExtraPiece want[] = {{0, 1}, {310, 1}, {310, 2}, {310, 3}, {1110, 1}};
  for (int64_t item = 0; item < 5; ++item) {
    const ExtraPiece got = FindExtraPiece(scan.data(), n, item);
    EXPECT_EQ(got.head, want[item].head) << item;
    EXPECT_EQ(got.k, want[item].k) << item;
    EXPECT_EQ(ExtraPieceNumber(scan.data(), got.head, RunExtraPieces(lens[item == 0 ? 0
                                                                      : item < 4 ? 2 : 3]),
                               got.k),
              item);
  }
}

struct Entry {
  uint64_t slot;  // the sort key's slot bits (table << bits | slot within the table)
  int64_t row;    // the row of the table under test (-1: another table's entry)
  float value;    // scale * gradient of this entry (one column suffices)
};

// The kernel's three modes over entries sorted stably by slot (positions keep their order):
// row -> summed bits. `absolute` replays the first version's cuts instead.
std::map<int64_t, uint32_t> ReplayKernel(std::vector<Entry> entries, bool absolute) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.slot < b.slot; });
  const int64_t n = static_cast<int64_t>(entries.size());
  std::vector<int64_t> run_starts;
  std::vector<int> run_ids(n), heads(n);
  for (int64_t i = 0; i < n; ++i) {
    heads[i] = i == 0 || entries[i].slot != entries[i - 1].slot;
    if (heads[i]) run_starts.push_back(i);
    run_ids[i] = static_cast<int>(run_starts.size());
  }
  const int64_t runs = static_cast<int64_t>(run_starts.size());
  run_starts.push_back(n);
  auto sum = [&](int64_t e0, int64_t e1) {
    float acc = 0.0f;
    for (int64_t e = e0; e < e1; ++e) acc += entries[e].value;
    return acc;
  };
  std::vector<float> row_grads(runs);
  if (!absolute) {
    // RunExtraPiecesKernel, the scan, then modes 0, 1, 2.
    std::vector<int> scan(n);
    for (int64_t i = 0; i < n; ++i) {
      const int extra = heads[i] ? static_cast<int>(RunExtraPieces(run_starts[run_ids[i]] - i)) : 0;
      scan[i] = (i > 0 ? scan[i - 1] : 0) + extra;
    }
    std::vector<float> partial(n / kRunPieceEntries + 1);
    for (int64_t u = 0; u < runs; ++u) {
      const EntryRange r = RunPiece(run_starts[u], run_starts[u + 1], 0);
      row_grads[u] = sum(r.begin, r.end);
    }
    std::vector<int> covered(n, 0);
    for (int64_t item = 0; item < scan[n - 1]; ++item) {
      const ExtraPiece p = FindExtraPiece(scan.data(), n, item);
      const EntryRange r = RunPiece(p.head, run_starts[run_ids[p.head]], p.k);
      for (int64_t e = r.begin; e < r.end; ++e) ++covered[e];
      partial[item] = sum(r.begin, r.end);
    }
    for (int64_t u = 0; u < runs; ++u) {
      const int64_t eb = run_starts[u], ee = run_starts[u + 1];
      const EntryRange r = RunPiece(eb, ee, 0);
      for (int64_t e = r.begin; e < r.end; ++e) ++covered[e];
      const int64_t extra = RunExtraPieces(ee - eb);
      if (extra == 0) continue;
      const int64_t first = ExtraPieceNumber(scan.data(), eb, extra, 1);
      for (int64_t k = 0; k < extra; ++k) row_grads[u] += partial[first + k];
    }
    for (int64_t e = 0; e < n; ++e) EXPECT_EQ(covered[e], 1) << "entry " << e;
  } else {
    // The first version: a run's first piece ends at the next absolute multiple of 256, then
    // whole 256-entry chunks of the sorted array.
    for (int64_t u = 0; u < runs; ++u) {
      const int64_t eb = run_starts[u], ee = run_starts[u + 1];
      float acc = sum(eb, std::min(ee, (eb / 256 + 1) * 256));
      for (int64_t c = eb / 256 + 1; c * 256 < ee; ++c) {
        acc += sum(c * 256, std::min(ee, c * 256 + 256));
      }
      row_grads[u] = acc;
    }
  }
  std::map<int64_t, uint32_t> out;
  for (int64_t u = 0; u < runs; ++u) {
    const int64_t row = entries[run_starts[u]].row;
    if (row < 0) continue;
    uint32_t bits;
    std::memcpy(&bits, &row_grads[u], sizeof(bits));
    out[row] = bits;
  }
  return out;
}

// `n` entries of a table of `rows` rows, skewed (u^3): a few hot rows own runs of hundreds.
std::vector<Entry> Batch(uint64_t seed, int64_t n, int64_t rows) {
  CounterRng rng(seed, 0);
  std::vector<Entry> e(n);
  for (auto& x : e) {
    const float u = rng.NextUniform();
    x.row = static_cast<int64_t>(u * u * u * static_cast<float>(rows)) % rows;
    x.value = (rng.NextUniform() - 0.5f) * std::ldexp(1.0f, static_cast<int>(rng.NextBits() % 8));
  }
  return e;
}

TEST(RunPieces, RowSumsDoNotDependOnSlotNumberingOrOtherTables) {
  int old_differs = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::vector<Entry> base = Batch(seed, 4000, 200);
    // Whole table: slot = row.
    std::vector<Entry> whole = base;
    for (auto& x : whole) x.slot = static_cast<uint64_t>(x.row);
    // HBM cache: slots in order of first appearance.
    std::vector<Entry> cached = base;
    std::map<int64_t, uint64_t> slot_of;
    for (auto& x : cached) {
      auto it = slot_of.emplace(x.row, slot_of.size()).first;
      x.slot = it->second;
    }
    // Fused pass: another table's 777 entries come first in the key order (table 0 < table 1).
    std::vector<Entry> fused;
    for (const Entry& x : Batch(seed + 100, 777, 50)) {
      fused.push_back({static_cast<uint64_t>(x.row), -1, x.value});
    }
    for (const Entry& x : base) {
      fused.push_back({(uint64_t{1} << 20) | static_cast<uint64_t>(x.row), x.row, x.value});
    }

    const auto want = ReplayKernel(whole, false);
    int64_t longest = 0;
    {
      std::map<int64_t, int64_t> count;
      for (const Entry& x : base) longest = std::max(longest, ++count[x.row]);
    }
    ASSERT_GT(longest, 2 * kRunPieceEntries) << "seed " << seed << ": no run spans 3 pieces";
    EXPECT_EQ(ReplayKernel(cached, false), want) << "seed " << seed << ": cache slots";
    EXPECT_EQ(ReplayKernel(fused, false), want) << "seed " << seed << ": fused with another table";
    if (ReplayKernel(cached, true) != ReplayKernel(whole, true) ||
        ReplayKernel(fused, true) != ReplayKernel(whole, true)) {
      ++old_differs;
    }
  }
  // The data reaches the cuts: absolute cuts (the first version) change some row's bits.
  EXPECT_GT(old_differs, 0);
}

}  // namespace
}  // namespace tessera::embedding_internal
