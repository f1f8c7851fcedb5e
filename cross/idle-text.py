#!/usr/bin/env python3
"""Writes cross/idle-text.ld: the functions an idle hub runs, first in the text (issue 34 item 4).

Usage (from the repo top, as `make idle-text` runs it; needs valgrind and binutils):
    python3 cross/idle-text.py <unstripped static musl tinyhub> <output .ld>

An idle hub's code is file-backed and the kernel maps each fault's whole 64 KiB window
(fault-around): once the start-up's pages are let go (src/text_pages.rs), the resident text is
every window holding a function the idle hub runs. Put together, those functions take a few
windows instead of nearly all of them.

The profile: tests/integration/watch_memory.rs's driver runs the hub under callgrind
(TINYHUB_TEST_RUNNER); the hub's call of text_pages::release once its start-up has settled
(src/app/shutdown.rs; under valgrind often at its 120 s limit) starts a new dump
(--dump-before), `callgrind_control --dump` ends the idle one IDLE seconds later, before the
driver opens its watches, and a third ends the watches' idle. The script writes the idle hub's functions first,
then those of its idle watches, each as an input section pattern without the symbol's hash,
so one script serves every target (x86_64, armv7, aarch64: the Rust paths are the same) and
survives edits. A stale script is harmless: a pattern that matches nothing places nothing, and
a function missing from it stays where the linker would have put it.
"""

import os
import re
import subprocess
import sys
import time

# The symbol whose call starts the idle profile (its legacy mangling, without the hash).
MARKER = "_ZN7tinyhub10text_pages7release"
# Idle seconds profiled, before and after the driver's watches open: the idle hub's periodic
# work within (the link totals' write and the identity's check every 60 s, a pooled
# connection aged out).
IDLE = 100
WATCHES = 15
# src/app/shutdown.rs's SETTLE_LIMIT: the marker's call comes by then.
SETTLE_LIMIT = 120


def wait_for(path, needle, proc, limit=600):
    """Waits until `needle` is in the file `path`; its text."""
    deadline = time.time() + limit
    while time.time() < deadline:
        text = open(path, encoding="utf-8", errors="replace").read() if os.path.exists(path) else ""
        if needle in text:
            return text
        if proc.poll() is not None:
            sys.exit(f"idle-text: the driver ended before '{needle}':\n{text[-3000:]}")
        time.sleep(0.5)
    sys.exit(f"idle-text: no '{needle}' within {limit} s")


def functions(dump):
    """The functions a callgrind dump (--compress-strings=no) shows run, in order of appearance
    (callgrind's `'2`, a recursion's depth, left out)."""
    seen = {}
    with open(dump, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                seen.setdefault(re.sub(r"'\d+$", "", line[3:].strip()), None)
    return list(seen)


def portable(symbol):
    """`symbol` without what differs between targets and builds: a legacy mangling's hash,
    a v0 mangling's crate disambiguators."""
    symbol = re.sub(r"17h[0-9a-f]{16}E$", "17h*", symbol)
    return re.sub(r"Cs[0-9A-Za-z]+_", "Cs*_", symbol) if symbol.startswith("_R") else symbol


def pattern(symbol):
    """An input section pattern for `symbol` on every target and build: its portable name.
    A generic's instances share it (but for the hash, which also changes with the build's
    profile): all of them are placed, the few that run and the others. Characters a linker
    script would not take bare become `?`."""
    return re.sub(r"[^A-Za-z0-9_.*]", "?", portable(symbol))


def text_symbols(binary):
    """The function symbols of `binary` (nm)."""
    listed = subprocess.run(["nm", binary], check=True, capture_output=True, text=True).stdout
    return {f[2] for f in (line.split() for line in listed.splitlines())
            if len(f) == 3 and f[1] in "tTwW"}


def main():
    binary, output = os.path.abspath(sys.argv[1]), sys.argv[2]
    work = os.path.abspath(os.environ.get("IDLE_TEXT_DIR", "target/idle-text"))
    os.makedirs(work, exist_ok=True)
    for name in os.listdir(work):
        if name.startswith("cg."):
            os.remove(os.path.join(work, name))
    # valgrind 3.19 cannot read the DWARF 5 of zig's objects: the symbols are enough.
    profiled = os.path.join(work, "tinyhub")
    subprocess.run(["objcopy", "--strip-debug", binary, profiled], check=True)
    binary = profiled
    log = os.path.join(work, "driver.log")
    runner = (
        "valgrind --tool=callgrind --demangle=no --compress-strings=no --dump-instr=no "
        f"--dump-before={MARKER}* --callgrind-out-file={work}/cg.%p"
    )
    env = dict(
        os.environ,
        TINYHUB_TEST_BIN=binary,
        TINYHUB_TEST_RUNNER=runner,
        TINYHUB_WATCH_MEMORY_PAUSE=str(SETTLE_LIMIT + IDLE + 20),
        TINYHUB_WATCH_MEMORY_HOLD=str(WATCHES + 10),
    )
    with open(log, "w") as out:
        driver = subprocess.Popen(
            ["cargo", "test", "--features", "fuzzing", "--test", "integration", "watch_memory",
             "--", "--ignored", "--nocapture"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    text = wait_for(log, ", pausing", driver)
    pid = re.search(r"pid (\d+): idle, pausing", text).group(1)
    marker_dump = os.path.join(work, f"cg.{pid}.1")
    deadline = time.time() + SETTLE_LIMIT + 10
    while not os.path.exists(marker_dump):
        if time.time() > deadline:
            sys.exit(f"idle-text: the hub never called {MARKER}")
        time.sleep(0.5)
    time.sleep(IDLE)
    subprocess.run(["callgrind_control", "--dump=idle", pid], check=True, stdout=subprocess.DEVNULL)
    wait_for(log, "idle VmRSS", driver)
    time.sleep(WATCHES)
    subprocess.run(["callgrind_control", "--dump=watches", pid], check=True,
                   stdout=subprocess.DEVNULL)
    if driver.wait() != 0:
        sys.exit(f"idle-text: the driver failed; see {log}")
    dumps = sorted(
        (n for n in os.listdir(work) if re.fullmatch(rf"cg\.{pid}\.\d+", n)),
        key=lambda n: int(n.rsplit(".", 1)[1]))
    # 1: the start-up, up to the marker; 2: the idle hub; 3: its idle watches.
    if len(dumps) < 3:
        sys.exit(f"idle-text: {len(dumps)} dumps in {work}, 3 wanted (was the marker called?)")
    idle = functions(os.path.join(work, dumps[1]))
    watches = [f for f in functions(os.path.join(work, dumps[2])) if f not in set(idle)]
    write(output, idle, watches, text_symbols(binary))
    print(f"idle-text: -> {output}")


def write(output, idle, watches, symbols):
    """Writes the linker script: `idle`'s functions, then `watches`' (those of `symbols`, the
    profiled binary's, without callgrind's other names such as addresses)."""
    patterns = {}
    for symbol in idle + watches:
        if symbol in symbols:
            patterns.setdefault(pattern(symbol), None)
    with open(output, "w") as out:
        out.write(
            "/* Generated by `make idle-text` (cross/idle-text.py): the functions an idle hub\n"
            f"   runs ({len(idle)}), then those of its idle watches ({len(watches)}), first in the text.\n"
            "   See cross/idle-text.py for why; a stale list is harmless. */\n"
            "SECTIONS {\n  .text.idle : {\n")
        for p in patterns:
            out.write(f"    *(.text.{p} .text.unlikely.{p})\n")
        out.write("  }\n}\nINSERT BEFORE .text;\n")


if __name__ == "__main__":
    main()
