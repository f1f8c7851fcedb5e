#!/usr/bin/env python3
"""mkapk.py: writes an apk v3 package (OpenWrt 25.x, apk-tools 3) from a directory tree.

Usage, a subset of `apk mkpkg` with the same option names:
  mkapk.py --info KEY:VALUE... [--script TYPE:FILE...] --files DIR --output FILE

KEY is one of name, version, description, arch, license, origin, maintainer, url, depends
(space-separated package names); TYPE one of pre-install, post-install, pre-deinstall,
post-deinstall, pre-upgrade, post-upgrade. Every entry is owned by root:root, with its mode
from DIR; file times are $SOURCE_DATE_EPOCH (default 0), so the same inputs give the same
bytes. Regular files and directories only.

Why here and not apk-tools: Debian has no apk-tools 3 and CI installs only from the
registries, so `make apk` needs nothing beyond python3's standard library. The format is
apk-tools' own (apk-tools/doc/apk-v3.5.scd, apk-tools/src/adb.c, apk-tools/src/apk_adb.c,
apk-tools/src/app_mkpkg.c): the file is "ADBd" then a raw deflate stream of "ADB." + the
schema "pckg" and a sequence of 8-byte-aligned blocks: one ADB block holding the package
object, then one DATA block per non-empty file. Values are written in the order `apk mkpkg`
writes them, with its sharing of equal values, so the package is the one `apk mkpkg` makes
from the same tree (cross/README.md says how that was checked). Unsigned, as `apk mkpkg`
makes it: OpenWrt signs its repository index, and a file installed by hand needs `apk add
--allow-untrusted`. """

import hashlib
import os
import re
import stat
import struct
import sys
import zlib

# Value tags: the high 4 bits of a 32-bit little-endian word (apk-tools/src/adb.h).
TYPE_INT = 0x10000000
TYPE_INT_32 = 0x20000000
TYPE_INT_64 = 0x30000000
TYPE_BLOB_8 = 0x80000000
TYPE_BLOB_16 = 0x90000000
TYPE_BLOB_32 = 0xA0000000
TYPE_OBJECT = 0xE0000000
NULL = 0
VALUE_MASK = 0x0FFFFFFF

BLOCK_ADB = 0
BLOCK_DATA = 2
BLOCK_MAX_LEN = 0x3FFFFFFF - 4
SCHEMA_PACKAGE = b"pckg"

# Object slots (apk-tools/src/apk_adb.h). Slot 0 of every object holds its slot count.
PKG_INFO, PKG_PATHS, PKG_SCRIPTS = 1, 2, 3
INFO_FIELDS = {
    "name": 1,
    "version": 2,
    "description": 4,
    "arch": 5,
    "license": 6,
    "origin": 7,
    "maintainer": 8,
    "url": 9,
    "depends": 15,
}
INFO_HASHES, INFO_INSTALLED_SIZE = 3, 12
DEP_NAME = 1
ACL_MODE, ACL_USER, ACL_GROUP = 1, 2, 3
FILE_NAME, FILE_ACL, FILE_SIZE, FILE_MTIME, FILE_HASH = 1, 2, 3, 4, 5
DIR_NAME, DIR_ACL, DIR_FILES = 1, 2, 3
SCRIPTS = {
    "pre-install": 2,
    "post-install": 3,
    "pre-deinstall": 4,
    "post-deinstall": 5,
    "pre-upgrade": 6,
    "post-upgrade": 7,
}
# The package's unique id: the first 20 bytes of the SHA-256 of the ADB block, computed
# with these bytes zeroed (app_mkpkg.c).
UID_LEN = 20

# apk-package(5): names and versions apk accepts.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
VERSION_RE = re.compile(
    r"[0-9]+(\.[0-9]+)*[a-z]?(_(alpha|beta|pre|rc|cvs|svn|git|hg|p)[0-9]*)*(~[0-9a-f]+)?(-r[0-9]+)?\Z"
)


class PackageError(Exception):
    """Input the format cannot carry; the message says which."""


