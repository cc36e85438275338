"""The log cleaner's decisions (Kafka's LogCleaner / LogCleanerManager), pure: no I/O,
no clock. ``shm.log.cleaner`` reads segments and feeds these functions columns.

What is cleaned (``choose_range``), as Kafka's ``cleanableOffsets`` and
``grabFilthiestCompactedLog``:
- the first dirty offset is the end of the last clean (checkpointed), reset to the log
  start when it lies outside [log start, LEO];
- the first uncleanable offset is the smallest of: the high watermark (our last stable
  offset), the active segment's base, and the base of the first dirty segment whose
  newest record is younger than ``min_compaction_lag_ms``; only whole segments below it
  are cleaned (a segment's range runs to the next segment's base: holes included);
- the log is cleaned when dirty bytes / (clean + dirty bytes) exceeds
  ``min_cleanable_dirty_ratio``, or when a dirty segment's first batch is older than
  ``max_compaction_lag_ms`` (and there are dirty bytes);
- a clean rewrites every segment from the log start to the first uncleanable offset
  (the clean section too: the key map may supersede records there), grouped as
  Kafka's ``groupSegmentsBySize`` (consecutive segments whose sizes add up to at most
  ``segment_bytes``).

What is kept (``keep_mask``), as Kafka's ``shouldRetainRecord``: the key map holds the
last offset of each key in the dirty section [first dirty, end); a record is kept if
- its offset is at or past the map's end (not mapped), or
- it has a key and its offset is the key's latest (or the key is not in the map: a
  key only in the clean section), and
- it has a value, or it is a tombstone whose delete horizon has not passed.
Records with a null key are dropped (Kafka's "invalid message" in a compacted log).

Tombstones (Kafka 4's rule for v2 batches, KIP-534): a tombstone survives the clean
that first cleans it; that clean sets its delete horizon to clean time +
``delete_retention_ms``, and the first clean at or after the horizon drops it. Kafka
stores the horizon in the batch (attribute bit 0x40 and the base timestamp); our batch
format has no room for it, so ``Horizons`` keeps it beside the log instead: offsets
below ``end`` of a step were first cleaned by a clean whose horizon is ``horizon_ms``.
A step's horizon applies to every batch first cleaned by that clean, which is exactly
KIP-534's per-batch horizon (all batches a clean first cleans get the same one).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Horizon steps kept per log: beyond it the two oldest merge into one with the later
# horizon (their tombstones then live longer than needed, never shorter).
HORIZON_STEPS_MAX = 1000
NO_HORIZON = -1  # never cleaned before: the clean keeps its tombstones


@dataclass(frozen=True)
class SegmentFacts:
    """What the planner needs of one segment (``end``: the next segment's base, or the
    LEO for the active one)."""

    base_offset: int
    end: int
    size_bytes: int
    max_timestamp: int           # -1: none
    first_batch_timestamp: int   # max timestamp of its first batch, -1: none


@dataclass(frozen=True)
class Range:
    """What ``choose_range`` decided: segments [0, count) are cleaned, the key map
    covers [first_dirty, end) and ``end`` becomes the next first dirty offset."""

    count: int
    first_dirty: int
    end: int
    clean_bytes: int
    dirty_bytes: int
    must_clean: bool  # max.compaction.lag.ms passed

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def first_dirty_offset(checkpointed: int | None, log_start: int, log_end: int) -> int:
    """Kafka: a checkpoint outside [log start, LEO] restarts at the log start."""
    if checkpointed is None or not log_start <= checkpointed <= log_end:
        return log_start
    return checkpointed


def choose_range(segments: list[SegmentFacts], first_dirty: int, high_watermark: int,
                 now_ms: int, *, min_compaction_lag_ms: int, max_compaction_lag_ms: int,
                 dirty_bytes_max: int | None = None) -> Range | None:
    """The cleanable range of a log whose last segment is the active one; None when
    nothing is dirty and cleanable. Does not apply the ratio (``should_clean``).
    ``dirty_bytes_max`` bounds the dirty segments one clean maps (at least one), as
    Kafka's dedupe buffer bounds its offset map: the rest waits for the next clean."""
    if len(segments) < 2:
        return None
    uncleanable = min(high_watermark, segments[-1].base_offset)
    if min_compaction_lag_ms > 0:
        for s in segments[:-1]:
            if s.end > first_dirty and s.max_timestamp > now_ms - min_compaction_lag_ms:
                uncleanable = min(uncleanable, s.base_offset)
                break
    count, mapped = 0, 0
    while count < len(segments) - 1 and segments[count].end <= uncleanable:
        s = segments[count]
        if s.end > first_dirty:
            if dirty_bytes_max is not None and mapped and mapped + s.size_bytes > dirty_bytes_max:
                break
            mapped += s.size_bytes
        count += 1
    chosen = segments[:count]
    dirty = [s for s in chosen if s.end > first_dirty]
    if not dirty:
        return None
    clean_bytes = sum(s.size_bytes for s in chosen if s.end <= first_dirty)
    dirty_bytes = sum(s.size_bytes for s in dirty)
    stamps = [s.first_batch_timestamp for s in segments[:-1]
              if s.end > first_dirty and s.first_batch_timestamp > 0]
    must = bool(stamps) and min(stamps) < now_ms - max(max_compaction_lag_ms, 0)
    return Range(count, first_dirty, chosen[-1].end, clean_bytes, dirty_bytes, must)


