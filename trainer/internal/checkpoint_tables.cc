#include "trainer/internal/checkpoint_tables.h"

#include "absl/strings/str_cat.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/row_optimizer.h"
#include "trainer/internal/checkpoint_files.h"

namespace tessera::internal {
namespace {

class HostTables final : public CheckpointTables {
 public:
  explicit HostTables(EmbeddingCollection& c) : c_(c) {}
  int num_tables() const override { return c_.num_tables(); }
  const TableConfig& table(int t) const override { return c_.table(t); }
  TieredRowStore* tiered(int t) override { return dynamic_cast<TieredRowStore*>(&c_.store(t)); }
  DynamicRowStore* dynamic(int t) override {
    return dynamic_cast<DynamicRowStore*>(&c_.store(t));
  }
  RowDtype weight_dtype(int t) const override { return c_.store(t).weight_dtype(); }
  int64_t state_dim(int t) const override { return c_.store(t).state_dim(); }
  absl::Status ReadRowBytes(int t, int64_t begin, int64_t n, void* weights,
                            float* state) override {
    return c_.store(t).ReadRowBytes(begin, n, weights, state);
  }
  absl::Status WriteRows(int t, const TensorView& w, int64_t src, int64_t dst, int64_t n,
                         const float* state) override {
    return WriteTableRows(c_.store(t), w, src, dst, n, state);
  }
  absl::Status WriteFloatRows(int t, int64_t begin, int64_t n, const float* weights,
                              const float* state) override {
    return c_.store(t).WriteRows(begin, n, weights, state);
  }

 private:
  EmbeddingCollection& c_;
};

// Device tables are fp32 in memory (CudaSparseArch refuses the tier and 16-bit storage), so the
// stored bytes are the floats ReadRows copies out.
class CudaTables final : public CheckpointTables {
 public:
  explicit CudaTables(CudaEmbeddingCollection& c) : c_(c) {}
  int num_tables() const override { return c_.num_tables(); }
  const TableConfig& table(int t) const override { return c_.table(t); }
  TieredRowStore* tiered(int) override { return nullptr; }
  RowDtype weight_dtype(int) const override { return RowDtype::kF32; }
  int64_t state_dim(int t) const override {
    return RowStateDim(c_.options().optimizer.type, c_.table(t).dim);
  }
  absl::Status ReadRowBytes(int t, int64_t begin, int64_t n, void* weights,
                            float* state) override {
    return c_.ReadRows(t, begin, n, static_cast<float*>(weights), state);
  }
  absl::Status WriteRows(int t, const TensorView& w, int64_t src, int64_t dst, int64_t n,
                         const float* state) override {
    if (w.dtype != SafetensorsDtype::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", c_.table(t).name, "': a checkpoint of 16-bit rows cannot be restored into "
          "device: cuda tables (fp32 only)"));
    }
    return c_.WriteRows(t, dst, n, w.f32() + src * c_.table(t).dim, state);
  }
  absl::Status WriteFloatRows(int t, int64_t begin, int64_t n, const float* weights,
                              const float* state) override {
    return c_.WriteRows(t, begin, n, weights, state);
  }

 private:
  CudaEmbeddingCollection& c_;
};

class JoinedTables final : public CheckpointTables {
 public:
  JoinedTables(std::vector<std::unique_ptr<CheckpointTables>> parts,
               std::vector<std::vector<int>> global)
      : parts_(std::move(parts)) {
    int n = 0;
    for (const auto& g : global) n += static_cast<int>(g.size());
    where_.assign(n, {0, 0});
    for (size_t p = 0; p < global.size(); ++p) {
      for (size_t i = 0; i < global[p].size(); ++i) {
        where_[global[p][i]] = {static_cast<int>(p), static_cast<int>(i)};
      }
    }
  }
  int num_tables() const override { return static_cast<int>(where_.size()); }
  const TableConfig& table(int t) const override { return part(t).table(index(t)); }
  TieredRowStore* tiered(int t) override { return part(t).tiered(index(t)); }
  DynamicRowStore* dynamic(int t) override { return part(t).dynamic(index(t)); }
  RowDtype weight_dtype(int t) const override { return part(t).weight_dtype(index(t)); }
  int64_t state_dim(int t) const override { return part(t).state_dim(index(t)); }
  absl::Status ReadRowBytes(int t, int64_t begin, int64_t n, void* weights,
                            float* state) override {
    return part(t).ReadRowBytes(index(t), begin, n, weights, state);
  }
  absl::Status WriteRows(int t, const TensorView& w, int64_t src, int64_t dst, int64_t n,
                         const float* state) override {
    return part(t).WriteRows(index(t), w, src, dst, n, state);
  }
  absl::Status WriteFloatRows(int t, int64_t begin, int64_t n, const float* weights,
                              const float* state) override {
    return part(t).WriteFloatRows(index(t), begin, n, weights, state);
  }

 private:
  CheckpointTables& part(int t) const { return *parts_[where_[t].first]; }
  int index(int t) const { return where_[t].second; }
  std::vector<std::unique_ptr<CheckpointTables>> parts_;
  std::vector<std::pair<int, int>> where_;  // table -> (part, index in the part)
};

}  // namespace

std::unique_ptr<CheckpointTables> JoinedCheckpointTables(
    std::vector<std::unique_ptr<CheckpointTables>> parts, std::vector<std::vector<int>> global) {
  return std::make_unique<JoinedTables>(std::move(parts), std::move(global));
}

std::unique_ptr<CheckpointTables> HostCheckpointTables(EmbeddingCollection& c) {
  return std::make_unique<HostTables>(c);
}
std::unique_ptr<CheckpointTables> CudaCheckpointTables(CudaEmbeddingCollection& c) {
  return std::make_unique<CudaTables>(c);
}

}  // namespace tessera::internal
