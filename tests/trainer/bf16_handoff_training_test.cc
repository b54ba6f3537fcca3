// The trainer's bf16 hand-off (Model with tables whose every output_dtype is bf16: the lookup
// pools into bf16, the dense arch reads it and writes d_emb in bf16, the update reads that)
// trains the same bits as the fp32 hand-off it replaced (the tables' bf16 outputs widened into
// an fp32 buffer, the fp32 d_emb rounded back): loss per step, every table row and its optimizer
// state, every dense parameter, for DLRM and DCNv2, fp32 and bf16 dense math, 1 and 2 threads.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "dense/internal/dnnl_gemm.h"
#include "gtest/gtest.h"
#include "trainer/model.h"

namespace tessera {
namespace {

constexpr int kF = 4;
constexpr int64_t kRows = 200;
constexpr int64_t kDim = 16;
constexpr int64_t kDense = 5;
constexpr int64_t kBatch = 96;
constexpr int kSteps = 4;

// A SparseArch over an EmbeddingCollection that offers the bf16 hand-off or hides it (then the
// model takes the fp32 path, the one every bf16-output run took before the hand-off), counting
// which lookups the model called.
class CountingSparseArch final : public SparseArch {
 public:
  CountingSparseArch(std::unique_ptr<EmbeddingCollection> c, bool offer_bf16)
      : local_(std::move(c)), offer_bf16_(offer_bf16) {}
  int64_t output_dim() const override { return local_.output_dim(); }
  absl::Status Forward(const KeyedJagged& batch, float* out) override {
    ++fp32_forwards;
    return local_.Forward(batch, out);
  }
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override {
    return local_.BackwardUpdate(d_out, lr, step);
  }
  bool bf16_outputs() const override { return offer_bf16_ && local_.bf16_outputs(); }
  absl::Status ForwardBf16(const KeyedJagged& batch, uint16_t* out) override {
    ++bf16_forwards;
    return local_.ForwardBf16(batch, out);
  }
  absl::Status BackwardUpdateBf16(const uint16_t* d_out, float lr, int64_t step) override {
    return local_.BackwardUpdateBf16(d_out, lr, step);
  }
  int num_tables() const override { return local_.num_tables(); }
  const TableConfig& table(int t) const override { return local_.table(t); }
  absl::Status ReadRows(int t, int64_t begin, int64_t count, float* out) override {
    return local_.ReadRows(t, begin, count, out);
  }
  absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* rows) override {
    return local_.WriteRows(t, begin, count, rows);
  }
  EmbeddingCollection& collection() { return local_.collection(); }
  int fp32_forwards = 0, bf16_forwards = 0;

