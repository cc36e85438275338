"""Checkpoint files and the leader-epoch cache, in Kafka's formats.

Files (text, as Kafka):
- ``replication-offset-checkpoint`` (high watermarks) and
  ``recovery-point-offset-checkpoint`` in the data directory, one per broker data dir:
  ``0\\n<count>\\n<topic> <partition> <offset>\\n...``.
- ``log-start-offset-checkpoint`` in the data directory, same format: a durable lower
  bound of each log's start offset, written BEFORE retention deletes a segment (Kafka
  has the file; we write it first so that a deleted segment can never come back).
- ``leader-epoch-checkpoint`` in each partition directory:
  ``0\\n<count>\\n<epoch> <start_offset>\\n...``.
- ``truncation-intent`` in a partition directory while a truncation is under way:
  ``0\\n1\\n<truncate_to|truncate_fully_and_start_at> <offset>\\n``. Written (durably)
  before the first file changes and removed after the last, so recovery can finish a
  truncation that a crash interrupted.

Rules:
- Writes are atomic: write ``<name>.tmp``, fsync it, rename over the file, fsync the
  directory. A reader sees the old file or the new one, never a mix.
- A malformed file raises ``CheckpointError`` naming the file and line; callers decide
  (a log treats a bad recovery point as 0: recover everything).
- LeaderEpochCache keeps entries strictly increasing in both epoch and start offset
  (Kafka's LeaderEpochFileCache semantics, KIP-101/KIP-279) and persists on change.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from shm.config import CHECKPOINT_BYTES_MAX

VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
TRUNCATION_INTENT = "truncation-intent"


class CheckpointError(Exception):
    """A checkpoint file is malformed."""


def write_atomically(path: str, text: str) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_lines(path: str, fields_per_line: int) -> list[list[str]]:
    """Parse the version/count/entries frame; [] if the file does not exist."""
    try:
        with open(path, "rb") as f:
            raw = f.read(CHECKPOINT_BYTES_MAX + 1)
    except FileNotFoundError:
        return []
    if len(raw) > CHECKPOINT_BYTES_MAX:
        raise CheckpointError(f"{path}: larger than {CHECKPOINT_BYTES_MAX} bytes")
    try:
        lines = raw.decode().split("\n")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not text") from e
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: unsupported version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError as e:
        raise CheckpointError(f"{path}: bad count line {lines[1]!r}") from e
    entries = lines[2:]
    if count != len(entries):
        raise CheckpointError(f"{path}: count says {count}, file has {len(entries)} entries")
    out = []
    for number, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != fields_per_line:
            raise CheckpointError(f"{path}:{number}: expected {fields_per_line} fields: {line!r}")
        out.append(parts)
    return out


def _int(path: str, text: str) -> int:
    try:
        return int(text)
    except ValueError as e:
        raise CheckpointError(f"{path}: {text!r} is not an integer") from e


class OffsetCheckpointFile:
    """``topic partition offset`` per line: the HW and recovery-point files of a data dir."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        return {(topic, _int(self.path, p)): _int(self.path, o)
                for topic, p, o in _read_lines(self.path, 3)}

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = [str(VERSION), str(len(offsets))]
        lines += [f"{topic} {partition} {offset}"
                  for (topic, partition), offset in sorted(offsets.items())]
        write_atomically(self.path, "\n".join(lines) + "\n")

    def update(self, topic: str, partition: int, offset: int | None) -> None:
        """Read-modify-write one entry (None removes it). One writer per data dir."""
        offsets = self.read()
        if offset is None:
            offsets.pop((topic, partition), None)
        else:
            offsets[(topic, partition)] = offset
        self.write(offsets)


