"""ReplicaSegmentReader: a follower's read of its leader's segment files, up to the
leader's LEO (``LocalReader`` stops at the HW and validates against the board; a
follower must copy what is not committed yet, and validates against the replication
slot's epoch instead: ``shm.replication_slot``).

The walking, the offset indexes in shared memory, the checks that a segment was not
replaced during a read (the cleaner), and the hole handling of compacted logs are
``LocalReader``'s. What is added: a position hint, since a follower reads on from where
its last read ended (no index lookup and no walk from the last index entry), and a fast
path for it (``_copy_hinted``), the steady state of a follower that keeps up: one
``fstat`` of the hinted segment, one header unpack per batch, one copy.

The fast path's rules (everything else goes the general way, which has them all):
- It reads only the segment object the hint came from (same mapping), at the hint's
  position: positions never pair with another file's bytes. It keeps a descriptor of
  that file, opened by its path and checked to be the mapped file (inode), and reads
  only while the file still has a name (``st_nlink``): the cleaner renames a new file
  over a segment (the old one's count drops to 0), a truncation or retention deletes
  it; the general path then maps what the path names now. (A ``stat`` of the path
  costs 2-3 times a ``fstat`` and was the largest single cost of a copy right after
  a wake-up.) Either way the old file is never written: a mapping read while it is
  being replaced or deleted holds the batches that file held, in this epoch (the
  caller validates the epoch after the copy; a leader leaves the epoch before it
  truncates).
- The ``fstat`` comes after the caller read the leader's LEO (> the start): a segment
  the leader rolled before appending the batch at the start was trimmed before that
  LEO was published, so its size shows it; a file never shrinks below its data within
  an epoch. Nothing is read past ``min(file size, mapped size)`` (the segment's limit
  is lowered to a trimmed file's size, as ``still_current`` does), so a mapping made
  while the file was preallocated is never touched past the trimmed end (SIGBUS).
- Each batch must have a valid header (magic, size within ``BATCH_BYTES_MAX`` and the
  file), start at or after the offset the previous one ended (a compacted log's hole
  moves the offset), and end at or below the leader's LEO. Anything else: the general
  path decides (it retries, lists the segments again, or raises).
"""
from __future__ import annotations

import os
import struct

from shm.batch import HEADER_BYTES, LAST_OFFSET_DELTA_POSITION, LENGTH_OVERHEAD_BYTES, MAGIC
from shm.batch import CorruptRecordError
from shm.config import BATCH_BYTES_MAX
from shm.errors import LocalReadError
from shm.local_reader import LocalReader, _Moved, _OffsetIndexes

READ_ATTEMPTS_MAX = 5
# base_offset i64, batch_length i32, partition_leader_epoch i32, magic i8, crc u32,
# attributes i16, last_offset_delta i32: one unpack tells a batch's size and offsets.
_HEAD = struct.Struct("<qiibIhi")
assert _HEAD.size == LAST_OFFSET_DELTA_POSITION + 4 <= HEADER_BYTES


class ReplicaReadError(LocalReadError):
    """The leader's segments kept changing under the read (or hold no such batch)."""


