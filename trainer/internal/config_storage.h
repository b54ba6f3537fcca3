// The storage and checkpoint parts of ParseConfig (trainer/config.h): each table's
// `storage: {tier, path, cache_rows | cache_bytes, policy, reader_threads, prefetch}` and the
// file-system checks of the directories a run writes into (table databases, checkpoints), which
// can only run once output.dir is known. Errors are ConfigReader's located InvalidArgument.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "embedding/embedding_collection.h"
#include "trainer/config.h"
#include "trainer/internal/config_reader.h"
#include "yaml-cpp/yaml.h"

namespace tessera::internal {

// Keys of a `storage` map (schema section "model.tables[].storage").
inline const std::vector<std::string>& StorageKeys() {
  static const auto* keys = new std::vector<std::string>{
      "tier",   "path",     "cache_rows", "cache_bytes", "policy", "reader_threads",
      "prefetch", "dtype", "rounding", "device_cache_rows", "device_cache_bytes"};
  return *keys;
}

// Reads entry["storage"] of the table at `table_path` ("model.tables[2]") into *out.
// dtype / rounding (any tier) override the model.embedding_dtype / embedding_rounding defaults
// already in *out. Rules: tier memory takes no other key but those two and the device cache's;
// tier rocksdb needs exactly one of cache_rows / cache_bytes (> 0); reader_threads in [1, 256];
// device_cache_rows / device_cache_bytes (any tier): >= 0 (0: no cache), at most one set.
absl::Status ParseTableStorage(const ConfigReader& r, const YAML::Node& entry,
                               const std::string& table_path, TableStorage* out);

// Checks, once the whole config is read, that every RocksDB table has its own directory and
// that it (and output.checkpoint_dir when train.checkpoint_every > 0) is writable or can be
// created: the error names the key and the resolved path.
absl::Status ValidateRunDirectories(const ConfigReader& r, const YAML::Node& root,
                                    const Config& c);

}  // namespace tessera::internal
