"""Idempotent producers' state per partition (KIP-98 without transactions), as Kafka's
ProducerStateManager keeps it: for each producer id, its epoch and where its last
batches' sequences went. Pure: the log (``shm.log``) feeds it every batch it appends,
as leader or follower, and rebuilds it from its batches after recovery or a truncation,
so every replica — a new leader too — knows it.

Kafka keeps a producer's last five batches (NumBatchesToRetain), enough for a client
that has at most five requests, of one batch per partition each, in flight. Our
producer sends a partition's queued batches as one frame instead (``node.client``), so
what it may retry is one frame of any number of batches. The state therefore keeps the
last ``RUNS_KEPT`` *runs*: batches of the producer appended back to back, at
consecutive offsets with consecutive sequences, merged into one span whose offsets
follow its sequences one for one. A frame is appended whole at consecutive offsets, so
it lies within one run; each batch or frame starts at most one new run, so the last five
of either are always recognised (a Kafka client's five batches too), and the check is
O(RUNS_KEPT) whatever the frame's length. The runs depend only on the log, so every
replica builds the same ones.

The leader asks ``check`` before appending a batch of producer ``pid``:

- ``APPEND``: the batch continues the producer's sequence (its first sequence is the last
  one seen plus one, or 0 for a producer or epoch not seen before);
- ``DUPLICATE``: the batch's sequences lie within one of the last runs: it was appended
  before, its reply was lost and the producer retried; answer with the original offsets
  instead of appending it again (Kafka matches a batch's first and last sequence
  exactly; a batch within a run is the same sequences, written at the same offsets);
- ``OUT_OF_ORDER``: a gap, or a sequence not seen, not 0 for a new producer/epoch
  (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER); ``UNKNOWN_PRODUCER``: a producer this
  partition has no state of, with a sequence other than 0 (its state was lost with
  truncated or deleted data; UNKNOWN_PRODUCER_ID: the producer starts a new epoch);
- ``FENCED``: an epoch older than the one seen (INVALID_PRODUCER_EPOCH).

``check_frame`` decides for one produce frame (batches appended together, one
producer's, as a producer sends them): append it, refuse it, or answer it as a retry.

A producer's state expires as Kafka's does (``expire``, run by the broker every
``producer.id.expiration.check.interval.ms``): once ``producer.id.expiration.ms`` has
passed since its last batch's max timestamp (or marker's), unless it has a transaction
open. Its next batch then starts again at sequence 0 (or is UNKNOWN_PRODUCER). Each
replica expires on its own clock, as Kafka's; a build from the log learns expired
producers again from their batches, and the next check forgets them again.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

RUNS_KEPT = 5          # Kafka's ProducerStateEntry.NumBatchesToRetain, counted in runs
SEQUENCE_MAX = 2**31 - 1          # sequences wrap from here to 0, as Kafka's
SEQUENCES = SEQUENCE_MAX + 1
NO_PRODUCER_ID = -1


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    UNKNOWN_PRODUCER = "unknown_producer"
    FENCED = "fenced"
    MIXED = "mixed"          # a frame of batches from several producers, or with and without




@dataclass(frozen=True)
class BatchSpan:
    """Sequences ``first_seq..last_seq`` (wrapping past SEQUENCE_MAX) written at offsets
    ``first_offset..last_offset``: one batch, or a run of them appended back to back,
    whose offsets then follow its sequences one for one."""
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int

    @property
    def linear(self) -> bool:
        """Each sequence at its own offset (a batch that compaction thinned is not)."""
        return self.last_offset - self.first_offset == _distance(self.first_seq, self.last_seq)

    def within(self, first_seq: int, last_seq: int) -> "BatchSpan | None":
        """Where sequences ``first_seq..last_seq`` were written, if this run holds them
        all; else None. A batch that is not ``linear`` holds only itself."""
        if not self.linear:
            return self if (first_seq, last_seq) == (self.first_seq, self.last_seq) else None
        start = _distance(self.first_seq, first_seq)
        end = _distance(self.first_seq, last_seq)
        if not start <= end <= self.last_offset - self.first_offset:
            return None
        return BatchSpan(first_seq, last_seq, self.first_offset + start, self.first_offset + end)


def _distance(from_seq: int, to_seq: int) -> int:
    """How many sequences ``to_seq`` comes after ``from_seq`` (wrapping)."""
    return (to_seq - from_seq) % SEQUENCES


@dataclass
class ProducerEntry:
    epoch: int
    runs: deque = field(default_factory=lambda: deque(maxlen=RUNS_KEPT))
    # The max timestamp (ms) of its last batch or marker, as Kafka's lastTimestamp;
    # None: not known (a snapshot written before the timestamps were kept): the first
    # expiry check starts its clock.
    last_timestamp: int | None = None

    @property
    def last_seq(self) -> int:
        return self.runs[-1].last_seq if self.runs else -1

    @property
    def last_offset(self) -> int:
        return self.runs[-1].last_offset if self.runs else -1

    def append(self, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int) -> None:
        """A batch appended after the others (sequences ``first_seq..last_seq`` at
        ``first_offset..last_offset``): it extends the last run when it follows it at
        the next offset with the next sequence (both linear, and the run shorter than
        the sequence space), else it starts a new run. Builds one span (every replica's
        append of an idempotent batch comes here)."""
        runs = self.runs
        if runs:
            last = runs[-1]
            if first_offset == last.last_offset + 1 and \
                    first_seq == _next(last.last_seq) and last.linear and \
                    last_offset - first_offset == _distance(first_seq, last_seq) and \
                    last_offset - last.first_offset < SEQUENCE_MAX:
                runs[-1] = BatchSpan(last.first_seq, last_seq, last.first_offset, last_offset)
                return
        runs.append(BatchSpan(first_seq, last_seq, first_offset, last_offset))


def last_sequence(first_seq: int, record_count: int) -> int:
    assert 0 <= first_seq <= SEQUENCE_MAX and record_count >= 1, (first_seq, record_count)
    return (first_seq + record_count - 1) % (SEQUENCE_MAX + 1)


def _next(seq: int) -> int:
    return 0 if seq == SEQUENCE_MAX else seq + 1


class ProducerStates:
    """The state of every producer that wrote to one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def check(self, pid: int, epoch: int, first_seq: int, last_seq: int
              ) -> tuple[Verdict, BatchSpan | None]:
        """What the leader should do with this batch (and the original's span for a
        duplicate)."""
        assert pid >= 0 and epoch >= 0 and first_seq >= 0, (pid, epoch, first_seq)
        entry = self.entries.get(pid)
        if entry is None:
            return (Verdict.APPEND, None) if first_seq == 0 else \
                (Verdict.UNKNOWN_PRODUCER, None)
        if epoch < entry.epoch:
            return Verdict.FENCED, None
        if epoch > entry.epoch:
            return (Verdict.APPEND, None) if first_seq == 0 else (Verdict.OUT_OF_ORDER, None)
        if first_seq == _next(entry.last_seq):
            return Verdict.APPEND, None     # (no run reaches round the sequence space)
        for run in entry.runs:
            span = run.within(first_seq, last_seq)
            if span is not None:
                return Verdict.DUPLICATE, span
        return Verdict.OUT_OF_ORDER, None

    def update(self, pid: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp: int | None = None) -> None:
        """A batch of ``pid`` was appended at ``[first_offset, last_offset]`` (as leader
        after APPEND, or as follower, or while rebuilding), its max timestamp
        ``timestamp`` (ms). A newer epoch replaces the producer's runs."""
        if pid < 0:
            return
        entry = self.entries.get(pid)
        if entry is None or epoch > entry.epoch:
            entry = self.entries[pid] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return      # an old epoch's batch replayed from the log: nothing to learn
        entry.append(first_seq, last_seq, first_offset, last_offset)
        entry.last_timestamp = timestamp

    def end_transaction(self, pid: int, epoch: int, timestamp: int | None = None) -> None:
        """A COMMIT/ABORT marker of ``pid`` at ``epoch`` (Kafka's appendEndTxnMarker
        updates the producer's epoch and last timestamp): a newer epoch replaces the
        producer's runs, so the old epoch is fenced and the new one starts at sequence
        0."""
        entry = self.entries.get(pid)
        if entry is None or epoch > entry.epoch:
            entry = self.entries[pid] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return
        entry.last_timestamp = timestamp

    def expire(self, now_ms: int, expiration_ms: int, open_transactions=()) -> list[int]:
        """Forget every producer whose last timestamp is ``expiration_ms`` or more before
        ``now_ms`` and that has no transaction open (``open_transactions``: their ids);
        the ids forgotten. One whose timestamp is not known gets ``now_ms``."""
        expired = []
        for pid, entry in self.entries.items():
            if entry.last_timestamp is None:
                entry.last_timestamp = now_ms
            elif now_ms - entry.last_timestamp >= expiration_ms and \
                    pid not in open_transactions:
                expired.append(pid)
        for pid in expired:
            del self.entries[pid]
        return expired

    def clear(self) -> None:
        self.entries.clear()

    # The snapshot files' contents (``shm.log`` writes them next to the segments): each
    # producer's runs (a snapshot of single batches, as before runs, reads the same) and
    # last timestamp (null: not known; a snapshot written before it was kept has none).
    def to_json(self) -> list:
        return [[pid, e.epoch, [[b.first_seq, b.last_seq, b.first_offset, b.last_offset]
                                for b in e.runs], e.last_timestamp]
                for pid, e in sorted(self.entries.items())]

    @classmethod
    def from_json(cls, data) -> "ProducerStates":
        """The inverse of ``to_json``; ValueError if ``data`` is not one."""
        states = cls()
        try:
            for pid, epoch, spans, *rest in data:
                if len(rest) > 1:
                    raise ValueError(f"{len(rest) + 3} fields for producer {pid}")
                entry = states.entries[int(pid)] = ProducerEntry(int(epoch))
                for first_seq, last_seq, first_offset, last_offset in spans:
                    entry.append(int(first_seq), int(last_seq), int(first_offset),
                                 int(last_offset))
                if rest and rest[0] is not None:
                    entry.last_timestamp = int(rest[0])
        except (TypeError, ValueError) as e:
            raise ValueError(f"not a producer-state snapshot: {e}") from None
        return states