class TruncationIntent:
    """The one truncation a partition directory may have under way (write-ahead)."""

    KINDS = ("truncate_to", "truncate_fully_and_start_at")

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> tuple[str, int] | None:
        lines = _read_lines(self.path, 2)
        if not lines:
            return None
        if len(lines) != 1 or lines[0][0] not in self.KINDS:
            raise CheckpointError(f"{self.path}: expected one of {self.KINDS}: {lines}")
        offset = _int(self.path, lines[0][1])
        if offset < 0:
            raise CheckpointError(f"{self.path}: negative offset {offset}")
        return lines[0][0], offset

    def write(self, kind: str, offset: int) -> None:
        assert kind in self.KINDS and offset >= 0, (kind, offset)
        write_atomically(self.path, f"{VERSION}\n1\n{kind} {offset}\n")

    def remove(self) -> None:
        """Durably: once this returns, recovery will not redo the truncation."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        fsync_dir(os.path.dirname(self.path) or ".")


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Leader epoch -> first offset written in it; persisted as ``leader-epoch-checkpoint``.

    Invariant: entries strictly increase in epoch and in start offset.
    ``log_end_offset`` is a callable so the latest epoch's end is always the live LEO.
    """

    def __init__(self, path: str, log_end_offset: Callable[[], int]) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self._entries: list[EpochEntry] = []
        self.dirty = False        # entries not yet written (truncate_from_start)
        for epoch, start in _read_lines(path, 2):
            self._assign(EpochEntry(_int(path, epoch), _int(path, start)))
        self._check()

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        Same epoch again is ignored unless it moves the start earlier. An entry that
        breaks monotonicity removes the conflicting entries at the end first (Kafka
        does this when a follower's epochs diverged from the new leader's).
        """
        entries = self._entries
        if entries and entries[-1].epoch == epoch and start_offset >= entries[-1].start_offset \
                and start_offset >= 0:
            return False   # the common case (every append in the latest epoch): no entry made
        changed = self._assign(EpochEntry(epoch, start_offset))
        if changed:
            self._check()
            self.flush()
        return changed

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        if self._entries:
            last = self._entries[-1]
            if entry.epoch == last.epoch and entry.start_offset >= last.start_offset:
                return False
        while self._entries and (self._entries[-1].epoch >= entry.epoch or
                                 self._entries[-1].start_offset >= entry.start_offset):
            self._entries.pop()
        self._entries.append(entry)
        return True

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """(largest epoch <= requested, end offset of that epoch), KIP-101/279.

        - the latest epoch: (epoch, LEO);
        - otherwise the end is the start offset of the first epoch above the request;
        - a request below the first cached epoch gets (requested, first start offset),
          as Kafka since KIP-279 (the data before it is gone; the follower truncates
          to the leader's start);
        - UNDEFINED epoch, an empty cache or an epoch above every cached one:
          (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, self._log_end_offset()
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e in self._entries:
            if e.epoch <= requested_epoch:
                floor = e
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop older entries, keeping the epoch
        that covers ``start_offset`` with its start moved up to it. Written later
        (``flush_if_dirty``, or any flush), as Kafka's truncateFromStartAsyncFlush
        (KAFKA-15046: a synchronous write stalled the request path behind a busy disk):
        a file that still holds the older entries is safe, since loading a log truncates
        its cache from its log start again."""
        removed = [e for e in self._entries if e.start_offset <= start_offset]
        if not removed:
            return
        kept = [e for e in self._entries if e.start_offset > start_offset]
        self._entries = [EpochEntry(removed[-1].epoch, start_offset)] + kept
        self._check()
        self.dirty = True

    def clear(self) -> None:
        self._entries = []
        self.flush()

    def flush(self) -> None:
        lines = [str(VERSION), str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_atomically(self.path, "\n".join(lines) + "\n")
        self.dirty = False

    def flush_if_dirty(self) -> None:
        """Write what ``truncate_from_start`` left in memory only (the broker's periodic
        checkpoints, and a log's close)."""
        if self.dirty:
            self.flush()

    def _check(self) -> None:
        for a, b in zip(self._entries, self._entries[1:]):
            assert a.epoch < b.epoch and a.start_offset < b.start_offset, self._entries
