// `tessera-plan replay TRACE`: a step trace (trainer/trace_writer.h) as a dependency graph and
// its replay. Per rank, the main thread's collectives split the traced window (its first step's
// start to its last step's end; ranks start where their traces start) into compute gaps; collective k of a step synchronises the ranks (every rank calls the same sequence): it
// ends when the last rank arrives plus its own time, the shortest of the ranks' durations (the
// last to arrive waits least). Replaying that graph gives the window, per step; each rank's critical path
// is its compute, its waits and the collectives' own time; what-ifs rescale collectives in the
// same graph (comm_dtype=bf16: the output and backward dists' all-to-alls at half the bytes;
// link=K: every collective K times faster; a whole call's time is scaled, latency included;
// group_size=N: every span of each estimator phase, compute and collectives, scaled by the
// planner's prediction for its own plan at N over its prediction for the traced run, a phase
// the traced plan lacks (replica sync at N < T) added at each step's end).
// Beside it, each estimator phase traced (the slowest rank's spans) and the profile's
// prediction the trace carries (tessera-bench's otherData.estimator_phases).
// Limits: the collectives are assumed to synchronise every rank (groups smaller than the world
// are replayed as if they spanned it); a trace of T ranks replays at T; group_size=N keeps the
// traced ranks' graph (which collectives, which rank arrives last) and only rescales it.
#pragma once

namespace tessera {

// argv[0] is "replay". Exit status 0, 1 for a bad trace (one message naming the file), 2 usage.
int RunPlanReplay(int argc, char** argv);

}  // namespace tessera
