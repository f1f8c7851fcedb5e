#!/bin/sh
# binary-test.sh <armv7|aarch64> <binary>: checks a cross-built tinyhub with `file` and
# `readelf` (static, stripped, the right machine; for armv7: EABI5 hard-float, ARMv7,
# VFPv3-D16, no NEON tag) and that it runs under qemu-user and names its target in --version.
# For armv7 it also proves the emulated CPU ($QEMU_CPU, e.g. cortex-a9,neon=off) really traps
# NEON, with two tiny C programs built by the same zig (one has a NEON instruction), so the
# run above means something.
# Prints the size. Exits non-zero when any check fails.
set -u

kind=$1
bin=$2
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"
# has <description> <text> <pattern>: ok when the text matches the shell pattern.
has() { case $2 in $3) ok "$1" ;; *) bad "$1"; printf '%s\n' "$2" | sed 's/^/        /' ;; esac; }

echo "binary-test: $kind $bin"
if [ ! -f "$bin" ]; then
	bad "binary exists"
	finish binary-test
	exit 1
fi

size=$(wc -c < "$bin" | tr -d ' ')
mib=$(awk -v b="$size" 'BEGIN { printf "%.2f", b / 1048576 }')
echo "  size  $size bytes ($mib MiB)"

desc=$(file -b "$bin")
header=$(readelf -h "$bin")
if ! cpu_target "$kind"; then
	echo "usage: $0 <armv7|aarch64> <binary>" >&2
	exit 2
fi
case $kind in
	armv7)
		has "file: 32-bit ARM EABI5 executable, statically linked, stripped" "$desc" \
			'ELF 32-bit LSB executable, ARM, EABI5 *statically linked*stripped*'
		has "ELF header: ARM executable, EABI5, hard-float" "$header" \
			'*Machine:*ARM*Flags:*Version5 EABI*hard-float ABI*'
		attrs=$(readelf -A "$bin")
		has "Tag_CPU_arch: v7, A profile" "$attrs" '*Tag_CPU_arch: v7
*Tag_CPU_arch_profile: Application*'
		has "Tag_FP_arch: VFPv3-D16" "$attrs" '*Tag_FP_arch: VFPv3-D16
*'
		has "Tag_ABI_VFP_args: VFP registers (hard-float calls)" "$attrs" '*Tag_ABI_VFP_args: VFP registers*'
		case $attrs in
			*Tag_Advanced_SIMD_arch:*NEON*) bad "no NEON: $(printf '%s\n' "$attrs" | grep SIMD)" ;;
			*) ok "no NEON in Tag_Advanced_SIMD_arch (absent)" ;;
		esac
		# The budget of issue 5.
		if [ "$size" -le 3145728 ]; then ok "within the 3 MiB budget"; else bad "over the 3 MiB budget"; fi
		;;
	aarch64)
		has "file: 64-bit ARM aarch64 executable, statically linked, stripped" "$desc" \
			'ELF 64-bit LSB executable, ARM aarch64,*statically linked*stripped*'
		has "ELF header: AArch64 executable" "$header" '*Type:*EXEC*Machine:*AArch64*'
		;;
esac
if readelf -l "$bin" | grep -q INTERP; then bad "has a PT_INTERP"; else ok "no PT_INTERP: needs no loader"; fi
has "no dynamic section" "$(readelf -d "$bin" 2>&1)" '*There is no dynamic section*'

out=$("$qemu" "$bin" --version 2>&1)
has "$qemu${QEMU_CPU:+ (CPU $QEMU_CPU)} runs --version: $out" "$out" "tinyhub *($triple)*"

if [ "$kind" = armv7 ] && [ -n "${QEMU_CPU:-}" ]; then
	if "$here/../zig" version > /dev/null 2>&1; then
		t=$(mktemp -d)
		# No libc (system calls only): zig builds no musl for it, which on a fresh machine took
		# a minute; the two programs differ by the one instruction.
		cat > "$t/neon.c" <<'EOF'
void _start(void) {
#ifdef NEON
    __asm__ volatile(".fpu neon\n\tvadd.i32 q0, q0, q0" ::: "q0");
#endif
    register long r7 __asm__("r7") = 1; /* exit(0) */
    register long r0 __asm__("r0") = 0;
    __asm__ volatile("svc 0" : : "r"(r7), "r"(r0));
    for (;;) {}
}
EOF
		probe_cc() { "$here/../zig-cc-armv7" -static -nostdlib -ffreestanding -O1 "$@"; }
		if probe_cc "$t/neon.c" -o "$t/plain" 2> "$t/cc.err" &&
			probe_cc -DNEON "$t/neon.c" -o "$t/neon" 2>> "$t/cc.err"; then
			"$qemu" "$t/plain" > /dev/null 2>&1
			plain=$?
			"$qemu" "$t/neon" > /dev/null 2>&1
			trapped=$?
			# 132 = 128 + SIGILL, as the shell reports qemu's death by the guest's signal.
			if [ "$plain" = 0 ] && [ "$trapped" = 132 ]; then
				ok "CPU $QEMU_CPU traps NEON (SIGILL) and runs the rest"
			else
				bad "CPU $QEMU_CPU does not trap NEON (exit $plain without, $trapped with)"
			fi
		else
			bad "building the NEON probe: $(cat "$t/cc.err")"
		fi
		rm -rf "$t"
	else
		skip "NEON trap probe (no zig: run make armv7 first)"
	fi
fi

finish binary-test
