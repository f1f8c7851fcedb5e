#!/usr/bin/env python3
"""apk-inspect.py <package.apk> <out-dir>: reads an apk v3 package back, checks its form,
and lays out what it holds for cross/test/apk-test.sh to compare.

Written from apk-tools' description of the format (apk-tools/doc/apk-v3.5.scd, apk-tools/src/adb.h,
apk-tools/src/apk_adb.h), apart from cross/mkapk.py, so that a mistake in the writer shows here.
It checks what `apk add` relies on: the "ADBd" (deflate) or "ADB." header and the "pckg"
schema; blocks 8-byte aligned with zero padding, one ADB block first (compat version 0),
then signatures, then DATA blocks, nothing after; every value inside the ADB block; the
package uid (info hashes) as apk mkpkg computes it; each DATA block naming a file of the
paths, in order, once, with that file's size and SHA-256; installed-size the sum of the
file sizes. Any failure: a line on stderr and exit status 1.

Out: <out-dir>/info ("key: value"; depends space-separated), <out-dir>/paths ("mode
user:group path", directories with a trailing /, sorted), <out-dir>/mtimes ("mtime path"
per file), <out-dir>/root/ (the files, with their modes), <out-dir>/scripts/<type>.
"""

import hashlib
import os
import struct
import sys
import zlib

INFO = {1: "name", 2: "version", 3: "hashes", 4: "description", 5: "arch", 6: "license",
        7: "origin", 8: "maintainer", 9: "url", 10: "repo-commit", 11: "build-time",
        12: "installed-size", 13: "file-size", 14: "provider-priority", 15: "depends",
        16: "provides", 17: "replaces", 18: "install-if", 19: "recommends", 20: "layer",
        21: "tags"}
INFO_INTS = {"build-time", "installed-size", "file-size", "provider-priority", "layer"}
INFO_DEPS = {"depends", "provides", "replaces", "install-if", "recommends"}
SCRIPTS = {1: "trigger", 2: "pre-install", 3: "post-install", 4: "pre-deinstall",
           5: "post-deinstall", 6: "pre-upgrade", 7: "post-upgrade"}


class Bad(Exception):
    pass


class Adb:
    """Reads values of one ADB block."""

    def __init__(self, data):
        self.data = data

    def _at(self, offset, size):
        if offset + size > len(self.data):
            raise Bad(f"value at {offset} (+{size}) is past the ADB block ({len(self.data)})")
        return self.data[offset : offset + size]

    def int(self, v):
        kind, x = v >> 28, v & 0x0FFFFFFF
        if v == 0:
            return None
        if kind == 0x1:
            return x
        if kind == 0x2:
            return struct.unpack("<I", self._at(x, 4))[0]
        if kind == 0x3:
            return struct.unpack("<Q", self._at(x, 8))[0]
        raise Bad(f"expected an integer, got tag {v:#010x}")

    def blob(self, v):
        kind, x = v >> 28, v & 0x0FFFFFFF
        if v == 0:
            return None
        width = {0x8: 1, 0x9: 2, 0xA: 4}.get(kind)
        if width is None:
            raise Bad(f"expected a string, got tag {v:#010x}")
        n = int.from_bytes(self._at(x, width), "little")
        return self._at(x + width, n)

    def obj(self, v):
        """The slots of an object or array (index 0 unused); [] for NULL."""
        if v == 0:
            return []
        if v >> 28 not in (0xD, 0xE):
            raise Bad(f"expected an object, got tag {v:#010x}")
        x = v & 0x0FFFFFFF
        if x % 4:
            raise Bad(f"object at {x} is not 4-byte aligned")
        n = struct.unpack("<I", self._at(x, 4))[0]
        if n == 0:
            raise Bad(f"object at {x} has no slot count")
        return list(struct.unpack(f"<{n}I", self._at(x, 4 * n)))

    def slot(self, slots, i):
        return slots[i] if i < len(slots) else 0

    def text(self, slots, i):
        b = self.blob(self.slot(slots, i))
        return None if b is None else b.decode()


def blocks(body):
    """(type, payload) of each block after the file header."""
    pos = 8
    while pos < len(body):
        if pos + 4 > len(body):
            raise Bad(f"truncated block header at {pos}")
        word = struct.unpack("<I", body[pos : pos + 4])[0]
        kind, raw, hdr = word >> 30, word & 0x3FFFFFFF, 4
        if kind == 3:  # extended header: type in the low bits, 64-bit size
            if pos + 16 > len(body):
                raise Bad(f"truncated extended block header at {pos}")
            kind, raw, hdr = word & 0x3FFFFFFF, struct.unpack("<Q", body[pos + 8 : pos + 16])[0], 16
        if raw < hdr:
            raise Bad(f"block at {pos}: size {raw} below its header")
        end = pos + raw
        padded = end + (-raw % 8)
        if padded > len(body):
            raise Bad(f"block at {pos} runs past the end ({padded} > {len(body)})")
        if any(body[end:padded]):
            raise Bad(f"block at {pos}: padding is not zero")
        yield kind, body[pos + hdr : end]
        pos = padded


