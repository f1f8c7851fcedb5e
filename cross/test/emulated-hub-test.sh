#!/bin/sh
# emulated-hub-test.sh <armv7 binary>: runs the integration tests listed in
# emulated-tests.txt (what can differ on ARM: the binary's start, the cache's files, TLS,
# 32-bit sizes, the kernel's interfaces, a smoke test of each feature) against the armv7 hub
# under qemu-arm-static, with QEMU_CPU as the caller set it; `make test` runs them all on
# x86_64. cross_* reports the hub's peak RSS net of qemu's own, measured in the same run with
# a do-nothing static ARM program built here. Fails when an entry of the list names no test.
# EMULATED_TESTS=<file> runs another list (`all` for the whole suite); `--list` instead of
# the binary prints the chosen tests' names and runs nothing. Run from the repo top.
set -eu

[ $# = 1 ] || {
	echo "usage: $0 <armv7 binary> | --list" >&2
	exit 2
}
cargo=${CARGO:-cargo}
here=$(dirname -- "$0")
list=${EMULATED_TESTS:-$here/emulated-tests.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The suite built as `make test` builds it (debug, feature fuzzing), so after `make test` it is
# not compiled again: only the hub under test is the armv7 release build.
suite() { "$cargo" test --features fuzzing --test integration -- "$@"; }

suite --list --format terse > "$work/list-out" || {
	echo "emulated-hub-test: FAIL: cannot list the integration tests"
	exit 1
}
sed -n 's/: test$//p' "$work/list-out" > "$work/all"
total=$(wc -l < "$work/all")

# The chosen names, one a line: a `module::` entry takes the module's tests, any other entry
# is one test's whole name.
if [ "$list" = all ]; then
	cp "$work/all" "$work/chosen"
else
	: > "$work/chosen"
	missing=
	for entry in $(sed 's/#.*//' "$list"); do
		case $entry in
			*::) awk -v p="$entry" 'index($0, p) == 1' "$work/all" > "$work/found" ;;
			*) grep -Fx -e "$entry" "$work/all" > "$work/found" || true ;;
		esac
		[ -s "$work/found" ] || missing="$missing $entry"
		cat "$work/found" >> "$work/chosen"
	done
	if [ -n "$missing" ]; then
		echo "emulated-hub-test: FAIL: ${list#./} names what is no integration test:"
		# shellcheck disable=SC2086 # one entry a word
		printf '  %s\n' $missing
		exit 1
	fi
	sort -u -o "$work/chosen" "$work/chosen"
fi
if [ "$1" = --list ]; then
	cat "$work/chosen"
	exit 0
fi
bin=$(realpath "$1")

# qemu's own footprint: a static ARM program that only sleeps, under the same qemu and CPU.
# No libc (system calls only: nanosleep, exit): zig builds no musl for it.
cat > "$work/idle.c" <<'C'
static void call2(long n, long a, long b) {
    register long r7 __asm__("r7") = n;
    register long r0 __asm__("r0") = a;
    register long r1 __asm__("r1") = b;
    __asm__ volatile("svc 0" : "+r"(r0) : "r"(r7), "r"(r1) : "memory");
}
void _start(void) {
    long one_second[2] = {1, 0};
    call2(162, (long)one_second, 0); /* nanosleep */
    call2(1, 0, 0); /* exit(0) */
    for (;;) {}
}
C
"$here/../zig-cc-armv7" -static -nostdlib -ffreestanding -O2 "$work/idle.c" -o "$work/idle"

echo "emulated-hub-test: $(wc -l < "$work/chosen") of the $total integration tests against $bin under qemu-arm-static (CPU ${QEMU_CPU:-the default})"
# shellcheck disable=SC2046 # one test name a word: names have no spaces
TINYHUB_TEST_BIN=$bin TINYHUB_TEST_RUNNER=qemu-arm-static TINYHUB_QEMU_BASELINE_BIN=$work/idle \
	suite --exact --nocapture $(cat "$work/chosen") 2>&1 | tee "$work/log" | grep -E '^test |^test result|MEASURED|panicked' || true
grep -q '^test result: ok' "$work/log" || {
	echo "emulated-hub-test: FAIL"
	# Each failure's message (the hub's log follows it in the full output).
	grep -A4 'panicked at' "$work/log" | grep -v '^[IWED][0-9]\{4\} ' | head -100
	tail -50 "$work/log"
	exit 1
}
echo "emulated-hub-test: PASS"
