#include "trainer/split_sparse_arch.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/status.h"
#include "trainer/model.h"
#include "trainer/stores.h"

namespace tessera {
namespace {

class HostCopies final : public ColumnCopies {
 public:
  absl::Status Copy2D(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                      int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * dpitch, src + r * spitch, static_cast<size_t>(width) * sizeof(float));
    }
    return absl::OkStatus();
  }
  absl::Status Finish() override { return absl::OkStatus(); }
};

class DeviceCopies final : public ColumnCopies {
 public:
  explicit DeviceCopies(const DeviceContext& ctx) : ctx_(ctx) {}
  absl::Status Copy2D(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                      int64_t rows) override {
    constexpr size_t f = sizeof(float);
    return CudaCopy2D(ctx_, dst, dpitch * f, src, spitch * f, width * f, rows);
  }
  absl::Status Finish() override { return CudaSynchronize(ctx_); }

 private:
  DeviceContext ctx_;
};

// Each feature's column offset in a layout of `features` (ascending) side by side.
std::vector<int64_t> Columns(const std::vector<TableConfig>& tables, int num_features) {
  std::vector<int64_t> dim_of(num_features, 0);
  for (const TableConfig& t : tables) {
    for (int f : t.features) {
      if (f >= 0 && f < num_features) dim_of[f] = t.dim;
    }
  }
  std::vector<int64_t> col(num_features + 1, 0);
  for (int f = 0; f < num_features; ++f) col[f + 1] = col[f] + dim_of[f];
  return col;
}

}  // namespace

std::unique_ptr<ColumnCopies> HostColumnCopies() { return std::make_unique<HostCopies>(); }
std::unique_ptr<ColumnCopies> DeviceColumnCopies(const DeviceContext& ctx) {
  return std::make_unique<DeviceCopies>(ctx);
}

void SelectFeatures(const KeyedJagged& in, const std::vector<int>& features, KeyedJagged* out) {
  const int64_t b = in.batch_size;
  out->num_features = static_cast<int>(features.size());
  out->batch_size = b;
  out->offsets.resize(features.size() * b + 1);
  out->values.clear();
  out->weights.clear();
  out->offsets[0] = 0;
  const bool weighted = !in.weights.empty();
  for (size_t i = 0; i < features.size(); ++i) {
    const int f = features[i];
    const int64_t* o = in.feature_offsets(f);
    const int64_t base = static_cast<int64_t>(out->values.size()) - o[0];
    for (int64_t s = 0; s < b; ++s) out->offsets[i * b + s + 1] = o[s + 1] + base;
    out->values.insert(out->values.end(), in.values.begin() + o[0], in.values.begin() + o[b]);
    if (weighted) {
      out->weights.insert(out->weights.end(), in.weights.begin() + o[0], in.weights.begin() + o[b]);
    }
  }
}

EmbeddingCollectionOptions SplitSparseArch::PartOptions(const EmbeddingCollectionOptions& all,
                                                        const std::vector<bool>& in_part,
                                                        std::vector<int>* tables,
                                                        std::vector<int>* features) {
  EmbeddingCollectionOptions o;
  o.optimizer = all.optimizer;
  o.seed = all.seed;
  tables->clear();
  features->clear();
  std::vector<int> renumber(all.num_features, -1);
  for (int t = 0; t < static_cast<int>(all.tables.size()); ++t) {
    if (!in_part[t]) continue;
    for (int f : all.tables[t].features) {
      if (f >= 0 && f < all.num_features) renumber[f] = 0;
    }
  }
  for (int f = 0; f < all.num_features; ++f) {
    if (renumber[f] == 0) {
      renumber[f] = static_cast<int>(features->size());
      features->push_back(f);
    }
  }
  for (int t = 0; t < static_cast<int>(all.tables.size()); ++t) {
    if (!in_part[t]) continue;
    TableConfig tc = all.tables[t];
    for (int& f : tc.features) f = renumber[f];
    o.tables.push_back(std::move(tc));
    tables->push_back(t);
  }
  o.num_features = static_cast<int>(features->size());
  return o;
}

