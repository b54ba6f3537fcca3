// Checkpoints of a training run, and resuming from them so that an interrupted run ends with the
// same model bits as one never interrupted.
//
// A checkpoint is a directory <checkpoint_dir>/ckpt-<step>/ holding
//   state.safetensors  dense parameters ("dense.<param>"), the dense optimizer's state
//                      ("dense_optimizer.<param>.<state>"), every in-memory table's rows
//                      ("table.<name>.weight" [rows, dim]) and row-optimizer state
//                      ("table.<name>.state" [rows, state_dim], absent for SGD), and metadata:
//                      format, step, epoch, batches_in_epoch, dense_optimizer_steps, seed
//   tables/<name>/     a RocksDB checkpoint of every table in the RocksDB tier
//                      (TieredRowStore::Checkpoint: dirty rows flushed, SST files hard-linked)
// and <checkpoint_dir>/LATEST names the newest complete one ("ckpt-<step>\n").
// The LR schedule is a pure function of the step, so the step is its position; the data
// position is (epoch, batches consumed in that epoch).
//
// Atomicity: everything is written into ckpt-<step>.tmp/, every file and directory fsynced, the
// directory renamed to ckpt-<step>/, then LATEST replaced atomically (write LATEST.tmp, fsync,
// rename, fsync the directory). A crash at any point leaves LATEST naming a complete
// checkpoint (or absent). After LATEST moves, every ckpt-* other than the new one and the one
// LATEST named before is deleted (so 2 are kept), including stale *.tmp directories.
//
// Sharded models (ShardedSparseArch, several MPI ranks) get the DCP-like layout of
// trainer/internal/sharded_checkpoint.h instead: rank 0 writes the dense model and the run's
// shape (world size, grid, plan per table) to state.safetensors, every rank its own shards to
// rank<r>.safetensors and tables/<name>/rank<r>-shard<k>/, and LATEST moves only once every rank
// has its part on disk. For them every function below is collective over the world (all ranks,
// same order, same arguments; checkpoint_dir shared by all ranks) and fails on every rank
// together. A checkpoint resumes on another world size, grid or plan, and between one process
// and several ranks, by resharding on load (trainer/internal/checkpoint_reshard.h; average mode
// only at a sync). Thread-safety: none (the training thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/timer.h"
#include "io/reader.h"
#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/run_log.h"
#include "trainer/stores.h"
#include "trainer/internal/dynamic_tables.h"

