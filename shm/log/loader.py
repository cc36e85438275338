"""Kafka's LogLoader: what ``Log.open`` does before the log takes appends.

Rules (the recovery half of the crash-safety rules in ``shm.log``'s docstring):
- Everything below the recovery point is trusted (sealed, flushed; indexes validated,
  rebuilt by a header walk if bad); from the recovery point on, every batch's CRC and
  structure are verified, and a torn or corrupt tail is cut and reported
  (``RecoveryReport.truncations`` and a warning on the ``shm.log`` logger).
- An interrupted multi-step change is finished, never guessed at: a durable
  ``truncation-intent`` is redone, and segments below the checkpointed log start
  offset (an interrupted retention) are deleted.
- Leftovers of a crash go: ``.tmp`` and ``.deleted`` files, index files and shared
  memory of segments that no longer exist.

Functions of the ``Log`` being opened: they read and set its fields (the package's
modules share them; nothing outside ``shm.log`` does).
"""
from __future__ import annotations

import bisect
import logging
import os
import re
from dataclasses import dataclass, field

from shm import batch
from shm.checkpoint import (LEADER_EPOCH_CHECKPOINT, CheckpointError, LeaderEpochCache,
                            OffsetCheckpointFile, fsync_dir)
from shm.config import BATCH_BYTES_MAX, SEGMENTS_PER_LOG_MAX
from shm.errors import LogError
from shm.index import (KIND_OFFSET, KIND_TIME, IndexCorruptError, OffsetIndex, TimeIndex,
                       index_name)
from shm.log import cleaner_files, transactions
from shm.log.producer_snapshots import delete_snapshots
from shm.names import cluster_objects, unlink
from shm.segment import DELETED_SUFFIX, Segment, segment_file_name

logger = logging.getLogger("shm.log")

_INDEX_SUFFIX = re.compile(r"^(\d+)-(idx|tidx)$")
_INDEX_FILE = re.compile(r"^(\d{20})\.(index|timeindex|txnindex)$")
# The operations a truncation-intent names (``Log.truncate_to`` and
# ``Log.truncate_fully_and_start_at`` write them; ``load`` finishes them).
TRUNCATE_TO = "truncate_to"
TRUNCATE_FULLY = "truncate_fully_and_start_at"


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


def load(log, reattach_indexes: bool, now_ms: int) -> None:
    """Recover ``log`` (just created and locked, no segment yet) from its directory;
    ``log.recovery`` says what was done."""
    for name in os.listdir(log.directory):
        if name.endswith(".tmp") or name.endswith(DELETED_SUFFIX):
            os.unlink(os.path.join(log.directory, name))  # half-written or deleted
    log._last_flush_ms = now_ms
    epoch_path = os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)
    try:
        log.leader_epoch_cache = LeaderEpochCache(epoch_path, lambda: log.log_end_offset)
    except CheckpointError as e:
        logger.warning("%s; starting with an empty leader epoch cache", e)
        os.unlink(epoch_path)
        log.leader_epoch_cache = LeaderEpochCache(epoch_path, lambda: log.log_end_offset)
    try:
        cleaner_files.finish_swap(log)  # before anything lists the segments
    except CheckpointError as e:
        raise LogError(f"{e}; refusing to open {log.directory}") from e
    intent = _read_intent(log)
    if intent is not None and intent[0] == TRUNCATE_FULLY:
        _redo_truncate_fully_files(log, intent[1])
    bases = _segment_bases(log)
    if len(bases) > SEGMENTS_PER_LOG_MAX:
        raise LogError(f"{log.directory}: {len(bases)} segments > {SEGMENTS_PER_LOG_MAX}")
    bases = _delete_below_log_start(log, bases)
    _unlink_stray_index_files(log, bases)
    _unlink_orphan_indexes(log, bases)
    if not bases:
        start = _read_checkpoint(log, log._log_start_file)
        log._add_segment(log._new_segment(start, now_ms))
        fsync_dir(log.directory)
        log.recovery_point = start
    else:
        _recover(log, bases, reattach_indexes, now_ms)
    # DeleteRecords may have put the log start inside the first segment.
    log.deleted_below = min(_read_checkpoint(log, log._log_start_file), log.log_end_offset)
    log.high_watermark = min(max(_read_checkpoint(log, log._hw_file),
                             log.log_start_offset), log.log_end_offset)
    log.leader_epoch_cache.truncate_from_end(log.log_end_offset)
    log.leader_epoch_cache.truncate_from_start(log.log_start_offset)
    if intent is not None:
        # Finish what the crash interrupted, then forget it.
        if intent[0] == TRUNCATE_TO:
            log._truncate_to(intent[1])
        else:
            log._start_at(intent[1])
        logger.warning("recovery of %s finished an interrupted %s(%d)", log.directory,
                       intent[0], intent[1])
        log.recovery.completed_operations.append(f"{intent[0]}({intent[1]})")
        log._intent.remove()
    log.recovery.log_end_offset = log.log_end_offset
    delete_snapshots(log.directory, lambda o: o > log.log_end_offset or o < log.log_start_offset)
    transactions.trim_active_index(log)   # a cut tail's aborts (the rest: at the build)
    log.check()


