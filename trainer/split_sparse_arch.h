// SplitSparseArch: one model's tables in two places behind one SparseArch -- typically the
// RocksDB-tier tables in host memory (a LocalSparseArch over TieredRowStores) and every other
// table in device memory (a CudaSparseArch), which is how a `device: cuda` model trains a table
// that does not fit in HBM. Each part is a SparseArch of its own over a subset of the tables and
// the features they serve (renumbered 0..n-1 in ascending global order); this class splits each
// batch by feature, runs both parts, and moves each feature's columns between the part's output
// and the model's [batch, output_dim()] rows (the one-collection layout: features side by side in
// feature order) with strided 2-D copies (ColumnCopies).
//
// Bits: a table's rows, updates and pooled outputs do not depend on which other tables share its
// collection (the collection runs tables independently; on the GPU, where tables of one dim
// share a backward pass, a row's terms are summed in pieces cut from the start of its own run,
// embedding/internal/run_pieces.h, not from its place among the other tables' entries), and the
// parts' tables keep their global table ids for the initial rows, so a split model trains
// bit-identically to one collection of the same kernels (tests/trainer/split_sparse_arch_test.cc,
// with two host parts).
//
// Memory contract: Forward's `out` and BackwardUpdate's `d_out` are in the model's memory (host
// or device, as ColumnCopies says); a part marked `host` takes host pointers, the other the
// model's memory. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer.h"
#include "core/device.h"
#include "trainer/config.h"
#include "trainer/sparse_arch.h"

namespace tessera {

// Strided copies of float column blocks between host memory and the model's memory.
class ColumnCopies {
 public:
  virtual ~ColumnCopies() = default;
  // `rows` rows of `width` floats from src (row pitch `spitch` floats) to dst (pitch `dpitch`);
  // either side in host memory or in the model's memory. May return once queued.
  [[nodiscard]] virtual absl::Status Copy2D(float* dst, int64_t dpitch, const float* src,
                                            int64_t spitch, int64_t width, int64_t rows) = 0;
  // Waits for every queued copy (before host memory they write is read, or a source reused).
  [[nodiscard]] virtual absl::Status Finish() = 0;
};
// memcpy per row (a CPU model).
std::unique_ptr<ColumnCopies> HostColumnCopies();
// cudaMemcpy2DAsync on ctx's compute stream, kinds from the pointers (a CUDA model).
std::unique_ptr<ColumnCopies> DeviceColumnCopies(const DeviceContext& ctx);

class SplitSparseArch final : public SparseArch {
 public:
  struct Part {
    std::unique_ptr<SparseArch> arch;
    std::vector<int> tables;    // global table index of the part's table i
    std::vector<int> features;  // global feature of the part's feature i (ascending)
    bool host = false;          // Forward/BackwardUpdate take host pointers
  };

  // `all`: the model's tables (global order, features as the config says). `parts`: each table
  // in exactly one part, each part's tables in ascending global order with their features.
  // `model_memory`: where out / d_out live (kCpu or kCuda), for the non-host parts' buffers.
  // InvalidArgument when the parts do not cover the tables.
  static absl::StatusOr<std::unique_ptr<SplitSparseArch>> Create(
      const std::vector<TableConfig>& all, int num_features, std::vector<Part> parts,
      std::unique_ptr<ColumnCopies> copies, Device model_memory);

  // The options of the part holding the tables with `in_part[t]` true: the tables in global
  // order with their features renumbered; `tables` / `features` receive the global indices.
  static EmbeddingCollectionOptions PartOptions(const EmbeddingCollectionOptions& all,
                                                const std::vector<bool>& in_part,
                                                std::vector<int>* tables,
                                                std::vector<int>* features);

  int64_t output_dim() const override { return output_dim_; }
  absl::Status Forward(const KeyedJagged& batch, float* out) override;
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override;
  void Prefetch(const KeyedJagged& next) override;
  int num_tables() const override { return static_cast<int>(all_.size()); }
  const TableConfig& table(int t) const override { return all_[t]; }
  absl::Status ReadRows(int t, int64_t begin, int64_t count, float* out) override;
  absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* rows) override;

  int num_parts() const { return static_cast<int>(parts_.size()); }
  const Part& part(int p) const { return parts_[p].part; }
  SparseArch& part_arch(int p) { return *parts_[p].part.arch; }

 private:
  struct Block {  // a run of features adjacent in both layouts
    int64_t model_col, part_col, width;
  };
  struct PartState {
    Part part;
    std::vector<Block> blocks;
    int64_t dim = 0;            // the part's output_dim
    KeyedJagged batch, next;    // this batch's / the prefetched batch's features of the part
    std::vector<float> host_out, host_d;  // host parts
    Buffer out, d;                        // other parts, in the model's memory
    int64_t capacity = 0;
  };
  SplitSparseArch() = default;
  absl::Status EnsureBuffers(PartState& p, int64_t batch);
  float* OutOf(PartState& p) { return p.part.host ? p.host_out.data() : p.out.data<float>(); }
  float* DOf(PartState& p) { return p.part.host ? p.host_d.data() : p.d.data<float>(); }

  std::vector<TableConfig> all_;
  std::vector<int> part_of_table_, index_in_part_;
  std::vector<PartState> parts_;
  std::unique_ptr<ColumnCopies> copies_;
  Device model_memory_ = Device::kCpu;
  int64_t output_dim_ = 0;
  int64_t batch_ = 0;
};

// A config's tables split by tier: the RocksDB-tier tables without a device cache in host memory (a LocalSparseArch over
// CreateTableStores, so the tier, its cache and its prefetch work as on the CPU), every other
// table in `make_rest(options, global_tables)` (a CudaSparseArch for device: cuda; tests give a
// LocalSparseArch and `rest_on_host`). InvalidArgument when the config has no tiered table.
using MakeSparsePart = std::function<absl::StatusOr<std::unique_ptr<SparseArch>>(
    const EmbeddingCollectionOptions& options, const std::vector<int>& global_tables)>;
absl::StatusOr<std::unique_ptr<SplitSparseArch>> CreateTierSplitSparseArch(
    const Config& config, const MakeSparsePart& make_rest, bool rest_on_host,
    std::unique_ptr<ColumnCopies> copies, Device model_memory);

// Copies the features `features` (ascending) of `in` into `out` (renumbered 0..n-1).
void SelectFeatures(const KeyedJagged& in, const std::vector<int>& features, KeyedJagged* out);

}  // namespace tessera
