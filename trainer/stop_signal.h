// Stopping a run cleanly on SIGINT (Ctrl-C) and SIGTERM (what Slurm and Kubernetes send before
// they preempt a job): the first signal only records a stop request; the training loop sees it
// after the step under way, writes a checkpoint and the export, and ends (Trainer::Run returns
// Cancelled naming the signal). A second SIGINT, or a second SIGTERM, ends the process at once
// (exit status 128 + the signal), as Ctrl-C does without these handlers.
// Process-wide; the handlers are async-signal-safe (an atomic store and write(2)).
#pragma once

namespace tessera {

// Installs the handlers for SIGINT and SIGTERM; `program` prefixes the one-line notice the
// first signal prints on stderr. Idempotent.
void InstallStopSignalHandlers(const char* program);

// The signal that asked the run to stop (SIGINT, SIGTERM), or 0 when none did.
int StopSignalReceived();

// Records a stop request as a signal would (for tests), or clears it (sig 0).
void SetStopSignalForTesting(int sig);

// "SIGINT", "SIGTERM", "SIGHUP", else "a signal".
const char* StopSignalName(int sig);

}  // namespace tessera
