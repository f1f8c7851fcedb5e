#!/bin/sh
# mkipk.sh <binary> <openwrt-arch> <out-dir>: packs a static tinyhub binary with the OpenWrt
# files under cross/openwrt/ into <out-dir>/tinyhub_<version>_<arch>.ipk, <version> being
# pkg-lib.sh's (e.g. 0.1.0-r1).
#
# The layout is what OpenWrt's scripts/ipkg-build writes: a gzipped tar of ./debian-binary
# ("2.0"), ./data.tar.gz and ./control.tar.gz. Reproducible: entries sorted, owned by 0:0,
# every mtime at $SOURCE_DATE_EPOCH (default 0), gzip without name or time. Needs only
# Debian's tar and gzip (no ar, no fakeroot). Installed-Size is, as in ipkg-build, the
# byte size of the uncompressed data tar.
set -eu

cross=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=pkg-lib.sh
. "$cross/pkg-lib.sh"
pack_args mkipk "$@"
owrt=$cross/openwrt
epoch=${SOURCE_DATE_EPOCH:-0}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT INT TERM
data=$stage/data
ctrl=$stage/control
pkg=$stage/pkg
# mktemp -d makes 0700 directories; the "./" entry of data.tar must not carry that mode.
install -d -m 0755 "$data" "$ctrl" "$pkg"
stage_files "$bin" "$data"

tarball() { # <dir> <out.tar.gz> [members...]: reproducible gzipped tar of <dir>
	dir=$1 dest=$2
	shift 2
	[ $# -gt 0 ] || set -- .
	(cd "$dir" && tar --format=gnu --sort=name --numeric-owner --owner=0 --group=0 \
		--mtime="@$epoch" -cf - "$@") | gzip -9n > "$dest"
}

tarball "$data" "$pkg/data.tar.gz"
installed_size=$(gzip -dc "$pkg/data.tar.gz" | wc -c | tr -d ' ')

cat > "$ctrl/control" <<EOF
Package: tinyhub
Version: $version
Depends: $(echo "$DEPENDS" | sed 's/ /, /g')
License: $(cargo_field license)
Section: net
Architecture: $arch
Installed-Size: $installed_size
Maintainer: $(cargo_field authors)
Description: $(cargo_field description)
EOF
echo "$CONFFILES" > "$ctrl/conffiles"
chmod 0644 "$ctrl/control" "$ctrl/conffiles"
install -m 0755 "$owrt/postinst" "$ctrl/postinst"
install -m 0755 "$owrt/prerm" "$ctrl/prerm"
tarball "$ctrl" "$pkg/control.tar.gz"

echo 2.0 > "$pkg/debian-binary"
chmod 0644 "$pkg/debian-binary" "$pkg/data.tar.gz" "$pkg/control.tar.gz"
mkdir -p "$out"
ipk=$out/tinyhub_${version}_${arch}.ipk
# Member order as ipkg-build writes it.
tarball "$pkg" "$ipk.tmp" ./debian-binary ./data.tar.gz ./control.tar.gz
mv "$ipk.tmp" "$ipk"
echo "mkipk: $ipk ($(wc -c < "$ipk" | tr -d ' ') bytes, installs $installed_size)"
