// `tessera-plan calibrate`: measures this machine and writes a MachineProfile
// (planner/profile.h). tools/plan_main.cc dispatches `tessera-plan calibrate ...` here before it
// parses its own flags: argv[0] is "calibrate", the rest are the subcommand's arguments.
// Returns the process exit status (0 done, 1 error with one message on stderr, 2 bad usage).
#pragma once

namespace tessera {

int RunPlanCalibrate(int argc, char** argv);

}  // namespace tessera