def read(path):
    raw = open(path, "rb").read()
    if raw[:4] == b"ADBd":
        z = zlib.decompressobj(-15)
        body = z.decompress(raw[4:])
        if not z.eof or z.unused_data:
            raise Bad("deflate stream incomplete or followed by other bytes")
    elif raw[:4] == b"ADB.":
        body = raw
    else:
        raise Bad(f"not an apk v3 package: starts with {raw[:4]!r}")
    if body[:4] != b"ADB." or body[4:8] != b"pckg":
        raise Bad(f"header {body[:8]!r}, want b'ADB.pckg'")

    adb, data, state = None, [], "adb"
    for kind, payload in blocks(body):
        if kind == 0 and state == "adb":
            adb, state = payload, "sig"
        elif kind == 1 and state == "sig":
            pass
        elif kind == 2 and state in ("sig", "data"):
            if len(payload) < 8:
                raise Bad("DATA block without its path and file index")
            data.append((*struct.unpack("<II", payload[:8]), payload[8:]))
            state = "data"
        else:
            raise Bad(f"block type {kind} out of order (ADB, SIG..., DATA...)")
    if adb is None:
        raise Bad("no ADB block")
    if len(adb) < 8 or adb[0] != 0:
        raise Bad("ADB block header missing or compat version not 0")
    return adb, data


def inspect(path, out):
    adb_bytes, data = read(path)
    db = Adb(adb_bytes)
    root = db.obj(struct.unpack("<I", adb_bytes[4:8])[0])
    info_slots = db.obj(db.slot(root, 1))
    info = {}
    for i, key in INFO.items():
        v = db.slot(info_slots, i)
        if v == 0:
            continue
        if key in INFO_INTS:
            info[key] = str(db.int(v))
        elif key in INFO_DEPS:
            info[key] = " ".join(db.text(db.obj(d), 1) for d in db.obj(v)[1:])
        elif key in ("hashes", "repo-commit"):
            info[key] = db.blob(v).hex()
        else:
            info[key] = db.text(info_slots, i)

    # The uid: SHA-256 of the ADB block with the uid's own bytes zeroed, first 20 bytes.
    uid_value = db.slot(info_slots, 3)
    uid = db.blob(uid_value)
    if uid is None or len(uid) != 20:
        raise Bad("info hashes (the package uid) missing or not 20 bytes")
    at = (uid_value & 0x0FFFFFFF) + 1
    zeroed = adb_bytes[:at] + bytes(20) + adb_bytes[at + 20 :]
    if hashlib.sha256(zeroed).digest()[:20] != uid:
        raise Bad("info hashes is not the SHA-256 of the ADB block")

    os.makedirs(os.path.join(out, "root"), exist_ok=True)
    os.makedirs(os.path.join(out, "scripts"), exist_ok=True)
    lines, mtimes, expected, modes, total = [], [], [], [], 0
    dirs = db.obj(db.slot(root, 2))
    for di, dv in enumerate(dirs[1:], start=1):
        d = db.obj(dv)
        name = db.text(d, 1) or ""
        acl = db.obj(db.slot(d, 2))
        lines.append(f"{db.int(db.slot(acl, 1)):04o} {db.text(acl, 2)}:{db.text(acl, 3)} {name}/")
        os.makedirs(os.path.join(out, "root", name), exist_ok=True)
        for fi, fv in enumerate(db.obj(db.slot(d, 3))[1:], start=1):
            f = db.obj(fv)
            fname = os.path.join(name, db.text(f, 1))
            facl = db.obj(db.slot(f, 2))
            size = db.int(db.slot(f, 3)) or 0
            mode = db.int(db.slot(facl, 1))
            lines.append(f"{mode:04o} {db.text(facl, 2)}:{db.text(facl, 3)} {fname}")
            mtimes.append(f"{db.int(db.slot(f, 4))} {fname}")
            total += size
            target = os.path.join(out, "root", fname)
            open(target, "wb").close()
            modes.append((target, mode))
            if size:
                expected.append((di, fi, fname, size, db.blob(db.slot(f, 5)), target))

    if len(data) != len(expected):
        raise Bad(f"{len(data)} DATA blocks for {len(expected)} non-empty files")
    for (di, fi, content), (wdi, wfi, fname, size, digest, target) in zip(data, expected):
        if (di, fi) != (wdi, wfi):
            raise Bad(f"DATA block for path {di} file {fi}, want {wdi}/{wfi} ({fname})")
        if len(content) != size:
            raise Bad(f"{fname}: {len(content)} bytes of data, the paths say {size}")
        if hashlib.sha256(content).digest() != digest:
            raise Bad(f"{fname}: data does not match its SHA-256")
        with open(target, "wb") as t:
            t.write(content)
    for target, mode in modes:
        os.chmod(target, mode)
    if info.get("installed-size") != str(max(total, 1)):
        raise Bad(f"installed-size {info.get('installed-size')}, files hold {total} bytes")

    scripts = db.obj(db.slot(root, 3))
    for i, kind in SCRIPTS.items():
        body = db.blob(db.slot(scripts, i))
        if body is not None:
            with open(os.path.join(out, "scripts", kind), "wb") as s:
                s.write(body)
    with open(os.path.join(out, "info"), "w") as f:
        f.writelines(f"{k}: {v}\n" for k, v in info.items())
    with open(os.path.join(out, "mtimes"), "w") as f:
        f.writelines(line + "\n" for line in mtimes)
    with open(os.path.join(out, "paths"), "w") as f:
        f.writelines(line + "\n" for line in sorted(lines, key=lambda l: l.split(" ", 2)[2]))


def main(argv):
    if len(argv) != 2:
        print("usage: apk-inspect.py <package.apk> <out-dir>", file=sys.stderr)
        return 2
    try:
        inspect(argv[0], argv[1])
    except (Bad, OSError, struct.error, zlib.error, UnicodeDecodeError) as e:
        print(f"apk-inspect: {argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
