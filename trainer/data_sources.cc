#include "trainer/data_sources.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "io/binary_format.h"
#include "io/criteo_gzip.h"
#include "io/criteo_text.h"
#include "io/mlperf_npy.h"
#include "io/prefetch.h"
#include "io/reduce_ids.h"
#include "io/synthetic.h"
#include "trainer/internal/memory_check.h"

namespace tessera {
namespace {

// The id space a dynamic table's features are read with: the raw ids of each format (the
// readers reduce ids mod these, which then changes nothing).
int64_t DynamicIdSpace(DataFormat format) {
  switch (format) {
    case DataFormat::kMlperfNpy: return kMlperfRawIds;   // ids as stored
    case DataFormat::kSynthetic: return int64_t{1} << 40;  // the generator's whole key space
    default: return int64_t{1} << 32;  // Criteo text and binary records: the hex's 32-bit value
  }
}

// Rows of the table serving each feature, in feature order (a dynamic table's: the format's
// raw id space).
std::vector<int64_t> RowsPerFeature(const Config& config) {
  int features = 0;
  for (const TableConfig& t : config.model.tables) {
    for (int f : t.features) features = std::max(features, f + 1);
  }
  std::vector<int64_t> rows(features, 0);
  for (const TableConfig& t : config.model.tables) {
    for (int f : t.features) {
      rows[f] = t.dynamic.enabled ? DynamicIdSpace(config.data.format) : t.num_rows;
    }
  }
  return rows;
}

// data.train / data.eval may name several files separated by commas.
std::vector<std::string> SplitPaths(const std::string& paths) {
  return absl::StrSplit(paths, ',', absl::SkipEmpty());
}

absl::StatusOr<std::unique_ptr<BatchReader>> OpenFileReader(const Config& config,
                                                            const std::string& paths,
                                                            int64_t batch_size, int shard,
                                                            int num_shards,
                                                            int64_t* batches_per_epoch) {
  const DataConfig& d = config.data;
  if (d.format == DataFormat::kMlperfNpy) {
    // `paths` is the folder; the training stream is train_days, the eval stream eval_days.
    const bool train = batches_per_epoch != nullptr;
    MlperfNpyOptions o;
    o.dir = paths;
    o.days = train ? d.train_days : d.eval_days;
    o.split = train ? MlperfSplit::kAll : d.eval_split;
    o.batch_size = batch_size;
    o.rows_per_feature = RowsPerFeature(config);
    o.num_dense = config.model.num_dense;
    o.shard_index = shard;
    o.num_shards = num_shards;
    TESSERA_ASSIGN_OR_RETURN(auto r, MlperfNpyReader::Open(std::move(o)));
    if (train) *batches_per_epoch = (r->num_records() + batch_size - 1) / batch_size;
    return std::unique_ptr<BatchReader>(std::move(r));
  }
  if (d.format == DataFormat::kBinary) {
    BinaryReaderOptions o;
    o.paths = SplitPaths(paths);
    o.batch_size = batch_size;
    o.rows_per_feature = RowsPerFeature(config);
    o.shard_index = shard;
    o.num_shards = num_shards;
    TESSERA_ASSIGN_OR_RETURN(auto r, BinaryReader::Open(std::move(o)));
    if (batches_per_epoch) *batches_per_epoch = (r->num_records() + batch_size - 1) / batch_size;
    return std::unique_ptr<BatchReader>(std::move(r));
  }
  CriteoTextOptions o;
  o.paths = SplitPaths(paths);
  o.format = d.format == DataFormat::kCriteoCsv ? CriteoTextFormat::kCsv : CriteoTextFormat::kTsv;
  o.batch_size = batch_size;
  o.rows_per_feature = RowsPerFeature(config);
  o.on_bad_record = d.on_bad_record;
  o.max_bad_records = d.max_bad_records;
  o.shard_index = shard;
  o.num_shards = num_shards;
  if (o.rows_per_feature.size() != kCriteoNumSparse) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.source, ": model.tables: Criteo data has ", kCriteoNumSparse,
        " categorical features but the tables serve ", o.rows_per_feature.size()));
  }
  if (AnyGzipPath(o.paths)) {
    // Compressed days stream through a threaded reader; the batch count is unknown up front.
    TESSERA_ASSIGN_OR_RETURN(CriteoGzipOptions g, GzipOptionsFrom(o));
    TESSERA_ASSIGN_OR_RETURN(auto r, CriteoGzipReader::Open(std::move(g)));
    return std::unique_ptr<BatchReader>(std::move(r));
  }
  TESSERA_ASSIGN_OR_RETURN(auto r, CriteoTextReader::Open(std::move(o)));
  if (batches_per_epoch) *batches_per_epoch = (r->num_records() + batch_size - 1) / batch_size;
  return std::unique_ptr<BatchReader>(std::move(r));
}

