#include "trainer/internal/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/logging.h"
#include "core/status.h"
#include "trainer/checkpoint.h"

namespace tessera {
namespace {
CheckpointEventHook checkpoint_event_hook = nullptr;
}  // namespace

void SetCheckpointEventHook(CheckpointEventHook hook) { checkpoint_event_hook = hook; }

}  // namespace tessera

namespace tessera::internal {
namespace fs = std::filesystem;

void CheckpointEvent(const char* event) {
  if (checkpoint_event_hook != nullptr) checkpoint_event_hook(event);
}

namespace {

std::string DenseName(const Parameter* p) { return "dense." + p->name; }
std::string OptimName(const Parameter* p) { return "dense_optimizer." + p->name; }

// Copies a parameter between host and its device.
absl::Status CopyOut(const Parameter* p, std::vector<float>* host) {
  host->resize(p->value.numel());
  if (p->value.device() != Device::kCpu) {
    return CudaMemcpy(host->data(), p->value.raw(), p->value.bytes());
  }
  std::memcpy(host->data(), p->value.raw(), p->value.bytes());
  return absl::OkStatus();
}
absl::Status CopyIn(Parameter* p, const void* src) {
  if (p->value.device() != Device::kCpu) return CudaMemcpy(p->value.raw(), src, p->value.bytes());
  std::memcpy(p->value.raw(), src, p->value.bytes());
  return absl::OkStatus();
}

absl::Status WriteLatest(const fs::path& dir, const std::string& name) {
  const fs::path tmp = dir / (std::string(kCheckpointLatest) + ".tmp");
  CheckpointEvent("latest_tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << name << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("writing ", tmp.string()));
  }
  TESSERA_RETURN_IF_ERROR(FsyncPath(tmp, false));
  std::error_code ec;
  CheckpointEvent("latest");
  fs::rename(tmp, dir / kCheckpointLatest, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("renaming ", tmp.string(), " to ", kCheckpointLatest, ": ", ec.message()));
  }
  return FsyncPath(dir, true);
}

}  // namespace

absl::Status FsyncPath(const fs::path& p, bool directory) {
  CheckpointEvent("fsync");
  int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", p.string(), ": ", strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync ", p.string(), ": ", strerror(err)));
  return absl::OkStatus();
}

// A renamed checkpoint must be on disk in full before LATEST may name it.
absl::Status FsyncTree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_symlink()) continue;
    TESSERA_RETURN_IF_ERROR(FsyncPath(it->path(), it->is_directory()));
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", root.string(), ": ", ec.message()));
  return FsyncPath(root, true);
}

int64_t CheckpointStep(const std::string& name) {
  if (!absl::StartsWith(name, "ckpt-")) return -1;
  std::string digits = name.substr(5);
  if (absl::EndsWith(digits, ".tmp")) digits.resize(digits.size() - 4);
  int64_t step;
  return !digits.empty() && absl::SimpleAtoi(digits, &step) && step >= 0 ? step : -1;
}

absl::StatusOr<std::string> ReadLatestName(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kCheckpointLatest, ec)) return std::string();
  std::ifstream in(dir / kCheckpointLatest);
  std::string name;
  std::getline(in, name);
  if (CheckpointStep(name) < 0 || absl::EndsWith(name, ".tmp")) {
    return absl::DataLossError(absl::StrCat((dir / kCheckpointLatest).string(),
                                            ": expected 'ckpt-<step>', got '", name, "'"));
  }
  return name;
}

absl::Status PrepareCheckpointTmp(const fs::path& dir, const fs::path& tmp) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp / "tables", ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint: cannot create ", tmp.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PublishCheckpoint(const fs::path& dir, const std::string& name,
                                              const fs::path& tmp, int keep) {
  const fs::path final_dir = dir / name;
  std::error_code ec;
  TESSERA_ASSIGN_OR_RETURN(std::string previous, ReadLatestName(dir));
  if (previous == name) {
    // LATEST names a checkpoint of this step from a run that was not resumed (train.resume:
    // false): it is being replaced, so stop naming it first.
    fs::remove(dir / kCheckpointLatest, ec);
    TESSERA_RETURN_IF_ERROR(FsyncPath(dir, true));
    previous.clear();
  }
  // A directory of this name that LATEST does not name comes from a run killed between its
  // rename and the LATEST update, or from an older run: replace it.
  fs::remove_all(final_dir, ec);
  CheckpointEvent("rename");
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("checkpoint: renaming ", tmp.string(), " to ",
                                            final_dir.string(), ": ", ec.message()));
  }
  TESSERA_RETURN_IF_ERROR(FsyncPath(dir, true));
  TESSERA_RETURN_IF_ERROR(WriteLatest(dir, name));
  // Keep the new checkpoint and (keep >= 2) the one LATEST named before; drop the rest.
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (CheckpointStep(n) < 0 || n == name || (keep >= 2 && n == previous)) continue;
    doomed.push_back(entry.path());
  }
  for (const fs::path& p : doomed) {
    CheckpointEvent("prune");
    std::error_code rm_ec;
    fs::remove_all(p, rm_ec);
    if (rm_ec) {
      TESSERA_LOG(WARNING) << "checkpoint: cannot remove " << p << ": " << rm_ec.message();
    }
  }
  return final_dir.string();
}

