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

# check_installed_files <root>: an unpacked package's init script, config and keep list are
# those of cross/openwrt/, and the keep list, read the way sysupgrade reads keep.d (`find`
# on each line but comments and blank ones), keeps on a stand-in filesystem a certificate
# in the init script's default root_dir, an object in its default disk_cache_path and the
# kubeconfig path the config suggests, and not kubelet's files beside them.
check_installed_files() {
	check "the init script is the procd one" grep -q '^USE_PROCD=1' "$1/etc/init.d/tinyhub"
	check "init script is cross/openwrt/tinyhub.init" \
		cmp -s "$1/etc/init.d/tinyhub" "$here/../openwrt/tinyhub.init"
	check "config is cross/openwrt/tinyhub.config" \
		cmp -s "$1/etc/config/tinyhub" "$here/../openwrt/tinyhub.config"
	keep=$1/lib/upgrade/keep.d/tinyhub
	check "lib/upgrade/keep.d/tinyhub is cross/openwrt/tinyhub.keep" \
		cmp -s "$keep" "$here/../openwrt/tinyhub.keep"
	init=$here/../openwrt/tinyhub.init
	# shellcheck disable=SC2016 # $SECTION is the init script's text
	root_dir=$(sed -n 's/.*config_get root_dir "$SECTION" root_dir \(\/.*\)$/\1/p' "$init")
	# shellcheck disable=SC2016
	cache=$(sed -n 's/.*config_get cache_path "$SECTION" disk_cache_path \(\/.*\)$/\1/p' "$init")
	kubeconfig=$(sed -n "s/^[[:space:]]*#option kubeconfig '\(.*\)'$/\1/p" "$here/../openwrt/tinyhub.config")
	fs=$(mktemp -d)
	want=$(printf '%s\n' "$root_dir/pki/yurthub-current.pem" \
		"$cache/kubelet/pods.v1.core/default/p1" "$kubeconfig" | sort)
	for f in $want /etc/kubernetes/kubelet.conf /etc/kubernetes/pki/ca.crt; do
		mkdir -p "$fs${f%/*}" && echo x > "$fs$f"
	done
	# shellcheck disable=SC2046 # one find path per line, as sysupgrade passes them
	got=$(find $(sed -ne '/^[[:space:]]*$/d; /^#/d; p' "$keep" | sed "s|^|$fs|") \
		-type f -o -type l 2> /dev/null | sed "s|^$fs||" | sort)
	rm -rf "$fs"
	if [ -n "$root_dir" ] && [ -n "$cache" ] && [ -n "$kubeconfig" ] && [ "$got" = "$want" ]; then
		ok "sysupgrade keeps the default root dir, cache and kubeconfig, not kubelet's files"
	else
		bad "sysupgrade keep list: want [$want] got [$got]"
	fi
}

# check_binary <file> <armv7|aarch64>: the static binary for that CPU (`file`), and its
# --version under qemu-user when installed.
check_binary() {
	desc=$(file -b "$1")
	cpu_target "$2" || { bad "unknown cpu $2"; return; }
	case $2 in
		armv7) pattern='ELF 32-bit LSB executable, ARM, EABI5*statically linked*' ;;
		aarch64) pattern='ELF 64-bit LSB executable, ARM aarch64*statically linked*' ;;
	esac
	case $desc in
		$pattern) ok "usr/bin/tinyhub is the static $2 binary ($desc)" ;;
		*) bad "usr/bin/tinyhub is not a static $2 binary: $desc" ;;
	esac
	if command -v "$qemu" > /dev/null 2>&1; then
		out=$("$qemu" "$1" --version 2>&1)
		case $out in
			*"$triple"*) ok "$qemu usr/bin/tinyhub --version names $triple" ;;
			*) bad "$qemu usr/bin/tinyhub --version: $out" ;;
		esac
	else
		skip "--version under $qemu (not installed)"
	fi
}

# check_instroot_scripts <root> <install script> <removal script>: while an image is built
# ($IPKG_INSTROOT = <root>, the unpacked package), the install script enables the service
# through the image's rc.common (the stand-in's) and the removal script disables it.
check_instroot_scripts() {
	cp "$here/openwrt-stub/rc.common" "$here/openwrt-stub/functions.sh" \
		"$here/openwrt-stub/procd.sh" "$1/etc/"
	IPKG_INSTROOT=$1 sh "$2" > "$1.scripts.out" 2>&1
	check "${2##*/} under IPKG_INSTROOT enables: etc/rc.d/S99tinyhub -> ../init.d/tinyhub" \
		[ "$(readlink "$1/etc/rc.d/S99tinyhub")" = ../init.d/tinyhub ]
	IPKG_INSTROOT=$1 sh "$3" >> "$1.scripts.out" 2>&1
	check "${3##*/} under IPKG_INSTROOT disables: no etc/rc.d/S99tinyhub" \
		[ ! -e "$1/etc/rc.d/S99tinyhub" ]
	rm -f "$1/etc/rc.common" "$1/etc/functions.sh" "$1/etc/procd.sh" "$1.scripts.out"
	rmdir "$1/etc/rc.d" 2> /dev/null || true
}
