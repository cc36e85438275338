"""Log compaction (Kafka's LogCleaner) for one ``Log``: plan, build, swap.

    plan = log.cleanable(now_ms)        # owner thread; None: nothing to clean now
    cleaned = plan.build(throttle, now_ms)   # any thread; reads sealed segments only
    log.swap_cleaned(cleaned)           # owner thread; False: the log changed, dropped
    cleaned.abort()                     # or drop it (removes its files)

Rules:
- A plan holds what it needs (duplicated descriptors of the sealed segments it cleans,
  their sizes, the horizons), so ``build`` never touches the ``Log`` and never blocks
  appends or reads; the segments it reads are sealed: their bytes never change while
  they are in the log.
- ``swap_cleaned`` refuses (False, files removed) if the log changed the segments the
  plan read (a truncation, retention, DeleteRecords, another swap, close): the
  ``Log``'s ``_segments_changed`` counter moves with each of them, and appends and
  rolls do not change sealed segments.
- What is kept: ``cleaner_core``; how a batch loses records: ``cleaner_batches``; the
  files and the crash-safe swap order: ``cleaner_files``.
- The last record of an idempotent producer's last batch is kept even when superseded
  (Kafka keeps that batch, emptied; our batches cannot be empty), so the producer's
  sequence survives when its state is rebuilt from the log.
- Transactions (``cleaner_core.TxnPass``): nothing at or above the last stable offset
  is cleaned (Kafka's firstUncleanableDirtyOffset); aborted transactions' data is
  discarded; markers stay until their transaction's data is gone and their delete
  horizon has passed; the cleaned segments' ``.txnindex`` keep the entries of the
  ABORT markers kept with data.
- A group whose cleaned output would exceed ``segment_bytes`` (runs of single records
  cost a header each) is left as it was in this clean (``CleanStats.groups_skipped``).
"""
from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa

from shm import batch as codec
from shm.log import cleaner_core as core
from shm.log.cleaner_batches import kept_batches
from shm.index import KIND_OFFSET, KIND_TIME, write_index_file
from shm.log.cleaner_files import (CLEANED_SUFFIX, INDEX_CLEANED_SUFFIXES, CleanerState,
                                   stem)
from shm.segment import NO_TIMESTAMP

WRITE_CHUNK_BYTES = 1 << 20  # cleaned bytes are written (and throttled) in chunks
THROTTLE_CHUNK_BYTES = 1 << 20  # bytes read are throttled in chunks of this size
# Dirty bytes one clean maps (Kafka bounds its offset map by log.cleaner.dedupe.buffer.size,
# 128 MiB for ~5M keys); the rest of the dirty section waits for the next clean.
DIRTY_BYTES_PER_CLEAN_MAX = 1 << 30


@dataclass
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_written: int = 0
    keys: int = 0
    groups: int = 0
    groups_skipped: int = 0
    elapsed_s: float = 0.0

    @property
    def mb_per_s(self) -> float:
        """MB (10**6 bytes) of log read by the clean per second (Kafka's figure)."""
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class _Source:
    segment: object       # the Log's Segment: identity is checked at the swap
    base: int
    end: int
    size: int
    fd: int


@dataclass
class _Output:
    base: int
    end: int
    first: int            # sources [first, stop) it replaces
    stop: int
    path: str
    fd: int
    size: int
    index: tuple          # (offset keys, positions, time keys, time values) as lists
    kept: bool = True     # False: nothing kept and not the first group: no new segment
    aborted: list = field(default_factory=list)   # its .txnindex entries


def state(log) -> CleanerState:
    if log._cleaner_state is None:
        log._cleaner_state = CleanerState.load(log.directory)
    return log._cleaner_state


