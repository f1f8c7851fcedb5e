#!/bin/sh
# apk-test.sh <version> (<apk> <openwrt-arch> <armv7|aarch64>)...: reads each apk v3 package
# back with apk-inspect.py (which checks the container, the ADB block, the package uid and
# each file's data against its size and SHA-256) and checks what OpenWrt 25.x and its users
# rely on: the package info (name, version with the release, arch, maintainer with an
# address, depends), every path with its mode and owner, the files of cross/openwrt/, the
# sysupgrade keep list, OpenWrt's lib/apk/packages/ list and conffiles, the scripts and
# their effect while an image is built, the static binary for the CPU; that a corrupted
# file is caught; and that packing the same contents again gives the same bytes. Needs
# python3; exits non-zero when any check fails.
set -u

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"
cross=$here/..
# shellcheck source=../pkg-lib.sh
. "$cross/pkg-lib.sh"

if [ $# -lt 4 ] || [ $(($# % 3)) -ne 1 ]; then
	echo "usage: $0 <version> (<apk> <openwrt-arch> <armv7|aarch64>)..." >&2
	exit 2
fi
version=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

# info <key>: a package info field as apk-inspect.py wrote it.
info() { sed -n "s/^$1: //p" "$u/info"; }

check_apk() {
	apk=$1 arch=$2 cpu=$3
	echo "apk-test: $apk"
	u=$work/$arch
	rm -rf "$u"
	if [ ! -f "$apk" ]; then
		bad "package exists (run make apk)"
		return
	fi
	check "named <arch>/tinyhub-<version>.apk, as OpenWrt's feeds name them" \
		[ "$(basename "$(dirname "$apk")")/${apk##*/}" = "$arch/tinyhub-$version.apk" ]
	if python3 "$here/apk-inspect.py" "$apk" "$u" 2> "$work/inspect.err"; then
		ok "apk v3: ADBd container, pckg schema, blocks, uid and every file's data check out"
	else
		bad "apk-inspect: $(cat "$work/inspect.err")"
		return
	fi

	# Package info.
	check "name: tinyhub" [ "$(info name)" = tinyhub ]
	check "version: $version, with the release" \
		sh -c 'case $1 in *-r[0-9]*) [ "$1" = "$2" ] ;; *) exit 1 ;; esac' - "$(info version)" "$version"
	check "arch: $arch" [ "$(info arch)" = "$arch" ]
	check "depends: kmod-dummy procd (static binary: no libraries; the dummy interface)" \
		[ "$(info depends)" = "kmod-dummy procd" ]
	check "maintainer is Cargo.toml's first author ($(info maintainer))" \
		[ "$(info maintainer)" = "$(cargo_field authors)" ]
	case $(info maintainer) in
		*"<"*@*">") ok "maintainer has an address" ;;
		*) bad "maintainer has no <address>: $(info maintainer)" ;;
	esac
	check "license is Cargo.toml's" [ "$(info license)" = "$(cargo_field license)" ]
	check "description is Cargo.toml's" [ "$(info description)" = "$(cargo_field description)" ]

	# Paths: exactly these, owned by root.
	want=$(printf '%s\n' "0755 root:root /" "0755 root:root etc/" "0755 root:root etc/config/" \
		"0600 root:root etc/config/tinyhub" "0755 root:root etc/init.d/" \
		"0755 root:root etc/init.d/tinyhub" "0755 root:root lib/" "0755 root:root lib/apk/" \
		"0755 root:root lib/apk/packages/" "0644 root:root lib/apk/packages/tinyhub.conffiles" \
		"0644 root:root lib/apk/packages/tinyhub.conffiles_static" \
		"0644 root:root lib/apk/packages/tinyhub.list" "0755 root:root lib/upgrade/" \
		"0755 root:root lib/upgrade/keep.d/" "0644 root:root lib/upgrade/keep.d/tinyhub" \
		"0755 root:root usr/" "0755 root:root usr/bin/" "0755 root:root usr/bin/tinyhub")
	if [ "$(cat "$u/paths")" = "$want" ]; then
		ok "paths: bin and init 0755, config 0600, the rest 0644, dirs 0755, all root's, nothing else"
	else
		bad "paths"; sed 's/^/        /' "$u/paths"
	fi
	r=$u/root
	check_installed_files "$r"

	# OpenWrt's package metadata (include/package-pack.mk): the list of files that
	# default_postinst/default_prerm and `apk info` read, and the conffiles with the hash
	# that tells a changed config from the packaged one.
	p=$r/lib/apk/packages
	files=$(cd "$r" && find . -type f ! -path './lib/apk/packages/*' -printf '/%P\n' | LC_ALL=C sort)
	check "tinyhub.list lists every other file of the package" [ "$(cat "$p/tinyhub.list")" = "$files" ]
	check "tinyhub.conffiles: /etc/config/tinyhub" [ "$(cat "$p/tinyhub.conffiles")" = /etc/config/tinyhub ]
	check "tinyhub.conffiles_static: /etc/config/tinyhub and its sha256" \
		[ "$(cat "$p/tinyhub.conffiles_static")" = "/etc/config/tinyhub $(sha256sum < "$r/etc/config/tinyhub" | cut -d' ' -f1)" ]

	# Scripts: OpenWrt's three, from cross/openwrt/.
	check "scripts: post-install, post-upgrade, pre-deinstall, no other" \
		[ "$(ls "$u/scripts" | tr '\n' ' ')" = "post-install post-upgrade pre-deinstall " ]
	check "post-install is cross/openwrt/postinst" cmp -s "$u/scripts/post-install" "$cross/openwrt/postinst"
	check "pre-deinstall is cross/openwrt/prerm" cmp -s "$u/scripts/pre-deinstall" "$cross/openwrt/prerm"
	check "post-upgrade is postinst with PKG_UPGRADE=1 (it keeps the boot setting, restarts the hub)" \
		[ "$(sed 1d "$u/scripts/post-upgrade")" = "$(printf 'export PKG_UPGRADE=1\n%s' "$(sed 1d "$cross/openwrt/postinst")")" ]
	for s in "$u"/scripts/*; do
		check "${s##*/} is a shell script" sh -n "$s"
	done
	check_instroot_scripts "$r" "$u/scripts/post-install" "$u/scripts/pre-deinstall"
	check_binary "$r/usr/bin/tinyhub" "$cpu"

	# A flipped byte in the init script's data must fail the inspection: the check above
	# is not a formality.
	bad_apk=$work/corrupt.apk
	python3 - "$apk" "$bad_apk" "$r/etc/init.d/tinyhub" <<'EOF'
