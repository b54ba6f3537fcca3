// A step trace: a tiny recorder of timed spans per thread, off by default, written as Chrome
// trace-event JSON (Perfetto, chrome://tracing). Marked by ScopedPhase (core/timer.h: every
// phase of the trainer and the sharded collection), the Communicator's collectives (bytes,
// peers) and the RocksDB tier's reads and prefetches; tessera-bench / tessera-train --trace FILE
// record a bounded window of steps and gather every rank's events into one file
// (trainer/trace_writer.h).
//
// Recording: a span is (name, category, start, duration, up to two integer arguments) on the
// calling thread's own buffer (no lock after the thread's first span; buffers registered once
// under a mutex), at most `max_events_per_thread` per thread (the rest counted as dropped). Off
// (Recording() false: one relaxed atomic load per span) until Start; Stop ends the window.
// Timestamps: CLOCK_MONOTONIC nanoseconds less the origin set by SetOrigin (every rank sets it
// right after a barrier, so ranks' clocks are aligned to a barrier's exit, microseconds apart).
// Names and categories must be string literals or outlive the trace (phase names are interned).
// Thread-safety: spans from any thread; Start/Stop/Take from one thread while no span is open.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::trace {

struct Event {
  const char* name = "";
  const char* category = "";
  int64_t start_ns = 0;  // since the origin
  int64_t dur_ns = 0;
  int thread = 0;  // this process's thread index (in order of first span)
  const char* arg_names[2] = {nullptr, nullptr};
  int64_t args[2] = {0, 0};
};

// True between Start and Stop.
bool Recording();
void Start(int64_t max_events_per_thread = 1 << 20);
void Stop();
// The origin of the timestamps: now (call it right after a barrier on every rank).
void SetOrigin();
// Nanoseconds since the origin.
int64_t NowNs();
// Every thread's events so far (cleared), sorted by (thread, start), and how many were dropped.
std::vector<Event> Take(int64_t* dropped = nullptr);
// Interns `name` for the life of the process (ScopedPhase's std::string names).
const char* Intern(const std::string& name);

// Records one span from now to destruction when Recording() (checked at construction).
class Span {
 public:
  Span(const char* name, const char* category) {
    if (Recording()) {
      on_ = true;
      e_.name = name;
      e_.category = category;
      e_.start_ns = NowNs();
    }
  }
  void Arg(const char* name, int64_t value) {
    if (!on_) return;
    const int i = e_.arg_names[0] == nullptr ? 0 : 1;
    e_.arg_names[i] = name;
    e_.args[i] = value;
  }
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_ = false;
  Event e_;
};

// Phases: PhaseTimes::Add (core/timer.cc) calls RecordPhase, so every phase a ScopedPhase times
// into an accumulator is a span (named by the phase, ending at `end_wall` (CLOCK_MONOTONIC
// seconds; < 0: now), lasting `seconds`: the phase's wall time, or its CPU time for a CPU-clock
// accumulator), in the accumulator's category (SetPhaseCategory; default "phase"). Phases timed
// without an accumulator are not traced.
void SetPhaseCategory(const void* accumulator, const char* category);
void RecordPhase(const void* accumulator, const std::string& phase, double seconds,
                 double end_wall = -1);

// The Chrome trace-event JSON of `events` of one process (pid = `rank`): "X" events with
// ts/dur in microseconds, args, and the process / thread name metadata; no enclosing brackets
// (pieces of several ranks are joined with commas into {"traceEvents": [...]}).
std::string EventsJson(const std::vector<Event>& events, int rank);

}  // namespace tessera::trace
