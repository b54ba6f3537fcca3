// Baselines the planner is compared with, both priced by the planner's own estimator:
//   - DefaultShardingPlan (sharding/plan.h): rows x dim balanced, table-wise or row-wise; the
//     plan a run gets without a plan file, and the planner's simplest baseline;
//   - a TorchRec-style greedy (TorchRec's EmbeddingShardingPlanner as its users describe it):
//     fixed bandwidth constants (HBM 897 GiB/s, DDR 51 GiB/s, intra-node 600 GiB/s, cross-node
//     12.5 GiB/s), each shard's cost the plain sum of its forward compute, forward comms,
//     backward compute (2x forward) and backward comms, no latency and no overlap; a memory
//     reservation of 15% of each rank's memory; per table the option (data_parallel,
//     table_wise, row_wise over every rank, column_wise in chunks of 32 or dim / 2) of the least
//     summed cost; shards, costliest first, on the rank with the least summed cost that has room;
//     1-D (one sharding group of all T ranks).
#pragma once

#include "absl/status/statusor.h"
#include "planner/inputs.h"
#include "sharding/plan.h"

namespace tessera::planner {

inline constexpr double kTorchRecHbmBytesPerSec = 897.0 * (1ull << 30);
inline constexpr double kTorchRecDdrBytesPerSec = 51.0 * (1ull << 30);
inline constexpr double kTorchRecIntraNodeBytesPerSec = 600.0 * (1ull << 30);
inline constexpr double kTorchRecCrossNodeBytesPerSec = 12.5 * (1ull << 30);
inline constexpr double kTorchRecReservation = 0.15;

// The TorchRec-style plan for group size `group_size` (normally T). ResourceExhausted naming the
// table when some shard finds no rank with room.
[[nodiscard]] absl::StatusOr<ShardingPlan> TorchRecStylePlan(const PlanInputs& inputs,
                                                             int group_size);

}  // namespace tessera::planner
