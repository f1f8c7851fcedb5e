#!/bin/sh
# emulated-hub-test.sh <armv7 binary>: runs the whole integration suite (the stand-in cloud
# on x86_64, requests through the hub, the cloud stopped, offline reads from the hub's
# cache, kubectl, faults) against the armv7 hub under qemu-arm-static, with QEMU_CPU as the
# caller set it. cross_* reports the hub's peak RSS net of qemu's own, measured in the same
# run with a do-nothing static ARM program built here. Run from the repo top.
set -eu

bin=$(realpath "$1")
cargo=${CARGO:-cargo}
here=$(dirname -- "$0")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# qemu's own footprint: a static ARM program that only sleeps, under the same qemu and CPU.
cat > "$work/idle.c" <<'C'
#include <unistd.h>
int main(void) { sleep(1); return 0; }
C
"$here/../zig-cc-armv7" -static -O2 "$work/idle.c" -o "$work/idle"

echo "emulated-hub-test: the integration suite against $bin under qemu-arm-static (CPU ${QEMU_CPU:-the default})"
# The suite built as `make test` builds it (debug, feature fuzzing), so after `make test` it is
# not compiled again: only the hub under test is the armv7 release build.
TINYHUB_TEST_BIN=$bin TINYHUB_TEST_RUNNER=qemu-arm-static TINYHUB_QEMU_BASELINE_BIN=$work/idle \
	"$cargo" test --features fuzzing --test integration -- --nocapture 2>&1 | tee "$work/log" | grep -E '^test |^test result|MEASURED|panicked' || true
grep -q '^test result: ok' "$work/log" || {
	echo "emulated-hub-test: FAIL"
	# Each failure's message (the hub's log follows it in the full output).
	grep -A4 'panicked at' "$work/log" | grep -v '^[IWED][0-9]\{4\} ' | head -100
	tail -50 "$work/log"
	exit 1
}
echo "emulated-hub-test: PASS"