 private:
  LocalSparseArch local_;
  bool offer_bf16_;
};

Config MakeConfig(InteractionType type, DenseDtype dense_dtype) {
  Config c;
  c.seed = 17;
  c.model.interaction = type;
  c.model.num_dense = kDense;
  c.model.embedding_dim = kDim;
  c.model.bottom_mlp = {32, kDim};
  c.model.top_mlp = {32, 16, 1};
  c.model.dcn_num_layers = 2;
  c.model.dense_dtype = dense_dtype;
  for (int f = 0; f < kF; ++f) {
    TableConfig t;
    t.name = absl::StrCat("t", f);
    t.num_rows = kRows;
    t.dim = kDim;
    t.features = {f};
    t.storage.dtype = f % 2 == 0 ? RowDtype::kBf16 : RowDtype::kF16;  // stochastic rounding
    t.output_dtype = RowDtype::kBf16;
    c.model.tables.push_back(t);
  }
  c.optimizer.embedding.type = RowOptimizerType::kRowWiseAdagrad;
  c.optimizer.embedding_lr = 0.05f;
  c.optimizer.dense.type = DenseOptimizerType::kSgd;
  c.optimizer.dense_lr = 0.05f;
  c.optimizer.schedule.base_lr = 1.0f;
  return c;
}

Batch MakeBatch(int step) {
  Batch b;
  b.batch_size = kBatch;
  b.num_dense = kDense;
  CounterRng rng(5, static_cast<uint64_t>(step));
  for (int64_t i = 0; i < kBatch * kDense; ++i) b.dense.push_back(2.0f * rng.NextUniform());
  for (int64_t i = 0; i < kBatch; ++i) b.labels.push_back(rng.NextBelow(4) == 0 ? 1.0f : 0.0f);
  b.sparse.num_features = kF;
  b.sparse.batch_size = kBatch;
  b.sparse.offsets = {0};
  for (int f = 0; f < kF; ++f) {
    for (int64_t s = 0; s < kBatch; ++s) {
      const int64_t len = static_cast<int64_t>(rng.NextBelow(5));
      for (int64_t k = 0; k < len; ++k) b.sparse.values.push_back(rng.NextBelow(kRows));
      b.sparse.offsets.push_back(static_cast<int64_t>(b.sparse.values.size()));
    }
  }
  return b;
}

struct Trainee {
  std::unique_ptr<Model> model;
  CountingSparseArch* sparse = nullptr;
};

Trainee MakeRun(const Config& c, bool offer_bf16) {
  auto collection = EmbeddingCollection::Create(EmbeddingOptionsFromConfig(c),
                                                DeviceContext::Cpu());
  EXPECT_TRUE(collection.ok()) << collection.status();
  auto sparse = std::make_unique<CountingSparseArch>(std::move(*collection), offer_bf16);
  Trainee r;
  r.sparse = sparse.get();
  auto model = Model::Create(c, DeviceContext::Cpu(), std::move(sparse));
  EXPECT_TRUE(model.ok()) << model.status();
  r.model = std::move(*model);
  return r;
}

TEST(Bf16HandoffTraining, TrainsTheBitsOfTheFp32HandOff) {
  std::vector<DenseDtype> dtypes = {DenseDtype::kFp32};
  if (dense_internal::DnnlGemmAvailable()) dtypes.push_back(DenseDtype::kBf16);
  for (InteractionType type : {InteractionType::kDot, InteractionType::kDcn}) {
    for (DenseDtype dtype : dtypes) {
      for (int threads : {1, 2}) {
        SetNumThreads(threads);
        SCOPED_TRACE(::testing::Message() << InteractionTypeName(type) << " dense "
                                          << DenseDtypeName(dtype) << " threads " << threads);
        const Config c = MakeConfig(type, dtype);
        Trainee handoff = MakeRun(c, /*offer_bf16=*/true);
        Trainee before = MakeRun(c, /*offer_bf16=*/false);
        ASSERT_NE(handoff.model, nullptr);
        ASSERT_NE(before.model, nullptr);
        for (int step = 0; step < kSteps; ++step) {
          const Batch b = MakeBatch(step);
          auto l16 = handoff.model->TrainStep(b, step);
          auto l32 = before.model->TrainStep(b, step);
          ASSERT_TRUE(l16.ok() && l32.ok()) << l16.status() << l32.status();
          ASSERT_EQ(std::memcmp(&*l16, &*l32, sizeof(double)), 0)
              << "step " << step << ": " << *l16 << " vs " << *l32;
        }
        // Predict goes through the same hand-off.
        std::vector<float> p16, p32;
        ASSERT_TRUE(handoff.model->Predict(MakeBatch(kSteps), &p16).ok());
        ASSERT_TRUE(before.model->Predict(MakeBatch(kSteps), &p32).ok());
        EXPECT_EQ(p16, p32);
        EXPECT_EQ(handoff.sparse->bf16_forwards, kSteps + 1);
        EXPECT_EQ(handoff.sparse->fp32_forwards, 0);
        EXPECT_EQ(before.sparse->fp32_forwards, kSteps + 1);
        for (int t = 0; t < kF; ++t) {
          std::vector<float> w16(kRows * kDim), w32(w16.size()), s16(kRows), s32(kRows);
          ASSERT_TRUE(handoff.sparse->collection()
                          .store(t)
                          .ReadRows(0, kRows, w16.data(), s16.data())
                          .ok());
          ASSERT_TRUE(
              before.sparse->collection().store(t).ReadRows(0, kRows, w32.data(), s32.data()).ok());
          EXPECT_EQ(w16, w32) << "table " << t;
          EXPECT_EQ(s16, s32) << "table " << t;
        }
        std::vector<Parameter*> d16 = handoff.model->dense_parameters();
        std::vector<Parameter*> d32 = before.model->dense_parameters();
        ASSERT_EQ(d16.size(), d32.size());
        for (size_t i = 0; i < d16.size(); ++i) {
          const int64_t n = d16[i]->value.numel();
          EXPECT_EQ(std::memcmp(d16[i]->value.data<float>(), d32[i]->value.data<float>(),
                                n * sizeof(float)),
                    0)
              << d16[i]->name;
        }
      }
    }
  }
  SetNumThreads(1);
}

}  // namespace
}  // namespace tessera