import sys, zlib
raw = open(sys.argv[1], "rb").read()
body = bytearray(zlib.decompress(raw[4:], -15))
script = open(sys.argv[3], "rb").read()
at = body.find(script)
body[at + len(script) // 2] ^= 0x20
z = zlib.compressobj(9, zlib.DEFLATED, -15)
open(sys.argv[2], "wb").write(b"ADBd" + z.compress(bytes(body)) + z.flush())
EOF
	if python3 "$here/apk-inspect.py" "$bad_apk" "$work/corrupt" 2> "$work/corrupt.err"; then
		bad "a corrupted init script passes the inspection"
	else
		check "a corrupted init script fails the inspection ($(cat "$work/corrupt.err"))" \
			grep -q 'etc/init.d/tinyhub: data does not match its SHA-256' "$work/corrupt.err"
	fi

	# Same inputs, same bytes: pack the unpacked binary again at the package's own time.
	epoch=$(cut -d' ' -f1 "$u/mtimes" | sort -u)
	check "every file has one fixed mtime ($epoch)" [ "$(printf '%s\n' "$epoch" | wc -l)" = 1 ]
	if SOURCE_DATE_EPOCH=$epoch sh "$cross/mkapk.sh" "$r/usr/bin/tinyhub" "$arch" "$u/again" > /dev/null &&
		cmp -s "$apk" "$u/again/$arch/${apk##*/}"; then
		ok "rebuilt from the same binary, byte for byte identical"
	else
		bad "rebuilding from the same binary gives different bytes"
	fi
}

while [ $# -ge 3 ]; do
	check_apk "$1" "$2" "$3"
	shift 3
done

finish apk-test
