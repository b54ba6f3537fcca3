#include "embedding/row_store.h"

#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

InMemoryRowStoreOptions Options(int64_t rows, int64_t dim, uint64_t table_id) {
  InMemoryRowStoreOptions o;
  o.num_rows = rows;
  o.dim = dim;
  o.state_dim = 1;
  o.seed = 1234;
  o.table_id = table_id;
  o.name = "t" + std::to_string(table_id);
  return o;
}

std::vector<float> AllRows(RowStore& s) {
  std::vector<float> w(s.num_rows() * s.dim());
  EXPECT_TRUE(s.ReadRows(0, s.num_rows(), w.data(), nullptr).ok());
  return w;
}

TEST(InMemoryRowStoreTest, InitDependsOnSeedTableRowOnly) {
  // Create the two tables in both orders and with different thread counts: the rows must be the
  // same bits, and equal to InitRow called directly for rows visited in reverse order.
  const int saved = NumThreads();
  SetNumThreads(1);
  auto a1 = CreateInMemoryRowStore(Options(5000, 12, 0));
  auto b1 = CreateInMemoryRowStore(Options(3000, 12, 1));
  SetNumThreads(2);
  auto b2 = CreateInMemoryRowStore(Options(3000, 12, 1));
  auto a2 = CreateInMemoryRowStore(Options(5000, 12, 0));
  SetNumThreads(saved);
  ASSERT_TRUE(a1.ok() && b1.ok() && a2.ok() && b2.ok());
  std::vector<float> wa1 = AllRows(**a1), wa2 = AllRows(**a2);
  std::vector<float> wb1 = AllRows(**b1), wb2 = AllRows(**b2);
  EXPECT_EQ(wa1, wa2);
  EXPECT_EQ(wb1, wb2);
  // Direct InitRow, rows in reverse order.
  InMemoryRowStoreOptions o = Options(5000, 12, 0);
  std::vector<float> row(12);
  for (int64_t r = o.num_rows - 1; r >= 0; r -= 7) {
    InitRow(o.init, o.seed, o.table_id, o.num_rows, r, o.dim, row.data());
    for (int k = 0; k < 12; ++k) ASSERT_EQ(row[k], wa1[r * 12 + k]) << "row " << r;
  }
  // Another table id or seed gives other values.
  int equal = 0;
  for (int k = 0; k < 3000 * 12; ++k) equal += wa1[k] == wb1[k];
  EXPECT_LT(equal, 10);
  InMemoryRowStoreOptions other_seed = Options(5000, 12, 0);
  other_seed.seed = 1235;
  auto c = CreateInMemoryRowStore(other_seed);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(AllRows(**c), wa1);
}

TEST(InMemoryRowStoreTest, UniformDefaultScaleAndNormalInit) {
  InMemoryRowStoreOptions o = Options(10000, 16, 3);
  auto s = CreateInMemoryRowStore(o);
  ASSERT_TRUE(s.ok());
  const double scale = std::sqrt(1.0 / o.num_rows);
  double sum = 0, sq = 0;
  for (float v : AllRows(**s)) {
    ASSERT_LE(std::abs(v), scale);
    sum += v;
    sq += double(v) * v;
  }
  const double n = 10000.0 * 16;
  EXPECT_NEAR(sum / n, 0.0, 0.02 * scale);
  EXPECT_NEAR(sq / n, scale * scale / 3, 0.02 * scale * scale);  // variance of U(-a, a)

  o.init.type = RowInitType::kNormal;
  o.init.scale = 0.5f;
  auto g = CreateInMemoryRowStore(o);
  ASSERT_TRUE(g.ok());
  sum = sq = 0;
  for (float v : AllRows(**g)) {
    sum += v;
    sq += double(v) * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 0.5, 0.01);
}

TEST(InMemoryRowStoreTest, StateInitAndStatelessStore) {
  InMemoryRowStoreOptions o = Options(100, 4, 0);
  o.state_dim = 3;
  o.state_init = 0.25f;
  auto s = CreateInMemoryRowStore(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->state_dim(), 3);
  for (int64_t i = 0; i < 300; ++i) ASSERT_EQ((*s)->state()[i], 0.25f);
  o.state_dim = 0;
  auto z = CreateInMemoryRowStore(o);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ((*z)->state(), nullptr);
}

TEST(InMemoryRowStoreTest, ResolveIsIdentityWithRangeCheckNamingTable) {
  auto s = CreateInMemoryRowStore(Options(50, 4, 7));
  ASSERT_TRUE(s.ok());
  std::vector<int64_t> ids = {3, 49, 0, 3}, slots(4, -1);
  ASSERT_TRUE((*s)->Resolve(ids, absl::MakeSpan(slots)).ok());
  EXPECT_EQ(slots, ids);
  for (int64_t bad : {int64_t{50}, int64_t{-1}}) {
    std::vector<int64_t> b = {1, 2, bad};
    absl::Status st = (*s)->Resolve(b, absl::MakeSpan(slots.data(), 3));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("table 't7'"));
    EXPECT_THAT(st.message(), HasSubstr("row id " + std::to_string(bad) + " at position 2"));
  }
  absl::Status mismatch = (*s)->Resolve(ids, absl::MakeSpan(slots.data(), 2));
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
}

TEST(InMemoryRowStoreTest, ReadWriteRowsRoundTripAndRangeErrors) {
  InMemoryRowStoreOptions o = Options(20, 3, 2);
  o.state_dim = 2;
  auto s = CreateInMemoryRowStore(o);
  ASSERT_TRUE(s.ok());
  RowStore& store = **s;
  std::vector<float> w = {1, 2, 3, 4, 5, 6}, st = {7, 8, 9, 10};
  ASSERT_TRUE(store.WriteRows(18, 2, w.data(), st.data()).ok());
  std::vector<float> w2(6), st2(4);
  ASSERT_TRUE(store.ReadRows(18, 2, w2.data(), st2.data()).ok());
  EXPECT_EQ(w2, w);
  EXPECT_EQ(st2, st);
  EXPECT_EQ(store.weights()[18 * 3 + 2], 3.0f);
  // A null state leaves state unchanged.
  std::vector<float> w3 = {0, 0, 0};
  ASSERT_TRUE(store.WriteRows(19, 1, w3.data(), nullptr).ok());
  EXPECT_EQ(store.state()[19 * 2], 9.0f);
  absl::Status e = store.ReadRows(19, 2, w2.data(), nullptr);
  EXPECT_EQ(e.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message(), HasSubstr("table 't2'"));
  EXPECT_EQ(store.WriteRows(-1, 1, w.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(InMemoryRowStoreTest, BadSizesAreInvalidArgumentNamingTable) {
  InMemoryRowStoreOptions o = Options(0, 4, 0);
  o.name = "clicks";
  auto s = CreateInMemoryRowStore(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("table 'clicks'"));
  o.num_rows = 10;
  o.dim = -1;
  EXPECT_EQ(CreateInMemoryRowStore(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.dim = 4;
  o.num_rows = int64_t{1} << 62;
  EXPECT_EQ(CreateInMemoryRowStore(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.name.clear();
  o.num_rows = 0;
  EXPECT_THAT(CreateInMemoryRowStore(o).status().message(), HasSubstr("table 0"));
}

}  // namespace
}  // namespace tessera
