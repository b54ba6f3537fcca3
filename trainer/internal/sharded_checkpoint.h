// Checkpoints of a sharded model (several MPI ranks, 2D sharding), behind trainer/checkpoint.h's
// WriteCheckpoint / RestoreCheckpoint, which dispatch here for a ShardedSparseArch. Every
// function is collective over the world (all ranks call it, in the same order, with the same
// arguments); all ranks return an error together (each its own, or one naming the failed ranks).
//
// Layout of <checkpoint_dir>/ckpt-<step>/ (checkpoint_dir on a file system every rank sees):
//   state.safetensors      rank 0: the dense parameters and dense optimizer state (identical on
//                          every rank after the all-reduce: checked by a fingerprint gathered
//                          from all ranks before anything is written) and the metadata: format
//                          tessera-sharded-checkpoint-1, step, epoch, batches_in_epoch,
//                          dense_optimizer_steps, seed, world_size, grid ("<M>x<N>"),
//                          replica_sync, tables, and plan.<table> per table.
//   rank<r>.safetensors    world rank r: its shards of every in-memory table
//                          ("shard.<table>.<k>.weight" [rows, cols] and ".state"), its replica of
//                          every data-parallel table ("table.<table>.weight" / ".state"), and in
//                          average mode each shard's between-sync state (".touched",
//                          ".pending_rows" (i64), ".pending_avg", ".pending_snapshot"); metadata:
//                          rank, group, shard_rank, step, epoch, batches_in_epoch, sync_clock.
//   tables/<table>/rank<r>-shard<k>/  a RocksDB-tier shard (TieredRowStore::Checkpoint).
// Average mode saves each replica's rows as they are (replicas differ between syncs) with the
// between-sync state, so a resumed run continues bit for bit, syncs included.
//
// Writing: rank 0 prepares ckpt-<step>.tmp/; every rank writes and fsyncs its own files; the
// ranks agree (one all-gather of per-rank verdicts) that every part is on disk; only then
// does rank 0 rename the directory and move LATEST, and the ranks agree again on that outcome
// before anyone returns. A rank that failed makes every rank return an error and LATEST stays.
//
// Restoring with the same world size, grid (M x N, and each rank's place in it), replica sync
// and plan loads this rank's files; any of those changed reshards on load
// (trainer/internal/checkpoint_reshard.h; a single-process checkpoint too). Other tables, row
// optimizer or seed: InvalidArgument naming the checkpoint and the mismatch; average mode
// between syncs onto another shape: FailedPrecondition. A missing rank file fails that rank and
// so every rank. On error the model is left partly restored: do not train it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "sharding/sharded_embedding.h"
#include "trainer/checkpoint.h"
#include "trainer/internal/checkpoint_tables.h"
#include "trainer/model.h"
#include "trainer/safetensors.h"

namespace tessera::internal {

inline constexpr char kShardedCheckpointFormat[] = "tessera-sharded-checkpoint-1";

absl::StatusOr<std::string> WriteShardedCheckpoint(Model& model,
                                                   ShardedEmbeddingCollection& tables,
                                                   const TrainPosition& position,
                                                   const std::string& checkpoint_dir, int keep);

absl::StatusOr<TrainPosition> RestoreShardedCheckpoint(Model& model,
                                                       ShardedEmbeddingCollection& tables,
                                                       const std::string& checkpoint);

// A sharded checkpoint gathered into one process's tables (`state`: its state.safetensors):
// every table read from the ranks' files and RocksDB shards (trainer/internal/checkpoint_reshard.h).
// Not collective. InvalidArgument when tables, row optimizer or seed differ; FailedPrecondition
// for average mode between syncs.
absl::StatusOr<TrainPosition> RestoreShardedCheckpointLocally(Model& model,
                                                              CheckpointTables& tables,
                                                              const std::string& checkpoint,
                                                              const SafetensorsFile& state);

// `latest` is this rank's LatestCheckpoint(checkpoint_dir). Returns it when every rank saw the
// same checkpoint (or none); otherwise FailedPrecondition on every rank naming what each saw
// (checkpoint_dir must be shared by all ranks). An error on any rank fails all of them.
absl::StatusOr<std::string> AgreeOnLatestCheckpoint(ShardedEmbeddingCollection& tables,
                                                    const std::string& checkpoint_dir,
                                                    const absl::StatusOr<std::string>& latest);

}  // namespace tessera::internal