def should_clean(chosen: Range | None, min_cleanable_dirty_ratio: float) -> bool:
    """Kafka: (must clean now and dirty bytes) or the ratio exceeds the minimum."""
    if chosen is None:
        return False
    return (chosen.must_clean and chosen.dirty_bytes > 0) or \
        chosen.dirty_ratio > min_cleanable_dirty_ratio


def group_by_size(sizes: list[int], segment_bytes: int) -> list[tuple[int, int]]:
    """Kafka's groupSegmentsBySize: [start, stop) index ranges of consecutive segments
    whose sizes add up to at most ``segment_bytes`` (a segment alone may exceed it)."""
    groups, i = [], 0
    while i < len(sizes):
        j, total = i + 1, sizes[i]
        while j < len(sizes) and total + sizes[j] <= segment_bytes:
            total += sizes[j]
            j += 1
        groups.append((i, j))
        i = j
    return groups


class KeyMap:
    """Kafka's OffsetMap: key -> last offset in the dirty section [start, end)."""

    def __init__(self, keys: pa.Array, offsets: np.ndarray, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.keys = keys          # unique, non-null
        self.offsets = offsets    # int64, aligned with keys

    @classmethod
    def build(cls, chunks: list[tuple[pa.Array, np.ndarray]], start: int, end: int
              ) -> "KeyMap":
        """From (keys, offsets) chunks of the dirty section, in offset order; records
        below ``start`` or at/after ``end`` and null keys are ignored."""
        keys = [k for k, _ in chunks]
        offsets = [o for _, o in chunks]
        if not keys:
            return cls(pa.array([], pa.binary()), np.zeros(0, np.int64), start, end)
        table = pa.table({"k": pa.chunked_array(keys, pa.binary()),
                          "o": pa.chunked_array([pa.array(o, pa.int64()) for o in offsets])})
        mask = pc.and_(pc.and_(pc.is_valid(table["k"]), pc.greater_equal(table["o"], start)),
                       pc.less(table["o"], end))
        table = table.filter(mask)
        grouped = table.group_by("k").aggregate([("o", "max")])
        return cls(grouped["k"].combine_chunks(),
                   grouped["o_max"].to_numpy().astype(np.int64), start, end)

    def __len__(self) -> int:
        return len(self.keys)

    def latest(self, keys: pa.Array) -> np.ndarray:
        """Per key, its last offset in the map; -1 where absent (or null)."""
        if len(self.keys) == 0:
            return np.full(len(keys), -1, np.int64)
        where = pc.index_in(keys, value_set=self.keys)
        found = where.is_valid().to_numpy(zero_copy_only=False)
        out = np.full(len(keys), -1, np.int64)
        if found.any():
            idx = where.fill_null(0).to_numpy(zero_copy_only=False)
            out[found] = self.offsets[idx[found]]
        return out


def keep_mask(offsets: np.ndarray, keys: pa.Array, tombstones: np.ndarray,
              horizons: np.ndarray, key_map: KeyMap, now_ms: int) -> np.ndarray:
    """Which records of a run of batches to keep (see the module's rules).
    ``horizons``: per record its delete horizon (NO_HORIZON: never cleaned)."""
    has_key = keys.is_valid().to_numpy(zero_copy_only=False)
    latest = key_map.latest(keys)
    newest = offsets >= latest                 # absent keys: -1, so kept
    tombstone_ok = (horizons == NO_HORIZON) | (now_ms < horizons)
    value_ok = ~tombstones | tombstone_ok
    return (offsets >= key_map.end) | (has_key & newest & value_ok)


def keep_producer_tails(keep: np.ndarray, headers, producers: dict[int, int]) -> None:
    """Keep (in place) the last record of each batch that is its producer's last data
    (``producers``: producer id -> last data offset); ``keep`` spans ``headers``'
    records in order."""
    at = 0
    for header in headers:
        at += header.record_count
        if header.producer_id >= 0 and \
                producers.get(header.producer_id) == header.base_offset + header.last_offset_delta:
            keep[at - 1] = True


class Horizons:
    """Delete horizons by offset: a sorted list of (end, horizon_ms) steps; an offset
    below ``end`` of the first step whose end is above it was first cleaned by the
    clean that set ``horizon_ms``. Offsets at or past the last end were never cleaned."""

    def __init__(self, steps: list[tuple[int, int]] | None = None) -> None:
        self.steps = list(steps or [])
        assert all(a[0] < b[0] for a, b in zip(self.steps, self.steps[1:])), self.steps

    def of(self, offsets: np.ndarray) -> np.ndarray:
        if not self.steps:
            return np.full(len(offsets), NO_HORIZON, np.int64)
        ends = np.array([e for e, _ in self.steps], np.int64)
        values = np.array([h for _, h in self.steps] + [NO_HORIZON], np.int64)
        return values[np.searchsorted(ends, offsets, side="right")]

    def after_clean(self, end: int, now_ms: int, delete_retention_ms: int) -> "Horizons":
        """The steps once a clean at ``now_ms`` has cleaned everything below ``end``:
        offsets first cleaned now get now + delete_retention_ms; steps whose horizon
        has passed lost their tombstones in this clean and merge into the next."""
        horizon = min(now_ms + delete_retention_ms, 2**63 - 1)
        old = [(e, h) for e, h in self.steps if e < end]
        live = [(e, h) for e, h in old if h > now_ms]
        if end > (old[-1][0] if old else -1):
            live.append((end, max(horizon, live[-1][1] if live else horizon)))
        while len(live) > HORIZON_STEPS_MAX:
            live[:2] = [live[1]]
        return Horizons(live)

    def truncated(self, offset: int) -> "Horizons":
        """After a truncation to ``offset``: what lay above it was never cleaned."""
        i = bisect.bisect_left([e for e, _ in self.steps], offset)
        steps = self.steps[:i]
        if i < len(self.steps):
            steps.append((offset, self.steps[i][1]))
        return Horizons([s for s in steps if s[0] > 0])


class TxnPass:
    """Transactions in one clean (Kafka's CleanedTransactionMetadata and the rules of
    its ``cleanInto``; the clean walks its batches in offset order from the log start):

    - the records of an aborted transaction (a transactional data batch of producer P
      inside [first offset, marker] of an aborted transaction of P) are discarded and
      never enter the key map;
    - a COMMIT/ABORT marker is discardable when no record of its transaction survives
      this clean (Kafka's: no batch of it was seen in the pass); it is dropped once
      discardable AND its delete horizon has passed (the tombstones' horizons, set by
      the first clean of its offset: delete.retention.ms), except a producer's newest
      marker (``keep_markers``: it carries the epoch that fences the producer, Kafka's
      "last record of an active producer");
    - an ABORT marker kept because data of its transaction survived keeps its
      ``.txnindex`` entry (returned by ``decide``); one without surviving data does not
      need one (Kafka's cleaned index likewise).
    """

    def __init__(self, aborted, keep_markers: set[int]) -> None:
        self._spans: dict[int, tuple[list[int], list[int]]] = {}
        for entry in sorted(aborted, key=lambda e: e.last_offset):
            firsts, lasts = self._spans.setdefault(entry.producer_id, ([], []))
            firsts.append(entry.first_offset)
            lasts.append(entry.last_offset)
        self._entries = {(e.producer_id, e.last_offset): e for e in aborted}
        self.keep_markers = keep_markers
        self.kept_data: set[int] = set()   # producers with a record kept since their marker
        self.dropped_marker_max = -1       # the last marker this clean drops (-1: none)

    def aborted_records(self, headers) -> np.ndarray:
        """Per record of ``headers``' batches: is it data of an aborted transaction?"""
        out = np.zeros(sum(h.record_count for h in headers), bool)
        at = 0
        for h in headers:
            if h.transactional and not h.control and h.producer_id in self._spans:
                firsts, lasts = self._spans[h.producer_id]
                i = bisect.bisect_left(lasts, h.base_offset)
                if i < len(lasts) and firsts[i] <= h.base_offset:
                    out[at:at + h.record_count] = True
            at += h.record_count
        return out

    def control_records(self, headers) -> np.ndarray:
        out = np.zeros(sum(h.record_count for h in headers), bool)
        at = 0
        for h in headers:
            if h.control:
                out[at] = True
            at += h.record_count
        return out

    def decide(self, headers, keep: np.ndarray, horizons: np.ndarray, now_ms: int) -> list:
        """Set the markers' fate in ``keep`` (in place; data records' as decided),
        and note the producers whose data survives; returns the aborted entries of
        the ABORT markers kept with surviving data. Call in offset order."""
        entries = []
        at = 0
        for h in headers:
            pid = h.producer_id
            if h.control:
                had_data = pid in self.kept_data
                self.kept_data.discard(pid)
                passed = horizons[at] != NO_HORIZON and now_ms >= horizons[at]
                keep[at] = had_data or not passed or h.base_offset in self.keep_markers
                if not keep[at]:
                    self.dropped_marker_max = max(self.dropped_marker_max, h.base_offset)
                entry = self._entries.get((pid, h.base_offset))
                if had_data and entry is not None:
                    entries.append(entry)
            elif h.transactional and keep[at:at + h.record_count].any():
                self.kept_data.add(pid)
            at += h.record_count
        return entries

    def save(self) -> tuple[set[int], int]:
        return set(self.kept_data), self.dropped_marker_max

    def restore(self, saved: tuple[set[int], int]) -> None:
        self.kept_data, self.dropped_marker_max = set(saved[0]), saved[1]
