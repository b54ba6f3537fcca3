// The step trace's window and file (core/trace.h records): every rank starts recording at the
// same step after a barrier (the clocks' common origin), stops after the window, and the ranks'
// events are gathered into one Chrome trace-event JSON file written by world rank 0:
//   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
// pid = rank, tid = the rank's thread index (0: the training thread); "X" events of categories
// "step" (one per traced step), the trainer's / bench's phases ("phase"; tessera-bench: "step"
// phases of its table and "sharded" ones of the sharded collection), "collective" (args bytes,
// peers), "tier" (reads, prefetches, write-backs; args rows or ids). otherData: what the writer
// adds (the tool, config, steps traced, world size, predictions) as JSON members.
// Collective over `comm` (null: one process). Opens in https://ui.perfetto.dev and
// chrome://tracing; tessera-plan replay reads it (tools/plan_replay.cc).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharding/communicator.h"

namespace tessera {

// Barrier, the common origin, recording on (at most `max_events_per_thread` per thread).
[[nodiscard]] absl::Status StartStepTrace(Communicator* comm,
                                          int64_t max_events_per_thread = 1 << 20);
// Recording off; every rank's events gathered; world rank 0 gets the file's text (others "").
// `other_data`: JSON members without braces ("\"steps\": 5, ...") or "".
[[nodiscard]] absl::StatusOr<std::string> GatherStepTrace(Communicator* comm,
                                                          const std::string& other_data);
// Writes `text` to `path` (temp file + rename); InvalidArgument naming the path on failure.
[[nodiscard]] absl::Status WriteTraceFile(const std::string& path, const std::string& text);

}  // namespace tessera
