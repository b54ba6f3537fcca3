// SplitSparseArch (trainer/split_sparse_arch.h), the tables of a device: cuda model with RocksDB
// tables: tiered tables in a host part, the rest in another part, columns moved between the
// parts' outputs and the model's rows. Here both parts are host LocalSparseArchs (the CUDA part
// is the same orchestration with CudaSparseArch and cudaMemcpy2DAsync), so the split model must
// train bit-identically to one collection: the same losses and the same export bytes, also
// through a checkpoint written by the split model and restored into a plain one and back.
#include "trainer/split_sparse_arch.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/data_sources.h"
#include "trainer/model.h"
#include "trainer/stores.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using tiertest::ReadFile;

TEST(SelectFeatures, KeepsEachSelectedFeaturesBagsIdsAndWeights) {
  // 3 features x 2 samples; bags: f0 {1} {2,3}; f1 {} {4}; f2 {5,6} {7}.
  KeyedJagged in;
  in.num_features = 3;
  in.batch_size = 2;
  in.offsets = {0, 1, 3, 3, 4, 6, 7};
  in.values = {1, 2, 3, 4, 5, 6, 7};
  in.weights = {.1f, .2f, .3f, .4f, .5f, .6f, .7f};
  KeyedJagged out;
  SelectFeatures(in, {0, 2}, &out);
  EXPECT_EQ(out.num_features, 2);
  EXPECT_EQ(out.batch_size, 2);
  EXPECT_EQ(out.offsets, (std::vector<int64_t>{0, 1, 3, 5, 6}));
  EXPECT_EQ(out.values, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(out.weights, (std::vector<float>{.1f, .2f, .3f, .5f, .6f, .7f}));
  SelectFeatures(in, {1}, &out);
  EXPECT_EQ(out.offsets, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(out.values, (std::vector<int64_t>{4}));
  EXPECT_EQ(out.weights, (std::vector<float>{.4f}));
}

class SplitSparseArchTest : public tiertest::TempDirTest {
 protected:
  // t1 (features 1, 2) in the RocksDB tier: the host part holds features {1, 2}, the other part
  // {0, 3}, so both parts' columns are interleaved with the other's.
  Config MakeConfig(const std::string& name) {
    const std::string yaml =
        tiertest::SmallTierYaml({"", "{tier: rocksdb, cache_rows: 600, policy: lru}"},
                                "rowwise_adagrad", "adam") +
        absl::StrCat("train: {epochs: 2}\noutput: {dir: ", (dir_ / name).string(),
                     ", progress: false}\n");
    auto c = ParseConfig(yaml, (dir_ / (name + ".yaml")).string());
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
  std::unique_ptr<Model> Plain(const Config& c) {
    auto m = Model::Create(c, DeviceContext::Cpu());
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::unique_ptr<Model> Split(const Config& c) {
    auto rest = [&c](const EmbeddingCollectionOptions& o, const std::vector<int>& global)
        -> absl::StatusOr<std::unique_ptr<SparseArch>> {
      TESSERA_ASSIGN_OR_RETURN(auto stores, CreateTableStores(c, global));
      TESSERA_ASSIGN_OR_RETURN(auto coll, EmbeddingCollection::CreateWithStores(
                                              o, std::move(stores), DeviceContext::Cpu()));
      return std::unique_ptr<SparseArch>(std::make_unique<LocalSparseArch>(std::move(coll)));
    };
    auto split = CreateTierSplitSparseArch(c, rest, /*rest_on_host=*/true, HostColumnCopies(),
                                           Device::kCpu);
    EXPECT_TRUE(split.ok()) << split.status();
    if (!split.ok()) return nullptr;
    EXPECT_EQ((*split)->num_parts(), 2);
    auto m = Model::Create(c, DeviceContext::Cpu(), std::move(*split));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::vector<Batch> Batches(const Config& c, int n) {
    auto data = OpenDataSources(c);
    EXPECT_TRUE(data.ok()) << data.status();
    std::vector<Batch> out(n);
    for (Batch& b : out) {
      auto more = data->train->Next(&b);
      EXPECT_TRUE(more.ok() && *more);
    }
    return out;
  }
  // Steps [from, to) with the next batch prefetched; the losses.
  std::vector<double> Train(Model& m, const std::vector<Batch>& batches, int from, int to) {
    std::vector<double> losses;
    for (int s = from; s < to; ++s) {
      if (s + 1 < to) m.Prefetch(batches[s + 1]);
      auto loss = m.TrainStep(batches[s], s);
      EXPECT_TRUE(loss.ok()) << loss.status();
      losses.push_back(loss.ok() ? *loss : -1);
    }
    return losses;
  }
  std::string Export(Model& m, const std::string& name, int64_t step) {
    const fs::path p = dir_ / (name + ".safetensors");
    EXPECT_TRUE(m.Export(p.string(), step).ok());
    return ReadFile(p);
  }
};

TEST_F(SplitSparseArchTest, TrainsBitIdenticallyToOneCollection) {
  const Config a_cfg = MakeConfig("plain"), b_cfg = MakeConfig("split");
  auto a = Plain(a_cfg);
  auto b = Split(b_cfg);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->sparse().output_dim(), a->sparse().output_dim());
  EXPECT_EQ(TieredStores(*b).size(), 1u);
  const std::vector<Batch> batches = Batches(a_cfg, 10);
  EXPECT_EQ(Train(*b, batches, 0, 10), Train(*a, batches, 0, 10));
  std::vector<float> pa, pb;
  ASSERT_TRUE(a->Predict(batches[0], &pa).ok());
  ASSERT_TRUE(b->Predict(batches[0], &pb).ok());
  EXPECT_EQ(pa, pb);
  EXPECT_TRUE(Export(*a, "a", 10) == Export(*b, "b", 10));
}

TEST_F(SplitSparseArchTest, CheckpointsMoveBetweenSplitAndPlainModels) {
  const Config a_cfg = MakeConfig("plain"), b_cfg = MakeConfig("split");
  const std::vector<Batch> batches = Batches(a_cfg, 10);
  auto a = Plain(a_cfg);
  ASSERT_NE(a, nullptr);
  Train(*a, batches, 0, 10);
  const std::string want = Export(*a, "a", 10);

  // Split model: 5 steps, checkpoint, restored into a plain model that finishes the run.
  auto b = Split(b_cfg);
  ASSERT_NE(b, nullptr);
  Train(*b, batches, 0, 5);
  auto ckpt = WriteCheckpoint(*b, {5, 0, 5}, (dir_ / "ckpt_split").string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE(fs::exists(fs::path(*ckpt) / "tables" / "t1" / "CURRENT"));
  b.reset();
  auto c = Plain(MakeConfig("plain2"));
  ASSERT_NE(c, nullptr);
  auto pos = RestoreCheckpoint(*c, *ckpt);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->step, 5);
  Train(*c, batches, 5, 10);
  EXPECT_TRUE(Export(*c, "c", 10) == want) << "split checkpoint -> plain model";

  // And back: a plain model's checkpoint restored into a split model.
  auto d = Plain(MakeConfig("plain3"));
  ASSERT_NE(d, nullptr);
  Train(*d, batches, 0, 5);
  auto ckpt2 = WriteCheckpoint(*d, {5, 0, 5}, (dir_ / "ckpt_plain").string());
  ASSERT_TRUE(ckpt2.ok()) << ckpt2.status();
  d.reset();
  auto e = Split(MakeConfig("split2"));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(RestoreCheckpoint(*e, *ckpt2).ok());
  Train(*e, batches, 5, 10);
  EXPECT_TRUE(Export(*e, "e", 10) == want) << "plain checkpoint -> split model";
}

TEST_F(SplitSparseArchTest, RefusesPartsThatDoNotCoverTheTables) {
  const Config c = MakeConfig("bad");
  const EmbeddingCollectionOptions all = EmbeddingOptionsFromConfig(c);
  std::vector<SplitSparseArch::Part> parts(1);
  const EmbeddingCollectionOptions o =
      SplitSparseArch::PartOptions(all, {true, false, false}, &parts[0].tables, &parts[0].features);
  auto coll = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(coll.ok()) << coll.status();
  parts[0].arch = std::make_unique<LocalSparseArch>(std::move(*coll));
  parts[0].host = true;
  auto s = SplitSparseArch::Create(all.tables, all.num_features, std::move(parts),
                                   HostColumnCopies(), Device::kCpu);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("table 't1' is in no part"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace tessera
