# tinyhub: the two set-up commands of the README are `make demo` and `make test`.
#
#   make build        release binary: target/release/tinyhub
#   make test         the whole test suite (unit and integration, kubectl end-to-end)
#   make demo         the main job on a bundled stand-in apiserver, step by step
#   make bench        measure hub vs direct and write BENCHMARKS.md (`make bench-quick`: a smoke run)
#   make lint         rustfmt and clippy, as CI runs them
#   make tools        install what the tests need (kubectl) when missing
#   make armv7 | aarch64 | ipk | cross-test   gateways and OpenWrt: see cross/README.md

CARGO ?= cargo

.DEFAULT_GOAL := build
.PHONY: build test demo bench bench-quick lint tools

build:
	$(CARGO) build --release

test: tools
	$(CARGO) test --all-targets

demo: tools build
	$(CARGO) run --release --example demo

bench: build
	$(CARGO) bench --bench hub

bench-quick: build
	$(CARGO) bench --bench hub -- --quick

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

# kubectl: the Debian package `kubectl` where the machine's sources have it, else Debian
# bookworm's `kubernetes-client` (an older kubectl, enough for the tests).
tools:
	@command -v kubectl >/dev/null 2>&1 || { \
		echo "installing kubectl"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		{ $$SUDO apt-get install -y -qq kubectl || $$SUDO apt-get install -y -qq kubernetes-client; }; \
	}

include cross/cross.mk
