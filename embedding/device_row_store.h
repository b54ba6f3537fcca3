// A RowStore holding a whole table (or one shard of it) in device memory: slot == row, weights
// [num_rows, dim] fp32 and state [num_rows, state_dim] in HBM. The sharded collection's stores
// on `device: cuda` (sharding/sharded_embedding.h); the kernels of pooled_lookup.h run on
// weight_data() / state() with a CUDA DeviceContext.
//
// Rows start exactly as CreateInMemoryRowStore's (InitRow computed on the host in chunks and
// copied), so a device store and a host store of the same options hold the same bits.
// Resolve is the identity after the in-memory store's range check (same error text).
// ReadRowBytes / WriteRowBytes copy between host memory and the device (synchronous: ordered
// after the work queued on the context's compute stream, which is a blocking stream).
// weight_data() and state() are device pointers: host code must not dereference them.
// Thread-safety: one caller at a time, as for every RowStore.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "embedding/row_store.h"

namespace tessera {

// For a CPU `ctx`: CreateInMemoryRowStore(options). For CUDA: the table in device memory.
// Returns InvalidArgument as CreateInMemoryRowStore does and for a 16-bit dtype on CUDA (the
// CUDA kernels take fp32 rows), ResourceExhausted naming the table and the bytes when device
// memory is short, Unimplemented without the CUDA path.
absl::StatusOr<std::unique_ptr<RowStore>> CreateDeviceRowStore(
    const DeviceContext& ctx, const InMemoryRowStoreOptions& options);

}  // namespace tessera
