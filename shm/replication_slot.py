"""The replication slot: one shared-memory object per partition a broker leads, through
which followers on the same host replicate without Fetch requests (issue 29).

Named ``/mk-<cluster>-repl-<leader broker>-<topic>-<partition>``; 2 KiB:

- words 0-7 (int64), written by the leader only: magic, leader epoch (-1 while the
  leader does not lead in it: written first when it stops leading, before any
  truncation), LEO, HW, log start offset, the leader's pid, when it last rang its
  followers (monotonic ns);
- ``ROWS`` follower rows of 8 words at word 8, each written by one follower only,
  seqlocked: broker id + 1 (0 = unused), seq (odd while being written), leader epoch the
  follower fetches in, its LEO, and the stamps of the copy it reports (monotonic ns:
  the leader's ring it answered, its wake-up, its append, its report) for
  ``bench.perf.latency --breakdown``;
- the leader's log directory (UTF-8, NUL-padded) at byte ``LOG_DIR_AT``: where its
  segment files are.

Ordering (x86-64 stores are seen in program order, an aligned int64 store is atomic):
the leader writes a batch into its segment and only then the LEO, so bytes below a LEO
read in epoch E are whole. A follower reads the epoch before and after copying and keeps
the copy only if both are its own epoch: the leader writes -1 before it may truncate, so
bytes copied under an unchanged epoch are bytes the leader held in that epoch (as a
Fetch answer sent before a truncation). Epochs only grow, so -1 -> E' cannot look like E.
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

import numpy as np

from shm import names
from shm.names import SharedArray, SharedMemoryError

MAGIC = 0x6D6B5F7265706C31            # "mk_repl1"
SLOT_BYTES = 2048
ROWS = 8                               # followers per partition (board.REPLICAS_MAX)
ROW_WORDS = 8
ROWS_AT = 8                            # word index of row 0
LOG_DIR_AT = 1024                      # byte offset of the leader's log directory
LOG_DIR_BYTES_MAX = SLOT_BYTES - LOG_DIR_AT
ROW_READ_ATTEMPTS = 100
_EPOCH, _LEO, _HW, _LOG_START, _PID, _RANG = 1, 2, 3, 4, 5, 6
assert ROWS_AT + ROWS * ROW_WORDS <= LOG_DIR_AT // 8
# The hot words through ``struct`` on the mapping (a follower reads them at every
# wake-up): native little-endian int64, each packed or unpacked with one aligned 8-byte
# memcpy, as numpy's element access, at a fraction of its cost.
_WORD = struct.Struct("<q")
_LEADER_WORDS = struct.Struct("<4q")      # epoch, LEO, HW, log start
_LEADER_STATE = struct.Struct("<5q")      # ... and pid
_ROW_BODY = struct.Struct("<6q")          # a row's epoch, LEO and 4 stamps
_ROWS = struct.Struct(f"<{ROWS * ROW_WORDS}q")   # every row at once (the leader's read)
_BROKER_SEQ = struct.Struct("<2q")        # a row's broker and seq words
# The rows' seq words alone (``report_marks``): a row's broker word skipped, its seq
# read, the rest of the row skipped.
_SEQS = struct.Struct("<" + f"8xq{(ROW_WORDS - 2) * 8}x" * ROWS)
assert _EPOCH + 1 == _LEO and _LEO + 1 == _HW and _HW + 1 == _LOG_START and \
    _LOG_START + 1 == _PID


def slot_name(cluster_id: str, leader_id: int, topic: str, partition: int) -> str:
    return names.shm_name(cluster_id, "repl", leader_id, topic, partition)


class LeaderState(NamedTuple):
    """What a follower reads of the leader's words (one read, not atomic as a whole:
    see the module docstring for why it need not be). A NamedTuple: made at every
    wake-up of a follower."""
    leader_epoch: int
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    pid: int


class FollowerReport(NamedTuple):
    """One follower's row as the leader read it. A NamedTuple: made for every row at
    every wake-up of a leader (a frozen dataclass's __init__ costs several times more)."""
    broker_id: int
    seq: int
    leader_epoch: int
    log_end_offset: int
    stamps: tuple = ()     # (leader rang, follower woke, appended, reported) ns


class ReplicationSlot:
    """One mapped slot; the leader creates it, followers attach to it."""

    def __init__(self, shared: SharedArray, inode: int, owner: bool) -> None:
        self._shared = shared
        self.words = shared.array
        self._buffer = shared.buffer
        self.name = shared.name
        self.inode = inode
        self.owner = owner

    # ---- the leader ----------------------------------------------------------------------

    @classmethod
    def create(cls, cluster_id: str, leader_id: int, topic: str, partition: int,
               log_dir: str) -> "ReplicationSlot":
        """A fresh slot (one left by an earlier run of this broker is replaced: a
        follower still mapping it sees ``replaced`` and attaches again. Not by its
        epoch: a SIGKILLed leader never retired it, and the new run may lead the same
        epoch, so the old slot's epoch can match for good)."""
        encoded = os.fsencode(log_dir)
        if len(encoded) >= LOG_DIR_BYTES_MAX:
            raise ValueError(f"log dir too long for a replication slot: {log_dir!r}")
        name = slot_name(cluster_id, leader_id, topic, partition)
        names.unlink(name)
        shared = SharedArray.create(name, SLOT_BYTES // 8, np.int64)
        words = shared.array
        words[_EPOCH] = -1
        raw = shared.array.view(np.uint8)
        raw[LOG_DIR_AT:LOG_DIR_AT + len(encoded)] = np.frombuffer(encoded, np.uint8)
        words[_PID] = os.getpid()
        words[0] = MAGIC
        inode = os.stat(os.path.join(names.SHM_DIR, name.lstrip("/"))).st_ino
        return cls(shared, inode, owner=True)

    def publish(self, *, leader_epoch: int, log_end_offset: int, high_watermark: int,
                log_start_offset: int) -> None:
        """The leader's state; the epoch last (a new epoch: after -1, see ``retire``)."""
        words = self.words
        if words[_EPOCH] != leader_epoch:
            words[_EPOCH] = -1
        words[_LOG_START] = log_start_offset
        words[_HW] = high_watermark
        words[_LEO] = log_end_offset
        words[_EPOCH] = leader_epoch

    def publish_end(self, log_end_offset: int, high_watermark: int, rang_ns: int = 0) -> None:
        """After an append: the new LEO with the HW as it is now (what a parked fetch
        answered now would carry), and the followers are rung now."""
        words = self.words
        if rang_ns:             # before the LEO it stamps: a follower that sees the LEO
            words[_RANG] = rang_ns      # must see its ring (CI: an older ring was read)
        words[_HW] = high_watermark
        words[_LEO] = log_end_offset

    def rang_ns(self) -> int:
        return _WORD.unpack_from(self._buffer, _RANG * 8)[0]

    def retire(self) -> None:
        """No longer leading: before any truncation."""
        self.words[_EPOCH] = -1

    def reports(self) -> list[FollowerReport]:
        """Every used row, each read consistently (seqlock): all rows are read at once
        (each row's seq before its body: ``struct`` reads in order, and x86-64 does
        not reorder loads), and a row counts if its seq was even and its broker and seq
        words are unchanged when read again after (the broker word comes before the seq:
        a whole write in between changes the seq); a row being written is read again
        alone."""
        out = []
        buffer = self._buffer
        words = _ROWS.unpack_from(buffer, ROWS_AT * 8)
        for row in range(ROWS):
            at = row * ROW_WORDS
            if words[at] == 0:
                continue
            seq = words[at + 1]
            if seq % 2 == 0 and \
                    _BROKER_SEQ.unpack_from(buffer, (ROWS_AT + at) * 8) == words[at:at + 2]:
                out.append(FollowerReport(words[at] - 1, seq, words[at + 2], words[at + 3],
                                          words[at + 4:at + ROW_WORDS]))
                continue
            report = self._read_row(row)
            if report is not None:
                out.append(report)
        return out

    def _read_row(self, row: int) -> FollowerReport | None:
        """One row read consistently, or None after ``ROW_READ_ATTEMPTS`` (its writer
        died mid-write, or keeps writing: its next report mends it)."""
        buffer = self._buffer
        at = (ROWS_AT + row * ROW_WORDS) * 8
        for _ in range(ROW_READ_ATTEMPTS):
            seq = _WORD.unpack_from(buffer, at + 8)[0]
            broker = _WORD.unpack_from(buffer, at)[0]
            body = _ROW_BODY.unpack_from(buffer, at + 16)
            if seq % 2 == 0 and _WORD.unpack_from(buffer, at + 8)[0] == seq:
                return FollowerReport(broker - 1, seq, body[0], body[1], body[2:])
        return None

    def report_marks(self) -> tuple:
        """The rows' seq words: unchanged means no follower wrote since (one read
        instead of every row)."""
        return _SEQS.unpack_from(self._buffer, ROWS_AT * 8)

    # ---- a follower ----------------------------------------------------------------------

    @classmethod
    def attach(cls, cluster_id: str, leader_id: int, topic: str,
               partition: int) -> "ReplicationSlot":
        """SharedMemoryError if the leader has no slot (it replicates by Fetch only, or
        is not on this host)."""
        name = slot_name(cluster_id, leader_id, topic, partition)
        path = os.path.join(names.SHM_DIR, name.lstrip("/"))
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            raise SharedMemoryError(f"no replication slot {name}") from None
        shared = SharedArray.attach(name, np.int64, shape=(SLOT_BYTES // 8,))
        if int(shared.array[0]) != MAGIC:
            shared.close()
            raise SharedMemoryError(f"replication slot {name} is not initialised")
        return cls(shared, inode, owner=False)

    def replaced(self) -> bool:
        """The name now holds another object (the leader restarted) or none."""
        try:
            return os.stat(os.path.join(names.SHM_DIR, self.name.lstrip("/"))).st_ino \
                != self.inode
        except FileNotFoundError:
            return True

    def leader_state(self) -> LeaderState:
        return LeaderState(*_LEADER_STATE.unpack_from(self._buffer, _EPOCH * 8))

    def leader_words(self) -> tuple:
        """(epoch, LEO, HW, log start): to tell cheaply whether anything moved."""
        return _LEADER_WORDS.unpack_from(self._buffer, _EPOCH * 8)

    def leader_epoch(self) -> int:
        return _WORD.unpack_from(self._buffer, _EPOCH * 8)[0]

    def log_dir(self) -> str:
        raw = self.words.view(np.uint8)[LOG_DIR_AT:].tobytes()
        return os.fsdecode(raw.split(b"\0", 1)[0])

    def report(self, row: int, broker_id: int, leader_epoch: int, log_end_offset: int,
               stamps: tuple = (0, 0, 0, 0)) -> None:
        """This follower's LEO in ``leader_epoch`` (row: its place in the replica list)."""
        if not 0 <= row < ROWS:
            raise ValueError(f"row {row} outside 0..{ROWS - 1}")
        if len(stamps) != ROW_WORDS - 4:
            raise ValueError(f"{len(stamps)} stamps, a row holds {ROW_WORDS - 4}")
        buffer = self._buffer
        at = (ROWS_AT + row * ROW_WORDS) * 8
        seq = _WORD.unpack_from(buffer, at + 8)[0]
        if seq % 2:
            seq += 1                   # a writer of this row died mid-write
        _WORD.pack_into(buffer, at + 8, seq + 1)
        _WORD.pack_into(buffer, at, broker_id + 1)
        _ROW_BODY.pack_into(buffer, at + 16, leader_epoch, log_end_offset, *stamps)
        _WORD.pack_into(buffer, at + 8, seq + 2)

    def close(self, unlink: bool = False) -> None:
        self.words = self._buffer = None
        self._shared.close()
        if unlink and self.owner and not self.replaced():
            self._shared.unlink()
