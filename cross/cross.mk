# cross/cross.mk: static builds for gateways, OpenWrt packages, and their tests.
#
# Included by the top-level Makefile (`include cross/cross.mk`), or run on its own from the
# repo top while developing: `make -f cross/cross.mk <target>`. Every path is relative to
# the repo top. `make -f cross/cross.mk cross-help` lists the targets.
#
# It installs what it needs when missing: zig (PyPI `ziglang`, into .cross-venv/), nightly
# rust-src, the aarch64 musl std, and Debian's qemu-user-static, file, binutils, busybox and
# systemd for tests (only the package of a missing command: tests/install-missing.sh).
# It does not touch host builds: the cross settings live in cross/cargo-config.toml, passed
# with --config only here.

# Keep the includer's default goal: these rules must not become `make`'s first target.
CROSS_SAVED_DEFAULT_GOAL := $(.DEFAULT_GOAL)
CROSS_STANDALONE := $(if $(filter 1,$(words $(MAKEFILE_LIST))),yes)

CROSS_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
CARGO_TARGET_DIR ?= target
CARGO ?= cargo
# rustup toolchain for armv7: its std is built from rust-src (-Zbuild-std), which needs
# nightly cargo. A machine without a nightly toolchain (and none can be fetched on some)
# builds with its stable one, allowing -Z with RUSTC_BOOTSTRAP=1.
CROSS_HAVE_NIGHTLY := $(shell rustup toolchain list 2>/dev/null | grep -q '^nightly' && echo yes)
ifeq ($(CROSS_HAVE_NIGHTLY),yes)
CROSS_NIGHTLY ?= nightly
CROSS_BOOTSTRAP ?=
else
CROSS_NIGHTLY ?= stable
CROSS_BOOTSTRAP ?= RUSTC_BOOTSTRAP=1
endif
# Pinned: zig's CPU feature syntax used by cross/zig-cc-armv7 was checked with this version.
CROSS_ZIGLANG ?= ziglang==0.17.1
CROSS_VENV ?= .cross-venv
# 1 = build armv7 with -Cpanic=immediate-abort: about 10% smaller, but a panic then dies by
# SIGILL with no message and no panic hook (see cross/README.md). Off by default.
CROSS_IMMEDIATE_ABORT ?= 0
# Appended to the rustflags of cross/cargo-config.toml (cargo joins arrays across configs).
CROSS_IMMEDIATE_ABORT_CONFIG := --config 'target.armv7-unknown-linux-musleabihf.rustflags=["-Zunstable-options", "-Cpanic=immediate-abort"]'

CROSS_ARMV7 := armv7-unknown-linux-musleabihf
CROSS_AARCH64 := aarch64-unknown-linux-musl
CROSS_ARMV7_BIN := $(CARGO_TARGET_DIR)/$(CROSS_ARMV7)/release/tinyhub
CROSS_AARCH64_BIN := $(CARGO_TARGET_DIR)/$(CROSS_AARCH64)/release/tinyhub
# The gateways' static musl build for this machine's architecture: make bench measures it.
CROSS_X86_64 := x86_64-unknown-linux-musl
CROSS_X86_64_BIN := $(CARGO_TARGET_DIR)/$(CROSS_X86_64)/release/tinyhub