namespace tessera {

struct TrainPosition {
  int64_t step = 0;              // training steps done (the LR schedule's position)
  int64_t epoch = 0;             // passes over the training data completed (reader rewinds)
  int64_t batches_in_epoch = 0;  // batches consumed in the current epoch
};

// Writes ckpt-<position.step> into `checkpoint_dir` (created if missing) as described above,
// moves LATEST to it and keeps the newest `keep` (>= 1; only 1 or 2 are meaningful: the new
// one and LATEST's previous target). REQUIRES: between steps (no Forward pending). Returns the
// checkpoint's path. Errors name the path; a failure leaves LATEST and older checkpoints as
// they were.
absl::StatusOr<std::string> WriteCheckpoint(Model& model, const TrainPosition& position,
                                            const std::string& checkpoint_dir, int keep = 2);

// The checkpoint LATEST names in `checkpoint_dir` (a path), or "" when there is none (no
// directory or no LATEST). DataLoss naming LATEST when it names a missing checkpoint.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& checkpoint_dir);

// Loads a checkpoint written by WriteCheckpoint into `model` (same tables, row optimizer and
// seed; any world size, grid or plan): dense parameters, optimizer state and step count,
// in-memory tables (rows and state), RocksDB tables (TieredRowStore::Restore, or resharded).
// Returns the position to continue from. Errors: InvalidArgument/DataLoss naming the checkpoint and
// the tensor or table that does not match; FailedPrecondition for an average-mode checkpoint
// between syncs onto another shape.
absl::StatusOr<TrainPosition> RestoreCheckpoint(Model& model, const std::string& checkpoint);

// Test seam for crash tests: when set, called at every durable step of writing a checkpoint
// (each file or directory fsynced, a RocksDB shard checkpointed, the directory renamed, LATEST
// written and moved, each old checkpoint removed) with a short name of the step ("fsync",
// "tier_checkpoint", "rename", "latest_tmp", "latest", "prune"), before the step is taken. A
// binary may let its hook end the process there (tools/train_main.cc's hidden
// --test_crash_at_checkpoint_event). Process-wide; set before training starts. Default: none.
using CheckpointEventHook = void (*)(const char* event);
void SetCheckpointEventHook(CheckpointEventHook hook);

namespace internal {
class TrainStream;
}

// The training loop's checkpoint support (trainer/trainer.cc calls Start before its loop and
// AfterStep after every step):
//   - resume: when config.train.resume and CheckpointDir(config) holds a checkpoint, restores
//     it into the model and fast-forwards the training reader to the recorded data position
//     (rewinds for the epochs, then reads and drops the batches already consumed, so the same
//     batches follow in the same order);
//   - wraps the training reader to track the data position and, when any table is in the
//     RocksDB tier, to read one batch ahead and call Model::Prefetch with it, so the tier's
//     reads for batch i+1 overlap step i;
//   - every train.checkpoint_every steps, and at the first step after train.checkpoint_minutes
//     of wall time since the last checkpoint (the caller decides, DueByTime, so all ranks
//     agree), writes a checkpoint (and a metrics line {"step", "checkpoint",
//     "checkpoint_seconds"}); CheckpointNow writes one on request (a stop signal);
//   - every train.log_every steps writes one metrics line per RocksDB-tier table:
//     {"step", "tier_table", "tier_hit_rate", "tier_rows_read_per_step",
//      "tier_rows_written_per_step", "tier_misses_per_step", "tier_prefetch_stall_ms_per_step",
//      "tier_read_ms_per_step", "tier_disk_bytes"}, and one per dynamic table
//     (internal::DynamicStatsLine: "dynamic_table", "dynamic_occupancy", ...), whose fill also
//     goes on the progress line.
class CheckpointedRun {
 public:
  // `model`, `*train` and `log` (nullable) are borrowed and must outlive the object; *train is
  // replaced by the wrapping reader.
  static absl::StatusOr<std::unique_ptr<CheckpointedRun>> Start(
      const Config& config, Model* model, std::unique_ptr<BatchReader>* train, RunLog* log);
  ~CheckpointedRun();

  // Where the run starts: zeros, or the restored checkpoint's position.
  const TrainPosition& start() const { return start_; }
  // The checkpoint resumed from, or "".
  const std::string& resumed_from() const { return resumed_from_; }

  // Bookkeeping after training step `step` (1-based count of steps done); `by_time`: the
  // time cadence says to checkpoint now (rank 0's DueByTime, agreed by every rank).
  absl::Status AfterStep(int64_t step, bool by_time = false);
  // True when train.checkpoint_minutes > 0 and that long has passed since the run started or
  // last checkpointed.
  bool DueByTime() const;
  // Writes a checkpoint at `step` unless one was written at that step; returns its path.
  absl::StatusOr<std::string> CheckpointNow(int64_t step);

 private:
  CheckpointedRun() = default;

  Config config_;
  Model* model_ = nullptr;
  RunLog* log_ = nullptr;
  internal::TrainStream* stream_ = nullptr;  // owned by *train
  TrainPosition start_;
  std::string resumed_from_;
  std::vector<TierTableMetrics> last_tier_;
  std::vector<internal::DynamicTableEntry> last_dynamic_;  // at the last metrics line
  int64_t last_tier_step_ = 0;
  int64_t last_checkpoint_step_ = -1;
  std::string last_checkpoint_;
  Stopwatch since_checkpoint_;
};

}  // namespace tessera
