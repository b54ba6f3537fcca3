// tessera-plan --data_sample FILE: per-table id statistics measured from a sample of a data file
// (read with the config's data.format, batches of `batch_size`): ids per sample, distinct rows
// per batch, and the share of accesses the hottest 0.1%, 1% and 10% of a table's rows take.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/inputs.h"
#include "trainer/config.h"

namespace tessera {

// One entry per model table. Reads at most `max_batches` batches. InvalidArgument naming the
// file (and the reader's file:line) for a file in another format or a bad record; NotFound when
// it cannot be opened; InvalidArgument when the file holds no complete batch.
absl::StatusOr<std::vector<planner::MeasuredIdStats>> MeasureDataSample(const Config& config,
                                                                        const std::string& path,
                                                                        int64_t batch_size,
                                                                        int max_batches = 64);

}  // namespace tessera
