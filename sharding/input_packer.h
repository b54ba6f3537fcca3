// InputPacker: the input dist's packing (InputDist::Pack, sharding/internal/input_dist.h) of one
// rank of a sharding group, without communicators or stores: the batch checked, every id routed
// to the shard owning its row, deduplicated per (table, destination shard), and each
// destination's header and payload written; the batch kept, as Prefetch keeps the next one.
// What `tessera-plan calibrate` times as the packing rate per id (planner/profile.h pack_id_s),
// so the rate is the code's and not a copy of it.
// Thread-safety: none (one packer per thread).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/keyed_jagged.h"
#include "embedding/embedding_collection.h"
#include "sharding/plan.h"

namespace tessera {

class InputPacker {
 public:
  // `co`'s tables and features, `plan` over a sharding group of `n` ranks (validated here; its
  // errors name "packing plan"), packed as shard rank 0 packs.
  static absl::StatusOr<std::unique_ptr<InputPacker>> Create(const EmbeddingCollectionOptions& co,
                                                             const ShardingPlan& plan, int n);
  ~InputPacker();
  InputPacker(const InputPacker&) = delete;
  InputPacker& operator=(const InputPacker&) = delete;

  // Packs `batch`; returns the unique ids over every (table, destination) request, or the
  // batch's error (CheckBatch's InvalidArgument).
  absl::StatusOr<int64_t> Pack(const KeyedJagged& batch);
  // (table, destination shard) requests: what the unique ids are counted over.
  int num_requests() const;

 private:
  InputPacker();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