absl::StatusOr<std::unique_ptr<SplitSparseArch>> SplitSparseArch::Create(
    const std::vector<TableConfig>& all, int num_features, std::vector<Part> parts,
    std::unique_ptr<ColumnCopies> copies, Device model_memory) {
  std::unique_ptr<SplitSparseArch> s(new SplitSparseArch());
  s->all_ = all;
  s->copies_ = std::move(copies);
  s->model_memory_ = model_memory;
  s->part_of_table_.assign(all.size(), -1);
  s->index_in_part_.assign(all.size(), -1);
  const std::vector<int64_t> col = Columns(all, num_features);
  s->output_dim_ = col[num_features];
  for (int p = 0; p < static_cast<int>(parts.size()); ++p) {
    Part& part = parts[p];
    if (part.arch == nullptr || part.arch->num_tables() != static_cast<int>(part.tables.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("SplitSparseArch: part ", p, " has no tables or a wrong table list"));
    }
    for (int i = 0; i < static_cast<int>(part.tables.size()); ++i) {
      const int t = part.tables[i];
      if (t < 0 || t >= static_cast<int>(all.size()) || s->part_of_table_[t] != -1 ||
          part.arch->table(i).name != all[t].name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SplitSparseArch: part ", p, "'s table ", i, " is not the model's table ", t));
      }
      s->part_of_table_[t] = p;
      s->index_in_part_[t] = i;
    }
    PartState st;
    st.dim = part.arch->output_dim();
    int64_t part_col = 0;
    for (int f : part.features) {
      const int64_t w = col[f + 1] - col[f];
      if (!st.blocks.empty() && st.blocks.back().model_col + st.blocks.back().width == col[f]) {
        st.blocks.back().width += w;
      } else {
        st.blocks.push_back({col[f], part_col, w});
      }
      part_col += w;
    }
    if (part_col != st.dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SplitSparseArch: part ", p, "'s features are ", part_col, " columns wide, its tables ",
          st.dim));
    }
    st.part = std::move(part);
    s->parts_.push_back(std::move(st));
  }
  for (size_t t = 0; t < all.size(); ++t) {
    if (s->part_of_table_[t] == -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("SplitSparseArch: table '", all[t].name, "' is in no part"));
    }
  }
  return s;
}

absl::Status SplitSparseArch::EnsureBuffers(PartState& p, int64_t batch) {
  if (batch <= p.capacity) return absl::OkStatus();
  const int64_t n = batch * std::max<int64_t>(p.dim, 1);
  if (p.part.host) {
    p.host_out.assign(static_cast<size_t>(n), 0.0f);
    p.host_d.assign(static_cast<size_t>(n), 0.0f);
  } else {
    TESSERA_ASSIGN_OR_RETURN(p.out, Buffer::Allocate(model_memory_, DType::kF32, {n}));
    TESSERA_ASSIGN_OR_RETURN(p.d, Buffer::Allocate(model_memory_, DType::kF32, {n}));
  }
  p.capacity = batch;
  return absl::OkStatus();
}

absl::Status SplitSparseArch::Forward(const KeyedJagged& batch, float* out) {
  const int64_t b = batch.batch_size;
  for (PartState& p : parts_) {
    SelectFeatures(batch, p.part.features, &p.batch);
    TESSERA_RETURN_IF_ERROR(EnsureBuffers(p, b));
    TESSERA_RETURN_IF_ERROR(p.part.arch->Forward(p.batch, OutOf(p)));
    for (const Block& k : p.blocks) {
      TESSERA_RETURN_IF_ERROR(copies_->Copy2D(out + k.model_col, output_dim_,
                                              OutOf(p) + k.part_col, p.dim, k.width, b));
    }
  }
  // The host parts' outputs are reused by the next Forward: the copies must have read them.
  TESSERA_RETURN_IF_ERROR(copies_->Finish());
  batch_ = b;
  return absl::OkStatus();
}

