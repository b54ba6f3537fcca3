// Before a model is built: the host bytes its dense part will hold (parameters, their gradients,
// the optimizer's state, one batch's activations), estimated from the config and compared with
// the memory this process can get. A shortfall is ResourceExhausted naming the config key and
// both byte counts, so a model too large for the machine is an error before the first
// allocation, not an abort or an out-of-memory kill halfway through building it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dense/dense_arch.h"
#include "trainer/config.h"

namespace tessera::internal {

struct HostMemory {
  int64_t bytes = -1;  // what the process can still allocate; -1: unknown (nothing is checked)
  std::string source;  // where the number came from, for messages
};

// TESSERA_MEMORY_LIMIT_BYTES when set (tests, containers whose /proc lies), else MemAvailable
// from /proc/meminfo, lowered to RLIMIT_AS / RLIMIT_DATA when those are set.
HostMemory AvailableHostMemory();

// The dense model's host bytes per DenseArch::Footprint: (value + grad + optimizer state) per
// parameter and (activations) per sample times the largest batch. OK when it fits in
// `available` (or when available.bytes < 0, or the device is not the CPU); ResourceExhausted
// "<source>: <key>: the dense model needs N bytes (...) but M bytes are available (<where>)"
// with the key of the part holding the most bytes (model.bottom_mlp, model.top_mlp, model.dcn,
// or model.embedding_dim for the interaction); InvalidArgument naming the key when the sizes
// overflow.
[[nodiscard]] absl::Status CheckDenseMemory(const Config& config, const DenseArchOptions& options,
                                            const HostMemory& available);

// The input batches a reader fills, as the config sizes them: batch (the larger of
// data.batch_size and data.eval_batch_size) x bytes per sample (4 per dense value and the label,
// 8 per sparse id and 8 per bag offset; ids per sample: data.synthetic.pooling summed over the
// features for synthetic data, one per feature otherwise, a lower bound for multi-hot files),
// for each batch in flight (data.prefetch_batches + 1). A lower bound of what the readers
// allocate, checked before they are opened (OpenDataSources). OK when it fits or when
// available.bytes < 0, unless the estimate exceeds 2^60 bytes (no machine has that);
// ResourceExhausted "<source>: <key>: input batches need N bytes (...) but M bytes are available
// (<where>)", <key> data.synthetic.pooling when synthetic bags hold more than one id on average,
// else data.batch_size.
[[nodiscard]] absl::Status CheckInputMemory(const Config& config, const HostMemory& available);

}  // namespace tessera::internal
