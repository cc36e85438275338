"""The aborted-transaction index of a segment, Kafka's ``.txnindex`` (TransactionIndex /
AbortedTxn): ``<base offset>.txnindex`` next to the segment's ``.log``, a sequence of
34-byte entries, big-endian as Kafka's ByteBuffer:

    version i16 (0) | producer_id i64 | first_offset i64 | last_offset i64 |
    last_stable_offset i64

One entry per ABORT marker in the segment (``last_offset`` = the marker's offset), in
marker order. A segment without aborts has no file.

Rules:
- Appended (not fsynced) when an ABORT marker is appended; every file written since
  (appended or rewritten) is fsynced, and the directory, by the next roll before it
  writes its producer snapshot, so a snapshot that survives a power cut never covers
  an index that did not. The cleaner fsyncs the files it writes.
- Derived from the log: ``shm.log.transactions`` trusts the files of segments below the
  snapshot it rebuilds from and rewrites the others from the batches (so a crash between
  a marker and its entry, or a cut tail, leaves no wrong entry behind).
- Truncated with its segment, deleted with it (``Segment.delete``, the loader).
- A file whose size is not a whole number of entries, or with an entry of another
  version or out of order, is damaged: the reader says so (None) and the caller rebuilds.
"""
from __future__ import annotations

import os
import struct

from shm.txn_state import AbortedTxn

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size
VERSION = 0                         # Kafka's AbortedTxn.CURRENT_VERSION
assert ENTRY_BYTES == 34            # Kafka's AbortedTxn.TOTAL_SIZE


def txn_index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")


def encode(entries) -> bytes:
    return b"".join(ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset,
                               e.last_stable_offset) for e in entries)


def decode(data: bytes) -> list[AbortedTxn] | None:
    """The entries of a file's bytes; None if they are damaged."""
    if len(data) % ENTRY_BYTES:
        return None
    entries = []
    for version, *fields in ENTRY.iter_unpack(data):
        entry = AbortedTxn(*fields)
        if version != VERSION or entry.producer_id < 0 or \
                not 0 <= entry.first_offset <= entry.last_offset or \
                (entries and entry.last_offset <= entries[-1].last_offset):
            return None
        entries.append(entry)
    return entries


def read(directory: str, base_offset: int) -> list[AbortedTxn] | None:
    """A segment's entries ([] without a file); None if the file is damaged."""
    try:
        with open(txn_index_path(directory, base_offset), "rb") as f:
            return decode(f.read())
    except FileNotFoundError:
        return []


def append(directory: str, base_offset: int, entry: AbortedTxn) -> None:
    with open(txn_index_path(directory, base_offset), "ab") as f:
        f.write(encode([entry]))


def rewrite(directory: str, base_offset: int, entries: list[AbortedTxn]) -> None:
    """Replace a segment's file (atomically) with ``entries``; none: no file."""
    path = txn_index_path(directory, base_offset)
    if not entries:
        delete(directory, base_offset)
        return
    with open(path + ".tmp", "wb") as f:
        f.write(encode(entries))
    os.replace(path + ".tmp", path)


def fsync(directory: str, base_offset: int) -> None:
    """Make a segment's file durable (nothing to do without one)."""
    try:
        fd = os.open(txn_index_path(directory, base_offset), os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def delete(directory: str, base_offset: int) -> None:
    try:
        os.unlink(txn_index_path(directory, base_offset))
    except FileNotFoundError:
        pass