class AdbWriter:
    """The ADB block being built: values appended with their alignment, as apk-tools/src/adb.c's
    writer does, equal byte strings written once and shared (except the uid's)."""

    def __init__(self):
        # The header: compat version 0, version 0, reserved, the root value (set last).
        self.buf = bytearray(8)
        self.seen = {}

    def _append(self, data, align, share=True):
        """The offset of data, aligned: an equal byte string already written at an offset
        so aligned is reused (nothing written then); else it is written after zero padding."""
        if share:
            offset = self.seen.get(data)
            if offset is not None and offset % align == 0:
                return offset
        self.buf += bytes(-len(self.buf) % align)
        offset = len(self.buf)
        if offset > VALUE_MASK:
            raise PackageError("package metadata over 256 MiB")
        self.buf += data
        if share:
            self.seen[data] = offset
        return offset

    def blob(self, data, share=True):
        """A string value; NULL when empty, as apk writes it."""
        n = len(data)
        if n == 0:
            return NULL
        if n <= 0xFF:
            return TYPE_BLOB_8 | self._append(struct.pack("<B", n) + data, 1, share)
        if n <= 0xFFFF:
            return TYPE_BLOB_16 | self._append(struct.pack("<H", n) + data, 2, share)
        return TYPE_BLOB_32 | self._append(struct.pack("<I", n) + data, 4, share)

    def int(self, n):
        """An integer: in the tag below 2^28, else a 32- or 64-bit word elsewhere."""
        if n < 0x10000000:
            return TYPE_INT | n
        if n < 0x100000000:
            return TYPE_INT_32 | self._append(struct.pack("<I", n), 4)
        return TYPE_INT_64 | self._append(struct.pack("<Q", n), 4)

    def obj(self, slots):
        """An object or array from {slot: value} (arrays: slots 1..n); NULL when empty.
        Trailing NULL slots are dropped; apk tags arrays it builds this way as objects."""
        used = [i for i, v in slots.items() if v != NULL]
        if not used:
            return NULL
        n = max(used) + 1
        words = [n] + [slots.get(i, NULL) for i in range(1, n)]
        return TYPE_OBJECT | self._append(struct.pack("<%dI" % n, *words), 4)

    def array(self, values):
        return self.obj({i + 1: v for i, v in enumerate(values)})


def parse_args(argv):
    info, scripts, files, output = {}, {}, None, None
    it = iter(argv)
    for opt in it:
        try:
            arg = next(it)
        except StopIteration:
            raise PackageError(f"{opt} needs a value") from None
        if opt in ("--info", "-I"):
            key, sep, value = arg.partition(":")
            if not sep or key not in INFO_FIELDS:
                raise PackageError(f"--info {arg}: key must be one of {', '.join(INFO_FIELDS)}")
            info[key] = value
        elif opt in ("--script", "-s"):
            kind, sep, path = arg.partition(":")
            if not sep or kind not in SCRIPTS:
                raise PackageError(f"--script {arg}: type must be one of {', '.join(SCRIPTS)}")
            with open(path, "rb") as f:
                scripts[kind] = f.read()
        elif opt in ("--files", "-F"):
            files = arg
        elif opt in ("--output", "-o"):
            output = arg
        else:
            raise PackageError(f"unknown option {opt}")
    for key in ("name", "version"):
        if key not in info:
            raise PackageError(f"--info {key}:... is required")
    if not NAME_RE.match(info["name"]):
        raise PackageError(f"bad package name {info['name']!r}")
    if not VERSION_RE.match(info["version"]):
        raise PackageError(f"bad version {info['version']!r} (apk's form: 1.2.3-r1)")
    if files is None or output is None:
        raise PackageError("--files and --output are required")
    return info, scripts, files, output


def tree(root):
    """(directories, files by directory) under root, relative, sorted bytewise as apk's
    directory scan sorts them; the root directory is ""."""
    dirs, files = [""], {"": []}
    for path, subdirs, names in os.walk(root):
        rel = os.path.relpath(path, root)
        rel = "" if rel == "." else rel
        subdirs.sort()
        for d in subdirs:
            dirs.append(os.path.join(rel, d))
            files[os.path.join(rel, d)] = []
        for name in sorted(names):
            st = os.lstat(os.path.join(path, name))
            if not stat.S_ISREG(st.st_mode):
                raise PackageError(f"{os.path.join(rel, name)}: only regular files and directories")
            files[rel].append(name)
    dirs.sort(key=lambda d: d.encode())
    return dirs, files