def _unlink_orphan_indexes(log, bases: list[int]) -> None:
    """Shared memory of segments that are gone (a crash between deleting a segment's
    file and its indexes, or the reverse) would leak until ``cluster down``."""
    head = index_name(log.cluster_id, log.broker_id, log.topic, log.partition, 0,
                      KIND_OFFSET)[:-len("0-idx")]
    wanted = set(bases)
    for name in cluster_objects(log.cluster_id):
        rest = name[len(head):] if name.startswith(head) else ""
        match = _INDEX_SUFFIX.match(rest)
        if match and int(match.group(1)) not in wanted:
            unlink(name)


def _segment_bases(log) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(log.directory)
                  if n.endswith(".log") and len(n) == 24 and n[:20].isdigit())


def _read_intent(log) -> tuple[str, int] | None:
    try:
        return log._intent.read()
    except CheckpointError as e:
        # Written atomically, so not a crash artifact: guessing could resurrect data.
        raise LogError(f"{e}; refusing to open {log.directory}") from e


def _delete_segment_files(log, base: int) -> None:
    """Recovery's deletion of a segment it never opened: .log first (renamed, so a
    crash here leaves a .deleted file, not a segment without its start)."""
    stem = os.path.join(log.directory, f"{base:020d}")
    try:
        os.rename(stem + ".log", stem + ".log" + DELETED_SUFFIX)
    except FileNotFoundError:
        pass
    for path in (stem + ".index", stem + ".timeindex", stem + ".txnindex",
                 stem + ".log" + DELETED_SUFFIX):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _redo_truncate_fully_files(log, offset: int) -> None:
    """A crash interrupted truncate_fully_and_start_at(offset) after its intent was
    durable: every segment file goes (the new one, if created, is still empty: no
    append runs while the intent exists); the caller creates the segment at
    ``offset`` (from the log start checkpoint) and ``_start_at`` does the rest."""
    for base in _segment_bases(log):
        _delete_segment_files(log, base)
    fsync_dir(log.directory)
    log._log_start_file.update(log.topic, log.partition, offset)


def _delete_below_log_start(log, bases: list[int]) -> list[int]:
    """Finish a retention that a crash interrupted: the new log start offset was
    checkpointed before any file went, so every segment that ends at or below it
    (the next segment starts at or below it) is deleted; returns the bases kept."""
    log_start = _read_checkpoint(log, log._log_start_file)
    first = 0
    while first + 1 < len(bases) and bases[first + 1] <= log_start:
        first += 1
    if first:
        for base in bases[:first]:
            _delete_segment_files(log, base)
        fsync_dir(log.directory)
        log.recovery.completed_operations.append(f"delete_old_segments({log_start})")
        logger.warning("recovery of %s deleted %d segment(s) below the checkpointed log "
                       "start offset %d (retention interrupted)", log.directory, first,
                       log_start)
    return bases[first:]    # a log start inside the first segment: DeleteRecords


def _unlink_stray_index_files(log, bases: list[int]) -> None:
    """Index files of deleted segments (a crash between a deletion's unlinks) must not
    be loaded if a segment with that base offset appears again."""
    wanted = set(bases)
    for name in os.listdir(log.directory):
        match = _INDEX_FILE.match(name)
        if match and int(match.group(1)) not in wanted:
            os.unlink(os.path.join(log.directory, name))


def _read_checkpoint(log, file: OffsetCheckpointFile) -> int:
    try:
        return file.read().get((log.topic, log.partition), 0)
    except CheckpointError as e:
        logger.warning("%s; treating it as 0 (recover everything)", e)
        return 0


