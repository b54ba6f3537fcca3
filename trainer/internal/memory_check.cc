#include "trainer/internal/memory_check.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace tessera::internal {
namespace {

std::string Gib(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
}

}  // namespace

HostMemory AvailableHostMemory() {
  HostMemory m;
  if (const char* env = std::getenv("TESSERA_MEMORY_LIMIT_BYTES"); env != nullptr) {
    int64_t v = 0;
    if (absl::SimpleAtoi(env, &v) && v >= 0) {
      m.bytes = v;
      m.source = "TESSERA_MEMORY_LIMIT_BYTES";
      return m;
    }
  }
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") {
      m.bytes = kib * 1024;
      m.source = "MemAvailable in /proc/meminfo";
      break;
    }
  }
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit lim;
    if (getrlimit(resource, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        (m.bytes < 0 || lim.rlim_cur < static_cast<rlim_t>(m.bytes))) {
      m.bytes = static_cast<int64_t>(lim.rlim_cur);
      m.source = resource == RLIMIT_AS ? "RLIMIT_AS" : "RLIMIT_DATA";
    }
  }
  return m;
}

absl::Status CheckDenseMemory(const Config& config, const DenseArchOptions& options,
                              const HostMemory& available) {
  const std::string where = config.source.empty() ? "" : config.source + ": ";
  absl::StatusOr<DenseArchFootprint> f = DenseArch::Footprint(options);
  if (!f.ok()) {
    // "DenseArchOptions.<field>: ..." -> the config's key.
    std::string msg(f.status().message());
    if (absl::StartsWith(msg, "DenseArchOptions.")) msg = "model." + msg.substr(17);
    return absl::Status(f.status().code(), where + msg);
  }
  if (config.device != Device::kCpu || available.bytes < 0) return absl::OkStatus();
  int64_t state = 0;  // optimizer state tensors per parameter
  if (config.optimizer.dense.type == DenseOptimizerType::kAdagrad) state = 1;
  if (config.optimizer.dense.type == DenseOptimizerType::kAdam) state = 2;
  const int64_t batch = std::max<int64_t>(
      {int64_t{1}, config.data.batch_size, config.data.eval_batch_size});
  // Every count is below 2^56 (DenseArch::kMaxFootprint) and the factors are small, so only the
  // activations (times a batch from the config) need a check; doubles keep the comparison exact
  // enough without overflow.
  const double per_param = 4.0 * (2 + state);
  const double param_bytes = per_param * static_cast<double>(f->params());
  const double act_bytes = 4.0 * static_cast<double>(f->activations_per_sample()) * batch;
  const double need = param_bytes + act_bytes;
  if (need <= static_cast<double>(available.bytes)) return absl::OkStatus();
  // The key to blame: the part holding the most bytes (its parameters and its activations).
  struct Part {
    const char* key;
    const DenseArchFootprint::Part* part;
  };
  const Part parts[] = {{"model.bottom_mlp", &f->bottom_mlp},
                        {"model.top_mlp", &f->top_mlp},
                        {"model.dcn", &f->cross},
                        {"model.embedding_dim", &f->interaction}};
  auto bytes = [&](const Part& p) {
    return per_param * static_cast<double>(p.part->params) +
           4.0 * static_cast<double>(p.part->activations_per_sample) * batch;
  };
  const Part* big = &parts[0];
  for (const Part& p : parts) {
    if (bytes(p) > bytes(*big)) big = &p;
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s%s: the dense model needs %.0f bytes (%s: %d parameters with gradients and %d "
      "optimizer state tensors, %.0f bytes; activations of %d samples (data.batch_size), %.0f "
      "bytes) but %d bytes "
      "(%s) are available (%s); make the layers or the batch smaller",
      where, big->key, need, Gib(static_cast<int64_t>(std::min(need, 9.0e18))), f->params(),
      state, param_bytes, batch, act_bytes, available.bytes, Gib(available.bytes),
      available.source));
}

absl::Status CheckInputMemory(const Config& config, const HostMemory& available) {
  const DataConfig& d = config.data;
  const bool synthetic = d.format == DataFormat::kSynthetic;
  int64_t num_features = 0;
  for (const TableConfig& t : config.model.tables)
    num_features += static_cast<int64_t>(t.features.size());
  // Doubles: pooling values and the batch size are any positive int64 the config accepts, so
  // their product may not fit in 64 bits; the estimate only has to be compared.
  double ids_per_sample = 0;
  for (int64_t f = 0; f < num_features; ++f) {
    const size_t i = d.synthetic.pooling.size() == 1 ? 0 : static_cast<size_t>(f);
    ids_per_sample += synthetic && i < d.synthetic.pooling.size()
                          ? static_cast<double>(d.synthetic.pooling[i]) : 1.0;
  }
  const double per_sample = 4.0 * static_cast<double>(config.model.num_dense + 1) +
                            8.0 * static_cast<double>(num_features) + 8.0 * ids_per_sample;
  const int64_t batch = std::max<int64_t>({int64_t{1}, d.batch_size, d.eval_batch_size});
  const int64_t in_flight = int64_t{d.prefetch_batches} + 1;
  const double need = per_sample * static_cast<double>(batch) * static_cast<double>(in_flight);
  const bool absurd = need > 0x1p60;
  if (!absurd && (available.bytes < 0 || need <= static_cast<double>(available.bytes)))
    return absl::OkStatus();
  const std::string where = config.source.empty() ? "" : config.source + ": ";
  const bool pooling = synthetic && ids_per_sample > static_cast<double>(num_features);
  const char* key = pooling ? "data.synthetic.pooling" : "data.batch_size";
  const std::string have =
      available.bytes < 0
          ? std::string("no machine has that much")
          : absl::StrFormat("%d bytes (%s) are available (%s)", available.bytes,
                            Gib(available.bytes), available.source);
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s%s: input batches need %.0f bytes (%d samples (data.batch_size) x %.0f bytes per "
      "sample: %d dense values and the label, %.0f sparse ids (%s) over %d features; %d "
      "batches in flight (data.prefetch_batches + 1)) but %s; lower the %s",
      where, key, need, batch, per_sample, config.model.num_dense, ids_per_sample,
      synthetic ? "data.synthetic.pooling" : "one per feature at least", num_features,
      in_flight, have, pooling ? "pooling or the batch" : "batch"));
}

}  // namespace tessera::internal
