"""LocalReader: read committed batches of a partition straight from its segment files.

A process on the broker's host (a zero-copy consumer, the dashboard, the chaos checker)
reads a partition replica without sending the broker a request: the high watermark and
log start offset come from the broker's replica-state board, positions come from the
segment's offset index in shared memory, and the bytes come from the segment files
mapped read-only. Nothing here writes anything.

Rules:
- Only batches whose last offset is below the HW published on the board are returned:
  the broker publishes a HW only after the bytes below it are in the segment, and
  bytes below the HW are never rewritten within one leader epoch.
- A read is validated after the fact, like a seqlock: the board is read again after
  the batches are gathered, and if the leader epoch changed, the HW fell below what
  was gathered (truncation) or the log start offset passed the start (retention), the
  read is thrown away and retried (at most ``READ_ATTEMPTS_MAX`` times).
- Every batch returned had a valid header where the reader expected it (magic, length
  within its segment, base offset at or after the previous batch's next offset: a
  compacted log has holes, and a read from an offset in a hole starts at the next
  batch); with ``verify_crc=True`` its CRC-32C was checked too.
- The cleaner replaces segments in place (``shm.log.cleaner_swap``: same base offset,
  new file, new index objects under the same names). A read checks, after gathering,
  that every segment file it used is still the one it mapped (inode), and retries
  otherwise, so a read never pairs positions of one file with bytes of another.
- A start offset below the log start offset, or above the log end offset, raises
  ``OffsetOutOfRangeError`` (Kafka's OFFSET_OUT_OF_RANGE); a start offset in
  [HW, LEO] returns no batches.
- Returned memoryviews view the file mappings (zero-copy). They stay readable after the
  segment is deleted (the mapping keeps the inode), but their content is only
  guaranteed while the HW stays above them; a caller that keeps batches across a
  leader change must copy them.
- Mappings are read-only and never extend past the file's size when mapped, so a read
  never touches a page beyond the end of a file as it was (no SIGBUS from our side
  unless the broker shrinks a file below the HW, which it must not do).
"""
from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
import time
from dataclasses import dataclass

from shm.batch import (HEADER_BYTES, LAST_OFFSET_DELTA, LAST_OFFSET_DELTA_POSITION,
                       LENGTH_OVERHEAD_BYTES, MAGIC, CorruptRecordError, check_batch)
from shm.board import BoardReader
from shm.config import BATCH_BYTES_MAX
from shm.errors import (LocalReadError, OffsetOutOfRangeError,  # noqa: F401
                        ReadRetriesExhaustedError, UnknownTopicOrPartitionError)
from shm.index import IndexCorruptError, OffsetIndex

READ_ATTEMPTS_MAX = 200
READ_SPINS = 10                   # attempts before backing off
READ_BACKOFF_S = 0.001            # between later attempts: the broker may be descheduled
SEGMENTS_MAPPED_MAX = 64          # mappings kept open per reader (the oldest go first)
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
# base_offset i64, batch_length i32, partition_leader_epoch i32, magic i8: enough to walk.
_WALK = struct.Struct("<qiib")


@dataclass(frozen=True)
class LocalRead:
    """What one ``read`` returned.

    ``batches``: zero-copy views, one per batch, in offset order. ``next_offset``: where
    the next read starts. ``high_watermark`` / ``log_start_offset`` / ``leader_epoch``:
    the board's values the read was validated against. ``places``: where each batch
    lies (a reader in another process, such as the JVM segment reader, maps them itself).
    """

    batches: list[memoryview]
    next_offset: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    places: tuple = ()   # per batch: (segment file path, byte position, size, inode)

    @property
    def size_bytes(self) -> int:
        return sum(b.nbytes for b in self.batches)


