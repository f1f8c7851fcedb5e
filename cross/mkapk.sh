#!/bin/sh
# mkapk.sh <binary> <openwrt-arch> <out-dir>: packs a static tinyhub binary with the OpenWrt
# files under cross/openwrt/ into <out-dir>/<arch>/tinyhub-<version>.apk, the apk v3 package
# OpenWrt 25.x installs (`apk add`), laid out as OpenWrt's include/package-pack.mk lays out
# its packages for `apk mkpkg`:
#   - the files of the ipk (pkg-lib.sh's stage_files), with lib/apk/packages/tinyhub.list
#     (every file), tinyhub.conffiles (/etc/config/tinyhub) and tinyhub.conffiles_static
#     (each conffile with its sha256, which tells apk whether the user changed it, so an
#     upgrade or removal keeps a changed config, and sysupgrade keeps it too);
#   - scripts: post-install is openwrt/postinst, post-upgrade the same with PKG_UPGRADE=1
#     (OpenWrt's form), pre-deinstall openwrt/prerm;
#   - info: name, version (<version>-r<release>), description, arch (OpenWrt's names, as
#     the ipk's: apk installs only a package whose arch is in /etc/apk/arch), license,
#     origin, maintainer, depends.
# cross/mkapk.py writes the file. Reproducible as mkipk.sh: root-owned entries, every time
# at $SOURCE_DATE_EPOCH (default 0). Needs python3 (its standard library), install, sha256sum.
set -eu

cross=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=pkg-lib.sh
. "$cross/pkg-lib.sh"
pack_args mkapk "$@"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT INT TERM
files=$stage/files
install -d -m 0755 "$files"
stage_files "$bin" "$files"

# OpenWrt's package metadata files, which its /lib/functions.sh, apk and sysupgrade read.
meta=$files/lib/apk/packages
list=$(cd "$files" && find . -type f -printf '/%P\n' | LC_ALL=C sort)
install -d -m 0755 "$files/lib/apk" "$meta"
printf '%s\n' "$list" > "$meta/tinyhub.list"
printf '%s\n' $CONFFILES > "$meta/tinyhub.conffiles"
for f in $CONFFILES; do
	echo "$f $(sha256sum < "$files$f" | cut -d' ' -f1)"
done > "$meta/tinyhub.conffiles_static"
chmod 0644 "$meta/tinyhub.list" "$meta/tinyhub.conffiles" "$meta/tinyhub.conffiles_static"

{ echo '#!/bin/sh'; echo 'export PKG_UPGRADE=1'; sed '/^#!/d' "$cross/openwrt/postinst"; } \
	> "$stage/post-upgrade"

mkdir -p "$out/$arch"
apk=$out/$arch/tinyhub-$version.apk
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0} python3 "$cross/mkapk.py" \
	--info "name:tinyhub" --info "version:$version" \
	--info "description:$(cargo_field description)" --info "arch:$arch" \
	--info "license:$(cargo_field license)" --info "origin:tinyhub" \
	--info "maintainer:$(cargo_field authors)" --info "depends:$DEPENDS" \
	--script "post-install:$cross/openwrt/postinst" \
	--script "post-upgrade:$stage/post-upgrade" \
	--script "pre-deinstall:$cross/openwrt/prerm" \
	--files "$files" --output "$apk"
echo "mkapk: $apk ($(wc -c < "$apk" | tr -d ' ') bytes)"