def check_frame(states: ProducerStates, headers) -> tuple[Verdict, int, int] | None:
    """For a frame's batch headers (``shm.batch.BatchHeader``): None when no batch has
    a producer id (nothing to check); (APPEND, -1, -1) when the first batch continues its
    producer's sequence and the others continue it; (DUPLICATE, first offset, last
    offset) when the frame's sequences were all appended before (within one run: a
    frame is appended whole); else the verdict that refuses it."""
    idempotent = [h for h in headers if h.producer_id >= 0 and h.base_sequence >= 0]
    if not idempotent:
        return None
    if len(idempotent) != len(headers) or \
            len({(h.producer_id, h.producer_epoch) for h in headers}) != 1:
        return Verdict.MIXED, -1, -1
    first = headers[0]
    expected = last_sequence(first.base_sequence, first.record_count)
    for h in headers[1:]:
        if h.base_sequence != _next(expected):
            return Verdict.OUT_OF_ORDER, -1, -1     # a gap inside the frame
        expected = last_sequence(h.base_sequence, h.record_count)
    verdict, span = states.check(first.producer_id, first.producer_epoch,
                                 first.base_sequence, expected)
    if verdict is Verdict.DUPLICATE:
        return Verdict.DUPLICATE, span.first_offset, span.last_offset
    return verdict, -1, -1