class _Segment:
    """One segment file, mapped read-only up to its size when (re)mapped.

    ``inode`` identifies the file: a segment deleted and created again under the same
    base offset (truncation then a roll at the same offset) is a different file, and
    bytes of the old one must never be read as the new one's.
    """

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.inode = -1
        self.map: mmap.mmap | None = None
        self.view: memoryview | None = None
        self.size_bytes = 0
        self.checked_in_read = -1

    def file_size(self) -> int:
        """The size of the mapped file (or of the file at ``path`` if none is mapped)."""
        if self.view is not None:
            return self.size_bytes
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            raise _Moved(f"{self.path} is gone") from None

    def still_current(self) -> bool:
        """Is the file at ``path`` still the one mapped (or nothing mapped yet)?

        A mapped file found shorter than its mapping was trimmed (a roll seals a
        preallocated segment at its data's end): the mapping is not read past the
        file's end from now on (a page wholly past it raises SIGBUS), so the walk
        sees the segment's end there."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return False
        if self.map is None:
            return True
        if stat.st_ino != self.inode:
            return False
        if stat.st_size < self.size_bytes:
            self.size_bytes = stat.st_size
        return True

    def ensure(self, end: int) -> None:
        """Map at least ``end`` bytes; _Moved if the file is gone, replaced or shorter."""
        if self.view is not None and end <= self.size_bytes:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise _Moved(f"{self.path} is gone") from None
        try:
            stat = os.fstat(fd)
            if (self.map is not None and stat.st_ino != self.inode) or stat.st_size < end:
                raise _Moved(f"{self.path} was replaced or is shorter than {end} bytes")
            old_view, old_map = self.view, self.map
            self.map = mmap.mmap(fd, stat.st_size, access=mmap.ACCESS_READ)
            self.view = memoryview(self.map)
            self.size_bytes = stat.st_size
            self.inode = stat.st_ino
            if old_view is not None:
                old_view.release()
                _close_quietly(old_map)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
        if self.map is not None:
            _close_quietly(self.map)
        self.view = self.map = None


def _close_quietly(m: mmap.mmap) -> None:
    try:
        m.close()
    except BufferError:
        pass  # a caller still holds batches from it; the map goes with the last view


class LocalReader:
    """Reads one partition replica of one broker on this host; one per thread."""

    def __init__(self, cluster_id: str, broker_id: int, log_dir: str, topic: str,
                 partition: int, *, verify_crc: bool = False):
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.topic = topic
        self.partition = int(partition)
        self.dir = os.path.join(log_dir, f"{topic}-{self.partition}")
        self.verify_crc = verify_crc
        self.retries = 0
        self._board = BoardReader.open(cluster_id, broker_id)
        self._segments: dict[int, _Segment] = {}
        self._bases: list[int] = []
        self._base_set: set[int] = set()
        self._index = _OffsetIndexes(cluster_id, broker_id, topic, self.partition)
        self._reads = 0
        self._seen = (None, None)  # (leader epoch, log start) of the last read
        self._places: list[tuple[str, int, int, int]] = []  # the last _gather's (LocalRead)

    # ---- public API --------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int) -> LocalRead:
        """Whole batches from ``start_offset`` strictly below the HW, about ``max_bytes``.

        The batch holding ``start_offset`` is returned whole even when it is larger
        than ``max_bytes`` (KIP-74), so a reader always makes progress.
        """
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        problem = None
        for attempt in range(READ_ATTEMPTS_MAX):
            if attempt >= READ_SPINS:
                time.sleep(READ_BACKOFF_S)
            self._reads += 1
            before = self._state()
            if start_offset < before.log_start_offset or start_offset > before.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: offset {start_offset} is outside"
                    f" [{before.log_start_offset}, {before.log_end_offset}] (log start, LEO)"
                    f" on broker {self.broker_id}")
            if self._seen != (before.leader_epoch, before.log_start_offset):
                # A new epoch may come with truncation, a new log start with deleted or
                # replaced segments: map everything afresh.
                self._forget()
                self._seen = (before.leader_epoch, before.log_start_offset)
            # Listed after the board was read: every segment holding offsets below that
            # HW existed before the HW was published, so it is in this listing.
            self._refresh_segments()
            try:
                batches, next_offset = self._gather(start_offset, before.high_watermark,
                                                    max_bytes, before.log_start_offset)
            except (_Moved, CorruptRecordError) as e:
                problem = e
                self.retries += 1
                self._forget()
                continue
            after = self._state()
            if not batches or (after.leader_epoch == before.leader_epoch
                               and after.high_watermark >= next_offset
                               and after.log_start_offset <= start_offset):
                return LocalRead(batches, next_offset, before.high_watermark,
                                 before.log_start_offset, before.leader_epoch,
                                 tuple(self._places))
            problem = f"the board changed during the read ({before} -> {after})"
            self.retries += 1
        if isinstance(problem, CorruptRecordError):
            raise problem
        raise ReadRetriesExhaustedError(
            f"{self.topic}-{self.partition}: the log kept changing during"
            f" {READ_ATTEMPTS_MAX} attempts to read from offset {start_offset}: {problem!r}")

    def close(self) -> None:
        self._forget()
        self._board.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- internals ---------------------------------------------------------------------

    def _state(self):
        state = self._board.get(self.topic, self.partition)
        if state is None:
            raise UnknownTopicOrPartitionError(
                f"broker {self.broker_id} publishes no replica of {self.topic}-{self.partition}")
        return state

    def _gather(self, start_offset: int, high_watermark: int, max_bytes: int,
                log_start: int = 0):
        """Batches from ``start_offset`` up to the HW; _Moved if the log moved under us."""
        batches: list[memoryview] = []
        places: list[tuple[str, int, int, int]] = []
        gathered_bytes = 0
        offset = start_offset
        segment = None
        position = 0
        used = []
        while offset < high_watermark:
            if segment is None or (offset in self._base_set and
                                   offset != segment.base_offset and position > 0):
                # First batch, or the end of a segment: another segment holds ``offset``.
                segment = self._segment_holding(offset, log_start)
                position = self._index.position(segment, offset)
                used.append(segment)
            if (segment.view is None or position + HEADER_BYTES > segment.size_bytes) \
                    and position >= segment.file_size():
                # The end of a sealed segment whose last batch ends before the next
                # segment's base (a hole; or an empty cleaned segment): go on with the
                # next segment.
                later = bisect.bisect_right(self._bases, segment.base_offset)
                if later >= len(self._bases):
                    raise _Moved(f"{segment.path} ends at position {position} below the HW")
                segment = self._segment_holding(self._bases[later], log_start)
                position = self._index.position(segment, offset)
                used.append(segment)
                continue
            base_offset, next_offset, size = self._batch_at(segment, position, offset)
            if next_offset <= offset:  # a batch wholly before the start (index is sparse)
                position += size
                continue
            if next_offset > high_watermark:
                break  # never return a batch that reaches the HW
            if batches and gathered_bytes + size > max_bytes:
                break
            batches.append(segment.view[position:position + size])
            places.append((segment.path, position, size, segment.inode))
            gathered_bytes += size
            position += size
            offset = next_offset
        for segment in used:
            if not segment.still_current():
                raise _Moved(f"{segment.path} was replaced during the read")
        self._places = places
        return batches, offset

    def _batch_at(self, segment: _Segment, position: int, offset: int) -> tuple[int, int, int]:
        """(base offset, next offset, size) of the batch at ``position``, which must hold
        ``offset``, come before it in the same segment, or come after it (``offset`` is
        in a hole of a compacted log)."""
        segment.ensure(position + HEADER_BYTES)
        view = segment.view
        base_offset, batch_length, _epoch, magic = _WALK.unpack_from(view, position)
        size = batch_length + LENGTH_OVERHEAD_BYTES
        if magic != MAGIC or not HEADER_BYTES <= size <= BATCH_BYTES_MAX:
            # Zeros or another batch where a batch below the HW must be: the segment was
            # truncated or replaced since we looked.
            raise _Moved(f"{segment.path}: no batch holding offset {offset} at position"
                         f" {position} (found base offset {base_offset}, magic {magic})")
        segment.ensure(position + size)
        view = segment.view
        if self.verify_crc:
            last_offset_delta = check_batch(view, position, verify_crc=True).last_offset_delta
        else:
            (last_offset_delta,) = LAST_OFFSET_DELTA.unpack_from(
                view, position + LAST_OFFSET_DELTA_POSITION)
        return base_offset, base_offset + last_offset_delta + 1, size

    def _refresh_segments(self) -> None:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            names = []
        bases = sorted(int(m.group(1)) for m in map(_SEGMENT_FILE.match, names) if m)
        for base in set(self._segments) - set(bases):
            self._index.drop(base)
            self._segments.pop(base).close()
        self._bases = bases
        self._base_set = set(bases)

    def _segment_holding(self, offset: int, log_start: int = 0) -> _Segment:
        """The segment with the greatest base offset <= ``offset``, checked to be the
        file it was when mapped (once per read)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            if self._bases and offset >= log_start and self._bases[0] > log_start:
                # The first segment is being swapped by the cleaner (its .log is
                # renamed for a moment): not retention, since the log start is lower.
                raise _Moved(f"{self.dir}: no segment holds offset {offset} yet")
            if self._bases:
                # Retention deleted it; the broker publishes the new log start right after.
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: offset {offset} is below the first"
                    f" segment ({self._bases[0]}) on broker {self.broker_id}")
            raise _Moved(f"{self.dir} has no segments")
        base = self._bases[i]
        segment = self._segments.get(base)
        if segment is not None and segment.checked_in_read != self._reads:
            if not segment.still_current():
                self._index.drop(base)
                self._segments.pop(base).close()
                segment = None
        if segment is None:
            if len(self._segments) >= SEGMENTS_MAPPED_MAX:
                oldest = next(iter(self._segments))
                self._index.drop(oldest)
                self._segments.pop(oldest).close()
            segment = _Segment(os.path.join(self.dir, f"{base:020d}.log"), base)
            self._segments[base] = segment
        segment.checked_in_read = self._reads
        return segment

    def _forget(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()
        self._index.forget()


class _Moved(Exception):
    """The log changed under a read (segment gone, replaced or cut); retry from the board."""


class _OffsetIndexes:
    """Positions from the segments' offset indexes in shared memory.

    Attached read-only, one per segment, on first use; a segment whose index cannot be
    attached (not created yet, already removed, being rebuilt) is scanned from its
    first byte instead, which is slower but equally correct because every position is
    checked by walking the batch headers from it.
    """

    def __init__(self, cluster_id: str, broker_id: int, topic: str, partition: int):
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.topic = topic
        self.partition = partition
        self._attached: dict[int, OffsetIndex] = {}

    def position(self, segment: _Segment, offset: int) -> int:
        base_offset = segment.base_offset
        index = self._attached.get(base_offset)
        if index is None:
            try:
                index = OffsetIndex.attach_readonly(self.cluster_id, self.broker_id,
                                                    self.topic, self.partition, base_offset)
            except IndexCorruptError:
                return 0
            if len(self._attached) >= SEGMENTS_MAPPED_MAX:
                self._attached.pop(next(iter(self._attached))).close()
            self._attached[base_offset] = index
        file_id = index.file_id
        if file_id:
            try:
                inode = segment.inode if segment.inode >= 0 else os.stat(segment.path).st_ino
            except FileNotFoundError:
                raise _Moved(f"{segment.path} is gone") from None
            if inode != file_id:  # the index of another file under this base (a clean)
                self.drop(base_offset)
                return 0          # scanning from the start is always right
        _offset, position = index.lookup(offset)
        return position

    def drop(self, base_offset: int) -> None:
        index = self._attached.pop(base_offset, None)
        if index is not None:
            index.close()

    def forget(self) -> None:
        """Drop every attachment (after a segment was deleted or replaced)."""
        for index in self._attached.values():
            index.close()
        self._attached.clear()

    close = forget
