#!/usr/bin/env bash
# --help on every binary: it lists the binary's own flags (every ABSL_FLAG of its sources but the
# test-only ones) with a default, its subcommands, and every flag the README and docs/ show for
# that binary; -h prints the same; Abseil's "No flags matched" never appears; an unknown flag
# gets a hint (--set for config keys). Usage: help_check.sh BUILD_BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1; src=$2
passed=0; failed=0
check() {  # name, condition result (0 = pass), message
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $1: $3"; fi
}
# The flags a binary's sources define: ABSL_FLAG(type, name, ...).
defined_flags() {
  sed -n 's/^ABSL_FLAG([^,]*, *\([a-z0-9_]*\),.*/\1/p' "$@" | grep -v '^test_' | sort -u
}
# The flags the README and docs show with `tessera-<tool>` on the same line (as --x or --x-y).
# (tessera-plan's lines about `calibrate` belong to that subcommand's own --help.)
documented_flags() {
  grep -hoE "tessera-$1( |\`)[^|]*" "$src/README.md" "$src"/docs/*.md 2>/dev/null |
    sed "s/^tessera-$1//; s/tessera-.*//" |
    if [ "$1" = plan ]; then grep -v calibrate; else cat; fi |
    grep -oE -- '--[a-z][a-z0-9_-]*' | tr '-' '_' | sed 's/^__/--/' | sort -u
}
for tool in train bench plan data; do
  exe="$bin/tessera-$tool"
  help=$("$exe" --help 2>&1); rc=$?
  check "$tool-help-rc" $rc "tessera-$tool --help exited $rc"
  short=$("$exe" -h 2>&1)
  [ "$short" = "$help" ]; check "$tool-h" $? "-h differs from --help"
  ! grep -q "No flags matched" <<<"$help"; check "$tool-not-abseil" $? "Abseil's empty help"
  grep -q "^Usage:\|^Commands:" <<<"$help"; check "$tool-usage" $? "no usage section"
  srcs=("$src/tools/${tool}_main.cc")
  for name in $(defined_flags "${srcs[@]}"); do
    line=$(grep -E -- "^  --$name(=| |$)" <<<"$help")
    [ -n "$line" ]; check "$tool-flag-$name" $? "--$name missing from --help"
    awk -v f="--$name" '$1 ~ "^" f "(=|$)" {on = 1; print; next} on && /^  -/ {exit} on' \
      <<<"$help" | grep -q "default:"
    check "$tool-default-$name" $? "--$name has no default shown"
  done
  for flag in $(documented_flags "$tool"); do
    name=${flag#--}
    [ "$name" = set ] && { grep -q -- "--set key=value" <<<"$help"; check "$tool-doc-set" $? "--set missing"; continue; }
    [ "$name" = oversubscribe ] || [ "$name" = allow_run_as_root ] && continue  # mpirun's
    dashed=${name//_/-}  # subcommand flags parsed by hand are spelled with dashes (--what-if)
    grep -qE -- "--($name|$dashed)(=| |$)|--($name|$dashed)\b" <<<"$help"
    check "$tool-doc-$name" $? "documented flag --$name is not in tessera-$tool --help"
  done
done
# Subcommands.
grep -q "tessera-plan calibrate" <<<"$("$bin/tessera-plan" --help)"; check plan-calibrate $? "calibrate not listed"
for c in convert inspect read; do
  grep -q "tessera-data $c" <<<"$("$bin/tessera-data" --help)"; check "data-$c" $? "$c not listed"
done
# Unknown flags: a hint, exit 2.
msg=$("$bin/tessera-train" --config "$src/configs/quickstart.yaml" --epochs 3 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unknown flag --epochs" <<<"$msg" && grep -q -- "--set train.epochs=" <<<"$msg"
check train-unknown-flag $? "rc=$rc: $msg"
msg=$("$bin/tessera-bench" --batch_size=4 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--set data.batch_size=" <<<"$msg"; check bench-unknown-flag $? "rc=$rc: $msg"
# The dashed spelling of a flag works (no unknown-flag error).
msg=$("$bin/tessera-train" --eval-only 2>&1); ! grep -q "unknown flag" <<<"$msg"
check train-dashed $? "$msg"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
