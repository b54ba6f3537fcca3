// DataParallelTables: the tables the plan replicates on every rank (sharding type
// data_parallel). Forward looks them up locally into their columns of the output; the backward
// all-reduces a dense [rows, dim + 1] gradient table per table over the world (the summed
// gradient and, last, how many ranks touched the row) and every rank applies the same update to
// exactly the rows some rank touched, as one rank would on the global batch.
//
// Owns: the replicas' stores (in memory; slot == row), this step's slots of their ids, and the
// dense gradient tables, kept across steps and all zero between them (the rows a step wrote are
// cleared after its update), so a step neither allocates nor page-faults the whole table again.
// On CUDA shards the replicas are in device memory; ids, the gradient tables and their
// all-reduce stay on the host (the aggregation copies its rows and sums to the host; the update
// gets them back). Reads the layout. Collective: BackwardUpdate (the world's all-reduce, when any table is data
// parallel). Thread-safety: none.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/keyed_jagged.h"
#include "embedding/pooled_lookup.h"
#include "sharding/internal/shard_layout.h"

namespace tessera::internal {

class DataParallelTables {
 public:
  // `layout` may still be under construction; it must be complete before Forward.
  explicit DataParallelTables(const ShardLayout& layout) : l_(layout) {}
  DataParallelTables(const DataParallelTables&) = delete;
  DataParallelTables& operator=(const DataParallelTables&) = delete;

  // Adds the replica of table t; returns its index (TableRoute::dp).
  int Add(int t, std::unique_ptr<RowStore> store);
  // The replica of index i (TableRoute::dp).
  RowStore* store(int i) const { return tables_[i].store.get(); }

  // Pooled lookup of every data-parallel table of `batch` into its columns of out [batch size,
  // output_dim] (ctx's memory); per-id weights when `weighted`. `local`: the same batch's
  // offsets and weights in ctx's memory (LocalStep's ctx_* pointers).
  absl::Status Forward(const KeyedJagged& batch, const LocalStep& local, bool weighted,
                       float* out);
  // The backward of the last Forward's batch (`step`) with d_out (its scale as for
  // ShardedEmbeddingCollection::BackwardUpdate), then the update with `lr` and 1-based `step`.
  absl::Status BackwardUpdate(const LocalStep& local, const float* d_out, float lr, int64_t step);
  // RowStore::EndStep / EndReadOnlyStep of every replica.
  absl::Status EndStep();
  absl::Status EndReadOnlyStep();

 private:
  struct Table {
    int table = 0;
    std::unique_ptr<RowStore> store;
  };
  const ShardLayout& l_;
  std::vector<Table> tables_;
  std::vector<int64_t> slots_;  // this step's slots, parallel to the batch's values
  const int64_t* ctx_slots_ = nullptr;  // slots_ in ctx's memory (CUDA: slots_mirror_)
  CtxArray<int64_t> slots_mirror_, update_slots_;
  CtxArray<float> update_grads_;
  std::vector<float> buf_;      // the dense gradient tables, zero between steps
  EmbeddingWorkspace ws_;
};

}  // namespace tessera::internal
