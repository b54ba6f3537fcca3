#!/usr/bin/env bash
# The planner's side of bench/cluster_2d.sh for one link rate's profile: per config, layout and
# replica sync, `tessera-plan` on 4 ranks, 2 per host, with N free (sharding.group_size 0):
# the N it chooses and its predicted step at every N it tried (each the best plan it found at
# that N: the plan sharding.plan: auto makes at a fixed N). One JSON line each on stdout.
#   bench/cluster_2d_choices.sh BUILD_DIR PROFILE RATE CONFIG...
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1 profile=$2 rate=$3; shift 3
for cfg in "$@"; do
  for layout in replicas_adjacent groups_contiguous; do
    for sync in "exact 1" "average 1" "average 8"; do
      read -r mode k <<< "$sync"
      "$build/bin/tessera-plan" --config "configs/bench/$cfg.yaml" --world_size 4 \
        --ranks_per_node 2 --profile "$profile" --group_size 0 --format json \
        --set "sharding.layout=$layout" --set "sharding.replica_sync=$mode" \
        --set "sharding.sync_every=$k" 2> /dev/null |
        python3 -c 'import json, sys
t = sys.stdin.read(); j = json.loads(t[t.index("{"):])
print(json.dumps({"choice": sys.argv[1], "group_size": j["group_size"],
                  "tried": {str(x["group_size"]): x["step_ms"] for x in j["tried"]}}))' \
          "$cfg $rate $layout $mode $k"
    done
  done
done
