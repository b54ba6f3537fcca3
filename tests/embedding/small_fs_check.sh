#!/usr/bin/env bash
# Runs the tiered table's real full-disk test (embedding_tiered_small_fs_test) on a 24 MiB tmpfs
# mounted for it. Mounting needs root with CAP_SYS_ADMIN; where that is not allowed (an
# unprivileged container, a user account) it says so and passes without running the test.
# usage: small_fs_check.sh <build>/tests/embedding_tiered_small_fs_test
set -u
bin=$1
dir=$(mktemp -d /tmp/tessera_small_fs.XXXXXX)
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=24m tmpfs "$dir" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (needs root); the full-disk case stays covered by" \
       "tiered_faults_test's injected faults"
  rmdir "$dir"
  exit 0
fi
trap 'umount "$dir"; rmdir "$dir"' EXIT
TESSERA_SMALL_FS="$dir" "$bin"