# OpenWrt architecture names written into the packages (opkg installs only matching ones).
# arm_cortex-a9_vfpv3-d16 is the OpenWrt arch whose floor is exactly this binary's: ARMv7-A,
# VFPv3-D16, no NEON (mvebu Armada 370/XP, tegra). The same binary runs on every armv7
# target with an FPU: relabel it with e.g. CROSS_ARMV7_IPK_ARCH=arm_cortex-a7_neon-vfpv4.
CROSS_ARMV7_IPK_ARCH ?= arm_cortex-a9_vfpv3-d16
CROSS_AARCH64_IPK_ARCH ?= aarch64_generic
CROSS_IPK_DIR ?= $(CARGO_TARGET_DIR)/ipk
CROSS_APK_DIR ?= $(CARGO_TARGET_DIR)/apk
# <Cargo.toml version>-r<PKG_RELEASE of cross/openwrt/Makefile>, e.g. 0.1.0-r1: the packages'
# version, as cross/pkg-lib.sh derives it for mkipk.sh and mkapk.sh.
CROSS_VERSION := $(shell cross=$(CROSS_DIR) sh -c '. "$$cross/pkg-lib.sh" && pkg_version')
CROSS_ARMV7_IPK := $(CROSS_IPK_DIR)/tinyhub_$(CROSS_VERSION)_$(CROSS_ARMV7_IPK_ARCH).ipk
CROSS_AARCH64_IPK := $(CROSS_IPK_DIR)/tinyhub_$(CROSS_VERSION)_$(CROSS_AARCH64_IPK_ARCH).ipk
# apk (OpenWrt 25.x) packages carry the same architecture names, one directory per arch.
CROSS_ARMV7_APK := $(CROSS_APK_DIR)/$(CROSS_ARMV7_IPK_ARCH)/tinyhub-$(CROSS_VERSION).apk
CROSS_AARCH64_APK := $(CROSS_APK_DIR)/$(CROSS_AARCH64_IPK_ARCH)/tinyhub-$(CROSS_VERSION).apk
# Fixed mtime for reproducible packages: the last commit's time, else the epoch.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# qemu CPU for the armv7 runs, read by qemu-arm-static from the environment. qemu's default
# CPU ("any") and its plain cortex-a7/a9/a15 models all have NEON; with neon=off a stray NEON
# instruction traps with SIGILL (cross/test/binary-test.sh proves it), and AT_HWCAP says "no
# NEON" so ring's run-time dispatch takes its plain ARM code. qemu 7.2 cannot take away the
# upper 16 double registers (no vfp-d32 property for these CPUs): VFPv3-D16 is checked on
# the ELF attributes only.
CROSS_QEMU_ARM_CPU ?= cortex-a9,neon=off

.PHONY: armv7 aarch64 ipk ipk-test apk apk-test init-test systemd-test cross-test cross-help \
	cross-zig cross-rust-src cross-aarch64-std cross-x86_64-std cross-test-tools x86_64-musl \
	idle-text

cross-help:
	@echo "cross targets (run from the repo top):"
	@echo "  armv7       static $(CROSS_ARMV7) binary -> $(CROSS_ARMV7_BIN)"
	@echo "  aarch64     static $(CROSS_AARCH64) binary -> $(CROSS_AARCH64_BIN)"
	@echo "  x86_64-musl static $(CROSS_X86_64) binary -> $(CROSS_X86_64_BIN) (make bench measures it)"
	@echo "  idle-text   regenerate $(CROSS_DIR)/idle-text.ld from a profile of the idle hub (valgrind)"
	@echo "  ipk         OpenWrt packages -> $(CROSS_ARMV7_IPK) and $(CROSS_AARCH64_IPK)"
	@echo "  ipk-test    unpack the packages and check them; check the feed Makefile"
	@echo "  apk         OpenWrt 25.x packages -> $(CROSS_ARMV7_APK) and $(CROSS_AARCH64_APK)"
	@echo "  apk-test    read the apk packages back and check them"
	@echo "  init-test   run cross/openwrt/tinyhub.init against stand-ins of rc.common/procd/UCI"
	@echo "  systemd-test  check README.md's systemd example against cross/systemd/tinyhub.service"
	@echo "  cross-test  all of the above, the binaries under qemu, and the emulated-hub test"

# --- tools --------------------------------------------------------------------------------

