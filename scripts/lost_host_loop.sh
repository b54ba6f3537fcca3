#!/usr/bin/env bash
# The lost-host check at full length: 20 losses of one of 2 emulated hosts (SIGKILL of its ranks,
# its link cut or slowed to 8 bit/s, the whole host cut off, only its TCP slowed) at random
# points of a tessera-train run, with the default sharding.peer_timeout_s; each must end the job
# within 60 s naming the lost rank and host (the TCP cut: the stall), and every rerun must
# resume and end byte-identical to the uninterrupted run (tests/distributed/lost_host_check.sh,
# whose default is 5 losses with a 10 s timeout).
#   scripts/lost_host_loop.sh [EVENTS [SEED]]     (root; build/ built)
set -euo pipefail
cd "$(dirname "$0")/.."
TESSERA_CLUSTER_PREFIX=tsr-loop TESSERA_CLUSTER_NET=3 STEPS=${STEPS:-200} exec bash tests/distributed/lost_host_check.sh build/bin . "${1:-20}" "${2:-1}" ""
