#!/usr/bin/env bash
# Bad input reaches the user as one clear message and a non-zero exit, never a crash, and
# leaves no output files behind. Usage: cli_errors_check.sh BUILD_BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1; src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
expect_error() {  # name, expected substring, command...
  local name=$1 want=$2; shift 2
  local msg rc
  msg=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF -- "$want" <<<"$msg"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL $name: rc=$rc, message: $msg (wanted: $want)"
  fi
}
cp "$src/configs/quickstart.yaml" "$tmp/q.yaml"
printf 'model:\n  type: dlrm\n  embeding_dim: 16\n' > "$tmp/unknown.yaml"
expect_error unknown_key "unknown.yaml:3" "$bin/tessera-train" --config "$tmp/unknown.yaml"
expect_error negative_size "data.batch_size" "$bin/tessera-train" --config "$tmp/q.yaml" \
  --set data.batch_size=-4 --set "output.dir=$tmp/out1"
expect_error wrong_type "model.bottom_mlp" "$bin/tessera-train" --config "$tmp/q.yaml" \
  --set "model.bottom_mlp=[64, abc, 16]" --set "output.dir=$tmp/out2"
expect_error missing_file "nowhere.tsv" "$bin/tessera-train" --config \
  "$src/configs/criteo_sample.yaml" --set data.train=nowhere.tsv --set "output.dir=$tmp/out3"
expect_error no_config "--config" "$bin/tessera-train"
for d in out1 out2 out3; do
  if [ -e "$tmp/$d/model.safetensors" ]; then failed=$((failed + 1)); echo "FAIL $d has a model"; fi
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