def _recover(log, bases: list[int], reattach: bool, now_ms: int) -> None:
    """Open every segment of ``bases``; trust what is below the recovery point, verify
    the rest, cut a bad tail or a gap."""
    report = log.recovery
    checkpointed = _read_checkpoint(log, log._recovery_file)
    recovery_point = max(checkpointed, bases[0])
    report.recovery_point = recovery_point
    first_scanned = bisect.bisect_right(bases, recovery_point) - 1
    segments = []
    for base in bases:
        offset_index, time_index, from_files = _open_indexes(log, base, reattach)
        segment = Segment.open(log.directory, base, log.config.segment_bytes,
                               offset_index, time_index, log.config.index_interval_bytes,
                               now_ms)
        segment.indexes_dirty = not from_files  # cuts and appends set it again
        segments.append(segment)
    # Below the recovery point: sealed, flushed, trusted (indexes validated).
    for i in range(first_scanned):
        segment = segments[i]
        segment.map_readonly()
        if not _trust(log, segment):
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
            start = _scan_start(log, segment, recovery_point)
        if start == 0:
            _clear_indexes(segment)
        file_end = segment.file_bytes
        result = segment.recover_from(start, BATCH_BYTES_MAX,
                                      lambda header: _recovered_batch(log, header))
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
                           "on): %s", log.directory, cut, truncation.position,
                           truncation.file, truncation.offset, error)
            break
    # A compacted log (or one ever cleaned) has holes between segments, as in Kafka;
    # in any other log a gap is a missing segment file. Either way an overlap is
    # damage. The log ends where either starts.
    holes = log.config.compact or \
        os.path.exists(os.path.join(log.directory, cleaner_files.CLEANER_CHECKPOINT))
    for i, segment in enumerate(segments):
        if log.segments and (segment.base_offset < log.log_end_offset or (
                not holes and segment.base_offset != log.log_end_offset)):
            error = (f"segment {segment_file_name(segment.base_offset)} starts at "
                     f"{segment.base_offset}, the log before it ends at "
                     f"{log.log_end_offset}")
            cut = sum(later.size_bytes for later in segments[i:])
            for later in reversed(segments[i:]):
                later.delete()
            report.truncations.append(
                Truncation(segment.path, 0, log.log_end_offset, cut, error))
            logger.warning("recovery of %s cut %d bytes: %s", log.directory, cut, error)
            break
        log._add_segment(segment)
    if not log.segments[-1].active:
        log.segments[-1].activate()
    log.recovery_point = min(recovery_point, log.log_end_offset)
    if report.truncations or checkpointed > log.log_end_offset:
        log._write_recovery_point()  # never leave a checkpoint above the LEO


def _recovered_batch(log, header: batch.BatchHeader) -> None:
    # As Kafka: epochs of recovered batches re-enter the cache (it may lag the log).
    if header.partition_leader_epoch >= 0:
        log.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)


def _open_indexes(log, base: int, reattach: bool) -> tuple[OffsetIndex, TimeIndex, bool]:
    """(offset index, time index, both loaded from their files)."""
    indexes, loaded = [], 0
    stem = os.path.join(log.directory, f"{base:020d}")
    for cls, kind, suffix in ((OffsetIndex, KIND_OFFSET, ".index"),
                              (TimeIndex, KIND_TIME, ".timeindex")):
        name = index_name(log.cluster_id, log.broker_id, log.topic, log.partition,
                          base, kind)
        index = None
        if reattach:
            try:
                index = cls.attach(name, base)
                log.recovery.indexes_reattached += 1
            except IndexCorruptError:
                index = None
        if index is None:
            index = cls.create(name, base, log._index_entries_max())
            if reattach:
                try:
                    keys, values = cls.read_file(stem + suffix, base)
                    index.load(keys, values)
                    log.recovery.indexes_loaded += 1
                    loaded += 1
                except IndexCorruptError:
                    index.truncate_to_count(0)
        indexes.append(index)
    return indexes[0], indexes[1], loaded == 2


def _clear_indexes(segment: Segment) -> None:
    segment.offset_index.truncate_to_count(0)
    segment.time_index.truncate_to_count(0)
    segment.indexes_dirty = True


def _trust(log, segment: Segment) -> bool:
    """Accept a sealed segment below the recovery point; rebuild bad indexes by a
    header walk. False if even the walk fails (then the segment is verified)."""
    size = segment.file_bytes
    segment.cut_indexes_after(size)
    if not segment.indexes_valid():
        _clear_indexes(segment)
    if segment.offset_index.count == 0 and size > 0:
        log.recovery.indexes_rebuilt += 1
    return segment.trust(size)


def _scan_start(log, segment: Segment, recovery_point: int) -> int:
    """Where verification starts: the indexed batch at or below the recovery point,
    if the index entry checks out; else the segment's start."""
    segment.cut_indexes_after(segment.file_bytes)
    offset, position = segment.offset_index.lookup(recovery_point)
    if position > 0 and segment.indexes_valid():
        return position
    if segment.offset_index.count > 0 or segment.file_bytes > 0:
        log.recovery.indexes_rebuilt += 1
    return 0