def build_adb(info, scripts, root, mtime):
    """The ADB block of the package and the files for its DATA blocks, in block order."""
    w = AdbWriter()
    info_slots = {}
    for key, index in sorted(INFO_FIELDS.items(), key=lambda kv: kv[1]):
        if key not in info:
            continue
        if key == "depends":
            deps = []
            for name in info[key].split():
                if not NAME_RE.match(name):
                    raise PackageError(f"depends: {name!r} is not a plain package name")
                deps.append((name.encode(), w.obj({DEP_NAME: w.blob(name.encode())})))
            unique = dict(sorted(deps))
            info_slots[index] = w.array(list(unique.values()))
        else:
            info_slots[index] = w.blob(info[key].encode())

    dirs, files = tree(root)
    installed_size = 0
    dir_values, data_files = [], []
    for di, d in enumerate(dirs, start=1):
        file_values = []
        for fi, name in enumerate(files[d], start=1):
            path = os.path.join(root, d, name)
            with open(path, "rb") as f:
                content = f.read()
            st = os.lstat(path)
            name_value = w.blob(name.encode())
            hash_value = w.blob(hashlib.sha256(content).digest())
            mtime_value = w.int(mtime)
            size_value = w.int(len(content))
            acl = acl_value(w, st.st_mode)
            file_values.append(
                w.obj({FILE_NAME: name_value, FILE_HASH: hash_value, FILE_MTIME: mtime_value,
                       FILE_SIZE: size_value, FILE_ACL: acl})
            )
            installed_size += len(content)
            if content:
                if len(content) + 8 > BLOCK_MAX_LEN:
                    raise PackageError(f"{d}/{name}: over 1 GiB")
                data_files.append((di, fi, content))
        name_value = w.blob(d.encode())
        acl = acl_value(w, os.lstat(os.path.join(root, d)).st_mode)
        dir_values.append(
            w.obj({DIR_NAME: name_value, DIR_ACL: acl, DIR_FILES: w.array(file_values)})
        )

    info_slots[INFO_INSTALLED_SIZE] = w.int(max(installed_size, 1))
    uid_at = len(w.buf) + 1  # after the length byte; never shared
    info_slots[INFO_HASHES] = w.blob(bytes(UID_LEN), share=False)
    pkg = {PKG_INFO: w.obj(info_slots), PKG_PATHS: w.array(dir_values)}
    script_values = {SCRIPTS[k]: w.blob(v) for k, v in sorted(scripts.items(), key=lambda kv: SCRIPTS[kv[0]])}
    pkg[PKG_SCRIPTS] = w.obj(script_values)
    w.buf[4:8] = struct.pack("<I", w.obj(pkg))
    w.buf[uid_at : uid_at + UID_LEN] = hashlib.sha256(w.buf).digest()[:UID_LEN]
    return bytes(w.buf), data_files


def acl_value(w, mode):
    """mode, owner root, group root: apk mkpkg's ACL under fakeroot; no xattrs."""
    return w.obj({ACL_MODE: w.int(stat.S_IMODE(mode)), ACL_USER: w.blob(b"root"),
                  ACL_GROUP: w.blob(b"root")})


def block(kind, payload):
    raw = 4 + len(payload)
    return struct.pack("<I", (kind << 30) | raw) + payload + bytes(-raw % 8)


def package_bytes(adb, data_files):
    body = bytearray(b"ADB." + SCHEMA_PACKAGE)
    body += block(BLOCK_ADB, adb)
    for di, fi, content in data_files:
        body += block(BLOCK_DATA, struct.pack("<II", di, fi) + content)
    # Raw deflate at level 9, apk's default compression (apk-tools/src/adb_comp.c,
    # apk-tools/src/io_gunzip.c).
    z = zlib.compressobj(9, zlib.DEFLATED, -15, 8)
    return b"ADBd" + z.compress(bytes(body)) + z.flush()


def main(argv):
    try:
        info, scripts, root, output = parse_args(argv)
        mtime = int(os.environ.get("SOURCE_DATE_EPOCH") or 0)
        adb, data_files = build_adb(info, scripts, root, mtime)
        if len(adb) > BLOCK_MAX_LEN:
            raise PackageError("package metadata over 1 GiB")
        pkg = package_bytes(adb, data_files)
    except (PackageError, OSError) as e:
        print(f"mkapk: {e}", file=sys.stderr)
        return 1
    tmp = output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(pkg)
    os.replace(tmp, output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
