// Dynamic tables (embedding/dynamic_row_store.h) in the trainer: their memory check before a
// model is built, their tensors in checkpoints and in the exported model, and their stats.
//
// In a checkpoint's state.safetensors a dynamic table `<name>` is (n = rows held, sorted by key):
//   table.<name>.keys            U64 [n]
//   table.<name>.weight          [n, dim] as stored (F32, F16 or BF16)
//   table.<name>.state           F32 [n, state_dim] (absent for SGD)
//   table.<name>.lookups         I64 [n]   training lookups while the key had its row
//   table.<name>.last_step       I64 [n]   the last training step that used it
//   table.<name>.admission_counters U16 [counter slots]   (only with admission.min_count > 1)
//   table.<name>.dynamic_stats   I64 [7]   steps, admissions, evictions, refused, lookups,
//                                          unadmitted lookups, probes
// In an exported model: embedding.<name>.keys U64 [n] and embedding.<name>.weight F32 [n, dim]
// (docs/FORMATS.md). Thread-safety: none (the training thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/dynamic_row_store.h"
#include "trainer/config.h"
#include "trainer/internal/memory_check.h"
#include "trainer/run_log.h"
#include "trainer/safetensors.h"
#include "trainer/sparse_arch.h"

namespace tessera::internal {

// OK when every dynamic table of `config` fits in `available` (together); ResourceExhausted
// "<source>: model.tables[i].dynamic.capacity_rows: table '<name>' needs N bytes (M for all
// dynamic tables) but K bytes are available (<where>)" naming the largest table otherwise.
// Nothing is checked when available.bytes < 0.
absl::Status CheckDynamicMemory(const Config& config, const HostMemory& available);

// Checkpoints: the tensors of `state` (SaveState with state) under "table.<name>.".
void AppendDynamicCheckpointSpecs(const std::string& name, const DynamicTableState& state,
                                  std::vector<TensorSpec>* specs);
absl::Status WriteDynamicCheckpointTensors(const std::string& name,
                                           const DynamicTableState& state,
                                           SafetensorsWriter& writer);
// Whether the checkpoint `file` holds table `name` as a dynamic table (table.<name>.keys).
bool CheckpointHasDynamicTable(const SafetensorsFile& file, const std::string& name);
// Loads table `name` from `file` into `store` (LoadState) and adds the tensors it read to
// *expected. InvalidArgument naming the checkpoint and the table when the file holds it as a
// static table ("checkpoint of a static table loaded as dynamic") or its tensors do not match.
absl::Status ReadDynamicCheckpointTable(const SafetensorsFile& file, const std::string& name,
                                        DynamicRowStore& store, size_t* expected);

// The same under any tensor prefix (a sharded checkpoint's "shard.<table>.<k>."); the read
// returns the state (dim, state_dim, dtype of the store it is for) without loading it.
void AppendDynamicSpecsAt(const std::string& prefix, const DynamicTableState& state,
                          std::vector<TensorSpec>* specs);
absl::Status WriteDynamicTensorsAt(const std::string& prefix, const DynamicTableState& state,
                                   SafetensorsWriter& writer);
absl::StatusOr<DynamicTableState> ReadDynamicStateAt(const SafetensorsFile& file,
                                                     const std::string& prefix, int64_t dim,
                                                     int64_t state_dim, RowDtype dtype,
                                                     size_t* expected);

// Export: embedding.<name>.keys (U64 [n]) and embedding.<name>.weight (F32 [n, dim]).
struct DynamicExport {
  std::string name;
  std::vector<uint64_t> keys;
  std::vector<float> weights;  // keys.size() * dim
  int64_t dim = 0;
};
absl::StatusOr<DynamicExport> ExportDynamicTable(const std::string& name,
                                                 const DynamicRowStore& store);
// The same from a table's state (SparseArch::GatherDynamicTable: a sharded table gathered).
DynamicExport ExportDynamicState(const std::string& name, DynamicTableState state);
// Import (model.init_from): the keys and fp32 weights of an exported table into `store`; the
// optimizer state starts fresh. InvalidArgument naming the file and tensor when they are
// missing or do not match.
absl::Status ImportDynamicTable(const SafetensorsFile& file, const std::string& name,
                                DynamicRowStore& store);

// Stats of the dynamic tables, in table order: collective over the world when the tables are
// sharded (every rank calls it).
struct DynamicTableEntry {
  int table = 0;
  std::string name;
  DynamicTableStats stats;
};
std::vector<DynamicTableEntry> CollectDynamicStats(SparseArch& sparse);
// The metrics line of one table at `step`, counters since `before` (its previous line):
// {"step", "dynamic_table", "dynamic_occupancy" (rows), "dynamic_occupancy_frac",
//  "dynamic_admissions", "dynamic_evictions", "dynamic_refused" (in the interval),
//  "dynamic_unadmitted_frac" (lookups that read the zero row / lookups, in the interval),
//  "dynamic_probe_length" (mean, in the interval)}.
JsonLine DynamicStatsLine(int64_t step, const DynamicTableEntry& now,
                          const DynamicTableStats& before);
// The progress line's note: "<name> <occupancy>% full, <unadmitted>% unadmitted" per table.
std::string DynamicProgressNote(const std::vector<DynamicTableEntry>& now,
                                const std::vector<DynamicTableEntry>& before);

}  // namespace tessera::internal
