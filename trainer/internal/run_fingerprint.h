// The training-relevant part of a config, recorded in every checkpoint (state.safetensors'
// metadata "training_config") so that a resume with another model, optimizer, seed or batch
// size is refused with the keys that differ, instead of silently mixing two runs or failing
// later on a tensor shape. Private to trainer/.
//
// What counts: seed, data.batch_size (the data position is counted in batches), every model.*
// key except model.init_from, the storage keys (tier, path, caches, reader threads, prefetch,
// dtype, rounding: a checkpoint restores across them, an fp32 one into 16-bit tables) and the
// precision keys (embedding_dtype, embedding_rounding, dense_dtype), and every optimizer.* key.
// The run length (train.*), output.*, sharding.*, threads and device may change.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "trainer/config.h"

namespace tessera::internal {

// Metadata key of state.safetensors holding TrainingConfigText.
inline constexpr char kTrainingConfigKey[] = "training_config";

// The training-relevant keys of `config` as "dotted.key: value" lines, sorted by key
// (values as ConfigToYaml writes them; lists in flow form).
std::string TrainingConfigText(const Config& config);

// Parses TrainingConfigText's lines back into key -> value.
std::map<std::string, std::string> ParseTrainingConfigText(const std::string& text);

// OK when `recorded` (the checkpoint's TrainingConfigText) equals this config's. Otherwise
// FailedPrecondition naming `checkpoint`, each differing key with both values (at most 8, then
// how many more), and the ways out: a new output.dir, train.resume: false, or the checkpoint's
// values.
absl::Status CheckResumeConfig(const Config& config, const std::string& recorded,
                               const std::string& checkpoint);

}  // namespace tessera::internal
