// Id statistics of a data sample (plan_sample.h).
#include "tools/plan_sample.h"

#include <algorithm>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "trainer/data_sources.h"

namespace tessera {

absl::StatusOr<std::vector<planner::MeasuredIdStats>> MeasureDataSample(const Config& config,
                                                                        const std::string& path,
                                                                        int64_t batch_size,
                                                                        int max_batches) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("--data_sample: cannot read '", path, "'"));
  }
  if (config.data.format == DataFormat::kSynthetic) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_sample '", path,
                     "': the config's data.format is synthetic; a sample needs "
                     "criteo_tsv, criteo_csv or binary (the format the file is in)"));
  }
  Config c = config;
  c.data.train_path = path;
  c.data.eval_path.clear();
  c.data.batch_size = std::max<int64_t>(1, batch_size);
  c.data.shuffle = false;
  c.data.on_bad_record = BadRecordPolicy::kFail;
  absl::StatusOr<DataSources> src = OpenDataSources(c);
  if (!src.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_sample '", path, "': ", src.status().message()));
  }
  const int num_tables = static_cast<int>(config.model.tables.size());
  std::vector<int> table_of_feature;
  for (int t = 0; t < num_tables; ++t) {
    for (int f : config.model.tables[t].features) {
      if (f >= static_cast<int>(table_of_feature.size())) table_of_feature.resize(f + 1, -1);
      table_of_feature[f] = t;
    }
  }
  std::vector<absl::flat_hash_map<int64_t, int64_t>> counts(num_tables);
  std::vector<double> distinct_sum(num_tables, 0), ids(num_tables, 0);
  int64_t samples = 0;
  int batches = 0;
  Batch batch;
  while (batches < max_batches) {
    absl::StatusOr<bool> more = src->train->Next(&batch);
    if (!more.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data_sample '", path, "': ", more.status().message()));
    }
    if (!*more || batch.batch_size < c.data.batch_size) break;
    std::vector<absl::flat_hash_set<int64_t>> seen(num_tables);
    const KeyedJagged& kj = batch.sparse;
    for (int f = 0; f < kj.num_features && f < static_cast<int>(table_of_feature.size()); ++f) {
      const int t = table_of_feature[f];
      if (t < 0) continue;
      for (int64_t i = kj.feature_begin(f); i < kj.feature_end(f); ++i) {
        seen[t].insert(kj.values[i]);
        ++counts[t][kj.values[i]];
        ids[t] += 1;
      }
    }
    for (int t = 0; t < num_tables; ++t) distinct_sum[t] += static_cast<double>(seen[t].size());
    samples += batch.batch_size;
    ++batches;
  }
  if (batches == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_sample '", path, "': no complete batch of ", c.data.batch_size, " samples"));
  }
  std::vector<planner::MeasuredIdStats> out(num_tables);
  for (int t = 0; t < num_tables; ++t) {
    planner::MeasuredIdStats& m = out[t];
    m.sample_batch = c.data.batch_size;
    m.ids_per_sample = ids[t] / static_cast<double>(samples);
    m.distinct_per_batch = distinct_sum[t] / batches;
    std::vector<int64_t> freq;
    freq.reserve(counts[t].size());
    for (const auto& kv : counts[t]) freq.push_back(kv.second);
    std::sort(freq.begin(), freq.end(), std::greater<int64_t>());
    const int64_t rows = config.model.tables[t].num_rows;
    for (double share : {0.001, 0.01, 0.1}) {
      const int64_t hot = std::max<int64_t>(1, static_cast<int64_t>(share * rows));
      double covered = 0;
      for (int64_t i = 0; i < hot && i < static_cast<int64_t>(freq.size()); ++i) covered += freq[i];
      if (!m.hot_rows.empty() && hot <= m.hot_rows.back()) continue;
      m.hot_rows.push_back(hot);
      m.hot_coverage.push_back(ids[t] > 0 ? covered / ids[t] : 1.0);
    }
  }
  return out;
}

}  // namespace tessera
