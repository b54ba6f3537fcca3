#include "trainer/internal/config_storage.h"

#include <unistd.h>

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {
namespace fs = std::filesystem;

namespace {

fs::path Resolve(const Config& c, const std::string& p) {
  fs::path path(p);
  if (path.is_relative()) path = fs::path(c.output.dir) / path;
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  return (ec ? path : abs).lexically_normal();
}

}  // namespace

std::string CheckpointDir(const Config& c) {
  return Resolve(c, c.output.checkpoint_dir.empty() ? "checkpoints" : c.output.checkpoint_dir)
      .string();
}

std::string TableStoragePath(const Config& c, int t) {
  const TableConfig& table = c.model.tables[t];
  return Resolve(c, table.storage.path.empty() ? "tables/" + table.name : table.storage.path)
      .string();
}

namespace internal {
namespace {

// "" when `dir` exists as a writable directory or can be created (its nearest existing
// ancestor is a writable directory); otherwise why not.
std::string WhyNotWritable(const fs::path& dir) {
  std::error_code ec;
  fs::path p = dir;
  while (!fs::exists(p, ec)) {
    if (!p.has_parent_path() || p.parent_path() == p) return "no existing parent folder";
    p = p.parent_path();
  }
  if (!fs::is_directory(p, ec)) {
    return p == dir ? "it exists and is not a directory"
                    : absl::StrCat(p.string(), " is not a directory");
  }
  if (::access(p.c_str(), W_OK | X_OK) != 0) {
    return p == dir ? "the directory is not writable"
                    : absl::StrCat("cannot be created: ", p.string(), " is not writable");
  }
  return "";
}

}  // namespace

absl::Status ParseTableStorage(const ConfigReader& r, const YAML::Node& entry,
                               const std::string& table_path, TableStorage* out) {
  YAML::Node st = Child(entry, "storage");
  const std::string p = table_path + ".storage";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(st, entry, p, "model.tables[].storage"));
  if (!st.IsDefined() || st.IsNull()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(st, p, "tier", kStorageTierNames, &out->tier));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(st, p, "dtype", kRowDtypeNames, &out->dtype));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(st, p, "rounding", kRowRoundingNames, &out->rounding));
  auto positive = [](int64_t v) { return v > 0; };
  auto non_negative = [](int64_t v) { return v >= 0; };
  TESSERA_RETURN_IF_ERROR(r.ReadInt(st, p, "device_cache_rows", "an integer >= 0 (0: no cache)",
                                    non_negative, &out->device_cache_rows));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(st, p, "device_cache_bytes",
                                    "an integer >= 0 (bytes; 0: no cache)", non_negative,
                                    &out->device_cache_bytes));
  if (out->device_cache_rows > 0 && out->device_cache_bytes > 0)
    return r.Error(YAML::Node(), Child(st, "device_cache_bytes"), p + ".device_cache_bytes",
                   "give either device_cache_rows or device_cache_bytes, not both");
  // policy: the RocksDB tier's and the device cache's replacement (one per table).
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(st, p, "policy", kCachePolicyNames, &out->policy));
  if (out->tier == StorageTier::kMemory) {
    for (const std::string& key : StorageKeys()) {
      if (key == "tier" || key == "dtype" || key == "rounding" || key == "device_cache_rows" ||
          key == "device_cache_bytes" || (key == "policy" && out->device_cached()))
        continue;
      YAML::Node n = Child(st, key.c_str());
      if (n.IsDefined() && !n.IsNull())
        return r.Error(n, st, JoinKey(p, key),
                       key == "policy" ? "only used with storage.tier rocksdb or a device cache"
                                       : "only used with storage.tier rocksdb");
    }
    return absl::OkStatus();
  }
  TESSERA_RETURN_IF_ERROR(r.ReadString(st, p, "path", &out->path));
  TESSERA_RETURN_IF_ERROR(
      r.ReadInt(st, p, "cache_rows", "a positive integer", positive, &out->cache_rows));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(st, p, "cache_bytes", "a positive integer (bytes)",
                                    positive, &out->cache_bytes));
  if (out->cache_rows > 0 && out->cache_bytes > 0)
    return r.Error(YAML::Node(), Child(st, "cache_bytes"), p + ".cache_bytes",
                   "give either cache_rows or cache_bytes, not both");
  if (out->cache_rows <= 0 && out->cache_bytes <= 0)
    return r.Error(YAML::Node(), st, p + ".cache_rows",
                   "required with storage.tier rocksdb (or cache_bytes): the cache must hold "
                   "at least one step's distinct rows");
  int64_t threads = out->reader_threads;
  TESSERA_RETURN_IF_ERROR(r.ReadInt(st, p, "reader_threads", "an integer in [1, 256]",
                                    [](int64_t v) { return v >= 1 && v <= 256; }, &threads));
  out->reader_threads = static_cast<int>(threads);
  TESSERA_RETURN_IF_ERROR(r.ReadBool(st, p, "prefetch", &out->prefetch));
  return absl::OkStatus();
}

absl::Status ValidateRunDirectories(const ConfigReader& r, const YAML::Node& root,
                                    const Config& c) {
  YAML::Node tables = Child(Child(root, "model"), "tables");
  std::map<std::string, size_t> owner;
  for (size_t i = 0; i < c.model.tables.size(); ++i) {
    if (c.model.tables[i].storage.tier != StorageTier::kRocksDb) continue;
    const std::string key = absl::StrCat("model.tables[", i, "].storage.path");
    YAML::Node entry = tables.IsSequence() && i < tables.size() ? tables[i] : YAML::Node();
    YAML::Node st = Child(entry, "storage");
    YAML::Node node = Child(st, "path");
    const std::string path = TableStoragePath(c, static_cast<int>(i));
    auto [it, inserted] = owner.emplace(path, i);
    if (!inserted)
      return r.Error(node, st, key,
                     absl::StrCat("table '", c.model.tables[i].name, "' and table '",
                                  c.model.tables[it->second].name,
                                  "' would share the RocksDB directory ", path,
                                  "; give each table its own storage.path"));
    if (std::string why = WhyNotWritable(path); !why.empty())
      return r.Error(node, st, key, absl::StrCat("cannot use ", path, ": ", why));
  }
  if (c.train.checkpoint_every > 0 || c.train.checkpoint_minutes > 0) {
    YAML::Node out = Child(root, "output");
    const std::string dir = CheckpointDir(c);
    if (std::string why = WhyNotWritable(dir); !why.empty())
      return r.Error(Child(out, "checkpoint_dir"), out, "output.checkpoint_dir",
                     absl::StrCat("cannot write checkpoints to ", dir, ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace tessera
