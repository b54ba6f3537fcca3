// Resharding on load: restoring a checkpoint's embedding tables into a model of another shape
// (another world size, process grid, layout or plan; one process <-> several ranks). Private to
// trainer/ (trainer/checkpoint.cc and trainer/internal/sharded_checkpoint.cc call it).
//
// A checkpoint's tables are described as pieces: rectangles (rows x columns) of a logical table,
// each in one sharding group (replica), stored either as two tensors of a safetensors file
// (weights [rows, cols], state [rows, RowStateDim(cols)] in the shard's layout) or as a RocksDB
// checkpoint of a TieredRowStore shard. The model's side is a list of targets: the rectangles
// this rank (or process) holds, with their RowStore. Every target is filled in row chunks from
// the pieces that intersect it: safetensors files are mapped, so only the needed rows are read;
// a RocksDB piece is opened on a scratch copy of its checkpoint (hard links) and read by row
// range (TieredRowStore::ReadRows: cost linear in the rows read, written or not).
//
// Replicas: in exact mode (and for data-parallel tables) every replica holds the same bits, so
// group 0's pieces are read. A checkpoint in average mode may be resharded only at a sync (its
// sync clock a multiple of sync_every): the weights are then the same on every replica (read
// from group 0) and each target's optimizer state is the mean over the old replicas (summed in
// group order), i.e. the delayed state average is applied at once; the between-sync state
// starts empty. Between syncs the replicas differ and the caller refuses (see
// AverageModeReshardError).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/embedding_collection.h"
#include "embedding/row_store.h"
#include "sharding/plan.h"
#include "sharding/sharded_embedding.h"
#include "trainer/checkpoint.h"
#include "trainer/internal/checkpoint_tables.h"
#include "trainer/model.h"
#include "trainer/safetensors.h"

namespace tessera::internal {

// One rectangle of a table in a checkpoint.
struct CheckpointPiece {
  Shard rect;         // rows and columns of the logical table
  int group = 0;      // the sharding group (replica) it belongs to
  std::string file;   // safetensors file holding it, or "" for a RocksDB piece
  std::string weight_tensor, state_tensor;  // its tensors in `file` (state: "" for SGD)
  std::string db;     // RocksDB checkpoint directory of a tiered piece
  bool sharded_db_layout = true;  // a shard's TieredRowStore (false: one process's full table)
};

// What a checkpoint holds for the tables, read from its metadata.
struct CheckpointContents {
  std::string checkpoint;                     // its path, for messages
  int num_groups = 1;                         // M of the run that wrote it
  bool average = false;                       // written in average mode
  int64_t sync_every = 1;                     // average mode's k
  int64_t sync_clock = 0;                     // BackwardUpdate count at the checkpoint
  std::vector<std::vector<CheckpointPiece>> pieces;  // per table of this run, group-major
};

// The pieces of a single-process checkpoint (format tessera-checkpoint-1; `state` is its
// state.safetensors) for this run's `tables`: InvalidArgument naming the checkpoint and table
// when a table is missing or has another shape.
absl::StatusOr<CheckpointContents> SingleProcessCheckpointContents(
    const std::string& checkpoint, const SafetensorsFile& state,
    const EmbeddingCollectionOptions& tables);

// The pieces of a sharded checkpoint (format tessera-sharded-checkpoint-1): its plan per table
// from state.safetensors' metadata, and which world rank held each (group, shard rank) from the
// rank files' metadata. InvalidArgument / DataLoss naming the checkpoint, the table or the file.
absl::StatusOr<CheckpointContents> ShardedCheckpointContents(const std::string& checkpoint,
                                                         const SafetensorsFile& state,
                                                         const EmbeddingCollectionOptions& tables);

// Average mode between syncs cannot be resharded: FailedPrecondition naming the checkpoint, the
// steps since the sync and what to do instead; OK otherwise (exact mode, or at a sync).
absl::Status AverageModeReshardError(const CheckpointContents& from, const std::string& why);

// Writes local rows [begin, begin + count) of a target from fp32 weights (count * width floats)
// and state (count * state_dim floats, or null): RowStore::WriteRows of a shard's store, or a
// one-process model's CheckpointTables::WriteFloatRows.
using RowWriter = std::function<absl::Status(int64_t begin, int64_t count, const float* weights,
                                             const float* state)>;

// One rectangle of a table this rank holds, and where its local rows [0, rect.num_rows()),
// rect.num_cols() wide, are written.
struct ReshardTarget {
  int table = 0;
  Shard rect;
  RowWriter write;
  // A dynamic table's store (its rows are keys, not written through `write`): it is loaded with
  // the keys whose pseudo-row falls in rect (sharding/key_routing.h), rect's columns, from the
  // whole table joined from group 0's pieces (sharding/dynamic_pieces.h).
  DynamicRowStore* dynamic = nullptr;
};
// The writer of a RowStore holding the rectangle (not owned; must outlive the writer).
RowWriter StoreWriter(RowStore* store);

// Fills every target from `from` (see above). `scratch` is a directory this rank alone may use
// for the RocksDB pieces' working copies (created, and removed afterwards). Errors name the
// checkpoint and the piece; on error the targets are partly written.
absl::Status ReshardInto(const CheckpointContents& from, const std::vector<ReshardTarget>& targets,
                         const EmbeddingCollectionOptions& tables, const std::string& scratch);

// The whole restore onto another shape, after the caller checked that tables, row optimizer and
// seed match: the dense model, optimizer step count and data position from `state` (the
// checkpoint's state.safetensors, single-process or sharded format), and every table resharded
// into this rank's shards and data-parallel replicas (average mode: the between-sync state
// emptied, the sync clock kept). `changed` names what differs, for messages. Not collective.
absl::StatusOr<TrainPosition> ReshardRestoreSharded(Model& model,
                                                    ShardedEmbeddingCollection& tables,
                                                    const std::string& checkpoint,
                                                    const SafetensorsFile& state,
                                                    const std::string& changed);
// The same into one process's tables (a sharded checkpoint gathered into one process): host,
// device (one GPU) or both (SplitSparseArch), through CheckpointTables::WriteFloatRows.
absl::StatusOr<TrainPosition> ReshardRestoreLocal(Model& model, CheckpointTables& tables,
                                                  const std::string& checkpoint,
                                                  const SafetensorsFile& state);

}  // namespace tessera::internal
