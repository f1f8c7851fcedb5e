#!/bin/sh
# ipk-test.sh <version> (<ipk> <openwrt-arch> <armv7|aarch64>)...: unpacks each OpenWrt
# package with tar alone and checks it: the outer gzipped tar (ipkg-build's form, so no ar)
# with debian-binary "2.0"; control fields; conffiles; every file's mode, owner 0:0 and
# fixed mtime; that /usr/bin/tinyhub is the static binary for the named CPU (`file`, and its
# --version under qemu when qemu-user is installed); that postinst/prerm are executable and
# enable/disable the service under $IPKG_INSTROOT; and that packing the same contents again
# gives the same bytes. Exits non-zero when any check fails.
set -u
# tar lists times in local time; the reproducibility check reads them back as UTC.
TZ=UTC
export TZ

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"
cross=$here/..
# shellcheck source=../pkg-lib.sh
. "$cross/pkg-lib.sh"

if [ $# -lt 4 ] || [ $(($# % 3)) -ne 1 ]; then
	echo "usage: $0 <version> (<ipk> <openwrt-arch> <armv7|aarch64>)..." >&2
	exit 2
fi
version=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

# field <name>: the value of a control field.
field() { sed -n "s/^$1: *//p" "$u/control/control"; }

# gzip_is_reproducible <file>: header without file name (FLG 0) and with MTIME 0.
gzip_is_reproducible() {
	[ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = "1f8b080000000000" ]
}

# listing <tar.gz>: "mode owner path" per entry, path without the leading "./".
listing() {
	tar --numeric-owner -tvzf "$1" | awk '{ p = $6; sub(/^\.\//, "", p); print $1, $2, p }'
}

check_ipk() {
	ipk=$1 arch=$2 cpu=$3
	echo "ipk-test: $ipk"
	u=$work/$arch
	rm -rf "$u"
	mkdir -p "$u/outer" "$u/control" "$u/root"

	if [ ! -f "$ipk" ]; then
		bad "package exists (run make ipk)"
		return
	fi
	check "named tinyhub_<version>_<arch>.ipk" \
		[ "$(basename "$ipk")" = "tinyhub_${version}_${arch}.ipk" ]

	# Outer container: a gzipped tar, as OpenWrt's ipkg-build writes it, so plain tar reads it
	# (opkg also accepts Debian's ar form; this packaging never makes it).
	check "outer container is gzip, not ar" [ "$(od -An -tx1 -N2 "$ipk" | tr -d ' ')" = 1f8b ]
	check "outer gzip is reproducible (no name, no time)" gzip_is_reproducible "$ipk"
	if tar -xzf "$ipk" -C "$u/outer"; then ok "outer tar.gz unpacks with tar alone (no ar needed)"; else
		bad "outer tar.gz unpacks"; return; fi
	members=$(tar -tzf "$ipk" | tr '\n' ' ')
	check "outer entries owned by 0:0" sh -c "! tar --numeric-owner -tvzf '$ipk' | awk '\$2 != \"0/0\"' | grep -q ."
	check "members in ipkg-build order: debian-binary data control ($members)" \
		[ "$members" = "./debian-binary ./data.tar.gz ./control.tar.gz " ]
	check "debian-binary says 2.0" [ "$(cat "$u/outer/debian-binary")" = 2.0 ]
	check "control.tar.gz is reproducible gzip" gzip_is_reproducible "$u/outer/control.tar.gz"
	check "data.tar.gz is reproducible gzip" gzip_is_reproducible "$u/outer/data.tar.gz"
	tar -xzf "$u/outer/control.tar.gz" -C "$u/control" || bad "control.tar.gz unpacks"
	tar -xzf "$u/outer/data.tar.gz" -C "$u/root" || bad "data.tar.gz unpacks"

	# Control fields.
	check "Package: tinyhub" [ "$(field Package)" = tinyhub ]
	check "Version: $version" [ "$(field Version)" = "$version" ]
	check "Architecture: $arch" [ "$(field Architecture)" = "$arch" ]
	check "Depends: procd, kmod-dummy (static binary: no libraries; the dummy interface)" \
		[ "$(field Depends)" = "procd, kmod-dummy" ]
	case $version in
		*-r[0-9]*) ok "Version carries the release: $version" ;;
		*) bad "Version $version has no -r<release>" ;;
	esac
	check "Maintainer is Cargo.toml's first author ($(field Maintainer))" \
		[ "$(field Maintainer)" = "$(cargo_field authors)" ]
	case $(field Maintainer) in
		*"<"*@*">") ok "Maintainer has an address" ;;
		*) bad "Maintainer has no <address>: $(field Maintainer)" ;;
	esac
	for f in Section Description; do
		check "$f is set" [ -n "$(field "$f")" ]
	done
	size=$(gzip -dc "$u/outer/data.tar.gz" | wc -c | tr -d ' ')
	check "Installed-Size is the data tar's size ($size)" [ "$(field Installed-Size)" = "$size" ]
	check "no control field is repeated" \
		[ -z "$(sed -n 's/^\([A-Za-z-]*\):.*/\1/p' "$u/control/control" | sort | uniq -d)" ]
	check "conffiles lists /etc/config/tinyhub" [ "$(cat "$u/control/conffiles")" = /etc/config/tinyhub ]

	# Control scripts.
	got=$(listing "$u/outer/control.tar.gz" | sort)
	want=$(printf '%s\n' "drwxr-xr-x 0/0 " "-rw-r--r-- 0/0 conffiles" "-rw-r--r-- 0/0 control" \
		"-rwxr-xr-x 0/0 postinst" "-rwxr-xr-x 0/0 prerm" | sort)
	if [ "$got" = "$want" ]; then ok "control.tar: postinst/prerm 0755, control/conffiles 0644, all 0:0"; else
		bad "control.tar modes/owners"; printf '        %s\n' "$got"; fi
	check "postinst is a shell script" sh -n "$u/control/postinst"
	check "prerm is a shell script" sh -n "$u/control/prerm"

	# Data: exactly these entries, modes and owners.
	got=$(listing "$u/outer/data.tar.gz" | sort)
	want=$(printf '%s\n' "drwxr-xr-x 0/0 " "drwxr-xr-x 0/0 etc/" "drwxr-xr-x 0/0 etc/config/" \
		"-rw------- 0/0 etc/config/tinyhub" "drwxr-xr-x 0/0 etc/init.d/" \
		"-rwxr-xr-x 0/0 etc/init.d/tinyhub" "drwxr-xr-x 0/0 usr/" "drwxr-xr-x 0/0 usr/bin/" \
		"-rwxr-xr-x 0/0 usr/bin/tinyhub" "drwxr-xr-x 0/0 lib/" "drwxr-xr-x 0/0 lib/upgrade/" \
		"drwxr-xr-x 0/0 lib/upgrade/keep.d/" "-rw-r--r-- 0/0 lib/upgrade/keep.d/tinyhub" | sort)
	if [ "$got" = "$want" ]; then ok "data.tar: bin and init 0755, config 0600, keep list 0644, dirs 0755, all 0:0, nothing else"; else
		bad "data.tar entries"; printf '        %s\n' "$got"; fi
	mtimes=$(for t in "$ipk" "$u/outer/control.tar.gz" "$u/outer/data.tar.gz"; do
		tar --full-time -tvzf "$t" | awk '{ print $4, $5 }'; done | sort -u)
	check "every entry has one fixed mtime ($mtimes)" [ "$(printf '%s\n' "$mtimes" | wc -l)" = 1 ]
	check "conffile /etc/config/tinyhub is in data" [ -f "$u/root/etc/config/tinyhub" ]
	check_installed_files "$u/root"

	check_binary "$u/root/usr/bin/tinyhub" "$cpu"
	check_instroot_scripts "$u/root" "$u/control/postinst" "$u/control/prerm"

	# Same inputs, same bytes: pack the unpacked binary again at the package's own mtime.
	epoch=$(tar --numeric-owner --full-time -tvzf "$ipk" | head -1 | awk '{ print $4 " " $5 }')
	epoch=$(date -u -d "$epoch" +%s)
	if SOURCE_DATE_EPOCH=$epoch sh "$here/../mkipk.sh" "$u/root/usr/bin/tinyhub" "$arch" "$u/again" > /dev/null &&
		cmp -s "$ipk" "$u/again/$(basename "$ipk")"; then
		ok "rebuilt from the same binary, byte for byte identical"
	else
		bad "rebuilding from the same binary gives different bytes"
	fi
}

while [ $# -ge 3 ]; do
	check_ipk "$1" "$2" "$3"
	shift 3
done

finish ipk-test