absl::StatusOr<int64_t> MetaInt(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  int64_t v;
  if (it == f.metadata().end() || !absl::SimpleAtoi(it->second, &v) || v < 0) {
    return absl::DataLossError(
        absl::StrCat(f.path(), ": metadata '", key, "' missing or not a non-negative integer"));
  }
  return v;
}

void AppendDenseSpecs(Model& model, std::vector<TensorSpec>* specs) {
  for (Parameter* p : model.dense_parameters()) {
    specs->push_back({DenseName(p), SafetensorsDtype::kF32, p->value.shape()});
  }
  for (Parameter* p : model.dense_optimizer().state()) {
    specs->push_back({OptimName(p), SafetensorsDtype::kF32, p->value.shape()});
  }
}

absl::Status WriteDenseTensors(Model& model, SafetensorsWriter& writer) {
  std::vector<float> host;
  for (Parameter* p : model.dense_parameters()) {
    TESSERA_RETURN_IF_ERROR(CopyOut(p, &host));
    TESSERA_RETURN_IF_ERROR(writer.WriteTensor(DenseName(p), host.data()));
  }
  for (Parameter* p : model.dense_optimizer().state()) {
    TESSERA_RETURN_IF_ERROR(CopyOut(p, &host));
    TESSERA_RETURN_IF_ERROR(writer.WriteTensor(OptimName(p), host.data()));
  }
  return absl::OkStatus();
}

absl::Status ReadDenseTensors(Model& model, const SafetensorsFile& file, size_t* count) {
  for (Parameter* p : model.dense_parameters()) {
    TESSERA_ASSIGN_OR_RETURN(const TensorView* v,
                             file.Get(DenseName(p), SafetensorsDtype::kF32, p->value.shape()));
    TESSERA_RETURN_IF_ERROR(CopyIn(p, v->data));
    ++*count;
  }
  for (Parameter* p : model.dense_optimizer().state()) {
    TESSERA_ASSIGN_OR_RETURN(const TensorView* v,
                             file.Get(OptimName(p), SafetensorsDtype::kF32, p->value.shape()));
    TESSERA_RETURN_IF_ERROR(CopyIn(p, v->data));
    ++*count;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DenseFingerprint(Model& model) {
  uint64_t h = 1469598103934665603ull;
  std::vector<float> host;
  std::vector<Parameter*> all = model.dense_parameters();
  for (Parameter* p : model.dense_optimizer().state()) all.push_back(p);
  for (Parameter* p : all) {
    TESSERA_RETURN_IF_ERROR(CopyOut(p, &host));
    const auto* b = reinterpret_cast<const unsigned char*>(host.data());
    for (size_t i = 0; i < host.size() * sizeof(float); ++i) {
      h = (h ^ b[i]) * 1099511628211ull;
    }
  }
  return h;
}

SafetensorsDtype StoredTensorDtype(RowDtype dtype) {
  switch (dtype) {
    case RowDtype::kF32: return SafetensorsDtype::kF32;
    case RowDtype::kF16: return SafetensorsDtype::kF16;
    case RowDtype::kBf16: return SafetensorsDtype::kBF16;
  }
  return SafetensorsDtype::kF32;
}

absl::StatusOr<const TensorView*> GetTableWeights(const SafetensorsFile& file,
                                                  std::string_view name, RowDtype dtype,
                                                  const std::vector<int64_t>& shape) {
  const TensorView* t = file.Find(name);
  if (t != nullptr && t->dtype == SafetensorsDtype::kF32) {
    return file.Get(name, SafetensorsDtype::kF32, shape);
  }
  return file.Get(name, StoredTensorDtype(dtype), shape);
}

absl::Status WriteTableRows(RowStore& store, const TensorView& w, int64_t src, int64_t dst,
                            int64_t n, const float* state) {
  const int64_t width = store.dim();
  if (w.dtype == StoredTensorDtype(store.weight_dtype())) {
    const char* bytes = static_cast<const char*>(w.data) + src * store.weight_row_bytes();
    return store.WriteRowBytes(dst, n, bytes, state);
  }
  return store.WriteRows(dst, n, w.f32() + src * width, state);
}

}  // namespace tessera::internal
