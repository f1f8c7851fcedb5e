#!/bin/sh
# feed-test.sh: evaluates cross/openwrt/Makefile (the OpenWrt feed package) against a
# stand-in of the OpenWrt build system, since the SDK is not available here. Checks that it
# follows the packages feed's Rust conventions, that its version is Cargo.toml's, that
# Build/Prepare copies the crate, and that Package/tinyhub/install lays out the same files
# with the same modes as `make ipk`. It does not compile anything. Exits non-zero on failure.
set -u

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
feed=$here/../openwrt
top=$(CDPATH='' cd -- "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"
cross=$here/..
# shellcheck source=../pkg-lib.sh
. "$cross/pkg-lib.sh"

echo "feed-test: $feed/Makefile"

# The stand-in build system: just enough of rules.mk, package.mk and the packages feed's
# rust-package.mk for the Makefile to be read and its package hooks to run.
sdk=$work/sdk
mkdir -p "$sdk/include" "$sdk/feeds/packages/lang/rust"
cat > "$sdk/rules.mk" <<'EOF'
INCLUDE_DIR:=$(TOPDIR)/include
CP:=cp -fpR
INSTALL_BIN:=install -m0755
INSTALL_DIR:=install -d -m0755
INSTALL_DATA:=install -m0644
INSTALL_CONF:=install -m0600
EOF
cat > "$sdk/include/package.mk" <<'EOF'
PKG_BUILD_DIR ?= $(BUILD_DIR)/$(PKG_NAME)-$(PKG_VERSION)
PKG_INSTALL_DIR ?= $(PKG_BUILD_DIR)/ipkg-install
define BuildPackage
feedtest-vars:
	@echo 'PKG_NAME=$(PKG_NAME)'
	@echo 'PKG_VERSION=$(PKG_VERSION)'
	@echo 'PKG_MAINTAINER=$(PKG_MAINTAINER)'
	@echo 'PKG_BUILD_DEPENDS=$(PKG_BUILD_DEPENDS)'
	@echo 'RUST_BIN_PACKAGE=$(RUST_BIN_PACKAGE)'
	@echo 'CONFFILES=$$(strip $$(Package/$(1)/conffiles))'
feedtest-prepare:
	$$(Build/Prepare)
feedtest-install:
	$$(call Package/$(1)/install,$$(FEEDTEST_ROOT))
endef
EOF
cat > "$sdk/feeds/packages/lang/rust/rust-package.mk" <<'EOF'
RUST_ARCH_DEPENDS:=@(aarch64||arm||x86_64)
define RustBinPackage
RUST_BIN_PACKAGE:=$(1)
endef
EOF

mk() { make -s -C "$feed" TOPDIR="$sdk" BUILD_DIR="$work/build" FEEDTEST_ROOT="$work/root" "$@"; }

vars=$(mk feedtest-vars 2>&1) || { bad "Makefile evaluates: $vars"; vars=; }
var() { printf '%s\n' "$vars" | sed -n "s/^$1=//p"; }
cargo_version=$(cargo_field version)
cargo_author=$(cargo_field authors)
check "PKG_NAME is tinyhub" [ "$(var PKG_NAME)" = tinyhub ]
check "PKG_VERSION is Cargo.toml's ($cargo_version)" [ "$(var PKG_VERSION)" = "$cargo_version" ]
check "PKG_MAINTAINER is Cargo.toml's first author, with an address ($cargo_author)" \
	sh -c '[ "$1" = "$2" ] && case $1 in *"<"*@*">") ;; *) exit 1 ;; esac' - "$(var PKG_MAINTAINER)" "$cargo_author"
check "PKG_BUILD_DEPENDS:=rust/host" [ "$(var PKG_BUILD_DEPENDS)" = rust/host ]
check "RustBinPackage is called for tinyhub" [ "$(var RUST_BIN_PACKAGE)" = tinyhub ]
check "conffiles: /etc/config/tinyhub" [ "$(var CONFFILES)" = /etc/config/tinyhub ]
check "DEPENDS uses \$(RUST_ARCH_DEPENDS)" grep -q 'DEPENDS:=$(RUST_ARCH_DEPENDS)' "$feed/Makefile"
check "DEPENDS pulls kmod-dummy (the dummy interface)" grep -q 'DEPENDS:=.* +kmod-dummy$' "$feed/Makefile"
check "includes the packages feed's rust-package.mk" grep -q '^include .*lang/rust/rust-package.mk' "$feed/Makefile"

# Build/Prepare copies the crate of this checkout.
if mk feedtest-prepare > "$work/prepare.log" 2>&1; then
	b=$work/build/tinyhub-$cargo_version
	check "Build/Prepare copies this checkout's Cargo.toml" cmp -s "$b/Cargo.toml" "$top/Cargo.toml"
	check "Build/Prepare copies Cargo.lock (RUST_PKG_LOCKED builds --locked)" cmp -s "$b/Cargo.lock" "$top/Cargo.lock"
	check "Build/Prepare copies build.rs and src/" [ -f "$b/build.rs" -a -f "$b/src/main.rs" ]
else
	bad "Build/Prepare: $(cat "$work/prepare.log")"
fi

# Package/tinyhub/install, with a fake built binary.
b=$work/build/tinyhub-$cargo_version
mkdir -p "$b/ipkg-install/bin"
printf 'fake' > "$b/ipkg-install/bin/tinyhub"
if mk feedtest-install > "$work/install.log" 2>&1; then
	got=$(cd "$work/root" && find . -mindepth 1 -printf '%M %p\n' | sort)
	want=$(printf '%s\n' "drwxr-xr-x ./etc" "drwxr-xr-x ./etc/config" "-rw------- ./etc/config/tinyhub" \
		"drwxr-xr-x ./etc/init.d" "-rwxr-xr-x ./etc/init.d/tinyhub" "drwxr-xr-x ./usr" \
		"drwxr-xr-x ./usr/bin" "-rwxr-xr-x ./usr/bin/tinyhub" "drwxr-xr-x ./lib" \
		"drwxr-xr-x ./lib/upgrade" "drwxr-xr-x ./lib/upgrade/keep.d" \
		"-rw-r--r-- ./lib/upgrade/keep.d/tinyhub" | sort)
	if [ "$got" = "$want" ]; then ok "install lays out the files of make ipk, with its modes"; else
		bad "install layout"; printf '        %s\n' "$got"; fi
	check "installed init script is cross/openwrt/tinyhub.init" cmp -s "$work/root/etc/init.d/tinyhub" "$feed/tinyhub.init"
	check "installed config is cross/openwrt/tinyhub.config" cmp -s "$work/root/etc/config/tinyhub" "$feed/tinyhub.config"
	check "installed sysupgrade keep list is cross/openwrt/tinyhub.keep" \
		cmp -s "$work/root/lib/upgrade/keep.d/tinyhub" "$feed/tinyhub.keep"
else
	bad "Package/tinyhub/install: $(cat "$work/install.log")"
fi

finish feed-test
