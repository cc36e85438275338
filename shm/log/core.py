"""``Log``: one partition replica's log - append (as leader, as follower), read, roll,
flush, high watermark, truncation and close. Opening runs the loader (``loader``),
retention's deletions live in ``retention``, the producers' snapshot files in
``producer_snapshots``; the layout and the rules they all keep are in ``shm.log``.
About 640 lines, kept whole: every operation here changes the segment list, the
offsets and the checkpoints together under the invariants of ``check``, as Kafka's
LocalLog does; the parts that only run at open or on a schedule are cut out.

Rules of the core:
- Single writer (the ``.lock`` file is flock'd); appends are whole-batch copies published
  by advancing the segment size, so ``read`` never returns a torn batch.
- Offsets are contiguous; log_start_offset <= high_watermark <= log_end_offset and
  recovery_point <= LEO hold after every operation (``check``).
- A multi-step change of the segment set writes its intent durably first (truncation)
  or its new log start offset (retention), so a crash at any named ``shm.faults`` point
  leaves what recovery finishes.
"""
from __future__ import annotations

import bisect
import fcntl
import logging
import os
import shutil
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from shm import batch
from shm import faults
from shm.batch import CorruptRecordError
from shm.batch_format import header_stamped
from shm.checkpoint import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT,
                            REPLICATION_OFFSET_CHECKPOINT, TRUNCATION_INTENT, CheckpointError,
                            LeaderEpochCache, OffsetCheckpointFile, TruncationIntent,
                            fsync_dir)
from shm.config import SEGMENTS_PER_LOG_MAX, LogConfig
from shm.errors import (InvalidRecordError, LogClosedError, LogError, OffsetOutOfRangeError,
                        RecordTooLargeError, UnexpectedAppendOffsetError)
from shm.index import (KIND_OFFSET, KIND_TIME, OffsetIndex, TimeIndex, index_name,
                       write_index_file)
from shm.log import cleaner, cleaner_swap, loader, retention, transactions
from shm.log.loader import TRUNCATE_FULLY, TRUNCATE_TO, RecoveryReport
from shm.log.producer_snapshots import delete_snapshots, write_snapshot
from shm.names import check_cluster_id
from shm.producer_state import ProducerStates
from shm.segment import Segment
from shm.txn_state import TxnState

logger = logging.getLogger("shm.log")

BATCHES_PER_APPEND_MAX = 100_000
LOCK_FILE = ".lock"


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int


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


_releaser_pool: ThreadPoolExecutor | None = None


def _releaser() -> ThreadPoolExecutor:
    """One background thread per process that closes deleted segments' files (the
    close of an unlinked file frees its blocks: Kafka's "delete-file" task)."""
    global _releaser_pool
    if _releaser_pool is None:
        _releaser_pool = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix="mk-segment-release")
    return _releaser_pool


def _run_all(closes) -> None:
    errors = []
    for close in closes:
        try:
            close()
        except OSError as e:
            errors.append(e)
    if errors:
        raise errors[0]


