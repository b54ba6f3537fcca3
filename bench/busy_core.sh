#!/usr/bin/env bash
# Keeps one core DUTY busy (default 50%): a duty-cycled busy loop, PERIOD_MS long (busy for
# DUTY x PERIOD_MS of its own CPU time, then asleep for the rest of the period), pinned to CPU (default 0) when taskset exists,
# for SECONDS seconds (0 = until killed). The acceptance check of issue 26 calibrates the planner
# while this runs: `bench/busy_core.sh & tessera-plan calibrate ...; kill %1`.
#   bench/busy_core.sh [SECONDS]      DUTY=0.5 PERIOD_MS=20 CPU=0
# Prints, when it stops (SIGTERM / SIGINT or SECONDS elapsed), the share of a core it used on
# its CPU clock.
set -euo pipefail
SECONDS_TO_RUN=${1:-0}
DUTY=${DUTY:-0.5}
PERIOD_MS=${PERIOD_MS:-20}
CPU=${CPU:-0}
pin=()
if command -v taskset > /dev/null; then pin=(taskset -c "$CPU"); fi
exec "${pin[@]}" python3 - "$SECONDS_TO_RUN" "$DUTY" "$PERIOD_MS" <<'PY'
import signal, sys, time
seconds, duty, period = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]) / 1e3
if not 0 < duty <= 1 or period <= 0:
    sys.exit("busy_core.sh: DUTY must be in (0, 1] and PERIOD_MS > 0")
start_wall, start_cpu = time.monotonic(), time.process_time()
def report(*_):
    wall = time.monotonic() - start_wall
    cpu = time.process_time() - start_cpu
    print(f"busy_core.sh: {cpu:.1f} CPU s in {wall:.1f} s: {100 * cpu / max(wall, 1e-9):.0f}% of "
          f"a core (asked {100 * duty:.0f}%)", file=sys.stderr)
    sys.exit(0)
signal.signal(signal.SIGTERM, report)
signal.signal(signal.SIGINT, report)
x = 0
while seconds <= 0 or time.monotonic() - start_wall < seconds:
    c0 = time.thread_time()
    while time.thread_time() - c0 < duty * period:
        x += 1
    time.sleep((1 - duty) * period)
report()
PY
