// The state of ShardedEmbeddingCollection: the static layout and one object per phase, each
// owning its buffers (see each header's contract). sharding/sharded_embedding.cc orchestrates
// them; checkpoint and table I/O (sharded_embedding_checkpoint.cc, sharded_embedding_io.cc)
// read the layout and the replica sync state. Private to sharding/.
//
// One step, in the order sharded_embedding.cc calls the phases:
//   Forward         input->Exchange, input->Unpack, output->PoolLocal, sync->StartAhead,
//                   output->ExchangeForward, sync->AdvanceAhead, output->Reduce, dp.Forward,
//                   sync->FinishAhead, input->HintNextRows
//   BackwardUpdate  output->ExchangeBackward, input->HintNextRows(wait), output->Aggregate,
//                   sync->ReduceGradients, ApplyShardUpdates, sync->PrefetchReplicaRows,
//                   dp.BackwardUpdate, stores' EndStep, sync->AfterUpdate
#pragma once

#include <memory>
#include <vector>

#include "core/timer.h"
#include "sharding/internal/data_parallel.h"
#include "sharding/internal/input_dist.h"
#include "sharding/internal/output_dist.h"
#include "sharding/internal/replica_sync.h"
#include "sharding/internal/shard_layout.h"
#include "sharding/internal/shard_update.h"
#include "sharding/sharded_embedding.h"

namespace tessera {

struct ShardedEmbeddingCollection::Impl {
  internal::ShardLayout layout;
  internal::DataParallelTables dp{layout};
  // Built by Create once the layout is complete.
  std::unique_ptr<internal::InputDist> input;
  std::unique_ptr<internal::OutputDist> output;
  std::unique_ptr<internal::ReplicaSyncPhase> sync;
  // Per local shard: the step's row gradients (OutputDist::Aggregate, then ReplicaSyncPhase).
  std::vector<internal::RowGrads> grads;
  internal::UpdateScratch update;  // ApplyShardUpdates' scratch
  // The local batch between Forward and BackwardUpdate.
  internal::LocalStep step;
  PhaseTimes* times = nullptr;
};

}  // namespace tessera
