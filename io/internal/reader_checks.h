// The option checks every reader's Open shares: a batch of at least one sample and this rank's
// slice (shard_index of num_shards). One wording for all formats.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::io_internal {

// OkStatus, or InvalidArgument naming the bad value.
[[nodiscard]] inline absl::Status CheckBatchAndShard(int64_t batch_size, int shard_index,
                                                     int num_shards) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size = ", batch_size, ", expected >= 1"));
  }
  if (num_shards < 1 || shard_index < 0 || shard_index >= num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("shard_index = ", shard_index,
                                                   " of num_shards = ", num_shards,
                                                   ", expected 0 <= shard_index < num_shards"));
  }
  return absl::OkStatus();
}

}  // namespace tessera::io_internal
