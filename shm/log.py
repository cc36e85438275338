"""A partition replica's log: segments on disk, indexes in shared memory, crash recovery.

On-disk layout (``data_dir`` is one of the broker's ``log.dirs``):

    <data_dir>/recovery-point-offset-checkpoint    Kafka text format, all partitions
    <data_dir>/replication-offset-checkpoint       high watermarks, same format
    <data_dir>/log-start-offset-checkpoint         durable lower bound of each log start
    <data_dir>/<topic>-<partition>/
        00000000000000000000.log        segment: whole record batches back to back
        00000000000000000000.index      offset index (written on roll and clean close)
        00000000000000000000.timeindex  time index (same)
        00000000000000004711.log        next segment, named by its base offset
        leader-epoch-checkpoint         epoch -> start offset
        truncation-intent               only while a truncation is under way
        *.log.deleted                   a segment being deleted (not part of the log)
        .lock                           flock'd by the one Log that has it open

- Segment files are named by base offset (``%020d.log``); the segment with the highest
  base offset is the active one. Its file is preallocated (sparse, zero-filled) to
  ``log.segment.bytes`` and mmap'd; bytes after the last batch are zero. Every other
  segment's file is trimmed to its data. So a reader mapping a segment must stop at
  an offset it knows is written (HW) or at the first 12-byte zero prefix, and must
  never touch bytes past the file's current size: a roll trims the file it mapped at
  full capacity, and touching a page past the end of a file is SIGBUS.
- The log start offset is the base offset of the first segment; retention deletes
  whole segments, never the active one.

Shared memory (see ``shm/index.py`` for the object layout): per segment

    /mk-<cluster_id>-b<broker_id>-<topic>-<partition>-<segment base offset>-idx
    /mk-<cluster_id>-b<broker_id>-<topic>-<partition>-<segment base offset>-tidx

Another process attaches them with ``OffsetIndex.attach_readonly(cluster_id,
broker_id, topic, partition, base_offset)`` (``TimeIndex`` likewise); they live while
the log is open (and after a crash, until the log is reopened or ``cleanup_cluster``)
and are unlinked by ``close()``. A new segment's index objects are created before its
``.log`` file, so a reader that sees the file finds the index (possibly still empty:
then it scans from position 0). A reader finds a batch: pick the segment file with
the largest base offset <= target, ``OffsetIndex.lookup(target)`` -> (offset,
position), then walk batch headers (size = batch_length + 12) from that position.

Rules and invariants:
- log_start_offset <= high_watermark <= log_end_offset; recovery_point <= LEO.
- Offsets are contiguous: each batch starts at the previous batch's next offset, each
  segment at the previous segment's next offset.
- Appends are whole-batch copies published by advancing the segment size, so
  ``read`` never returns a torn batch; views are read-only.
- Default flush policy: never fsync on append (acks come from the page cache and
  durability from replication, as Kafka). ``flush()`` fsyncs and advances the
  recovery point, which is checkpointed; a roll flushes the sealed segment in a
  background thread and then advances the recovery point, as Kafka.
- Recovery (``Log.open`` after an unclean shutdown) trusts everything below the
  recovery point and verifies CRC and structure from there on, so its cost is the
  unflushed tail. It cuts a torn or corrupt tail and reports each cut
  (``RecoveryReport.truncations``, and a warning on the ``shm.log`` logger).
- Multi-step changes of the segment set are crash-safe (SIGKILL at any point, and
  power loss for what they made durable): ``truncate_to`` and
  ``truncate_fully_and_start_at`` first write a ``truncation-intent`` durably, and
  recovery finishes an interrupted one; retention first checkpoints the new log start
  offset, and recovery deletes every segment below it. Segments are deleted by renaming
  to ``.log.deleted`` (from the end for truncation, so a crash leaves a prefix), one
  directory fsync, then unlinking; recovery removes ``.deleted`` and orphan index
  files. A roll creates the new segment only after sealing the old one, so any crash
  leaves either the old active segment or an empty new one after it.
  ``shm.faults`` names every intermediate step; the crash tests die at each.
- Indexes: ``reattach_indexes=True`` (default) reattaches shared memory left by the
  previous incarnation, or loads the ``.index`` files, validating entries against the
  segments; anything invalid is rebuilt. ``reattach_indexes=False`` rebuilds all.
"""
from __future__ import annotations

import bisect
import dataclasses
import fcntl
import json
import logging
import os
import re
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from crc32c import crc32c

from shm import batch as B
from shm import faults
from shm.batch import CorruptRecordError
from shm.checkpoint import (LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                            RECOVERY_POINT_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
                            TRUNCATION_INTENT, CheckpointError, LeaderEpochCache,
                            OffsetCheckpointFile, TruncationIntent, fsync_dir)
from shm.config import BATCH_BYTES_MAX, SEGMENTS_PER_LOG_MAX, LogConfig
from shm.errors import (LogClosedError, LogError, OffsetOutOfRangeError,  # noqa: F401
                        RecordTooLargeError, UnexpectedAppendOffsetError)
from shm.index import (KIND_OFFSET, KIND_TIME, IndexCorruptError, OffsetIndex, TimeIndex,
                       index_name)
from shm.names import check_cluster_id, cluster_objects, unlink
from shm.producer_state import ProducerStates, last_sequence
from shm.segment import DELETED_SUFFIX, Segment, segment_file_name