class _HintedIndexes(_OffsetIndexes):
    """Positions from the last read's end when it is the asked offset; the index otherwise."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        # (segment object, offset, position): where the last read ended. The object,
        # not its base: a segment mapped again (another file) never matches.
        self.hint: tuple | None = None

    def position(self, segment, offset: int) -> int:
        hint = self.hint
        if hint is not None and hint[0] is segment and hint[1] == offset:
            return hint[2]
        return super().position(segment, offset)


class ReplicaSegmentReader(LocalReader):
    """Reads one partition of one leader broker from its log dir; no board."""

    def __init__(self, cluster_id: str, broker_id: int, log_dir: str, topic: str,
                 partition: int) -> None:
        # LocalReader.__init__ without the board (a follower validates by the slot).
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.topic = topic
        self.partition = int(partition)
        self.dir = os.path.join(log_dir, f"{topic}-{self.partition}")
        self.verify_crc = False          # the follower's append checks every CRC
        self.retries = 0
        self.fast_copies = 0             # copies served by _copy_hinted
        self._board = None
        self._segments = {}
        self._bases = []
        self._base_set = set()
        self._index = _HintedIndexes(cluster_id, broker_id, topic, self.partition)
        self._reads = 0
        self._seen = (None, None)
        self._walked = []
        self._fd = -1                    # a descriptor of the hinted segment's file
        self._fd_segment = None

    def copy(self, start: int, end: int, max_bytes: int, *, leader_epoch: int,
             log_start: int) -> tuple[bytes, int]:
        """A copy of the whole batches in [start, end) (at least one batch, about
        ``max_bytes``) and the offset after them. The caller checks afterwards that the
        leader's epoch did not change (``plan.copy_valid``)."""
        if self._index.hint is not None and self._seen == (leader_epoch, log_start):
            copied = self._copy_hinted(start, end, max_bytes)
            if copied is not None:
                self.fast_copies += 1
                return copied
        problem = None
        for attempt in range(READ_ATTEMPTS_MAX):
            self._reads += 1
            if self._seen != (leader_epoch, log_start):
                self._forget()
                self._seen = (leader_epoch, log_start)
            if attempt or not self._bases:
                # Listed again only when a read failed: a stale listing misses at most
                # segments the leader rolled since, and a walk past the end of the
                # last listed one fails (_Moved: zeros, or its end) and lands here.
                self._refresh_segments()
            self._walked = []            # (segment, next offset, end position)
            try:
                batches, next_offset = self._gather(start, end, max_bytes, log_start)
            except (_Moved, CorruptRecordError) as e:
                problem = e
                self.retries += 1
                self._index.hint = None
                self._forget()
                continue
            data = b"".join(batches)
            # The last batch copied ends where the next read starts.
            ends = [w for w in self._walked if w[1] == next_offset]
            self._index.hint = ends[-1] if batches and ends else None
            return data, next_offset
        raise ReplicaReadError(f"{self.topic}-{self.partition}: cannot read [{start}, {end}) "
                               f"from broker {self.broker_id}'s segments: {problem!r}")

    def _copy_hinted(self, start: int, end: int, max_bytes: int) -> tuple[bytes, int] | None:
        """The batches from the hint's position on in its segment (the rules in the
        module docstring); None: nothing read, the general path reads."""
        segment, offset, first = self._index.hint
        if offset != start or segment.view is None or \
                self._segments.get(segment.base_offset) is not segment:
            if self._fd_segment is segment and segment.view is None:
                self._close_fd()         # unmapped: its file may be deleted, let it go
            return None
        if not self._still_linked(segment):
            return None                  # gone or replaced (the cleaner): map afresh
        limit = segment.size_bytes       # no more than the file holds now (a trim)
        view = segment.view
        unpack = _HEAD.unpack_from
        position = first
        while position + HEADER_BYTES <= limit:
            base_offset, batch_length, _epoch, magic, _crc, _attributes, last_delta = \
                unpack(view, position)
            size = batch_length + LENGTH_OVERHEAD_BYTES
            if magic != MAGIC or not HEADER_BYTES <= size <= BATCH_BYTES_MAX or \
                    position + size > limit or base_offset < offset or last_delta < 0:
                break                    # not a batch we may take: the general path looks
            next_offset = base_offset + last_delta + 1
            if next_offset > end or (position > first and position + size - first > max_bytes):
                break
            position += size
            offset = next_offset
        if position == first:
            if position + HEADER_BYTES > limit:
                # The segment ends here (rolled): list the segments, for the next one.
                self._index.hint = None
                self._refresh_segments()
            return None
        self._index.hint = (segment, offset, position)
        return bytes(view[first:position]), offset

    def _still_linked(self, segment) -> bool:
        """Is the mapped file of ``segment`` still in the log (a name, the inode mapped)?
        Lowers its limit to the file's size if it was trimmed."""
        if self._fd_segment is not segment:
            self._close_fd()
            try:
                fd = os.open(segment.path, os.O_RDONLY)
            except OSError:              # gone (or no descriptor left): the general path
                return False
            stat = os.fstat(fd)
            if stat.st_ino != segment.inode:
                os.close(fd)
                return False
            self._fd, self._fd_segment = fd, segment
        else:
            stat = os.fstat(self._fd)
            if stat.st_nlink == 0:
                self._close_fd()
                return False
        if stat.st_size < segment.size_bytes:
            segment.size_bytes = stat.st_size
        return True

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._fd_segment = -1, None

    def _batch_at(self, segment, position: int, offset: int) -> tuple[int, int, int]:
        base_offset, next_offset, size = super()._batch_at(segment, position, offset)
        self._walked.append((segment, next_offset, position + size))
        return base_offset, next_offset, size

    def _forget(self) -> None:
        self._index.hint = None
        self._close_fd()
        super()._forget()

    def close(self) -> None:
        self._forget()
