# tinyhub: the two set-up commands of the README are `make demo` and `make test`.
#
#   make build        release binary: target/release/tinyhub
#   make test         the whole test suite (unit and integration, kubectl end-to-end)
#   make demo         the main job on a bundled stand-in apiserver, step by step
#   make try          the hub and that apiserver left running, to try by hand (Ctrl-C ends it)
#   make bench        measure hub vs direct and write BENCHMARKS.md (`make bench-quick`: a smoke run)
#   make bench-armv7  case 10's relative figures of the armv7 binary under qemu (prints them)
#   make readme       rewrite README.md's "Measured" block from BENCHMARKS.md (make bench does too)
#   make lint         rustfmt, clippy and the floors check (tests/floors.rs), as CI runs them
#   make fuzz         each cargo-fuzz target for FUZZ_SECONDS (nightly; see fuzz/README.md)
#   make tools        install what the tests need (kubectl, iproute2) when missing
#   make armv7 | aarch64 | ipk | apk | cross-test   gateways and OpenWrt: see cross/README.md

CARGO ?= cargo

.DEFAULT_GOAL := build
.PHONY: build test demo try bench bench-quick bench-armv7 bench-tools readme lint tools fuzz fuzz-cmin

build:
	$(CARGO) build --release

# `fuzzing`: tests/fuzz_corpus.rs replays the fuzz corpus through src/fuzzing.rs.
# Every target, as `cargo test --all-targets`, in two runs: the unit tests (--lib) one per
# core, as libtest runs them (some race a checker thread: more at once on 2 cores made one
# fail), then the rest TEST_THREADS at a time: the integration tests mostly wait (the hub's
# timeouts, the stand-in cloud's delays, hubs starting) and keep about half a core busy, so
# one per core took 6 minutes on a 2-core machine; 8 at a time, 2.
# tests/untouched.sh runs them with a TMPDIR of their own that must be empty at the end, and
# checks that a hub's default paths (/var/lib/yurthub, /etc/kubernetes) are left as they were;
# as root, in a mount namespace where those are private and held locked by a stand-in hub.
TEST_THREADS ?= 8
test: tools
	sh tests/untouched.sh '$(CARGO) test --features fuzzing --lib && \
		RUST_TEST_THREADS=$(TEST_THREADS) $(CARGO) test --features fuzzing --bins --examples --bench "*" --test "*"'

# The demo and the try run target/release/tinyhub as `make build` built it: one build serves
# all three. Each builds only its example (quiet: cargo's compile lines would drown the story;
# errors still show); building the binary with it would compile it again with the features the
# dev-dependencies add, and `make build` after that once more.
demo: build tools
	@echo "building the demo (cargo build --release --example demo), a few minutes the first time..."
	@$(CARGO) run --release -q --example demo

# Runs until Ctrl-C; its files in TRY_DIR (default ./try, git-ignored). examples/try.rs.
try: build tools
	@echo "building the try (cargo build --release --example try), a few minutes the first time..."
	@$(CARGO) run --release -q --example try

# The full run also measures the static x86_64 musl build (cross/cross.mk).
bench: build bench-tools x86_64-musl
	$(CARGO) bench --bench hub

bench-quick: build bench-tools
	$(CARGO) bench --bench hub -- --quick

# Case 10 with both hubs the armv7 binary under qemu, as cross-test runs it (cross/cross.mk's
# CPU): only the figures emulation leaves meaningful, as section "10a" (benches/hub/peer.rs).
# Prints them; BENCH_ARMV7_ARGS=--update also writes that section into BENCHMARKS.md.
BENCH_ARMV7_ARGS ?=
bench-armv7: armv7
	@sh tests/install-missing.sh qemu-arm-static:qemu-user-static
	TINYHUB_TEST_BIN='$(abspath $(CROSS_ARMV7_BIN))' TINYHUB_TEST_RUNNER=qemu-arm-static \
		QEMU_CPU='$(CROSS_QEMU_ARM_CPU)' $(CARGO) bench --bench hub -- --cases=10 $(BENCH_ARMV7_ARGS)

# Case 10's peer (nginx) and its system-call counter (strace), from Debian (command:package;
# tests/install-missing.sh installs only what is missing, never upgrades what is there).
bench-tools:
	@sh tests/install-missing.sh nginx:nginx strace:strace

# Measures nothing: the figures are BENCHMARKS.md's (tests/repo_docs.rs checks the block).
readme:
	$(CARGO) bench --bench hub -- --readme-only

# tests/floors.rs: imports run down ARCHITECTURE.md's floors, no circles of files.
lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets --features fuzzing -- -D warnings
	$(CARGO) test --features fuzzing --test floors

# Fuzzing needs nightly and cargo-fuzz; CI only replays the corpus (tests/fuzz_corpus.rs, part
# of `make test`). One fuzzer process at a time: `make fuzz FUZZ_SECONDS=600 FUZZ_TARGETS=selectors`.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?= request_head selectors body_decoder archive
FUZZ_CARGO ?= $(CARGO) +nightly
FUZZ = $(CURDIR)/fuzz
# Longest input: a request head or a selector pair is short, a response body is not.
FUZZ_MAX_LEN = case $$t in body_decoder|archive) echo 65536;; *) echo 4096;; esac

fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== fuzzing $$t for $(FUZZ_SECONDS) s"; \
		$(FUZZ_CARGO) fuzz run $$t $(FUZZ)/corpus/$$t $(FUZZ)/seeds/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=512 -max_len=$$($(FUZZ_MAX_LEN)) \
			-dict=$(FUZZ)/dicts/$$t.dict -print_final_stats=1; \
	done

# Shrinks each corpus to a small set of inputs with the same coverage (run before committing).
fuzz-cmin:
	@set -e; for t in $(FUZZ_TARGETS); do \
		$(FUZZ_CARGO) fuzz cmin $$t $(FUZZ)/corpus/$$t -- -set_cover_merge=1 -rss_limit_mb=512 -max_len=$$($(FUZZ_MAX_LEN)); \
	done

# kubectl: the Debian package `kubectl` where the machine's sources have it, else Debian
# bookworm's `kubernetes-client` (an older kubectl, enough for the tests). openssl checks the
# hub's CSRs and keys; python3 is a client of its HTTPS port; curl of a leader's multiplexer
# port (tests/integration/pool_leader.rs); iproute2's `ip` checks the dummy interface the
# netif tests make; util-linux's `unshare` and `setpriv` run tests/integration/dummy_if.rs's
# hub in a network namespace, with and without CAP_NET_ADMIN, and `flock` holds a hub's
# directories in tests/untouched.sh (command:package; tests/install-missing.sh installs only
# what is missing, never upgrades what is there).
tools:
	@sh tests/install-missing.sh 'kubectl:kubectl|kubernetes-client' openssl:openssl \
		python3:python3 curl:curl ip:iproute2 unshare:util-linux setpriv:util-linux flock:util-linux

include cross/cross.mk
