// Pieces shared by the single-process checkpoints (trainer/checkpoint.cc) and the sharded ones
// (trainer/internal/sharded_checkpoint.cc): file names, fsync, the LATEST pointer, publishing
// a finished ckpt-<step>.tmp directory, and the dense model's tensors. Private to trainer/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/row_store.h"
#include "trainer/model.h"
#include "trainer/safetensors.h"

namespace tessera::internal {

inline constexpr char kCheckpointStateFile[] = "state.safetensors";
inline constexpr char kCheckpointLatest[] = "LATEST";
inline constexpr int64_t kCheckpointChunkRows = 1 << 16;

// Calls the hook of SetCheckpointEventHook (trainer/checkpoint.h), if any.
void CheckpointEvent(const char* event);

absl::Status FsyncPath(const std::filesystem::path& p, bool directory);
// fsyncs every file and directory under `root` (and root itself).
absl::Status FsyncTree(const std::filesystem::path& root);

// Step number of a "ckpt-<step>" or "ckpt-<step>.tmp" entry, or -1.
int64_t CheckpointStep(const std::string& name);
// The name LATEST holds in `dir` ("" when there is no LATEST); DataLoss when malformed.
absl::StatusOr<std::string> ReadLatestName(const std::filesystem::path& dir);

// Creates `dir` (if missing) and an empty `tmp` with a tables/ subdirectory (a stale one is
// removed first). PermissionDenied naming tmp on failure.
absl::Status PrepareCheckpointTmp(const std::filesystem::path& dir,
                                  const std::filesystem::path& tmp);
// The last step of writing a checkpoint, once everything under `tmp` (= dir/name.tmp) is on disk:
// renames it to dir/name, moves LATEST to it atomically and removes every other ckpt-* except
// LATEST's previous target when keep >= 2. Returns the new checkpoint's path.
absl::StatusOr<std::string> PublishCheckpoint(const std::filesystem::path& dir,
                                              const std::string& name,
                                              const std::filesystem::path& tmp, int keep);

// Non-negative integer metadata `key` of `f`; DataLoss naming the file and key otherwise.
absl::StatusOr<int64_t> MetaInt(const SafetensorsFile& f, const std::string& key);

// Embedding weights in a checkpoint are written in the table's stored dtype (F32, F16 or BF16:
// the same bytes as the store and the RocksDB tier hold, so a resume is bit-identical).
SafetensorsDtype StoredTensorDtype(RowDtype dtype);
// The weights tensor `name` of shape `shape` for a table stored as `dtype`: in the stored dtype,
// or F32 (a checkpoint of an fp32 table, or written before 16-bit storage existed).
// NotFound / InvalidArgument as SafetensorsFile::Get.
absl::StatusOr<const TensorView*> GetTableWeights(const SafetensorsFile& file,
                                                  std::string_view name, RowDtype dtype,
                                                  const std::vector<int64_t>& shape);
// Writes rows [src, src + n) of `w` (a GetTableWeights tensor of the store's width) into rows
// [dst, dst + n) of `store`: the bytes as they are when the dtypes agree, else F32 values
// rounded to nearest into the store's dtype. `state`: n * state_dim floats, or null.
absl::Status WriteTableRows(RowStore& store, const TensorView& w, int64_t src, int64_t dst,
                            int64_t n, const float* state);

// The dense model in a checkpoint: "dense.<param>" and "dense_optimizer.<param>.<state>".
void AppendDenseSpecs(Model& model, std::vector<TensorSpec>* specs);
absl::Status WriteDenseTensors(Model& model, SafetensorsWriter& writer);
// Loads them into `model` (shapes checked) and adds the number of tensors read to *count.
// Does not set the optimizer's step count.
absl::Status ReadDenseTensors(Model& model, const SafetensorsFile& file, size_t* count);
// FNV-1a over the bytes of every dense parameter and optimizer state tensor: equal on every
// rank of a data-parallel run (the all-reduced gradients are the same bits everywhere).
absl::StatusOr<uint64_t> DenseFingerprint(Model& model);

}  // namespace tessera::internal