absl::StatusOr<std::unique_ptr<BatchReader>> Prefetch(const Config& config,
                                                      std::unique_ptr<BatchReader> r,
                                                      bool shuffle) {
  PrefetchOptions o;
  o.queue_batches = std::max(1, config.data.prefetch_batches);
  o.shuffle = shuffle;
  o.seed = config.seed;
  TESSERA_ASSIGN_OR_RETURN(auto p, PrefetchingReader::Create(std::move(r), o));
  return std::unique_ptr<BatchReader>(std::move(p));
}

}  // namespace

absl::StatusOr<DataSources> OpenDataSources(const Config& config, int shard_index,
                                            int num_shards) {
  const DataConfig& d = config.data;
  const int64_t eval_batch = d.eval_batch_size > 0 ? d.eval_batch_size : d.batch_size;
  DataSources out;
  // Before the generator or a reader thread allocates a batch the config sizes.
  TESSERA_RETURN_IF_ERROR(internal::CheckInputMemory(config, internal::AvailableHostMemory()));
  if (d.format == DataFormat::kSynthetic) {
    SyntheticDataOptions o;
    o.rows_per_feature = RowsPerFeature(config);
    // data.synthetic.id_space: one id space for every feature; static tables hash mod rows.
    std::vector<int64_t> reduce(o.rows_per_feature.size(), 0);
    if (d.synthetic.id_space > 0) {
      for (const TableConfig& t : config.model.tables) {
        for (int f : t.features) {
          if (!t.dynamic.enabled && t.num_rows < d.synthetic.id_space) reduce[f] = t.num_rows;
          o.rows_per_feature[f] = d.synthetic.id_space;
        }
      }
    }
    const bool hashing = std::any_of(reduce.begin(), reduce.end(), [](int64_t r) { return r > 0; });
    auto reduced = [&](std::unique_ptr<BatchReader> r) {
      return hashing ? ReduceIdsReader(std::move(r), reduce) : std::move(r);
    };
    if (!d.synthetic.pooling.empty()) o.pooling = d.synthetic.pooling;
    o.zipf_exponent = d.synthetic.zipf_exponent;
    o.num_dense = config.model.num_dense;
    o.seed = d.synthetic.seed != 0 ? d.synthetic.seed : config.seed;
    o.model.scale = d.synthetic.planted_scale;
    TESSERA_ASSIGN_OR_RETURN(auto gen, SyntheticGenerator::Create(o));
    SyntheticStreamOptions train;
    train.begin = 0;
    train.num_samples = d.synthetic.num_train_samples;
    train.batch_size = d.batch_size;
    train.shard_index = shard_index;
    train.num_shards = num_shards;
    TESSERA_ASSIGN_OR_RETURN(auto tr, SyntheticReader::Open(gen, train));
    out.train_batches_per_epoch = (tr->num_records() + d.batch_size - 1) / d.batch_size;
    TESSERA_ASSIGN_OR_RETURN(out.train, Prefetch(config, reduced(std::move(tr)), d.shuffle));
    if (d.synthetic.num_eval_samples > 0) {
      SyntheticStreamOptions ev;
      ev.begin = kSyntheticEvalBegin;
      ev.num_samples = d.synthetic.num_eval_samples;
      ev.batch_size = eval_batch;
      ev.shard_index = shard_index;
      ev.num_shards = num_shards;
      TESSERA_ASSIGN_OR_RETURN(auto er, SyntheticReader::Open(gen, ev));
      TESSERA_ASSIGN_OR_RETURN(out.eval, Prefetch(config, reduced(std::move(er)), false));
      TESSERA_ASSIGN_OR_RETURN(PlantedModelStats planted,
                               gen->PlantedStats(kSyntheticEvalBegin, d.synthetic.num_eval_samples));
      out.planted_auc = planted.auc;
    }
    return out;
  }
  if (d.train_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(config.source, ": data.train: required for ",
                                                   "file formats"));
  }
  TESSERA_ASSIGN_OR_RETURN(auto tr, OpenFileReader(config, d.train_path, d.batch_size,
                                                   shard_index, num_shards,
                                                   &out.train_batches_per_epoch));
  TESSERA_ASSIGN_OR_RETURN(out.train, Prefetch(config, std::move(tr), d.shuffle));
  if (!d.eval_path.empty()) {
    TESSERA_ASSIGN_OR_RETURN(auto er, OpenFileReader(config, d.eval_path, eval_batch, shard_index,
                                                     num_shards, nullptr));
    TESSERA_ASSIGN_OR_RETURN(out.eval, Prefetch(config, std::move(er), false));
  }
  return out;
}

}  // namespace tessera
