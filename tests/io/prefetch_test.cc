#include "io/prefetch.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "io/criteo_text.h"
#include "io/synthetic.h"
#include "io_test_util.h"

namespace tessera {
namespace {

using testing_io::AppendFlat;
using testing_io::FlatSample;

// Yields batches 0..n-1 (batch k holds k + 1 samples labelled k), then an error if fail_at >= 0
// replaces batch fail_at.
class ScriptedReader : public BatchReader {
 public:
  ScriptedReader(int n, int fail_at, std::atomic<int>* rewinds = nullptr)
      : n_(n), fail_at_(fail_at), rewinds_(rewinds) {}
  absl::StatusOr<bool> Next(Batch* batch) override {
    if (next_ == fail_at_)
      return absl::DataLossError("scripted failure at batch " + std::to_string(next_));
    if (next_ >= n_) return false;
    batch->batch_size = next_ + 1;
    batch->num_dense = 0;
    batch->dense.clear();
    batch->labels.assign(next_ + 1, static_cast<float>(next_));
    batch->sparse.num_features = 0;
    batch->sparse.batch_size = next_ + 1;
    batch->sparse.Clear();
    ++next_;
    stats_.records += batch->batch_size;
    stats_.bad_records_skipped = next_;  // something that moves, to check the snapshot
    return true;
  }
  absl::Status Rewind() override {
    next_ = 0;
    if (rewinds_) ++*rewinds_;
    return absl::OkStatus();
  }
  ReaderStats stats() const override { return stats_; }

 private:
  int n_, fail_at_, next_ = 0;
  std::atomic<int>* rewinds_;
  ReaderStats stats_;
};

std::vector<int> BatchOrder(BatchReader& r) {
  std::vector<int> order;
  Batch b;
  while (true) {
    auto more = r.Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    order.push_back(static_cast<int>(b.labels[0]));
  }
  return order;
}

std::vector<FlatSample> Drain(BatchReader& r) {
  std::vector<FlatSample> out;
  Batch b;
  while (true) {
    auto more = r.Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    AppendFlat(b, &out);
  }
  return out;
}

TEST(PrefetchTest, SameOrderAsDirectReading) {
  CriteoTextOptions o;
  o.paths = {testing_io::SharedPath("kaggle_train_head1000.tsv")};
  o.rows_per_feature = *CriteoRowsPreset("kaggle");
  o.batch_size = 37;
  auto direct = CriteoTextReader::Open(o);
  ASSERT_TRUE(direct.ok());
  std::vector<FlatSample> want = Drain(**direct);
  for (int queue : {1, 3, 16}) {
    auto p = PrefetchingReader::Create(*CriteoTextReader::Open(o), {.queue_batches = queue});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(Drain(**p), want) << queue;
    EXPECT_EQ((*p)->stats().records, 1000);
    // Rewind gives the same order again (no shuffle).
    ASSERT_TRUE((*p)->Rewind().ok());
    EXPECT_EQ(Drain(**p), want);
    EXPECT_EQ((*p)->stats().records, 2000);
  }
  SyntheticDataOptions d;
  d.rows_per_feature = {100, 1000};
  d.pooling = {2, 3};
  SyntheticStreamOptions s;
  s.num_samples = 5000;
  s.batch_size = 128;
  auto syn = SyntheticReader::Open(d, s);
  std::vector<FlatSample> syn_want = Drain(**syn);
  auto p = PrefetchingReader::Create(*SyntheticReader::Open(d, s));
  EXPECT_EQ(Drain(**p), syn_want);
}

TEST(PrefetchTest, ErrorsArriveInOrderAndStick) {
  auto p = PrefetchingReader::Create(std::make_unique<ScriptedReader>(10, 4), {.queue_batches = 2});
  ASSERT_TRUE(p.ok());
  Batch b;
  for (int k = 0; k < 4; ++k) {
    auto more = (*p)->Next(&b);
    ASSERT_TRUE(more.ok() && *more) << k;
    EXPECT_EQ(b.labels[0], static_cast<float>(k));
  }
  for (int again = 0; again < 2; ++again) {
    auto st = (*p)->Next(&b);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(st.status().message(), "scripted failure at batch 4");
  }
  EXPECT_EQ((*p)->stats().records, 1 + 2 + 3 + 4);
  EXPECT_EQ((*p)->stats().bad_records_skipped, 4);  // the inner reader's, at the error
  // Rewind recovers (the scripted reader fails at batch 4 again, after the same batches).
  ASSERT_TRUE((*p)->Rewind().ok());
  auto more = (*p)->Next(&b);
  ASSERT_TRUE(more.ok() && *more);
  EXPECT_EQ(b.labels[0], 0.0f);
}

TEST(PrefetchTest, EndIsSticky) {
  auto p = PrefetchingReader::Create(std::make_unique<ScriptedReader>(3, -1));
  EXPECT_EQ(BatchOrder(**p), (std::vector<int>{0, 1, 2}));
  Batch b;
  EXPECT_FALSE(*(*p)->Next(&b));
  EXPECT_FALSE(*(*p)->Next(&b));
}

TEST(PrefetchTest, ShuffleIsADeterministicPermutationThatChangesPerEpoch) {
  const int n = 60;
  std::vector<int> source(n);
  for (int i = 0; i < n; ++i) source[i] = i;
  PrefetchOptions o{.queue_batches = 3, .shuffle = true, .shuffle_window = 8, .seed = 11};
  auto a = PrefetchingReader::Create(std::make_unique<ScriptedReader>(n, -1), o);
  auto b = PrefetchingReader::Create(std::make_unique<ScriptedReader>(n, -1), o);
  std::vector<int> ea = BatchOrder(**a);
  EXPECT_EQ(ea, BatchOrder(**b));  // same seed, same order
  EXPECT_NE(ea, source);
  std::vector<int> sorted = ea;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, source);  // every batch exactly once
  // A window of 8 moves no batch earlier than 7 places before its source position.
  for (int i = 0; i < n; ++i) EXPECT_GE(i, ea[i] - 7) << i;
  ASSERT_TRUE((*a)->Rewind().ok());
  std::vector<int> ea2 = BatchOrder(**a);
  EXPECT_NE(ea2, ea);  // the next epoch is shuffled differently
  sorted = ea2;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, source);
  o.seed = 12;
  auto c = PrefetchingReader::Create(std::make_unique<ScriptedReader>(n, -1), o);
  EXPECT_NE(BatchOrder(**c), ea);
  // Window 1 is source order.
  o.shuffle_window = 1;
  auto d = PrefetchingReader::Create(std::make_unique<ScriptedReader>(n, -1), o);
  EXPECT_EQ(BatchOrder(**d), source);
}

