"""One partition's transactions (KIP-98), as Kafka's ProducerStateManager keeps them:
the ongoing transaction of each producer, the completed ones not yet below the high
watermark, and the aborted ones (Kafka's transaction index). Pure: the log
(``shm.log``) feeds it every transactional batch it appends, as leader or follower, and
rebuilds it after recovery or a truncation (``shm.log.transactions``).

Rules (Kafka's):
- A transactional data batch of producer ``pid`` opens its transaction at the batch's
  base offset if none is open, else continues it (the first offset stays).
- A marker (control batch, ``shm.control``) of ``pid`` completes its open transaction:
  ``CompletedTxn(pid, first_offset, marker offset, aborted)``. A marker with no open
  transaction (the coordinator retried it, or the transaction had no data here) is
  appended anyway and completes nothing (Kafka: "only emit CompletedTxn for non-empty
  transactions").
- The first unstable offset is the smallest first offset of an ongoing transaction or
  of a completed one whose marker is not yet below the high watermark (Kafka's
  ``unreplicatedTxns``: until the marker is replicated its outcome may still change with
  a new leader). The last stable offset (LSO) is min(first unstable offset, HW), the HW
  when there is none: read_committed consumers read below it.
- An aborted transaction is recorded as Kafka's AbortedTxn: (producer id, first offset,
  last offset = the marker's, last stable offset = the first offset of another
  producer's ongoing transaction when it completed, else marker + 1). A fetch of
  ``[start, end)`` gets every aborted transaction overlapping it: last offset >= start
  and first offset < end (Kafka's TransactionIndex.collectAbortedTxns, whose early stop
  at an entry with last stable offset >= end this keeps).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int            # the marker's offset
    aborted: bool


@dataclass(frozen=True)
class AbortedTxn:
    """Kafka's AbortedTxn: one entry of a ``.txnindex`` file."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnState:
    """The transactions of one partition."""

    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}                  # producer id -> first offset
        self.unreplicated: dict[int, CompletedTxn] = {}    # first offset -> completed txn
        self.coordinator_epochs: dict[int, int] = {}       # producer id -> its last marker's
        self.last_markers: dict[int, int] = {}             # producer id -> its last marker
        self.aborted: list[AbortedTxn] = []                # ascending last_offset
        self._aborted_last: list[int] = []                 # their last offsets (bisect)

    # ------------------------------------------------------------ feeding

    def data_batch(self, producer_id: int, base_offset: int) -> None:
        """A transactional data batch of ``producer_id`` at ``base_offset``."""
        assert producer_id >= 0 and base_offset >= 0, (producer_id, base_offset)
        first = self.ongoing.setdefault(producer_id, base_offset)
        assert first <= base_offset, (producer_id, first, base_offset)

    def marker(self, producer_id: int, commit: bool, coordinator_epoch: int,
               offset: int) -> CompletedTxn | None:
        """A COMMIT/ABORT marker of ``producer_id`` at ``offset``: the transaction it
        completes (its abort entry recorded), or None if none was open."""
        assert producer_id >= 0 and offset >= 0, (producer_id, offset)
        self.coordinator_epochs[producer_id] = coordinator_epoch
        self.last_markers[producer_id] = offset
        first = self.ongoing.pop(producer_id, None)
        if first is None:
            return None
        assert first <= offset, (producer_id, first, offset)
        done = CompletedTxn(producer_id, first, offset, not commit)
        self.unreplicated[first] = done
        if done.aborted:
            others = [f for f in self.ongoing.values()]
            lso = min(others) if others else offset + 1
            self.add_aborted(AbortedTxn(producer_id, first, offset, lso))
        return done

    def add_aborted(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction (a marker above, or a ``.txnindex`` entry read
        back): in marker order."""
        assert not self.aborted or entry.last_offset > self.aborted[-1].last_offset, \
            (entry, self.aborted[-1])
        self.aborted.append(entry)
        self._aborted_last.append(entry.last_offset)

    # ------------------------------------------------------------ queries

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The smallest first offset of an ongoing transaction or of a completed one
        whose marker is at or above ``high_watermark``; None if there is none.
        Forgets the completed transactions below ``high_watermark`` (it only rises,
        except at a truncation, after which the log rebuilds this state)."""
        for first in [f for f, t in self.unreplicated.items() if t.last_offset < high_watermark]:
            del self.unreplicated[first]
        candidates = list(self.ongoing.values()) + list(self.unreplicated)
        return min(candidates) if candidates else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def aborted_overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start, end)``."""
        found = []
        for entry in self.aborted[bisect.bisect_left(self._aborted_last, start):]:
            if entry.first_offset < end:
                found.append(entry)
            if entry.last_stable_offset >= end:
                break
        return found

    def forget_aborted_below(self, offset: int) -> None:
        """Drop the aborted entries wholly below ``offset`` (retention deleted them)."""
        keep = bisect.bisect_left(self._aborted_last, offset)
        del self.aborted[:keep]
        del self._aborted_last[:keep]

    # ------------------------------------------------------------ snapshots

    def to_json(self) -> dict:
        """What a producer snapshot carries (Kafka's: each producer's current
        transaction's first offset and last coordinator epoch; and its last marker's
        offset, which the cleaner keeps for the epoch it carries)."""
        return {"ongoing": sorted(self.ongoing.items()),
                "coordinator_epochs": sorted(self.coordinator_epochs.items()),
                "last_markers": sorted(self.last_markers.items())}

    @classmethod
    def from_json(cls, data: dict | None) -> "TxnState":
        """The inverse of ``to_json`` (None: an older snapshot, no transactions);
        ValueError if ``data`` is not one. Aborted entries come from the index files."""
        state = cls()
        if data is None:
            return state
        try:
            state.ongoing = {int(p): int(f) for p, f in data["ongoing"]}
            state.coordinator_epochs = {int(p): int(e) for p, e in data["coordinator_epochs"]}
            state.last_markers = {int(p): int(o) for p, o in data.get("last_markers", ())}
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"not a transaction-state snapshot: {e}") from None
        if any(p < 0 or f < 0 for p, f in state.ongoing.items()):
            raise ValueError("not a transaction-state snapshot: negative ids or offsets")
        return state

    def same_as(self, other: "TxnState", high_watermark: int) -> bool:
        """Equal as far as readers can tell (tests: a rebuild against the live state)."""
        return (self.ongoing == other.ongoing and self.aborted == other.aborted
                and self.coordinator_epochs == other.coordinator_epochs
                and self.last_stable_offset(high_watermark)
                == other.last_stable_offset(high_watermark))


# ---------------------------------------------------------------- a leader's checks
# Kafka's ProducerAppendInfo checks, for the leader before it appends (a follower
# appends what its leader wrote). The answers are Kafka's error names (node.wire maps).
INVALID_PRODUCER_EPOCH = "INVALID_PRODUCER_EPOCH"
TRANSACTION_COORDINATOR_FENCED = "TRANSACTION_COORDINATOR_FENCED"
INVALID_TXN_STATE = "INVALID_TXN_STATE"


def marker_problem(producer_epoch_now: int | None, txns: TxnState, producer_id: int,
                   producer_epoch: int, coordinator_epoch: int) -> str | None:
    """Why a WriteTxnMarkers marker must be refused, or None: an epoch older than the
    producer's (``producer_epoch_now``: the partition's, None if unknown) is
    INVALID_PRODUCER_EPOCH; a coordinator epoch older than the last marker's of this
    producer is TRANSACTION_COORDINATOR_FENCED (a zombie coordinator)."""
    if producer_epoch_now is not None and producer_epoch < producer_epoch_now:
        return INVALID_PRODUCER_EPOCH
    if coordinator_epoch < txns.coordinator_epochs.get(producer_id, coordinator_epoch):
        return TRANSACTION_COORDINATOR_FENCED
    return None


def data_problem(txns: TxnState, producer_id: int, transactional: bool) -> str | None:
    """A non-transactional batch of a producer whose transaction is open is
    INVALID_TXN_STATE (Kafka's appendDataBatch); else None."""
    if not transactional and producer_id in txns.ongoing:
        return INVALID_TXN_STATE
    return None
