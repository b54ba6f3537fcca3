#!/usr/bin/env bash
# Every plan tessera-plan emits for 2 and 4 ranks trains under mpirun: for each config, plan
# (--out), then a few training steps with that plan file; and sharding.plan: auto with the
# default `sharding.profile: auto` twice: the first run calibrates this machine once (a tiny
# calibration, TESSERA_AUTO_CALIBRATE_FLAGS) into a fresh cache, the second uses the cache.
#   tests/planner/plans_train_check.sh build/bin <source dir>
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
common=(--set train.steps=4 --set train.eval_every=0 --set train.eval_batches=1
        --set output.progress=false --set output.export= --set data.batch_size=512
        --set data.synthetic.train_samples=8192 --set data.synthetic.eval_samples=1024)
for cfg in configs/quickstart.yaml configs/bench/small.yaml configs/bench/small_tiered.yaml; do
  for np in 2 4; do
    name=$(basename "$cfg" .yaml)-$np
    if ! "$bin/tessera-plan" --config "$src/$cfg" --world_size $np --set data.batch_size=512 \
         --profile cpu_default \
         --out "$tmp/$name.yaml" >"$tmp/$name.txt" 2>&1; then
      echo "FAIL plan $name"; cat "$tmp/$name.txt"; fail=1; continue
    fi
    if ! mpirun --oversubscribe -np $np "$bin/tessera-train" --config "$src/$cfg" "${common[@]}" \
         --set sharding.plan="$tmp/$name.yaml" --set output.dir="$tmp/run-$name" \
         >"$tmp/$name.log" 2>&1; then
      echo "FAIL train $name with:"; cat "$tmp/$name.yaml"; tail -5 "$tmp/$name.log"; fail=1
    else
      echo "ok $name: $(grep -c 'type:' "$tmp/$name.yaml") tables, $(grep -o 'type: [a-z_]*' "$tmp/$name.yaml" | sort | uniq -c | tr '\n' ' ')"
    fi
  done
done
export XDG_CACHE_HOME=$tmp/cache
export TESSERA_AUTO_CALIBRATE_FLAGS="--dims 16 --table_mib 4 --tier_dims 16 --tier_rows 8192
  --seconds_per_point 0.02 --runs 1 --extra_runs 0"
for run in 1 2; do
  if ! mpirun --oversubscribe -np 2 "$bin/tessera-train" --config "$src/configs/quickstart.yaml" \
       "${common[@]}" --set sharding.plan=auto --set output.dir="$tmp/run-auto$run" \
       >"$tmp/auto$run.log" 2>&1; then
    echo "FAIL sharding.plan: auto (run $run)"; tail -5 "$tmp/auto$run.log"; fail=1
  fi
done
if ! grep -q "calibrating once" "$tmp/auto1.log" || ! grep -q "calibrated in" "$tmp/auto1.log"; then
  echo "FAIL: the first auto run did not calibrate"; tail -5 "$tmp/auto1.log"; fail=1
fi
grep -q "calibrat" "$tmp/auto2.log" && { echo "FAIL: the second auto run calibrated again"; fail=1; }
ls "$XDG_CACHE_HOME"/tessera/profile-*.yaml >/dev/null 2>&1 || { echo "FAIL: nothing cached"; fail=1; }
[[ $fail -eq 0 ]] && echo "every plan trained"
exit $fail
