# shellcheck shell=sh
# pkg-lib.sh: sourced by mkipk.sh, mkapk.sh and the package tests, which set $cross to the
# cross/ directory. Where the package metadata comes from, and the files both packages install.
# Each fact lives in one place: the version, description, licence and maintainer in
# Cargo.toml's [package], the release in openwrt/Makefile's PKG_RELEASE (as in an OpenWrt
# feed); the package version is <version>-r<release>, OpenWrt's form.

# cargo_field <key>: the first quoted string of <key> in Cargo.toml's [package] (for
# `authors = ["Name <address>"]`, the first author).
cargo_field() {
	awk -F'"' -v key="$1" '/^\[/ { p = ($0 == "[package]") }
		p && $0 ~ "^" key " *=" { print $2; exit }' "$cross/../Cargo.toml"
}

# feed_field <name>: the value of <name>:= in the OpenWrt feed Makefile.
feed_field() {
	sed -n "s/^$1:=//p" "$cross/openwrt/Makefile"
}

# pkg_version: <Cargo.toml version>-r<PKG_RELEASE>, e.g. 0.1.0-r1.
pkg_version() {
	echo "$(cargo_field version)-r$(feed_field PKG_RELEASE)"
}

# stage_files <binary> <dir>: the installed files, with their modes, under <dir> (which must
# exist, mode 0755): the binary, the procd init script, the UCI config (0600, as OpenWrt's
# INSTALL_CONF installs every UCI file: root alone runs and configures services, and
# extra_args may carry something private) and the sysupgrade keep list.
stage_files() {
	install -d -m 0755 "$2/usr" "$2/usr/bin" "$2/etc" "$2/etc/init.d" "$2/etc/config" \
		"$2/lib" "$2/lib/upgrade" "$2/lib/upgrade/keep.d"
	install -m 0755 "$1" "$2/usr/bin/tinyhub"
	install -m 0755 "$cross/openwrt/tinyhub.init" "$2/etc/init.d/tinyhub"
	install -m 0600 "$cross/openwrt/tinyhub.config" "$2/etc/config/tinyhub"
	install -m 0644 "$cross/openwrt/tinyhub.keep" "$2/lib/upgrade/keep.d/tinyhub"
}

# The one conffile: sysupgrade and the package manager keep the user's copy.
CONFFILES=/etc/config/tinyhub
# What the packages need on the router: procd runs the init script; kmod-dummy makes the
# hub's local address for pods. The binary is static: no libraries.
DEPENDS="procd kmod-dummy"

# pack_args <tool> <binary> <openwrt-arch> <out-dir>: checks mkipk.sh's or mkapk.sh's
# arguments (exits 2 or 1 with a message) and sets bin, arch, out and version.
pack_args() {
	tool=$1
	shift
	if [ $# -ne 3 ]; then
		echo "usage: $tool.sh <binary> <openwrt-arch> <out-dir>" >&2
		exit 2
	fi
	bin=$1 arch=$2 out=$3
	version=$(pkg_version)
	[ -f "$bin" ] || { echo "$tool: no binary at $bin (run make armv7 / make aarch64)" >&2; exit 1; }
	case $arch in
		*[!A-Za-z0-9_.+-]*|'') echo "$tool: bad architecture name '$arch'" >&2; exit 1 ;;
	esac
}