cross-zig:
	@if ! $(CROSS_VENV)/bin/python3 -m ziglang version >/dev/null 2>&1; then \
		echo "cross: installing $(CROSS_ZIGLANG) into $(CROSS_VENV)/"; \
		python3 -m venv $(CROSS_VENV) && \
		$(CROSS_VENV)/bin/pip install --quiet --disable-pip-version-check '$(CROSS_ZIGLANG)'; \
	fi

cross-rust-src:
	@rustup component list --toolchain $(CROSS_NIGHTLY) --installed 2>/dev/null | grep -q '^rust-src' || { \
		echo "cross: installing rust-src for $(CROSS_NIGHTLY)"; \
		rustup component add rust-src --toolchain $(CROSS_NIGHTLY); }

# For the toolchain cargo uses in this directory (rust-toolchain.toml if any, else default).
cross-aarch64-std:
	@rustup target list --installed | grep -qx '$(CROSS_AARCH64)' || { \
		echo "cross: installing the $(CROSS_AARCH64) std"; \
		rustup target add $(CROSS_AARCH64); }

cross-x86_64-std:
	@rustup target list --installed | grep -qx '$(CROSS_X86_64)' || { \
		echo "cross: installing the $(CROSS_X86_64) std"; \
		rustup target add $(CROSS_X86_64); }

# busybox: init-test runs the init script under OpenWrt's shell (ash). systemd: only for
# systemd-analyze (systemd-test); the package does not make itself the init, and a Debian
# machine booted with systemd has it already. Only the package of a missing command is
# installed, never one already there (tests/install-missing.sh: installing an installed
# package upgrades it, as it once did the host's systemd).
cross-test-tools:
	@sh tests/install-missing.sh qemu-arm-static:qemu-user-static \
		qemu-aarch64-static:qemu-user-static file:file readelf:binutils busybox:busybox \
		systemd-analyze:systemd

# --- binaries -----------------------------------------------------------------------------

# Phony on purpose: cargo decides what is stale.
armv7: cross-zig cross-rust-src
	CARGO_TARGET_DIR=$(CARGO_TARGET_DIR) $(CROSS_BOOTSTRAP) $(CARGO) +$(CROSS_NIGHTLY) build --release \
		--config $(CROSS_DIR)/cargo-config.toml --target $(CROSS_ARMV7) \
		-Zbuild-std=std,panic_abort -Zbuild-std-features=optimize_for_size \
		$(if $(filter 1,$(CROSS_IMMEDIATE_ABORT)),$(CROSS_IMMEDIATE_ABORT_CONFIG))
	@ls -l $(CROSS_ARMV7_BIN)

aarch64: cross-zig cross-aarch64-std
	CARGO_TARGET_DIR=$(CARGO_TARGET_DIR) $(CARGO) build --release \
		--config $(CROSS_DIR)/cargo-config.toml --target $(CROSS_AARCH64)
	@ls -l $(CROSS_AARCH64_BIN)

x86_64-musl: cross-zig cross-x86_64-std
	CARGO_TARGET_DIR=$(CARGO_TARGET_DIR) $(CARGO) build --release \
		--config $(CROSS_DIR)/cargo-config.toml --target $(CROSS_X86_64)
	@ls -l $(CROSS_X86_64_BIN)

# The musl builds link the functions an idle hub runs first in their text (build.rs passes
# cross/idle-text.ld; cross/idle-text.py says why). This rewrites that file from a callgrind
# profile of an unstripped x86_64 musl build idling under tests/integration/watch_memory.rs's
# driver: after changes to what the idle hub runs. About 10 minutes; needs valgrind and
# binutils. A stale file is harmless: it places less of what runs.
CROSS_IDLE_TEXT_DIR ?= $(CARGO_TARGET_DIR)/idle-text
idle-text: cross-zig cross-x86_64-std
	CARGO_TARGET_DIR=$(CROSS_IDLE_TEXT_DIR) CARGO_PROFILE_RELEASE_STRIP=false $(CARGO) build --release \
		--config $(CROSS_DIR)/cargo-config.toml --target $(CROSS_X86_64)
	@sh tests/install-missing.sh valgrind:valgrind objcopy:binutils
	IDLE_TEXT_DIR=$(CROSS_IDLE_TEXT_DIR) python3 $(CROSS_DIR)/idle-text.py \
		$(CROSS_IDLE_TEXT_DIR)/$(CROSS_X86_64)/release/tinyhub $(CROSS_DIR)/idle-text.ld