absl::Status SplitSparseArch::BackwardUpdate(const float* d_out, float lr, int64_t step) {
  if (batch_ == 0) {
    return absl::FailedPreconditionError("SplitSparseArch: BackwardUpdate before Forward");
  }
  for (PartState& p : parts_) {
    for (const Block& k : p.blocks) {
      TESSERA_RETURN_IF_ERROR(copies_->Copy2D(DOf(p) + k.part_col, p.dim, d_out + k.model_col,
                                              output_dim_, k.width, batch_));
    }
  }
  TESSERA_RETURN_IF_ERROR(copies_->Finish());  // the host parts read their gradients now
  for (PartState& p : parts_) {
    TESSERA_RETURN_IF_ERROR(p.part.arch->BackwardUpdate(DOf(p), lr, step));
  }
  return absl::OkStatus();
}

void SplitSparseArch::Prefetch(const KeyedJagged& next) {
  for (PartState& p : parts_) {
    SelectFeatures(next, p.part.features, &p.next);
    p.part.arch->Prefetch(p.next);
  }
}

absl::Status SplitSparseArch::ReadRows(int t, int64_t begin, int64_t count, float* out) {
  if (t < 0 || t >= num_tables()) {
    return absl::InvalidArgumentError(absl::StrCat("SplitSparseArch: no table ", t));
  }
  return parts_[part_of_table_[t]].part.arch->ReadRows(index_in_part_[t], begin, count, out);
}

absl::Status SplitSparseArch::WriteRows(int t, int64_t begin, int64_t count, const float* rows) {
  if (t < 0 || t >= num_tables()) {
    return absl::InvalidArgumentError(absl::StrCat("SplitSparseArch: no table ", t));
  }
  return parts_[part_of_table_[t]].part.arch->WriteRows(index_in_part_[t], begin, count, rows);
}

absl::StatusOr<std::unique_ptr<SplitSparseArch>> CreateTierSplitSparseArch(
    const Config& config, const MakeSparsePart& make_rest, bool rest_on_host,
    std::unique_ptr<ColumnCopies> copies, Device model_memory) {
  const EmbeddingCollectionOptions all = EmbeddingOptionsFromConfig(config);
  std::vector<bool> tiered(all.tables.size());
  bool any = false, all_tiered = true;
  for (size_t t = 0; t < all.tables.size(); ++t) {
    // A RocksDB table with an HBM cache (storage.device_cache_rows) trains in the rest.
    tiered[t] = all.tables[t].storage.tier == StorageTier::kRocksDb &&
                !all.tables[t].storage.device_cached();
    any = any || tiered[t];
    all_tiered = all_tiered && tiered[t];
  }
  if (!any) {
    return absl::InvalidArgumentError(
        "CreateTierSplitSparseArch: no table is in the RocksDB tier without a device cache");
  }
  std::vector<SplitSparseArch::Part> parts;
  {
    SplitSparseArch::Part host;
    const EmbeddingCollectionOptions o =
        SplitSparseArch::PartOptions(all, tiered, &host.tables, &host.features);
    TESSERA_ASSIGN_OR_RETURN(auto stores, CreateTableStores(config, host.tables));
    TESSERA_ASSIGN_OR_RETURN(auto collection, EmbeddingCollection::CreateWithStores(
                                                  o, std::move(stores), DeviceContext::Cpu()));
    host.arch = std::make_unique<LocalSparseArch>(std::move(collection));
    host.host = true;
    parts.push_back(std::move(host));
  }
  if (!all_tiered) {
    std::vector<bool> rest(tiered.size());
    for (size_t t = 0; t < rest.size(); ++t) rest[t] = !tiered[t];
    SplitSparseArch::Part part;
    const EmbeddingCollectionOptions o =
        SplitSparseArch::PartOptions(all, rest, &part.tables, &part.features);
    TESSERA_ASSIGN_OR_RETURN(part.arch, make_rest(o, part.tables));
    part.host = rest_on_host;
    parts.push_back(std::move(part));
  }
  return SplitSparseArch::Create(all.tables, all.num_features, std::move(parts), std::move(copies),
                                 model_memory);
}

}  // namespace tessera
