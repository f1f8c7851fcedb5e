# shellcheck shell=sh
# lib.sh: sourced by the cross/test scripts (`. "$here/lib.sh"`). Counts checks as they are
# printed (ok, FAIL, skip), prints the closing summary line, and names the Rust target and
# the qemu-user program of a CPU.

passed=0
failed=0
skipped=0
ok() { passed=$((passed + 1)); echo "  ok    $*"; }
bad() { failed=$((failed + 1)); echo "  FAIL  $*"; }
skip() { skipped=$((skipped + 1)); echo "  skip  $*"; }

# check <description> <command...>: ok when the command succeeds.
check() {
	check_desc=$1
	shift
	if "$@"; then ok "$check_desc"; else bad "$check_desc"; fi
}

# finish <name>: "<name>: N passed, N failed, N skipped"; fails when any check failed.
finish() {
	echo "$1: $passed passed, $failed failed, $skipped skipped"
	[ "$failed" = 0 ]
}

# cpu_target <armv7|aarch64>: sets triple (the Rust target) and qemu (the qemu-user program
# that runs it); fails for any other CPU.
# shellcheck disable=SC2034 # both are read by the sourcing script
cpu_target() {
	case $1 in
		armv7) triple=armv7-unknown-linux-musleabihf qemu=qemu-arm-static ;;
		aarch64) triple=aarch64-unknown-linux-musl qemu=qemu-aarch64-static ;;
		*) return 1 ;;
	esac
}
