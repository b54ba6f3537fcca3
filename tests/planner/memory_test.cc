// The estimator's weights + optimizer state against what real in-memory stores allocate: the
// resident memory an EmbeddingCollection adds when it creates its tables (every row initialised,
// so every page touched).
#include <unistd.h>

#include <fstream>

#include "core/device.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/embedding_collection.h"
#include "gtest/gtest.h"
#include "planner/enumerator.h"
#include "planner/estimator.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

double ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  long size = 0, resident = 0;
  in >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

TEST(MemoryTest, WeightsAndStateMatchAllocatedBytes) {
  if (!std::ifstream("/proc/self/statm")) GTEST_SKIP() << "no /proc/self/statm";
  const std::vector<int64_t> rows = {400000, 250000, 100000, 5000};
  const int64_t dim = 32;
  PlanInputs in = SmallInputs(rows, dim, 1);
  in.step.row_state_fixed = 1;  // row-wise AdaGrad
  EmbeddingCollectionOptions o;
  for (const PlanTable& t : in.tables) o.tables.push_back(t.config);
  o.num_features = static_cast<int>(rows.size());
  o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;

  const double before = ResidentBytes();
  absl::StatusOr<std::unique_ptr<EmbeddingCollection>> c =
      EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(c.ok()) << c.status();
  const double allocated = ResidentBytes() - before;

  MachineProfile prof = FlatProfile();
  absl::StatusOr<Estimator> est = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est.ok());
  std::vector<TablePlacement> p;
  TableOption tw;
  for (const PlanTable& t : in.tables) p.push_back(MakePlacement(tw, {0}, t.config));
  StepEstimate e = est->Evaluate(p);
  const double predicted = e.memory_detail[0].weights + e.memory_detail[0].optimizer_state;
  EXPECT_GT(allocated, 0);
  EXPECT_NEAR(predicted / allocated, 1.0, 0.05)
      << "predicted " << predicted << " allocated " << allocated;
}

// A dynamic table is priced by its capacity (rows, state, key index and bookkeeping: what
// DynamicRowStore::MemoryBytes allocates) and pays a key probe per id looked up; the planner
// never offers it replicated (data_parallel) or in the RocksDB tier.
TEST(MemoryTest, DynamicTablePricedByCapacityAndProbes) {
  const std::vector<int64_t> rows = {400000, 5000};
  const int64_t dim = 32;
  PlanInputs in = SmallInputs(rows, dim, 1);
  in.step.row_state_fixed = 1;  // row-wise AdaGrad
  MachineProfile prof = FlatProfile();
  absl::StatusOr<Estimator> est_static = Estimator::Create(in, prof, 1);
  ASSERT_TRUE(est_static.ok());
  PlanInputs din = in;  // the estimator keeps a pointer to its inputs
  din.tables[0].config.dynamic.enabled = true;
  absl::StatusOr<Estimator> est = Estimator::Create(din, prof, 1);
  ASSERT_TRUE(est.ok());
  std::vector<TablePlacement> p;
  TableOption tw;
  for (const PlanTable& t : din.tables) p.push_back(MakePlacement(tw, {0}, t.config));
  const StepEstimate dyn = est->Evaluate(p);
  const StepEstimate stat = est_static->Evaluate(p);
  DynamicRowStoreOptions d;
  d.capacity = rows[0];
  d.dim = dim;
  d.state_dim = 1;
  const double want = static_cast<double>(DynamicRowStore::MemoryBytes(d)) +
                      static_cast<double>(rows[1]) * (dim * 4 + 4);
  const double got = dyn.memory_detail[0].weights + dyn.memory_detail[0].optimizer_state;
  EXPECT_NEAR(got / want, 1.0, 0.05) << "predicted " << got << " allocated " << want;
  EXPECT_GT(dyn.step.s[kLookup], stat.step.s[kLookup]) << "no probe cost";

  EnumerateContext ctx;
  ctx.group_size = 2;
  ctx.world_size = 2;
  ctx.disk_available = true;
  const std::vector<TableOption> options = EnumerateTableOptions(din.tables[0], ctx);
  EXPECT_FALSE(options.empty());
  for (const TableOption& o : options) {
    EXPECT_NE(o.type, ShardingType::kDataParallel);
    EXPECT_FALSE(o.tiered);
  }
}

}  // namespace
}  // namespace tessera::planner