logger = logging.getLogger("shm.log")

BATCHES_PER_APPEND_MAX = 100_000
LOCK_FILE = ".lock"
_INDEX_SUFFIX = re.compile(r"^(\d+)-(idx|tidx)$")
_INDEX_FILE = re.compile(r"^(\d{20})\.(index|timeindex)$")
SNAPSHOT_SUFFIX = ".snapshot"      # idempotent producers' state as of an offset
SNAPSHOTS_KEPT = 3
TRUNCATE_TO = "truncate_to"
TRUNCATE_FULLY = "truncate_fully_and_start_at"


def _unlink_if_present(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int


@dataclass(frozen=True)
class Truncation:
    """What recovery cut: ``bytes`` from ``position`` of ``file`` (offset ``offset`` on)."""

    file: str
    position: int
    offset: int
    bytes: int
    reason: str


@dataclass
class RecoveryReport:
    recovery_point: int = 0
    log_end_offset: int = 0
    segments_scanned: int = 0
    bytes_scanned: int = 0
    batches_scanned: int = 0
    indexes_reattached: int = 0
    indexes_loaded: int = 0
    indexes_rebuilt: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    # Operations a crash interrupted and recovery finished, e.g. "truncate_to(264)".
    completed_operations: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def truncated(self) -> bool:
        return bool(self.truncations)


@dataclass
class _RollFlush:
    future: Future
    offset: int  # the recovery point once the fsyncs are done
    segments: list[tuple[Segment, int]]  # (segment, bytes covered)


_flusher_pool: ThreadPoolExecutor | None = None


def _flusher() -> ThreadPoolExecutor:
    """One background thread per process for roll flushes (os.fsync drops the GIL)."""
    global _flusher_pool
    if _flusher_pool is None:
        _flusher_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mk-roll-flush")
    return _flusher_pool


def _fsync_and_close(descriptors: list[int]) -> None:
    # Duplicated descriptors: the log may close or delete the segment meanwhile.
    try:
        for fd in descriptors:
            os.fsync(fd)
    finally:
        for fd in descriptors:
            os.close(fd)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Log:
    """One partition replica's log. Open with ``Log.open``; single writer."""

    def __init__(self, data_dir: str, topic: str, partition: int, config: LogConfig,
                 cluster_id: str, broker_id: int) -> None:
        self.data_dir = data_dir
        self.topic = topic
        self.partition = partition
        self.config = config
        self.cluster_id = check_cluster_id(cluster_id)
        self.broker_id = broker_id
        self.directory = os.path.join(data_dir, f"{topic}-{partition}")
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.high_watermark = 0
        self.recovery_point = 0
        self.recovery = RecoveryReport()
        self._recovery_file = OffsetCheckpointFile(
            os.path.join(data_dir, RECOVERY_POINT_OFFSET_CHECKPOINT))
        self._hw_file = OffsetCheckpointFile(os.path.join(data_dir, REPLICATION_OFFSET_CHECKPOINT))
        self._log_start_file = OffsetCheckpointFile(
            os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT))
        self._intent = TruncationIntent(os.path.join(self.directory, TRUNCATION_INTENT))
        self.leader_epoch_cache: LeaderEpochCache | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = wall_clock_ms()
        self._closed = False
        self._lock_fd = -1
        self._roll_flush: _RollFlush | None = None
        # Idempotent producers' state (shm.producer_state): built from the batch headers
        # the first time it is needed, then kept up to date by every append; dropped by
        # a truncation (rebuilt again on the next need). None: not built.
        self._producers: ProducerStates | None = None

    # ================================================================ open / recovery

    @classmethod
    def open(cls, data_dir: str, topic: str, partition: int, config: LogConfig | None = None,
             *, cluster_id: str, broker_id: int = 0, reattach_indexes: bool = True,
             now_ms: int | None = None) -> "Log":
        """Open (creating if needed) and recover. ``log.recovery`` says what happened."""
        started = time.perf_counter()
        log = cls(data_dir, topic, partition, config or LogConfig(), cluster_id, broker_id)
        os.makedirs(log.directory, exist_ok=True)
        log._lock()
        try:
            log._load(reattach_indexes, wall_clock_ms() if now_ms is None else now_ms)
        except BaseException:
            log.abandon()  # drop maps, descriptors and the lock; leave files for a retry
            raise
        log.recovery.elapsed_s = time.perf_counter() - started
        return log

    def _load(self, reattach_indexes: bool, now_ms: int) -> None:
        for name in os.listdir(self.directory):
            if name.endswith(".tmp") or name.endswith(DELETED_SUFFIX):
                os.unlink(os.path.join(self.directory, name))  # half-written or deleted
        self._last_flush_ms = now_ms
        epoch_path = os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT)
        try:
            self.leader_epoch_cache = LeaderEpochCache(epoch_path, lambda: self.log_end_offset)
        except CheckpointError as e:
            logger.warning("%s; starting with an empty leader epoch cache", e)
            os.unlink(epoch_path)
            self.leader_epoch_cache = LeaderEpochCache(epoch_path, lambda: self.log_end_offset)
        intent = self._read_intent()
        if intent is not None and intent[0] == TRUNCATE_FULLY:
            self._redo_truncate_fully_files(intent[1])
        bases = self._segment_bases()
        if len(bases) > SEGMENTS_PER_LOG_MAX:
            raise LogError(f"{self.directory}: {len(bases)} segments > {SEGMENTS_PER_LOG_MAX}")
        bases = self._delete_below_log_start(bases)
        self._unlink_stray_index_files(bases)
        self._unlink_orphan_indexes(bases)
        if not bases:
            start = self._read_checkpoint(self._log_start_file)
            self._add_segment(self._new_segment(start, now_ms))
            fsync_dir(self.directory)
            self.recovery_point = start
        else:
            self._recover(bases, reattach_indexes, now_ms)
        self.high_watermark = min(max(self._read_checkpoint(self._hw_file),
                                      self.log_start_offset), self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        if intent is not None:
            # Finish what the crash interrupted, then forget it.
            if intent[0] == TRUNCATE_TO:
                self._truncate_to(intent[1])
            else:
                self._start_at(intent[1])
            logger.warning("recovery of %s finished an interrupted %s(%d)", self.directory,
                           intent[0], intent[1])
            self.recovery.completed_operations.append(f"{intent[0]}({intent[1]})")
            self._intent.remove()
        self.recovery.log_end_offset = self.log_end_offset
        self._delete_snapshots(lambda o: o > self.log_end_offset or o < self.log_start_offset)
        self.check()

    def _lock(self) -> None:
        """One writer per partition directory (Kafka locks its log dirs the same way);
        the kernel drops the lock when the process dies."""
        self._lock_fd = os.open(os.path.join(self.directory, LOCK_FILE),
                                os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise LogError(f"{self.directory} is open in another Log (its {LOCK_FILE} is held)")

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = -1

    def _unlink_orphan_indexes(self, bases: list[int]) -> None:
        """Shared memory of segments that are gone (a crash between deleting a segment's
        file and its indexes, or the reverse) would leak until ``cluster down``."""
        head = index_name(self.cluster_id, self.broker_id, self.topic, self.partition, 0,
                          KIND_OFFSET)[:-len("0-idx")]
        wanted = set(bases)
        for name in cluster_objects(self.cluster_id):
            rest = name[len(head):] if name.startswith(head) else ""
            match = _INDEX_SUFFIX.match(rest)
            if match and int(match.group(1)) not in wanted:
                unlink(name)

    def _segment_bases(self) -> list[int]:
        return sorted(int(n[:-4]) for n in os.listdir(self.directory)
                      if n.endswith(".log") and len(n) == 24 and n[:20].isdigit())

    def _read_intent(self) -> tuple[str, int] | None:
        try:
            return self._intent.read()
        except CheckpointError as e:
            # Written atomically, so not a crash artifact: guessing could resurrect data.
            raise LogError(f"{e}; refusing to open {self.directory}") from e

    def _delete_segment_files(self, base: int) -> None:
        """Recovery's deletion of a segment it never opened: .log first (renamed, so a
        crash here leaves a .deleted file, not a segment without its start)."""
        stem = os.path.join(self.directory, f"{base:020d}")
        try:
            os.rename(stem + ".log", stem + ".log" + DELETED_SUFFIX)
        except FileNotFoundError:
            pass
        for path in (stem + ".index", stem + ".timeindex", stem + ".log" + DELETED_SUFFIX):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _redo_truncate_fully_files(self, offset: int) -> None:
        """A crash interrupted truncate_fully_and_start_at(offset) after its intent was
        durable: every segment file goes (the new one, if created, is still empty: no
        append runs while the intent exists); the caller creates the segment at
        ``offset`` (from the log start checkpoint) and ``_start_at`` does the rest."""
        for base in self._segment_bases():
            self._delete_segment_files(base)
        fsync_dir(self.directory)
        self._log_start_file.update(self.topic, self.partition, offset)

    def _delete_below_log_start(self, bases: list[int]) -> list[int]:
        """Finish a retention that a crash interrupted: the new log start offset was
        checkpointed before any file went, so every segment that ends at or below it
        (the next segment starts at or below it) is deleted; returns the bases kept."""
        log_start = self._read_checkpoint(self._log_start_file)
        first = 0
        while first + 1 < len(bases) and bases[first + 1] <= log_start:
            first += 1
        if first:
            for base in bases[:first]:
                self._delete_segment_files(base)
            fsync_dir(self.directory)
            self.recovery.completed_operations.append(f"delete_old_segments({log_start})")
            logger.warning("recovery of %s deleted %d segment(s) below the checkpointed log "
                           "start offset %d (retention interrupted)", self.directory, first,
                           log_start)
        if bases[first:] and bases[first] < log_start:
            logger.warning("%s: log start offset %d is inside segment %d", self.directory,
                           log_start, bases[first])
        return bases[first:]

    def _unlink_stray_index_files(self, bases: list[int]) -> None:
        """Index files of deleted segments (a crash between a deletion's unlinks) must not
        be loaded if a segment with that base offset appears again."""
        wanted = set(bases)
        for name in os.listdir(self.directory):
            match = _INDEX_FILE.match(name)
            if match and int(match.group(1)) not in wanted:
                os.unlink(os.path.join(self.directory, name))

    def _read_checkpoint(self, file: OffsetCheckpointFile) -> int:
        try:
            return file.read().get((self.topic, self.partition), 0)
        except CheckpointError as e:
            logger.warning("%s; treating it as 0 (recover everything)", e)
            return 0

    def _recover(self, bases: list[int], reattach: bool, now_ms: int) -> None:
        report = self.recovery
        checkpointed = self._read_checkpoint(self._recovery_file)
        recovery_point = max(checkpointed, bases[0])
        report.recovery_point = recovery_point
        first_scanned = bisect.bisect_right(bases, recovery_point) - 1
        segments = []
        for base in bases:
            offset_index, time_index, from_files = self._open_indexes(base, reattach)
            segment = Segment.open(self.directory, base, self.config.segment_bytes,
                                   offset_index, time_index, self.config.index_interval_bytes,
                                   now_ms)
            segment.indexes_dirty = not from_files  # cuts and appends set it again
            segments.append(segment)
        # Below the recovery point: sealed, flushed, trusted (indexes validated).
        for i in range(first_scanned):
            segment = segments[i]
            segment.map_readonly()
            if not self._trust(segment):
                first_scanned = i  # damaged below the recovery point: verify it too
                recovery_point = segment.base_offset
                break
        for i in range(first_scanned, len(segments)):
            segment = segments[i]
            last = i == len(segments) - 1
            if last:
                segment.activate()
            else:
                segment.map_readonly()
            start = 0
            if i == first_scanned:
                start = self._scan_start(segment, recovery_point)
            if start == 0:
                self._clear_indexes(segment)
            file_end = segment.file_bytes
            result = segment.recover_from(start, BATCH_BYTES_MAX, self._recovered_batch)
            report.segments_scanned += 1
            report.bytes_scanned += result.end_position - start
            report.batches_scanned += result.batches
            error = result.error
            if error is None and not last and result.end_position != file_end:
                error = f"zero bytes at position {result.end_position} of a sealed segment"
            if error is not None:
                dirty_end = segment.nonzero_end(result.end_position)
                cut = dirty_end - result.end_position
                for later in reversed(segments[i + 1:]):  # a crash leaves a prefix
                    cut += later.file_bytes
                    later.delete()
                del segments[i + 1:]
                segment.truncate_at(result.end_position, dirty_end)
                truncation = Truncation(segment.path, result.end_position, segment.next_offset,
                                        cut, error)
                report.truncations.append(truncation)
                logger.warning("recovery of %s cut %d bytes at position %d of %s (offset %d "
                               "on): %s", self.directory, cut, truncation.position,
                               truncation.file, truncation.offset, error)
                break
        for i, segment in enumerate(segments):
            if self.segments and segment.base_offset != self.log_end_offset:
                # A missing segment file: offsets must stay contiguous, so the log ends
                # where the gap starts.
                error = (f"segment {segment_file_name(segment.base_offset)} starts at "
                         f"{segment.base_offset}, the log before it ends at "
                         f"{self.log_end_offset}")
                cut = sum(later.size_bytes for later in segments[i:])
                for later in reversed(segments[i:]):
                    later.delete()
                report.truncations.append(
                    Truncation(segment.path, 0, self.log_end_offset, cut, error))
                logger.warning("recovery of %s cut %d bytes: %s", self.directory, cut, error)
                break
            self._add_segment(segment)
        if not self.segments[-1].active:
            self.segments[-1].activate()
        self.recovery_point = min(recovery_point, self.log_end_offset)
        if report.truncations or checkpointed > self.log_end_offset:
            self._write_recovery_point()  # never leave a checkpoint above the LEO

    def _recovered_batch(self, header: B.BatchHeader) -> None:
        # As Kafka: epochs of recovered batches re-enter the cache (it may lag the log).
        if header.partition_leader_epoch >= 0:
            self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    def _open_indexes(self, base: int, reattach: bool) -> tuple[OffsetIndex, TimeIndex, bool]:
        """(offset index, time index, both loaded from their files)."""
        indexes, loaded = [], 0
        stem = os.path.join(self.directory, f"{base:020d}")
        for cls, kind, suffix in ((OffsetIndex, KIND_OFFSET, ".index"),
                                  (TimeIndex, KIND_TIME, ".timeindex")):
            name = index_name(self.cluster_id, self.broker_id, self.topic, self.partition,
                              base, kind)
            index = None
            if reattach:
                try:
                    index = cls.attach(name, base)
                    self.recovery.indexes_reattached += 1
                except IndexCorruptError:
                    index = None
            if index is None:
                index = cls.create(name, base, self._index_entries_max())
                if reattach:
                    try:
                        keys, values = cls.read_file(stem + suffix, base)
                        index.load(keys, values)
                        self.recovery.indexes_loaded += 1
                        loaded += 1
                    except IndexCorruptError:
                        index.truncate_to_count(0)
            indexes.append(index)
        return indexes[0], indexes[1], loaded == 2

    def _index_entries_max(self) -> int:
        by_segment = self.config.segment_bytes // self.config.index_interval_bytes + 2
        return max(2, min(self.config.index_entries_max, by_segment))

    def _clear_indexes(self, segment: Segment) -> None:
        segment.offset_index.truncate_to_count(0)
        segment.time_index.truncate_to_count(0)
        segment.indexes_dirty = True

    def _trust(self, segment: Segment) -> bool:
        """Accept a sealed segment below the recovery point; rebuild bad indexes by a
        header walk. False if even the walk fails (then the segment is verified)."""
        size = segment.file_bytes
        segment.cut_indexes_after(size)
        if not segment.indexes_valid():
            self._clear_indexes(segment)
        if segment.offset_index.count == 0 and size > 0:
            self.recovery.indexes_rebuilt += 1
        return segment.trust(size)

    def _scan_start(self, segment: Segment, recovery_point: int) -> int:
        """Where verification starts: the indexed batch at or below the recovery point,
        if the index entry checks out; else the segment's start."""
        segment.cut_indexes_after(segment.file_bytes)
        offset, position = segment.offset_index.lookup(recovery_point)
        if position > 0 and segment.indexes_valid():
            return position
        if segment.offset_index.count > 0 or segment.file_bytes > 0:
            self.recovery.indexes_rebuilt += 1
        return 0

    # ================================================================ state

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def check(self) -> None:
        """Assert the invariants (cheap enough for tests and after recovery)."""
        assert self.segments and self.segments[-1].active
        assert self.log_start_offset <= self.high_watermark <= self.log_end_offset, \
            (self.log_start_offset, self.high_watermark, self.log_end_offset)
        assert self.recovery_point <= self.log_end_offset
        for a, b in zip(self.segments, self.segments[1:]):
            assert a.next_offset == b.base_offset, (a.base_offset, a.next_offset, b.base_offset)
            assert not a.active
        assert self._bases == [s.base_offset for s in self.segments]

    def _ensure_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # ================================================================ append

    def append_as_leader(self, records, leader_epoch: int, *,
                         now_ms: int | None = None) -> AppendInfo:
        """Assign offsets from the LEO: stamp base_offset and the leader epoch in place
        (``records`` must be writable: one or more whole batches), then append."""
        self._ensure_open()
        view = memoryview(records).cast("B")
        if view.readonly:
            raise ValueError("append_as_leader stamps offsets in place: pass a writable buffer")
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} must be >= 0")
        batches = self._check_records(view)
        next_offset = self.log_end_offset
        stamped = []
        for position, header in batches:
            B.stamp(view[position:position + header.size_bytes], next_offset, leader_epoch)
            stamped.append((position, dataclasses.replace(
                header, base_offset=next_offset, partition_leader_epoch=leader_epoch)))
            next_offset += header.record_count
        self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)
        return self._append(view, stamped, now_ms)

    def append_as_follower(self, records, *, now_ms: int | None = None) -> AppendInfo:
        """Append batches with the offsets they carry; they must continue the LEO."""
        self._ensure_open()
        view = memoryview(records).cast("B")
        batches = self._check_records(view)
        expected = self.log_end_offset
        for position, header in batches:
            if header.base_offset != expected:
                raise UnexpectedAppendOffsetError(
                    f"{self.topic}-{self.partition}: follower batch at position {position} "
                    f"starts at offset {header.base_offset}, expected {expected} (LEO "
                    f"{self.log_end_offset})")
            expected = header.next_offset
        for _, header in batches:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        return self._append(view, batches, now_ms)

    def _check_records(self, view: memoryview) -> list[tuple[int, B.BatchHeader]]:
        limit = self.config.message_max_bytes
        batches, position = [], 0
        while position < len(view):
            if len(batches) >= BATCHES_PER_APPEND_MAX:
                raise RecordTooLargeError(f"more than {BATCHES_PER_APPEND_MAX} batches")
            if len(view) - position >= B.PREFIX.size:
                size = B.PREFIX.unpack_from(view, position)[1] + B.LENGTH_OVERHEAD_BYTES
                if size > limit:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes exceeds message.max.bytes={limit}")
                if size > self.config.segment_bytes:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes exceeds log.segment.bytes="
                        f"{self.config.segment_bytes}")
            header = B.check_batch(view, position, max_bytes=limit)
            batches.append((position, header))
            position += header.size_bytes
        if not batches:
            raise CorruptRecordError("no record batch in an append")
        return batches

    def _append(self, view: memoryview, batches, now_ms: int | None) -> AppendInfo:
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        self._poll_roll_flush(wait=False)
        records = 0
        for position, header in batches:
            segment = self.active_segment
            if segment.size_bytes > 0 and (
                    segment.size_bytes + header.size_bytes > self.config.segment_bytes
                    or segment.index_full
                    or segment.time_waited_for_roll_ms(now_ms, header.max_timestamp)
                    > self.config.roll_ms):
                self.roll(now_ms=now_ms)
                segment = self.active_segment
            segment.append(view[position:position + header.size_bytes], header)
            records += header.record_count
            if self._producers is not None and header.producer_id >= 0:
                self._learn_producer(header)
        first = batches[0][1].base_offset
        info = AppendInfo(first, self.log_end_offset - 1, records, len(batches))
        assert info.last_offset - info.first_offset + 1 == records
        self._unflushed_messages += records
        if self._unflushed_messages >= self.config.flush_interval_messages or \
                now_ms - self._last_flush_ms >= self.config.flush_interval_ms:
            self.flush(now_ms=now_ms)
        return info

    # ================================================================ producers

    def producer_states(self) -> ProducerStates:
        """The idempotent producers' state of this partition. Built on first use from
        the newest snapshot file at or below the LEO (``<offset>.snapshot``, written at
        each roll, as Kafka's) and the batch headers after it (no record is decoded);
        without a usable snapshot, from every batch header of the log."""
        self._ensure_open()
        if self._producers is None:
            states, start = None, self.log_start_offset
            for offset in reversed(self._snapshot_offsets()):
                if self.log_start_offset <= offset <= self.log_end_offset:
                    states = self._read_producer_snapshot(offset)
                    if states is not None:
                        start = offset
                        break
            self._producers = states or ProducerStates()
            for segment in self.segments:
                if segment.next_offset <= start:
                    continue
                end = segment.size_bytes
                view = segment.view(0, end)
                position = segment.position_of(start) if segment.base_offset < start else 0
                while position is not None and position < end:
                    header = B.read_header(view, position)
                    if header.producer_id >= 0 and header.base_offset >= start:
                        self._learn_producer(header)
                    position += header.size_bytes
        return self._producers

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def _snapshot_offsets(self) -> list[int]:
        return sorted(int(n[:20]) for n in os.listdir(self.directory)
                      if n.endswith(SNAPSHOT_SUFFIX) and len(n) == 20 + len(SNAPSHOT_SUFFIX)
                      and n[:20].isdigit())

    def _write_producer_snapshot(self, offset: int) -> None:
        """The producers' state as of ``offset`` (every batch below it), with its CRC.
        Not fsynced: it is derived from the log, and a lost or torn one is rebuilt."""
        payload = json.dumps({"offset": offset, "producers": self._producers.to_json()},
                             separators=(",", ":")).encode()
        path = self._snapshot_path(offset)
        with open(path + ".tmp", "wb") as f:
            f.write(b"%08x\n" % crc32c(payload) + payload)
        os.replace(path + ".tmp", path)
        self._delete_snapshots(lambda o: o < self.log_start_offset)
        kept = self._snapshot_offsets()
        for old in kept[:-SNAPSHOTS_KEPT]:
            _unlink_if_present(self._snapshot_path(old))

    def _read_producer_snapshot(self, offset: int) -> ProducerStates | None:
        path = self._snapshot_path(offset)
        try:
            with open(path, "rb") as f:
                data = f.read()
            crc, payload = int(data[:8], 16), data[9:]
            if crc != crc32c(payload):
                raise ValueError("CRC mismatch")
            snapshot = json.loads(payload)
            if snapshot["offset"] != offset:
                raise ValueError(f"it says offset {snapshot['offset']}")
            return ProducerStates.from_json(snapshot["producers"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("ignoring producer-state snapshot %s: %s", path, e)
            _unlink_if_present(path)
            return None

    def _delete_snapshots(self, which) -> None:
        for offset in self._snapshot_offsets():
            if which(offset):
                _unlink_if_present(self._snapshot_path(offset))

    def _learn_producer(self, header: B.BatchHeader) -> None:
        if header.base_sequence < 0 or header.producer_epoch < 0:
            return
        self._producers.update(
            header.producer_id, header.producer_epoch, header.base_sequence,
            last_sequence(header.base_sequence, header.record_count), header.base_offset,
            header.next_offset - 1)

    # ================================================================ read

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None
             ) -> memoryview:
        """Whole batches from the one holding ``start_offset``: at most ``max_bytes``
        but at least one batch (as Kafka), none ending above ``max_offset`` (e.g. the HW).
        A zero-copy read-only view of one segment; empty at the LEO. The bytes stay
        valid until this range is truncated (they then read as zeros) - copy them to
        keep them longer; a deleted segment's view stays readable (the map lives on)."""
        self._ensure_open()
        if not self.log_start_offset <= start_offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: offset {start_offset} is outside "
                f"[{self.log_start_offset}, {self.log_end_offset}]")
        if max_bytes < 0:
            raise ValueError(f"max_bytes {max_bytes} < 0")
        if start_offset == self.log_end_offset or \
                (max_offset is not None and start_offset >= max_offset):
            return memoryview(b"")
        i = bisect.bisect_right(self._bases, start_offset) - 1
        for segment in self.segments[i:]:
            position = segment.position_of(start_offset)
            if position is None:
                continue
            end = segment.end_of_batches_within(position, max_bytes, max_offset)
            return segment.view(position, end)
        return memoryview(b"")

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """ListOffsets by time: the first offset whose record timestamp is >=
        ``timestamp_ms``; None if every record is older."""
        found = self.entry_for_timestamp(timestamp_ms)
        return None if found is None else found[0]

    def entry_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= ``timestamp_ms``
        (what Kafka's ListOffsets answers); None if every record is older. Uses each
        segment's max timestamp, then its time index, then walks at most one index
        interval."""
        self._ensure_open()
        for segment in self.segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            start = max(segment.time_index.scan_start(timestamp_ms), segment.base_offset)
            position = segment.position_of(min(start, segment.next_offset - 1))
            while position is not None and position < segment.size_bytes:
                header = B.read_header(segment.view(position, segment.size_bytes))
                if header.max_timestamp >= timestamp_ms:
                    deltas = np.frombuffer(segment.view(position, position + header.size_bytes),
                                           dtype="<i4", count=header.record_count,
                                           offset=B.HEADER_BYTES)
                    stamps = deltas.astype(np.int64) + header.base_timestamp
                    first = int(np.argmax(stamps >= timestamp_ms))
                    return header.base_offset + first, int(stamps[first])
                position += header.size_bytes
        return None

    # ================================================================ roll / flush

    def roll(self, *, now_ms: int | None = None) -> None:
        """Seal the active segment (trim, persist indexes, flush) and start a new one."""
        self._ensure_open()
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        segment = self.active_segment
        if segment.size_bytes == 0:
            return
        self._poll_roll_flush(wait=True)  # at most one in flight
        segment.seal()
        faults.point("roll:sealed")
        segment.persist_indexes()
        faults.point("roll:indexes-persisted")
        self._add_segment(self._new_segment(self.log_end_offset, now_ms))
        faults.point("roll:segment-created")
        if self._producers is not None and len(self._producers):
            self._write_producer_snapshot(self.log_end_offset)
        fsync_dir(self.directory)
        faults.point("roll:directory-synced")
        # As Kafka: the sealed segments are fsynced in the background and the recovery
        # point moves to the new segment once that is done (seen by the next append,
        # flush or flush_if_due), so a roll does not stall appends behind an fsync.
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        pending = [(s, s.size_bytes) for s in self.segments[first:-1]
                   if s.flushed_bytes < s.size_bytes]
        descriptors = [s.dup_fd() for s, _ in pending]
        self._roll_flush = _RollFlush(_flusher().submit(_fsync_and_close, descriptors),
                                      self.active_segment.base_offset, pending)

    def _poll_roll_flush(self, *, wait: bool) -> None:
        """Apply a finished background roll flush (or wait for it)."""
        roll_flush = self._roll_flush
        if roll_flush is None or not (wait or roll_flush.future.done()):
            return
        self._roll_flush = None
        roll_flush.future.result()  # an fsync error surfaces here, as a storage error
        for segment, size_bytes in roll_flush.segments:
            segment.flushed_bytes = max(segment.flushed_bytes, size_bytes)
        if self.recovery_point < roll_flush.offset <= self.log_end_offset:
            self.recovery_point = roll_flush.offset
            self._write_recovery_point()

    def _new_segment(self, base_offset: int, now_ms: int) -> Segment:
        indexes = []
        for cls, kind in ((OffsetIndex, KIND_OFFSET), (TimeIndex, KIND_TIME)):
            name = index_name(self.cluster_id, self.broker_id, self.topic, self.partition,
                              base_offset, kind)
            indexes.append(cls.create(name, base_offset, self._index_entries_max()))
        return Segment.create(self.directory, base_offset, self.config.segment_bytes,
                              indexes[0], indexes[1], self.config.index_interval_bytes, now_ms)

    def _add_segment(self, segment: Segment) -> None:
        if self.segments:
            assert segment.base_offset == self.log_end_offset
            assert not self.segments[-1].active
        if len(self.segments) >= SEGMENTS_PER_LOG_MAX:
            raise LogError(f"{self.directory}: more than {SEGMENTS_PER_LOG_MAX} segments")
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def flush(self, *, now_ms: int | None = None) -> None:
        """fsync everything up to the LEO and checkpoint it as the recovery point."""
        self._ensure_open()
        self._poll_roll_flush(wait=True)
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        for segment in self.segments[first:]:
            if segment.flushed_bytes < segment.size_bytes:
                segment.flush()
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = wall_clock_ms() if now_ms is None else now_ms
        self._write_recovery_point()

    def flush_if_due(self, *, now_ms: int | None = None) -> bool:
        """The broker's periodic check of log.flush.interval.ms (appends check it too)."""
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        self._poll_roll_flush(wait=False)
        due = now_ms - self._last_flush_ms >= self.config.flush_interval_ms
        if self._unflushed_messages and due:
            self.flush(now_ms=now_ms)
            return True
        return False

    def _write_recovery_point(self) -> None:
        self._recovery_file.update(self.topic, self.partition, self.recovery_point)

    # ================================================================ high watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start, LEO]; returns the value set."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def checkpoint_high_watermark(self) -> None:
        self._hw_file.update(self.topic, self.partition, self.high_watermark)

    # ================================================================ truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset >= ``offset`` (whole batches: the LEO
        becomes the base of the batch holding ``offset``). Below the log start the log
        is emptied and restarts at ``offset``, as Kafka. True if anything was removed.

        Crash-safe: the intent is made durable first and recovery redoes the rest, so a
        crash leaves the log untruncated (intent not yet durable) or truncated."""
        self._ensure_open()
        if offset < 0:
            raise ValueError(f"truncate_to({offset})")
        if offset >= self.log_end_offset:
            return False
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self._intent.write(TRUNCATE_TO, offset)
        faults.point("truncate_to:intent-written")
        self._truncate_to(offset)
        self._intent.remove()
        return True

    def _truncate_to(self, offset: int) -> None:
        """The steps of ``truncate_to``, also run by recovery to finish one (idempotent)."""
        if not self.log_start_offset <= offset < self.log_end_offset:
            return
        i = bisect.bisect_right(self._bases, offset) - 1
        segment = self.segments[i]
        position = segment.position_of(offset)
        assert position is not None
        later = self.segments[i + 1:]
        for victim in reversed(later):  # from the end: a crash leaves a prefix of the log
            victim.mark_deleted()
            faults.point("truncate_to:segment-renamed")
        if later:
            fsync_dir(self.directory)
            faults.point("truncate_to:segments-renamed-durable")
        for victim in later:
            victim.delete()
            faults.point("truncate_to:segment-deleted")
        del self.segments[i + 1:]
        del self._bases[i + 1:]
        segment.truncate_at(position)
        faults.point("truncate_to:tail-cut")
        # Durable before the intent goes: after a power loss the cut must not come back.
        segment.flush()
        faults.point("truncate_to:tail-flushed")
        self._after_truncation()
        faults.point("truncate_to:checkpoints-written")

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Delete every segment and restart empty at ``offset`` (a follower far behind).

        Crash-safe: the intent is made durable first; from then on recovery deletes
        every segment and restarts at ``offset`` (no old segment can come back)."""
        self._ensure_open()
        if offset < 0:
            raise ValueError(f"truncate_fully_and_start_at({offset})")
        self._intent.write(TRUNCATE_FULLY, offset)
        faults.point("truncate_fully:intent-written")
        self._roll_flush = None
        for segment in reversed(self.segments):
            segment.mark_deleted()
            faults.point("truncate_fully:segment-renamed")
        fsync_dir(self.directory)
        faults.point("truncate_fully:segments-renamed-durable")
        for segment in self.segments:
            segment.delete()
            faults.point("truncate_fully:segment-deleted")
        self.segments, self._bases = [], []
        self._add_segment(self._new_segment(offset, wall_clock_ms() if now_ms is None else now_ms))
        fsync_dir(self.directory)
        faults.point("truncate_fully:segment-created")
        self._start_at(offset)
        faults.point("truncate_fully:checkpoints-written")
        self._intent.remove()
        self.check()

    def _start_at(self, offset: int) -> None:
        """The checkpoints of an empty log restarted at ``offset`` (its only segment)."""
        self._producers = None
        self._delete_snapshots(lambda o: True)
        assert self.log_start_offset == self.log_end_offset == offset
        self.high_watermark = offset
        self.recovery_point = offset
        self.leader_epoch_cache.clear()
        self._write_recovery_point()
        self._log_start_file.update(self.topic, self.partition, offset)
        self.checkpoint_high_watermark()

    def _after_truncation(self) -> None:
        self._roll_flush = None  # its offset may now name different data: forget it
        self._producers = None   # rebuilt from what is left when next needed
        self._delete_snapshots(lambda o: o > self.log_end_offset)
        if self.high_watermark > self.log_end_offset:
            # Lower the checkpoint too: otherwise, after new appends at these offsets
            # and a crash, the old HW would cover records no replica has confirmed.
            self.high_watermark = self.log_end_offset
            self.checkpoint_high_watermark()
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        if self.recovery_point > self.log_end_offset:
            self.recovery_point = self.log_end_offset
            self._write_recovery_point()
        self.check()

    # ================================================================ retention

    def delete_old_segments(self, *, now_ms: int | None = None) -> int:
        """Retention (log.retention.ms / log.retention.bytes): delete whole segments
        from the start, only below the HW, never the active one. Returns how many."""
        self._ensure_open()
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        total = self.size_bytes
        victims = 0
        while victims < len(self.segments) - 1:
            first = self.segments[victims]
            if first.next_offset > self.high_watermark:
                break
            expired = retention_ms >= 0 and first.max_timestamp >= 0 and \
                now_ms - first.max_timestamp > retention_ms
            too_big = retention_bytes >= 0 and total - first.size_bytes >= retention_bytes
            if not (expired or too_big):
                break
            total -= first.size_bytes
            victims += 1
        if victims:
            self._delete_first_segments(victims)
        return victims

    def _delete_first_segments(self, count: int) -> None:
        """Crash-safe: the new log start offset is durable before any file goes (Kafka's
        log-start-offset-checkpoint), and recovery deletes every segment below it."""
        victims = self.segments[:count]
        self._log_start_file.update(self.topic, self.partition, self.segments[count].base_offset)
        faults.point("retention:log-start-written")
        for victim in victims:
            victim.mark_deleted()
            faults.point("retention:segment-renamed")
        fsync_dir(self.directory)
        faults.point("retention:segments-renamed-durable")
        for victim in victims:
            victim.delete()
            faults.point("retention:segment-deleted")
        del self.segments[:count]
        del self._bases[:count]
        self._delete_snapshots(lambda o: o < self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        if self.recovery_point < self.log_start_offset:
            self.recovery_point = self.log_start_offset
            self._write_recovery_point()
        self.check()

    # ================================================================ close / delete

    def close(self) -> None:
        """Clean shutdown: trim the active segment, fsync, persist indexes and
        checkpoints, unlink this log's shared memory."""
        if self._closed:
            return
        self._poll_roll_flush(wait=True)
        self.active_segment.trim_for_close()
        for segment in self.segments:
            if segment.flushed_bytes < segment.size_bytes or segment is self.segments[-1]:
                segment.flush()
            segment.persist_indexes()
        self.recovery_point = self.log_end_offset
        self._write_recovery_point()
        self.checkpoint_high_watermark()
        for segment in self.segments:
            segment.close(unlink_indexes=True)
        self._closed = True
        self._unlock()

    def abandon(self) -> None:
        """Drop this object as a SIGKILL would (tests): no trim, no persist, no unlink."""
        for segment in self.segments:
            segment.abandon()
        self._closed = True
        self._unlock()

    def delete(self) -> None:
        """Remove the partition directory, its shared memory and its checkpoint entries."""
        for segment in self.segments:
            segment.close(unlink_indexes=True)
        shutil.rmtree(self.directory, ignore_errors=True)
        for file in (self._recovery_file, self._hw_file, self._log_start_file):
            try:
                file.update(self.topic, self.partition, None)
            except CheckpointError:
                pass
        self._closed = True
        self._unlock()