# --- OpenWrt packages ---------------------------------------------------------------------

ipk: armv7 aarch64
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) sh $(CROSS_DIR)/mkipk.sh \
		$(CROSS_ARMV7_BIN) $(CROSS_ARMV7_IPK_ARCH) $(CROSS_IPK_DIR)
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) sh $(CROSS_DIR)/mkipk.sh \
		$(CROSS_AARCH64_BIN) $(CROSS_AARCH64_IPK_ARCH) $(CROSS_IPK_DIR)

# OpenWrt 25.x: apk v3 packages, written by cross/mkapk.py (python3's standard library).
apk: armv7 aarch64
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) sh $(CROSS_DIR)/mkapk.sh \
		$(CROSS_ARMV7_BIN) $(CROSS_ARMV7_IPK_ARCH) $(CROSS_APK_DIR)
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) sh $(CROSS_DIR)/mkapk.sh \
		$(CROSS_AARCH64_BIN) $(CROSS_AARCH64_IPK_ARCH) $(CROSS_APK_DIR)

# --- tests --------------------------------------------------------------------------------

CROSS_IPK_TEST = sh $(CROSS_DIR)/test/ipk-test.sh $(CROSS_VERSION) \
	$(CROSS_ARMV7_IPK) $(CROSS_ARMV7_IPK_ARCH) armv7 \
	$(CROSS_AARCH64_IPK) $(CROSS_AARCH64_IPK_ARCH) aarch64

CROSS_APK_TEST = sh $(CROSS_DIR)/test/apk-test.sh $(CROSS_VERSION) \
	$(CROSS_ARMV7_APK) $(CROSS_ARMV7_IPK_ARCH) armv7 \
	$(CROSS_AARCH64_APK) $(CROSS_AARCH64_IPK_ARCH) aarch64

ipk-test: ipk cross-test-tools
	$(CROSS_IPK_TEST)
	sh $(CROSS_DIR)/test/feed-test.sh

apk-test: apk cross-test-tools
	$(CROSS_APK_TEST)

init-test:
	sh $(CROSS_DIR)/test/init-test.sh

systemd-test:
	sh $(CROSS_DIR)/test/systemd-test.sh

cross-test: armv7 aarch64 ipk apk cross-test-tools
	QEMU_CPU='$(CROSS_QEMU_ARM_CPU)' sh $(CROSS_DIR)/test/binary-test.sh armv7 $(CROSS_ARMV7_BIN)
	sh $(CROSS_DIR)/test/binary-test.sh aarch64 $(CROSS_AARCH64_BIN)
	$(CROSS_IPK_TEST)
	$(CROSS_APK_TEST)
	sh $(CROSS_DIR)/test/feed-test.sh
	sh $(CROSS_DIR)/test/init-test.sh
	sh $(CROSS_DIR)/test/systemd-test.sh
	@# Checked as `make test` is: nothing left behind, the default directories held (tests/untouched.sh).
	sh tests/untouched.sh "QEMU_CPU='$(CROSS_QEMU_ARM_CPU)' CARGO_TARGET_DIR=$(CARGO_TARGET_DIR) \
		CARGO='$(CARGO)' sh $(CROSS_DIR)/test/emulated-hub-test.sh $(CROSS_ARMV7_BIN)"

ifeq ($(CROSS_STANDALONE),yes)
.DEFAULT_GOAL := cross-help
else
.DEFAULT_GOAL := $(CROSS_SAVED_DEFAULT_GOAL)
endif
