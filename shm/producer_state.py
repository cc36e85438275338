"""Idempotent producers' state per partition (KIP-98 without transactions), as Kafka's
ProducerStateManager keeps it: for each producer id, its epoch and its last five
batches' sequence ranges and offsets. Pure: the log (``shm.log``) feeds it every batch
it appends, as leader or follower, and rebuilds it from its batches after recovery or a
truncation, so every replica — a new leader too — knows it.

The leader asks ``check`` before appending a batch of producer ``pid``:

- ``APPEND``: the batch continues the producer's sequence (its first sequence is the last
  one seen plus one, or 0 for a producer or epoch not seen before);
- ``DUPLICATE``: the batch is one of the last five (the same first and last sequence):
  it was appended before, its reply was lost and the producer retried; answer with the
  original offsets instead of appending it again;
- ``OUT_OF_ORDER``: a gap, or a sequence not seen, not 0 for a new producer/epoch
  (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER); ``UNKNOWN_PRODUCER``: a producer this
  partition has no state of, with a sequence other than 0 (its state was lost with
  truncated or deleted data; UNKNOWN_PRODUCER_ID: the producer starts a new epoch);
- ``FENCED``: an epoch older than the one seen (INVALID_PRODUCER_EPOCH).

``check_frame`` decides for one produce frame (batches appended together, one
producer's, as a producer sends them): append it, refuse it, or answer it as a retry.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

BATCHES_KEPT = 5                  # Kafka's ProducerStateEntry.NumBatchesToRetain
SEQUENCE_MAX = 2**31 - 1          # sequences wrap from here to 0, as Kafka's
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
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


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
        for span in entry.batches:
            if span.first_seq == first_seq and span.last_seq == last_seq:
                return Verdict.DUPLICATE, span
        if first_seq == _next(entry.last_seq):
            return Verdict.APPEND, None
        return Verdict.OUT_OF_ORDER, None

    def update(self, pid: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int) -> None:
        """A batch of ``pid`` was appended at ``[first_offset, last_offset]`` (as leader
        after APPEND, or as follower, or while rebuilding). A newer epoch replaces the
        producer's batches."""
        if pid < 0:
            return
        entry = self.entries.get(pid)
        if entry is None or epoch > entry.epoch:
            entry = self.entries[pid] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return      # an old epoch's batch replayed from the log: nothing to learn
        entry.batches.append(BatchSpan(first_seq, last_seq, first_offset, last_offset))

    def end_transaction(self, pid: int, epoch: int) -> None:
        """A COMMIT/ABORT marker of ``pid`` at ``epoch`` (Kafka's appendEndTxnMarker
        updates the producer's epoch): a newer epoch replaces the producer's batches, so
        the old epoch is fenced and the new one starts at sequence 0."""
        entry = self.entries.get(pid)
        if entry is None or epoch > entry.epoch:
            self.entries[pid] = ProducerEntry(epoch)

    def clear(self) -> None:
        self.entries.clear()

    # The snapshot files' contents (``shm.log`` writes them next to the segments).
    def to_json(self) -> list:
        return [[pid, e.epoch, [[b.first_seq, b.last_seq, b.first_offset, b.last_offset]
                                for b in e.batches]] for pid, e in sorted(self.entries.items())]

    @classmethod
    def from_json(cls, data) -> "ProducerStates":
        """The inverse of ``to_json``; ValueError if ``data`` is not one."""
        states = cls()
        try:
            for pid, epoch, spans in data:
                entry = states.entries[int(pid)] = ProducerEntry(int(epoch))
                for first_seq, last_seq, first_offset, last_offset in spans:
                    entry.batches.append(BatchSpan(int(first_seq), int(last_seq),
                                                   int(first_offset), int(last_offset)))
        except (TypeError, ValueError) as e:
            raise ValueError(f"not a producer-state snapshot: {e}") from None
        return states


def check_frame(states: ProducerStates, headers) -> tuple[Verdict, int, int] | None:
    """For a frame's batch headers (``shm.batch.BatchHeader``): None when no batch has
    a producer id (nothing to check); (APPEND, -1, -1) when the first batch continues its
    producer's sequence and the others continue it; (DUPLICATE, first offset, last
    offset) when every batch was appended before; else the verdict that refuses it."""
    idempotent = [h for h in headers if h.producer_id >= 0 and h.base_sequence >= 0]
    if not idempotent:
        return None
    if len(idempotent) != len(headers) or \
            len({(h.producer_id, h.producer_epoch) for h in headers}) != 1:
        return Verdict.MIXED, -1, -1
    first = headers[0]
    verdict, span = states.check(first.producer_id, first.producer_epoch,
                                 first.base_sequence,
                                 last_sequence(first.base_sequence, first.record_count))
    if verdict is Verdict.APPEND:
        expected = last_sequence(first.base_sequence, first.record_count)
        for h in headers[1:]:
            if h.base_sequence != _next(expected):
                return Verdict.OUT_OF_ORDER, -1, -1
            expected = last_sequence(h.base_sequence, h.record_count)
        return Verdict.APPEND, -1, -1
    if verdict is Verdict.DUPLICATE:
        spans = [span]
        for h in headers[1:]:
            v, s = states.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                last_sequence(h.base_sequence, h.record_count))
            if v is not Verdict.DUPLICATE:
                return Verdict.OUT_OF_ORDER, -1, -1
            spans.append(s)
        return Verdict.DUPLICATE, spans[0].first_offset, spans[-1].last_offset
    return verdict, -1, -1