def plan(log, now_ms: int) -> "CleanPlan | None":
    """``Log.cleanable``: a plan when the log is compacted and dirty enough, else None."""
    config = log.config
    if not config.compact:
        return None
    segments = log.segments
    facts = []
    for i, s in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else s.next_offset
        facts.append(core.SegmentFacts(s.base_offset, end, s.size_bytes, s.max_timestamp,
                                       s.first_batch_max_timestamp() if s.size_bytes else
                                       NO_TIMESTAMP))
    first_dirty = core.first_dirty_offset(state(log).first_dirty, log.log_start_offset,
                                          log.log_end_offset)
    chosen = core.choose_range(facts, first_dirty, log.last_stable_offset(), now_ms,
                               min_compaction_lag_ms=config.min_compaction_lag_ms,
                               max_compaction_lag_ms=config.max_compaction_lag_ms,
                               dirty_bytes_max=DIRTY_BYTES_PER_CLEAN_MAX)
    if not core.should_clean(chosen, config.min_cleanable_dirty_ratio):
        return None
    sources = [_Source(s, f.base_offset, f.end, s.size_bytes, s.dup_fd())
               for s, f in zip(segments[:chosen.count], facts)]
    groups = core.group_by_size([s.size for s in sources], config.segment_bytes)
    producers = {pid: entry.last_offset
                 for pid, entry in log.producer_states().entries.items() if entry.runs}
    txns = log.transaction_state()
    keep_markers = {offset for pid, offset in txns.last_markers.items()
                    if offset > producers.get(pid, -1)}
    txn_pass = core.TxnPass(txns.aborted_overlapping(log.log_start_offset, chosen.end),
                            keep_markers)
    return CleanPlan(log, sources, groups, chosen, state(log).horizons, now_ms, producers,
                     txn_pass)


