"""KIP-320's position validation (Kafka's validatePositionsIfNeeded and its
OffsetsForLeaderEpochClient). A mixin of ``api.Consumer``; the decision itself is the
pure ``node.client.offset_validation``.

Rules:
- The position carries the leader epoch of the last batch consumed and the leader it is
  known good with. When metadata names another leader or a newer leader epoch, what was
  fetched from the old leader is dropped and a position whose epoch is known awaits
  validation: no Fetch until the new leader has answered OffsetForLeaderEpoch.
- An answer counts only if the position, its epoch and its leader are still the ones
  asked about. Every failure refreshes metadata and asks again after ``retry_backoff_ms``.
- A log truncated beneath the position moves it back to the first offset known to
  diverge (or resets it); with ``auto_offset_reset="none"`` every ``poll`` raises
  LogTruncationException until the caller seeks.
"""
from __future__ import annotations

import collections
import logging
import time

from node.client import offset_validation
from node.client.consumer.subscription import _PartitionState, _Validation
from node.client.types import TopicPartition
from node.wire import errors
from node.wire import protocol

log = logging.getLogger("minikafka.consumer")


class LogTruncationException(errors.OffsetOutOfRangeError):
    """KIP-320: the log a partition's position was on was truncated beneath it (a leader
    change left it past the new leader's copy) and ``auto_offset_reset`` is "none".
    ``offset_out_of_range_partitions`` {tp: position}; ``divergent_offsets`` {tp: first
    offset known to diverge}, missing where the leader could not tell. Raised by every
    ``poll`` until the caller seeks the partition (Kafka's LogTruncationException)."""

    def __init__(self, positions: dict, divergent_offsets: dict):
        def named(offsets: dict) -> str:
            return ", ".join(f"{tp.topic}-{tp.partition}={o}" for tp, o in offsets.items())
        super().__init__(f"truncated partitions detected with divergent offsets "
                         f"{{{named(divergent_offsets)}}} (positions {{{named(positions)}}}); "
                         f"seek to go on")
        self.offset_out_of_range_partitions = dict(positions)
        self.divergent_offsets = dict(divergent_offsets)


class PositionValidation:
    """Validation after a leader change (rules above; state: ``api.Consumer``)."""

    def _on_current_leader(self, state: _PartitionState) -> bool:
        """Kafka's maybeValidatePositionForCurrentLeader: True if ``state`` may be
        fetched from the leader metadata names. After a leader change what was fetched
        from the old leader is dropped, and a position whose epoch is known awaits
        validation (AWAIT_VALIDATION) before any fetch."""
        pm = self.meta.current.partition(*state.tp)
        if pm is not None and pm.leader >= 0 and state.position is not None and \
                state.corrupt is None and state.truncation is None and \
                state.leader != (pm.leader, pm.leader_epoch):
            if state.leader is not None:
                state.buffered.clear()
                state.buffered_bytes = 0
                state.fetch_offset = state.position
            state.leader = (pm.leader, pm.leader_epoch)
            state.validating = state.position_epoch is not None
            state.validation = None
            state.validation_retry_s = 0.0
        return not state.validating and state.truncation is None

    def _send_validations(self) -> None:
        """OffsetForLeaderEpoch to each new leader for the positions awaiting validation:
        the current leader epoch and the epoch of the last batch consumed."""
        now = time.monotonic()
        by_leader: dict[str, list[_PartitionState]] = collections.defaultdict(list)
        for state in self._states.values():
            self._on_current_leader(state)
            if not state.validating or state.validation is not None or \
                    state.truncation is not None or state.validation_retry_s > now:
                continue
            endpoint = self.meta.current.endpoint(state.leader[0])
            if endpoint is None:
                self._metadata_wanted = True
                continue
            by_leader[endpoint].append(state)
        for endpoint, group in by_leader.items():
            request = _Validation({s.tp: (s.position, s.position_epoch, s.leader)
                                   for s in group}, now)
            body = {"replica_id": protocol.CONSUMER_REPLICA_ID,
                    "partitions": [[s.tp.topic, s.tp.partition, s.leader[1], s.position_epoch]
                                   for s in group]}
            try:
                self.net.send(endpoint, protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH, body,
                              context=request, timeout_ms=self.request_timeout_ms)
            except errors.KafkaError as e:
                self._retry_validation(group, f"{endpoint}: {e}")
                continue
            for s in group:
                s.validation = request

    def _on_validation(self, c) -> None:
        request: _Validation = c.context
        mine = [s for tp in request.asked
                if (s := self._states.get(tp)) is not None and s.validation is request]
        for s in mine:
            s.validation = None
        if c.response is None:
            self._retry_validation(mine, c.error_message)
            return
        answered = set()
        try:
            entries = protocol.entries(c.response.body, "partitions", 5)
        except (protocol.ProtocolError, TypeError) as e:
            entries = []
            log.warning("malformed OffsetForLeaderEpoch answer from %s: %s", c.endpoint, e)
        for topic, partition, code, epoch, end_offset in entries:
            tp = TopicPartition(topic, partition)
            state = self._states.get(tp)
            if state not in mine or not state.validating or \
                    (state.position, state.position_epoch, state.leader) != request.asked[tp]:
                continue  # Kafka: "Skipping completed validation"
            answered.add(tp)
            if code:
                self._retry_validation([state], errors.NAMES.get(code, str(code)))
            elif not (isinstance(epoch, int) and isinstance(end_offset, int)):
                self._retry_validation([state], "malformed entry")
            else:
                self._complete_validation(state, epoch, end_offset)
        self._retry_validation([s for s in mine if s.tp not in answered and s.validating],
                               "no answer")

    def _retry_validation(self, states, why: str) -> None:
        """Kafka's OffsetsForLeaderEpochClient: every failure (FENCED_LEADER_EPOCH,
        UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, a lost connection...) refreshes
        metadata and asks again after ``retry_backoff_ms``."""
        if not states:
            return
        log.debug("validating the positions of %s failed (%s); retrying",
                  [f"{s.tp.topic}-{s.tp.partition}" for s in states], why)
        until = time.monotonic() + self.retry_backoff_s
        for state in states:
            state.validation_retry_s = until
        self._metadata_wanted = True

    def _complete_validation(self, state: _PartitionState, epoch: int, end_offset: int) -> None:
        tp, position = state.tp, state.position
        decision = offset_validation.complete_validation(
            position, state.position_epoch, epoch, end_offset,
            self.auto_offset_reset != "none")
        name = f"{tp.topic}-{tp.partition}"
        if isinstance(decision, offset_validation.Validated):
            state.validating = False
        elif isinstance(decision, offset_validation.SeekValidated):
            log.info("Truncation detected for partition %s at offset %d, resetting offset to "
                     "the first offset known to diverge %d", name, position, decision.offset)
            leader = state.leader
            state.seek(decision.offset)
            state.position_epoch, state.leader = decision.leader_epoch, leader
        elif isinstance(decision, offset_validation.ResetOffset):
            log.info("Truncation detected for partition %s at offset %d, resetting offset",
                     name, position)
            self._mark_reset(state, self.auto_offset_reset)
        else:
            log.warning("Truncation detected for partition %s at offset %d (the end offset "
                        "from the broker is %d in epoch %d), but no reset policy is set",
                        name, position, end_offset, epoch)
            state.truncation = (position, decision.divergent_offset)

    def _raise_truncations(self) -> None:
        truncated = [s for s in self._states.values() if s.truncation is not None]
        if truncated:
            raise LogTruncationException(
                {s.tp: s.truncation[0] for s in truncated},
                {s.tp: s.truncation[1] for s in truncated if s.truncation[1] is not None})
