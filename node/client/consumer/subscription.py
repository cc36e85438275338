"""Kafka's SubscriptionState: the assigned partitions and, per partition, its position
(with the leader epoch it was read in), what is buffered for it, and its reset and
validation states. A mixin of ``api.Consumer``.

Rules:
- ``position`` is the next offset ``poll`` returns, ``fetch_offset`` the next to ask
  for (the position plus what is buffered). Both None while ``reset`` is set: a
  ListOffsets (``offset_fetcher``) decides them.
- ``seek`` drops what was buffered, a corrupt batch and the KIP-320 state: a position
  set by ``seek`` or a reset has no epoch and is not validated.
- ``assign`` keeps the state of a partition that stays assigned.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

from node.client.types import TopicPartition
from node.wire import errors
from shm.batch import RecordBatch


@dataclass(frozen=True, eq=False)
class _Validation:
    """The context of an OffsetForLeaderEpoch in flight: {tp: (position, last fetched
    epoch, leader)} as asked, and when (monotonic s)."""
    asked: dict
    sent_s: float


class _PartitionState:
    __slots__ = ("tp", "position", "fetch_offset", "reset", "buffered", "buffered_bytes",
                 "paused_until_s", "paused_epoch", "high_watermark", "corrupt",
                 "position_epoch", "leader", "validating", "validation", "validation_retry_s",
                 "truncation", "hole_until", "last_stable_offset")

    def __init__(self, tp: TopicPartition, reset: str):
        self.tp = tp
        self.position: int | None = None
        # KIP-320: the leader epoch of the last batch consumed (None: unknown, e.g. after
        # a seek) and the (leader id, leader epoch) the position is known good with
        # (Kafka's FetchPosition.offsetEpoch and .currentLeader).
        self.position_epoch: int | None = None
        self.leader: tuple[int, int] | None = None
        self.validating = False  # AWAIT_VALIDATION: no fetch until OffsetForLeaderEpoch
        self.validation: _Validation | None = None  # its request in flight
        self.validation_retry_s = 0.0
        self.truncation: tuple[int, int | None] | None = None  # (position, divergent)
        self.fetch_offset: int | None = None
        self.reset: str | None = reset  # "earliest" | "latest" | None (position known)
        self.buffered: collections.deque = collections.deque()  # FetchedBatch
        self.buffered_bytes = 0
        self.paused_until_s = 0.0
        self.paused_epoch = -1  # leader epoch when a leadership error paused it
        self.high_watermark = -1
        self.last_stable_offset = -1   # the last fetch's LSO (-1: none told)
        # A corrupt batch at fetch_offset: raised once the position reaches it.
        self.corrupt: errors.KafkaError | None = None
        # The HW of a fetch answer that had no batch at or after fetch_offset although
        # fetch_offset < HW: offsets up to it are a hole (a compacted log), -1 otherwise.
        self.hole_until = -1

    def seek(self, offset: int) -> None:
        self.position = self.fetch_offset = offset
        self.reset = None
        self.buffered.clear()
        self.buffered_bytes = 0
        self.corrupt = None
        self.hole_until = -1
        self.position_epoch = self.leader = self.validation = self.truncation = None
        self.validating = False

    def consumed(self, batch: RecordBatch, next_offset: int) -> None:
        """The caller got records up to ``next_offset`` (exclusive), the last from ``batch``."""
        self.position = next_offset
        epoch = batch.header.partition_leader_epoch
        self.position_epoch = epoch if epoch >= 0 else None


def _tp(item) -> TopicPartition:
    if isinstance(item, TopicPartition):
        return item
    topic, partition = item
    return TopicPartition(str(topic), int(partition))


class SubscriptionState:
    """The assignment and the partitions' states (rules above; ``self._states``)."""

    # ------------------------------------------------------------- assignment
    def assign(self, partitions) -> None:
        if self._group is not None:
            raise RuntimeError("assign() after subscribe(): subscription to topics and "
                               "manual assignment are mutually exclusive")
        self._set_assignment(partitions)

    def _set_assignment(self, partitions) -> None:
        tps = [_tp(x) for x in partitions]
        old = self._states
        self._states = {tp: old.get(tp) or _PartitionState(tp, self._default_reset())
                        for tp in tps}
        self._metadata_wanted = True

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _default_reset(self) -> str:
        return "latest" if self.auto_offset_reset == "none" else self.auto_offset_reset

    def _state(self, tp) -> _PartitionState:
        tp = _tp(tp)
        state = self._states.get(tp)
        if state is None:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned")
        return state

    def seek(self, tp, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._state(tp).seek(int(offset))

    def seek_to_beginning(self, *tps) -> None:
        for tp in tps or list(self._states):
            self._mark_reset(self._state(tp), "earliest")

    def seek_to_end(self, *tps) -> None:
        for tp in tps or list(self._states):
            self._mark_reset(self._state(tp), "latest")

    @staticmethod
    def _mark_reset(state: _PartitionState, how: str) -> None:
        state.seek(0)
        state.position = state.fetch_offset = None
        state.reset = how

    def _pending_resets(self) -> bool:
        return any(s.reset is not None for s in self._states.values())