class CleanPlan:
    """What one clean will do; ``build`` it on any thread (once)."""

    def __init__(self, log, sources: list[_Source], groups: list[tuple[int, int]],
                 chosen: core.Range, horizons: core.Horizons, now_ms: int,
                 producers: dict[int, int] | None = None,
                 txn_pass: core.TxnPass | None = None) -> None:
        self.directory = log.directory
        self.generation = log._segments_changed
        self.sources = sources
        self.groups = groups
        self.range = chosen
        self.horizons = horizons
        self.now_ms = now_ms
        # Idempotent producers' last data offsets: the last record of such a batch is
        # kept (Kafka keeps the batch, emptied), so their sequences survive a rebuild
        # of the producer state from the log.
        self.producers = producers or {}
        # Transactions (cleaner_core.TxnPass): aborted data goes, markers by its rules.
        self.txn_pass = txn_pass or core.TxnPass([], set())
        self.segment_bytes = log.config.segment_bytes
        self.delete_retention_ms = log.config.delete_retention_ms
        self.index_interval_bytes = log.config.index_interval_bytes
        self.index_entries_max = log._index_entries_max()
        self._log = log  # only read by swap_cleaned, on the owner thread
        self._closed = False

    @property
    def first_dirty(self) -> int:
        return self.range.first_dirty

    @property
    def end(self) -> int:
        return self.range.end

    def build(self, throttle: Callable[[int], None] | None = None,
              now_ms: int | None = None) -> "Cleaned":
        """Write the cleaned segments (``<base>.log.cleaned``, fsynced); ``throttle(n)``
        is called for every n bytes read or written (Kafka's cleaner I/O throttle)."""
        assert not self._closed, "a plan is built once"
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        throttle = throttle or (lambda n: None)
        started = time.perf_counter()
        stats = CleanStats()
        maps = []
        outputs: list[_Output] = []
        try:
            views = []
            for source in self.sources:
                m = mmap.mmap(source.fd, source.size, access=mmap.ACCESS_READ) \
                    if source.size else None
                maps.append(m)
                views.append(memoryview(m) if m is not None else memoryview(b""))
            key_map = self._key_map(views, throttle, stats)
            stats.keys = len(key_map)
            for number, (first, stop) in enumerate(self.groups):
                output = self._clean_group(number, first, stop, views, key_map, now_ms,
                                           throttle, stats)
                if output is not None:
                    outputs.append(output)
            if outputs:
                _fsync_dir(self.directory)  # the .cleaned names are durable
            del views
        except BaseException:
            for output in outputs:
                output.discard()
            self._close_sources(maps)
            raise
        self._close_sources(maps)
        stats.elapsed_s = time.perf_counter() - started
        return Cleaned(self, outputs, stats, now_ms)

    def abort(self) -> None:
        """Drop a plan that will not be built (closes its descriptors)."""
        self._close_sources([])

    def _close_sources(self, maps) -> None:
        for m in maps:
            if m is not None:
                try:
                    m.close()
                except BufferError:
                    pass  # arrays still view it: it goes with them
        if not self._closed:
            self._closed = True
            for source in self.sources:
                os.close(source.fd)

    # ---------------------------------------------------------------- reading

    @staticmethod
    def _columns(view, size: int, throttle):
        """(positions, headers, offsets, keys, tombstones) of a segment's batches;
        ``throttle`` is told of the bytes read as it goes."""
        positions, headers, offsets, keys, tombstones = [], [], [], [], []
        position = told = 0
        while position < size:
            if position - told >= THROTTLE_CHUNK_BYTES:
                throttle(position - told)
                told = position
            parsed = codec.parse_batch(view, position, verify_crc=False)
            positions.append(position)
            headers.append(parsed.header)
            offsets.append(parsed.offsets)
            keys.append(parsed.keys)
            tombstones.append(parsed.values.is_null().to_numpy(zero_copy_only=False))
            position += parsed.size_bytes
        if size > told:
            throttle(size - told)
        if not headers:
            return [], [], np.zeros(0, np.int64), pa.array([], pa.binary()), \
                np.zeros(0, bool)
        return (positions, headers, np.concatenate(offsets),
                pa.chunked_array(keys, pa.binary()).combine_chunks(),
                np.concatenate(tombstones))

    def _key_map(self, views, throttle, stats: CleanStats) -> core.KeyMap:
        chunks = []
        for source, view in zip(self.sources, views):
            if source.end <= self.first_dirty:
                continue
            _, headers, offsets, keys, _ = self._columns(view, source.size, throttle)
            mappable = ~(self.txn_pass.aborted_records(headers) |
                         self.txn_pass.control_records(headers))
            if not mappable.all():
                keys, offsets = keys.filter(pa.array(mappable)), offsets[mappable]
            chunks.append((keys, offsets))
        return core.KeyMap.build(chunks, self.first_dirty, self.end)

    # ---------------------------------------------------------------- writing

    def _clean_group(self, number: int, first: int, stop: int, views, key_map, now_ms,
                     throttle, stats: CleanStats) -> _Output | None:
        base = self.sources[first].base
        end = self.sources[stop - 1].end
        path = stem(self.directory, base) + CLEANED_SUFFIX
        try:
            os.unlink(path)  # left by a clean that was never swapped
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        writer = _Writer(fd, base, self.index_interval_bytes, self.index_entries_max,
                         throttle)
        output = _Output(base, end, first, stop, path, fd, 0, ())
        stats.groups += 1
        saved = self.txn_pass.save()
        try:
            for i in range(first, stop):
                source, view = self.sources[i], views[i]
                stats.bytes_read += source.size
                positions, headers, offsets, keys, tombstones = \
                    self._columns(view, source.size, throttle)
                stats.records_read += len(offsets)
                horizons = self.horizons.of(offsets)
                keep = core.keep_mask(offsets, keys, tombstones, horizons, key_map, now_ms)
                keep &= ~self.txn_pass.aborted_records(headers)
                if self.producers:
                    core.keep_producer_tails(keep, headers, self.producers)
                output.aborted += self.txn_pass.decide(headers, keep, horizons, now_ms)
                stats.records_kept += int(keep.sum())
                at = 0
                for position, header in zip(positions, headers):
                    n = header.record_count
                    for piece in kept_batches(view, position, keep[at:at + n]):
                        writer.write(piece)
                    at += n
                if writer.size > self.segment_bytes:
                    break
            writer.flush()
        except BaseException:
            output.discard()
            raise
        if writer.size > self.segment_bytes:
            stats.groups_skipped += 1
            output.discard()
            self._left_as_it_was(first, stop, views, saved)
            return None
        os.fsync(fd)
        output.size = writer.size
        output.index = writer.index()
        output.kept = writer.size > 0 or number == 0
        if output.kept:   # its index files too, so the swap only renames them
            keys, positions, time_keys, time_values = output.index
            for suffix, kind, k, v in zip(INDEX_CLEANED_SUFFIXES, (KIND_OFFSET, KIND_TIME),
                                          (keys, time_keys), (positions, time_values)):
                write_index_file(stem(self.directory, base) + suffix, kind, base,
                                 self.index_entries_max, k, v)
        stats.bytes_written += writer.size
        stats.batches_written += writer.batches
        if not output.kept:
            output.discard()
            output.fd = -1
        return output


    def _left_as_it_was(self, first: int, stop: int, views, saved) -> None:
        """A skipped group keeps every record: the transactions' pass sees it so."""
        self.txn_pass.restore(saved)
        for i in range(first, stop):
            _, headers, offsets, _, _ = self._columns(views[i], self.sources[i].size,
                                                      lambda n: None)
            self.txn_pass.decide(headers, np.ones(len(offsets), bool),
                                 np.full(len(offsets), core.NO_HORIZON, np.int64), 0)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writer:
    """Appends batches to a cleaned file in chunks, building its indexes by the rule of
    ``shm.segment`` (so the loader would rebuild exactly these)."""

    def __init__(self, fd: int, base: int, interval: int, entries_max: int, throttle):
        self.fd, self.base, self.interval, self.entries_max = fd, base, interval, entries_max
        self.throttle = throttle
        self.size = 0
        self.batches = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._keys, self._positions, self._tkeys, self._tvalues = [], [], [], []
        self._last_indexed = -1
        self._max_timestamp = NO_TIMESTAMP

    def write(self, piece: bytes) -> None:
        base_offset, _ = codec.PREFIX.unpack_from(piece, 0)
        max_timestamp = codec.HEADER.unpack_from(piece, 0)[8]
        position = self.size
        self._max_timestamp = max(self._max_timestamp, max_timestamp)
        if len(self._keys) < self.entries_max and (
                self._last_indexed < 0 or position - self._last_indexed >= self.interval):
            relative = base_offset - self.base
            self._keys.append(relative)
            self._positions.append(position)
            self._last_indexed = position
            last_time = self._tkeys[-1] if self._tkeys else NO_TIMESTAMP
            if self._max_timestamp > last_time and \
                    (not self._tvalues or relative > self._tvalues[-1]):
                self._tkeys.append(self._max_timestamp)
                self._tvalues.append(relative)
        self._pending.append(piece)
        self._pending_bytes += len(piece)
        self.size += len(piece)
        self.batches += 1
        if self._pending_bytes >= WRITE_CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.write(self.fd, view[done:])
            self.throttle(len(data))
            self._pending, self._pending_bytes = [], 0

    def index(self) -> tuple:
        return (np.array(self._keys, np.int64), np.array(self._positions, np.int64),
                np.array(self._tkeys, np.int64), np.array(self._tvalues, np.int64))


def _discard(self: _Output) -> None:
    if self.fd >= 0:
        os.close(self.fd)
        self.fd = -1
    base_stem = self.path[:-len(CLEANED_SUFFIX)]
    for path in (self.path,) + tuple(base_stem + s for s in INDEX_CLEANED_SUFFIXES):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


_Output.discard = _discard


@dataclass
class Cleaned:
    """A built clean: its .cleaned files, waiting for ``Log.swap_cleaned``."""

    plan: CleanPlan
    outputs: list[_Output]
    stats: CleanStats
    now_ms: int
    done: bool = field(default=False)

    def abort(self) -> None:
        """Remove its files (the log is unchanged)."""
        for output in self.outputs:
            output.discard()
        self.done = True