def _flush_roll(descriptors: list[int], index_files: list[tuple], directory: str) -> None:
    """A roll's durable steps, on the flusher thread: the sealed segment's index files,
    the fsyncs of the sealed segments (duplicated descriptors: the log may close or
    delete a segment meanwhile, though it waits for this before it truncates or deletes
    one) and of the directory, which names the new segment. The recovery point passes
    the sealed segments only once all of it is done."""
    try:
        for args in index_files:
            write_index_file(*args)
        faults.point("roll:indexes-persisted")
        for fd in descriptors:
            os.fsync(fd)
        fsync_dir(directory)
        faults.point("roll:directory-synced")
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
        # DeleteRecords' lower bound on the log start offset (Kafka's logStartOffset may
        # sit inside the first segment); the first segment's base when that is higher.
        self.deleted_below = 0
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
        # What the recovery-point checkpoint file holds for this log (None: not known).
        self.checkpointed_recovery_point: int | None = None
        self._releases: deque[Future] = deque()  # deleted segments' closes under way
        # Idempotent producers' state (shm.producer_state): built from the batch headers
        # the first time it is needed, then kept up to date by every append; dropped by
        # a truncation (rebuilt again on the next need). None: not built.
        self._producers: ProducerStates | None = None
        # Its transactions (shm.txn_state), built and dropped with it (``transactions``).
        self._txns: TxnState | None = None
        self._txn_indexes_unsynced: set[int] = set()   # .txnindex files written since
        # Log compaction (``cleaner``): its checkpoint, loaded on first use, and a
        # counter of changes to sealed segments (truncation, retention, swaps) that a
        # clean plan built meanwhile must not be swapped over.
        self._cleaner_state = None
        self._segments_changed = 0

    # ================================================================ open (recovery: loader)

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
            loader.load(log, reattach_indexes, wall_clock_ms() if now_ms is None else now_ms)
        except BaseException:
            log.abandon()  # drop maps, descriptors and the lock; leave files for a retry
            raise
        log.recovery.elapsed_s = time.perf_counter() - started
        return log

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

    def _index_entries_max(self) -> int:
        by_segment = self.config.segment_bytes // self.config.index_interval_bytes + 2
        return max(2, min(self.config.index_entries_max, by_segment))

    # ================================================================ state

    @property
    def log_start_offset(self) -> int:
        return max(self.segments[0].base_offset, self.deleted_below)

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
            assert a.next_offset <= b.base_offset, (a.base_offset, a.next_offset, b.base_offset)
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
        if self.config.compact:
            for position, header in batches:
                if header.attributes & batch.ATTR_KEY_NULLS and not \
                        batch.read_columns(view, position, verify_crc=False).keys_present():
                    raise InvalidRecordError(
                        f"{self.topic}-{self.partition}: a compacted topic cannot accept a "
                        f"record without a key (batch at position {position})")
        next_offset = self.log_end_offset
        stamped = []
        for position, header in batches:
            batch.stamp(view[position:position + header.size_bytes], next_offset, leader_epoch)
            stamped.append((position, header_stamped(header, next_offset, leader_epoch)))
            next_offset += header.record_count
        self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)
        return self._append(view, stamped, now_ms)

    def append_as_follower(self, records, *, now_ms: int | None = None) -> AppendInfo:
        """Append batches with the offsets they carry. Each must start at or after the
        previous one's end (the LEO for the first): a compacted range fetched from the
        leader has holes, and a first batch past the LEO moves the LEO past the hole, as
        Kafka's follower append (it refuses only offsets below the LEO)."""
        self._ensure_open()
        view = memoryview(records).cast("B")
        batches = self._check_records(view, structure=False)
        expected = self.log_end_offset
        for position, header in batches:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"{self.topic}-{self.partition}: follower batch at position {position} "
                    f"starts at offset {header.base_offset}, below {expected} (LEO "
                    f"{self.log_end_offset})")
            expected = header.next_offset
        for _, header in batches:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        return self._append(view, batches, now_ms)

    def _check_records(self, view: memoryview, *, structure: bool = True
                       ) -> list[tuple[int, batch.BatchHeader]]:
        """The batches of an append, each checked (``batch.check_batch``; ``structure``
        False: headers and CRCs only, for a follower's append)."""
        limit = self.config.message_max_bytes
        batches, position = [], 0
        while position < len(view):
            if len(batches) >= BATCHES_PER_APPEND_MAX:
                raise RecordTooLargeError(f"more than {BATCHES_PER_APPEND_MAX} batches")
            if len(view) - position >= batch.PREFIX.size:
                size = batch.PREFIX.unpack_from(view, position)[1] + batch.LENGTH_OVERHEAD_BYTES
                if size > limit:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes exceeds message.max.bytes={limit}")
                if size > self.config.segment_bytes:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes exceeds log.segment.bytes="
                        f"{self.config.segment_bytes}")
            header = batch.check_batch(view, position, max_bytes=limit, structure=structure)
            batches.append((position, header))
            position += header.size_bytes
        if not batches:
            raise CorruptRecordError("no record batch in an append")
        transactions.check_markers(view, batches)
        return batches

    def _append(self, view: memoryview, batches, now_ms: int | None) -> AppendInfo:
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        self._poll_roll_flush(wait=False)
        if self._producers is None and \
                any(h.attributes & batch.ATTR_TRANSACTIONAL for _, h in batches):
            transactions.build(self)  # an ABORT's index entry needs its first offset
        records = 0
        i, count = 0, len(batches)
        while i < count:
            position, header = batches[i]
            segment = self.active_segment
            if segment.size_bytes > 0 and \
                    (segment.index_room == 0 or self._rolls_before(segment, header, now_ms)):
                self.roll(now_ms=now_ms, next_offset=header.base_offset)
                segment = self.active_segment
            # The batches that follow in the same segment go with it in one write (a
            # pwrite costs ~2 us besides its copy: a follower copies tens of batches at
            # a time). Each is the roll's to decide, as if appended alone: the index
            # cannot fill within the run (at most one entry a batch, the run shorter than
            # the room left), and a run starts alone in an empty segment, whose roll time
            # counts from its first batch.
            j = i + 1
            if segment.size_bytes > 0:
                room = segment.index_room
                while j < count and j - i < room and \
                        not self._rolls_before(segment, batches[j][1], now_ms,
                                               batches[j][0] - position):
                    j += 1
            run = batches[i:j]
            last_position, last = run[-1]
            segment.append_run(view[position:last_position + last.size_bytes], run)
            for at, appended in run:
                records += appended.record_count
                if self._producers is not None and appended.producer_id >= 0:
                    transactions.learn(self, view, at, appended,
                                       index_base=segment.base_offset)
            i = j
        first = batches[0][1].base_offset
        info = AppendInfo(first, self.log_end_offset - 1, records, len(batches))
        assert info.last_offset - info.first_offset + 1 >= records  # holes: follower
        self._unflushed_messages += records
        if self._unflushed_messages >= self.config.flush_interval_messages or \
                now_ms - self._last_flush_ms >= self.config.flush_interval_ms:
            self.flush(now_ms=now_ms)
        return info

    def _rolls_before(self, segment: Segment, header: batch.BatchHeader, now_ms: int,
                      ahead_bytes: int = 0) -> bool:
        """Whether a non-empty ``segment`` rolls before ``header``'s batch, by size or time
        (its index's fullness is the caller's), once ``ahead_bytes`` more are in it."""
        return segment.size_bytes + ahead_bytes + header.size_bytes > \
            self.config.segment_bytes or \
            segment.time_waited_for_roll_ms(now_ms, header.max_timestamp) > self.config.roll_ms

    # ================================================================ producers

    def producer_states(self) -> ProducerStates:
        """The idempotent producers' state of this partition. Built on first use from
        the newest snapshot file at or below the LEO (``<offset>.snapshot``, written at
        each roll, as Kafka's) and the batch headers after it (no record is decoded);
        without a usable snapshot, from every batch header of the log."""
        self._ensure_open()
        if self._producers is None:
            transactions.build(self)
        return self._producers

    def transaction_state(self) -> TxnState:
        """This partition's transactions (``shm.txn_state``), built as the producers'."""
        self._ensure_open()
        if self._txns is None:
            transactions.build(self)
        return self._txns

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing transaction, or of a completed one
        whose marker is not yet below the HW (Kafka's), at least the log start (as
        Kafka's, after retention or DeleteRecords passed it); None if none."""
        first = self.transaction_state().first_unstable_offset(self.high_watermark)
        return None if first is None else max(first, self.log_start_offset)

    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW): read_committed reads stop here."""
        first = self.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """[(producer_id, first_offset)] of the aborted transactions overlapping
        ``[start, end)`` (Kafka's collectAbortedTxns), in marker order."""
        return [(t.producer_id, t.first_offset)
                for t in self.transaction_state().aborted_overlapping(start, end)]

    def ongoing_transactions(self) -> dict[int, int]:
        """producer_id -> first offset of its open transaction."""
        return dict(self.transaction_state().ongoing)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Kafka's removeExpiredProducers (``ProducerStates.expire``): the ids of the
        producers forgotten. A state not built yet is left alone: it holds no memory,
        and the build reads its producers, which the next check then judges."""
        if self._producers is None:
            return []
        return self._producers.expire(now_ms, expiration_ms,
                                      self._txns.ongoing if self._txns is not None else ())

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
                header = batch.read_header(segment.view(position, segment.size_bytes))
                if header.max_timestamp >= timestamp_ms:
                    deltas = np.frombuffer(segment.view(position, position + header.size_bytes),
                                           dtype="<i4", count=header.record_count,
                                           offset=batch.HEADER_BYTES)
                    stamps = deltas.astype(np.int64) + header.base_timestamp
                    first = int(np.argmax(stamps >= timestamp_ms))
                    return header.base_offset + first, int(stamps[first])
                position += header.size_bytes
        return None

    def entry_for_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's largest timestamp
        (KIP-734's ListOffsets MAX_TIMESTAMP); None for an empty log."""
        self._ensure_open()
        newest = max((s.max_timestamp for s in self.segments if s.size_bytes), default=None)
        if newest is None or newest < 0:
            return None
        return self.entry_for_timestamp(newest)

    # ================================================================ roll / flush

    def roll(self, *, now_ms: int | None = None, next_offset: int | None = None) -> None:
        """Seal the active segment (trim, persist indexes, flush) and start a new one,
        at the LEO (or at ``next_offset`` past it: a follower's batch after a hole)."""
        self._ensure_open()
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        segment = self.active_segment
        if segment.size_bytes == 0:
            return
        self._poll_roll_flush(wait=True)  # at most one in flight
        segment.seal()
        faults.point("roll:sealed")
        index_files = segment.take_index_files()   # written by the flusher thread
        base = self.log_end_offset if next_offset is None else max(next_offset,
                                                                   self.log_end_offset)
        self._add_segment(self._new_segment(base, now_ms))
        faults.point("roll:segment-created")
        if self._producers is not None and len(self._producers):
            transactions.sync_indexes(self)  # durable before a snapshot covers them
            write_snapshot(self.directory, self.log_end_offset, self._producers,
                           self.log_start_offset, self._txns)
        # As Kafka: the sealed segments' index files and fsyncs, and the directory's, run
        # in the background ("flush-log", scheduled by the roll) and the recovery point
        # moves to the new segment once they are done (seen by the next append, flush
        # or flush_if_due), so a roll does not stall appends behind a disk (a loaded
        # disk made each of them a 40-260 ms stall of the broker's loop). Until then a
        # crash recovers the sealed segments by scanning them and rebuilding their
        # indexes, as for any segment above the recovery point.
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        pending = [(s, s.size_bytes) for s in self.segments[first:-1]
                   if s.flushed_bytes < s.size_bytes]
        descriptors = [s.dup_fd() for s, _ in pending]
        self._roll_flush = _RollFlush(
            _flusher().submit(_flush_roll, descriptors, index_files, self.directory),
            self.active_segment.base_offset, pending)

    def _release(self, closes) -> None:
        """``Segment.delete``'s last steps (``closes``: closing the unlinked files, which
        frees their blocks) on the releaser thread, in one task, so deleting segments
        on the owner thread costs only renames and unlinks."""
        while self._releases and self._releases[0].done():  # one thread: in order
            self._settle(self._releases.popleft())
        if closes:
            self._releases.append(_releaser().submit(_run_all, list(closes)))

    def _wait_for_releases(self) -> None:
        while self._releases:
            self._settle(self._releases.popleft())

    def _settle(self, future: Future) -> None:
        try:
            future.result()
        except OSError as e:  # the names are gone already: only a descriptor leaked
            logger.warning("%s: closing a deleted segment: %s", self.directory, e)

    def _finish_roll_flush(self) -> None:
        """Before segments are cut, deleted or replaced: wait for a roll's background
        flush (it writes index files of the segments it covers) and forget its recovery
        point (the offsets it names may soon mean other data)."""
        roll_flush, self._roll_flush = self._roll_flush, None
        if roll_flush is not None:
            try:
                roll_flush.future.result()
            except OSError as e:   # what it would have made durable is going anyway
                logger.warning("%s: a roll's background flush failed: %s", self.directory, e)

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
            # In memory: the broker writes the checkpoint file every
            # log.flush.offset.checkpoint.interval.ms (checkpoint_recovery_point), as
            # Kafka; one that lags is safe (recovery scans from it).
            self.recovery_point = roll_flush.offset

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
            assert segment.base_offset >= self.log_end_offset
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
        self.checkpointed_recovery_point = self.recovery_point

    def checkpoint_recovery_point(self) -> None:
        """Write the recovery point if a roll's flush moved it since it was last written
        (the broker does it for all its logs at once: ReplicaManager.checkpoint_recovery_points),
        and the leader-epoch cache if a log start move left it unwritten."""
        self._ensure_open()
        if self.recovery_point != self.checkpointed_recovery_point:
            self._write_recovery_point()
        self.leader_epoch_cache.flush_if_dirty()

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
        self._finish_roll_flush()
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
        if position is None:  # ``offset`` is in the hole after this segment's last batch
            position = segment.size_bytes
        later = self.segments[i + 1:]
        for victim in reversed(later):  # from the end: a crash leaves a prefix of the log
            victim.mark_deleted()
            faults.point("truncate_to:segment-renamed")
        if later:
            fsync_dir(self.directory)
            faults.point("truncate_to:segments-renamed-durable")
        closes = []
        for victim in later:
            victim.delete(closes.append)
            faults.point("truncate_to:segment-deleted")
        self._release(closes)
        del self.segments[i + 1:]
        del self._bases[i + 1:]
        self._segments_changed += 1
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
        self._finish_roll_flush()
        self._segments_changed += 1
        for segment in reversed(self.segments):
            segment.mark_deleted()
            faults.point("truncate_fully:segment-renamed")
        fsync_dir(self.directory)
        faults.point("truncate_fully:segments-renamed-durable")
        closes = []
        for segment in self.segments:
            segment.delete(closes.append)
            faults.point("truncate_fully:segment-deleted")
        self._release(closes)
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
        self._producers = self._txns = None
        delete_snapshots(self.directory, lambda o: True)
        self.deleted_below = offset
        assert self.log_start_offset == self.log_end_offset == offset
        self.high_watermark = offset
        self.recovery_point = offset
        self.leader_epoch_cache.clear()
        cleaner.state(self).truncated(offset)
        self._write_recovery_point()
        self._log_start_file.update(self.topic, self.partition, offset)
        self.checkpoint_high_watermark()

    def _after_truncation(self) -> None:
        self._roll_flush = None  # its offset may now name different data: forget it
        self._producers = self._txns = None   # rebuilt from what is left when needed
        delete_snapshots(self.directory, lambda o: o > self.log_end_offset)
        transactions.trim_active_index(self)
        if self.deleted_below > self.log_end_offset:
            # The cut (whole batches) went below a DeleteRecords' log start, as Kafka's
            # truncateTo: the log start follows the end down.
            self.deleted_below = self.log_end_offset
            self._log_start_file.update(self.topic, self.partition, self.deleted_below)
        if self.high_watermark > self.log_end_offset:
            # Lower the checkpoint too: otherwise, after new appends at these offsets
            # and a crash, the old HW would cover records no replica has confirmed.
            self.high_watermark = self.log_end_offset
            self.checkpoint_high_watermark()
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        cleaner.state(self).truncated(self.log_end_offset)
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
        victims = retention.segments_past_retention(self, now_ms)
        if victims:
            retention.delete_first_segments(self, victims)
            if self._txns is not None:
                self._txns.forget_aborted_below(self.log_start_offset)
        return victims

    def increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords (Kafka's maybeIncrementLogStartOffset): records below ``offset``
        are gone for readers; segments wholly below it are deleted. Never moves down;
        ``offset`` above the HW raises OffsetOutOfRangeError. True if it moved.

        Crash-safe as retention: the new log start offset is durable before any file
        goes, and the loader honours it (deleting what lies wholly below it)."""
        self._ensure_open()
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: cannot delete records below {offset}, "
                f"above the high watermark {self.high_watermark}")
        if offset <= self.log_start_offset:
            return False
        self._log_start_file.update(self.topic, self.partition, offset)
        self.deleted_below = offset
        whole = 0
        while whole < len(self.segments) - 1 and self.segments[whole].next_offset <= offset:
            whole += 1
        if whole:
            retention.delete_first_segments(self, whole)
        self._producers = self._txns = None   # rebuilt from what is left when needed
        delete_snapshots(self.directory, lambda o: o < self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        if self.recovery_point < self.log_start_offset:
            self.recovery_point = self.log_start_offset
            self._write_recovery_point()
        self.check()
        return True

    # ================================================================ compaction

    def cleanable(self, now_ms: int | None = None):
        """Log compaction (``shm.log.cleaner``): a ``CleanPlan`` if cleanup.policy has
        compact and the dirty ratio or max.compaction.lag.ms says clean now; else
        None. Owner thread; cheap (segment sizes and timestamps)."""
        self._ensure_open()
        return cleaner.plan(self, wall_clock_ms() if now_ms is None else now_ms)

    def swap_cleaned(self, cleaned) -> bool:
        """Swap a built clean's segments in (owner thread). False, and its files
        removed, if the log changed under the plan (truncation, retention, another
        swap, close)."""
        if self._closed:
            cleaned.abort()
            return False
        self._poll_roll_flush(wait=True)   # it may write index files of what is swapped
        return cleaner_swap.swap(self, cleaned)

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
        self.leader_epoch_cache.flush_if_dirty()
        for segment in self.segments:
            segment.close(unlink_indexes=True)
        self._wait_for_releases()
        self._closed = True
        self._unlock()

    def abandon(self) -> None:
        """Drop this object as a SIGKILL would (tests): no trim, no persist, no unlink.
        A roll's background flush is let finish (a SIGKILL may come after it as well as
        before), so that it writes nothing into the files once they are someone else's."""
        self._finish_roll_flush()
        for segment in self.segments:
            segment.abandon()
        self._closed = True
        self._unlock()

    def delete(self) -> None:
        """Remove the partition directory, its shared memory and its checkpoint entries."""
        self._finish_roll_flush()
        for segment in self.segments:
            segment.close(unlink_indexes=True)
        self._wait_for_releases()
        shutil.rmtree(self.directory, ignore_errors=True)
        for file in (self._recovery_file, self._hw_file, self._log_start_file):
            try:
                file.update(self.topic, self.partition, None)
            except CheckpointError:
                pass
        self._closed = True
        self._unlock()
