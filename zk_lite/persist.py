"""Durability: an append-only txn log plus periodic snapshots, and restore on start.

Files in the data directory:

* ``log.<first zxid, 16 hex>``: records ``u32 length | u32 crc32(payload) | payload``,
  payload = ``marshal((zxid, time_ms, record))`` (records as in txn.py). A batch of records is
  written with one ``write`` and made durable with one ``fdatasync`` (group commit).
  Like ZooKeeper, the file is preallocated with zeros in ``preallocate_bytes`` chunks, so
  an fdatasync only flushes data blocks and never waits for a journal commit of the
  file size; a zero length marks the end of the records.
* ``snapshot.<zxid, 16 hex>``: ``u32 crc32 | marshal(Tree.to_snapshot())``, written to a
  temp file, fsync'd, renamed into place, and the directory fsync'd.

Restore: load the newest snapshot whose CRC checks, then replay every log in zxid order,
skipping records at or below the snapshot's zxid. A record that is cut short or fails its
CRC is a torn tail: the file is truncated there (and the truncation is logged).
After a snapshot, older snapshots and every log that predates it are deleted.
"""
from __future__ import annotations

import marshal
import os
import struct
import zlib

from .tree import Tree
from .txn import from_record, to_record

_REC = struct.Struct("!II")
_CRC = struct.Struct("!I")
_LOG_PREFIX = "log."
_SNAP_PREFIX = "snapshot."


def encode_txns(txns) -> bytes:
    """``(zxid, time_ms, txn)`` records as log bytes (a txn as its on-disk tuple)."""
    parts = []
    for zxid, time_ms, txn in txns:
        payload = marshal.dumps((zxid, time_ms, to_record(txn)))
        parts.append(_REC.pack(len(payload), zlib.crc32(payload)))
        parts.append(payload)
    return b"".join(parts)


def read_log(data: bytes):
    """Yield (offset_after, (zxid, time_ms, txn)) for every intact record; stops at the
    first bad one (torn, failing its CRC, or not a txn).

    Returns via StopIteration value the offset where valid data ends."""
    pos = 0
    end = len(data)
    while pos + 8 <= end:
        length, crc = _REC.unpack_from(data, pos)
        if length == 0 or pos + 8 + length > end:
            break
        payload = data[pos + 8:pos + 8 + length]
        if zlib.crc32(payload) != crc:
            break
        try:
            zxid, time_ms, record = marshal.loads(payload)
            txn = (zxid, time_ms, from_record(record))
        except (ValueError, EOFError, TypeError):  # TxnFormatError is a ValueError
            break
        pos += 8 + length
        yield pos, txn
    return pos


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Store:
    """The files of one data directory. Not thread-safe: use it from one thread."""

    def __init__(self, data_dir: str, log=print, preallocate_bytes: int = 16 << 20):
        self.dir = data_dir
        self.log = log
        self.preallocate_bytes = preallocate_bytes
        os.makedirs(data_dir, exist_ok=True)
        self._fd: int | None = None
        self._log_name: str | None = None
        self._offset = 0
        self._allocated = 0

    def _names(self, prefix: str) -> list[tuple[int, str]]:
        out = []
        for name in os.listdir(self.dir):
            if name.startswith(prefix) and not name.endswith(".tmp"):
                try:
                    out.append((int(name[len(prefix):], 16), name))
                except ValueError:
                    continue
        return sorted(out)

    # ------------------------------------------------------------------ restore
    def load(self) -> Tree:
        for name in os.listdir(self.dir):
            if name.endswith(".tmp"):  # a snapshot that was never renamed into place
                os.unlink(os.path.join(self.dir, name))
        tree = None
        for zxid, name in reversed(self._names(_SNAP_PREFIX)):
            with open(os.path.join(self.dir, name), "rb") as f:
                raw = f.read()
            if len(raw) >= 4 and _CRC.unpack_from(raw)[0] == zlib.crc32(raw[4:]):
                try:
                    tree = Tree.from_snapshot(marshal.loads(raw[4:]))
                    self.log(f"loaded {name} (zxid 0x{tree.zxid:x}, {len(tree.nodes)} znodes)")
                    break
                except (ValueError, EOFError, TypeError, AssertionError):
                    pass
            self.log(f"ignoring corrupt snapshot {name}")
        if tree is None:
            tree = Tree()
        replayed = 0
        for _, name in self._names(_LOG_PREFIX):
            path = os.path.join(self.dir, name)
            with open(path, "rb") as f:
                data = f.read()
            gen = read_log(data)
            valid_end = 0
            while True:
                try:
                    valid_end, (zxid, time_ms, op) = next(gen)
                except StopIteration as stop:
                    valid_end = stop.value
                    break
                if zxid > tree.zxid:
                    tree.apply(zxid, time_ms, op, [])
                    replayed += 1
            if valid_end < len(data) and data.count(0, valid_end) != len(data) - valid_end:
                self.log(f"truncating torn tail of {name}: {len(data) - valid_end} bytes "
                         f"at offset {valid_end}")
                with open(path, "r+b") as f:
                    f.truncate(valid_end)
                    f.flush()
                    os.fsync(f.fileno())
        if replayed:
            self.log(f"replayed {replayed} txns; zxid now 0x{tree.zxid:x}")
        return tree

    # ------------------------------------------------------------------ log
    def open_log(self, first_zxid: int) -> None:
        self.close()
        name = f"{_LOG_PREFIX}{first_zxid:016x}"
        self._fd = os.open(os.path.join(self.dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                           0o644)
        self._log_name = name
        self._offset = 0
        self._allocated = 0
        if self.preallocate_bytes:
            self._extend(self.preallocate_bytes)
        _fsync_dir(self.dir)

    def _extend(self, nbytes: int) -> None:
        zeros = bytes(min(nbytes, 1 << 20))
        end = self._allocated + nbytes
        pos = self._allocated
        while pos < end:
            pos += os.pwrite(self._fd, zeros[:end - pos], pos)
        self._allocated = end
        os.fsync(self._fd)  # the new size is metadata: make it durable once, here

    def append(self, data: bytes) -> None:
        """Write a batch of encoded records and make it durable."""
        assert self._fd is not None, "open_log first"
        if self.preallocate_bytes and self._offset + len(data) > self._allocated:
            self._extend(max(self.preallocate_bytes, len(data)))
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, self._offset)
            self._offset += written
            view = view[written:]
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, snap_bytes: bytes, zxid: int) -> None:
        """Start a new log after ``zxid``, then write the snapshot and prune (synchronous)."""
        self.open_log(zxid + 1)
        self.write_snapshot(snap_bytes, zxid)

    def write_snapshot(self, snap_bytes: bytes, zxid: int) -> None:
        """Make the snapshot of state at ``zxid`` durable, then delete older snapshots and
        every log that starts at or below ``zxid`` (their txns are all in the snapshot,
        because the caller rotated the log at exactly that point). May run in another
        thread than ``append``: it never touches the log being appended to."""
        name = f"{_SNAP_PREFIX}{zxid:016x}"
        tmp = os.path.join(self.dir, name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_CRC.pack(zlib.crc32(snap_bytes)))
            f.write(snap_bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.dir, name))
        _fsync_dir(self.dir)
        for old_zxid, old in self._names(_SNAP_PREFIX):
            if old_zxid < zxid:
                os.unlink(os.path.join(self.dir, old))
        for start, old in self._names(_LOG_PREFIX):
            if start <= zxid:
                os.unlink(os.path.join(self.dir, old))
        _fsync_dir(self.dir)


def snapshot_bytes(tree: Tree) -> bytes:
    return marshal.dumps(tree.to_snapshot())
