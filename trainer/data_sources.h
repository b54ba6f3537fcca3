// The readers a Config asks for: a training stream and an eval set, each wrapped in a
// PrefetchingReader (a reader thread overlapping parsing/generation with compute). For a
// multi-rank run each rank opens its own slice (shard_index of num_shards) of both.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "io/reader.h"
#include "trainer/config.h"

namespace tessera {

struct DataSources {
  std::unique_ptr<BatchReader> train;
  std::unique_ptr<BatchReader> eval;  // null when the config has no eval set
  // Training batches per epoch for this shard, or -1 when unknown.
  int64_t train_batches_per_epoch = -1;
  // The planted model's AUC on the eval set (synthetic data only; NaN otherwise): the best AUC
  // any model can reach, so a run can be judged against it.
  double planted_auc = 0.0 / 0.0;
};

absl::StatusOr<DataSources> OpenDataSources(const Config& config, int shard_index = 0,
                                            int num_shards = 1);

}  // namespace tessera