TEST(PrefetchTest, RewindMidStreamAndDestroyWhileProducerWaits) {
  std::atomic<int> rewinds{0};
  auto p = PrefetchingReader::Create(std::make_unique<ScriptedReader>(50, -1, &rewinds),
                                     {.queue_batches = 2});
  Batch b;
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(*(*p)->Next(&b));
  ASSERT_TRUE((*p)->Rewind().ok());
  EXPECT_EQ(rewinds.load(), 1);
  std::vector<int> order = BatchOrder(**p);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  // Destroying a reader whose producer is blocked on a full queue must not hang.
  for (int i = 0; i < 20; ++i) {
    auto q =
        PrefetchingReader::Create(std::make_unique<ScriptedReader>(1000, -1), {.queue_batches = 1});
    if (i % 2) {
      ASSERT_TRUE(*(*q)->Next(&b));
    }
  }
}

TEST(PrefetchTest, BatchesAreRecycled) {
  SyntheticDataOptions d;
  d.rows_per_feature = {1000};
  SyntheticStreamOptions s;
  s.num_samples = 200 * 64;
  s.batch_size = 64;
  auto p = PrefetchingReader::Create(*SyntheticReader::Open(d, s), {.queue_batches = 2});
  Batch b;
  std::set<const float*> buffers;
  int n = 0;
  while (*(*p)->Next(&b)) {
    buffers.insert(b.dense.data());
    ++n;
  }
  EXPECT_EQ(n, 200);
  // The caller's batch, the queue and the one being filled: a handful of buffers in rotation.
  EXPECT_LE(buffers.size(), 2u + 3u);
}

TEST(PrefetchTest, OptionErrors) {
  EXPECT_EQ(PrefetchingReader::Create(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefetchingReader::Create(std::make_unique<ScriptedReader>(1, -1), {.queue_batches = 0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
