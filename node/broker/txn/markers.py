"""The marker channel (Kafka's TransactionMarkerChannelManager and its completion
handler): for each ``MarkerRequest`` a TxnShard gives once its PrepareCommit/PrepareAbort
record is committed, a WriteTxnMarkers (native, api 27) goes to the leader of each of the
transaction's partitions, from the metadata cache, one request per leader; once every
partition has answered, ``TxnRuntime.markers_done`` hands the results to the shard, which
writes CompleteCommit/CompleteAbort.

Per partition answer (Kafka's rules):
- NONE: done;
- UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, and a lost or refused request: sent again
  after ``MARKER_RETRY_BACKOFF_MS`` to the partition's leader of the moment (so is a
  partition whose leader is unknown), until done or the coordinator is unloaded;
- INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: the transaction has moved on
  (a newer epoch or coordinator): sending stops, nothing is reported (as Kafka);
- UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: the partition is done (the
  producer could not have written to it);
- a partition of a topic the metadata no longer has (deleted) is done, reported
  UNKNOWN_TOPIC_OR_PARTITION;
- anything else is logged and retried (Kafka stops its broker: here the request is
  kept alive rather than lost).
A marker in flight to a broker that the metadata shows no longer leading its partition
is sent to the new leader at once (``leaders_changed``), rather than after the request's
timeout; an answer that comes back afterwards counts only if it is NONE.
"""
from __future__ import annotations

import dataclasses
import logging

from node.broker.loop import now_ms
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

logger = logging.getLogger("node.broker.server")

MARKER_RETRY_BACKOFF_MS = 100   # between a failed marker and its next attempt
# Retried partitions are logged at most this often per transaction (a leader that stays
# away retries every MARKER_RETRY_BACKOFF_MS).
MARKER_LOG_INTERVAL_MS = 5000

RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR})
STOP_SENDING = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH,
                          ErrorCode.TRANSACTION_COORDINATOR_FENCED})
SKIP_PARTITION = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                            ErrorCode.UNSUPPORTED_VERSION})


@dataclasses.dataclass(eq=False)
class PendingMarkers:
    """One MarkerRequest being delivered."""

    hosted: object                      # the shard_runtime.Hosted that asked
    marker: object                      # node.core.txn's MarkerRequest
    left: set                           # (topic, partition) not yet done
    results: dict = dataclasses.field(default_factory=dict)   # (topic, partition) -> code
    sent: dict = dataclasses.field(default_factory=dict)      # in flight: key -> leader
    timer: int | None = None
    stopped: bool = False
    attempts: int = 0
    logged_ms: int = -MARKER_LOG_INTERVAL_MS

    def alive(self) -> bool:
        return not self.stopped and not self.hosted.gone


class MarkerChannel:
    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.metadata = runtime.metadata
        self.replicas = runtime.replicas
        self.pending: set[PendingMarkers] = set()

    def outbound(self):
        return self.runtime.apis.outbound      # the broker's inter-broker requests

    def send(self, hosted, marker) -> None:
        partitions = {(t, int(p)) for t, p in marker.partitions}
        pending = PendingMarkers(hosted, marker, partitions)
        self.pending.add(pending)
        self._dispatch(pending)

    def _dispatch(self, pending: PendingMarkers) -> None:
        if not pending.alive():
            self.pending.discard(pending)
            return
        by_leader: dict[tuple[int, str], list] = {}
        unknown = []
        for key in sorted(pending.left - pending.sent.keys()):
            topic, partition = key
            if topic not in self.metadata.topics:
                logger.info("%s: %s-%d is gone (the topic was deleted): no marker there",
                            pending.marker.transactional_id, topic, partition)
                pending.results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                pending.left.discard(key)
                continue
            meta = self.metadata.partition(topic, partition)
            leader = -1 if meta is None else meta.leader
            endpoint = self.replicas.endpoint_of(leader) if leader >= 0 else None
            if endpoint is None:
                unknown.append(key)
                continue
            by_leader.setdefault((leader, endpoint), []).append(key)
        outbound = self.outbound()
        for (leader, endpoint), keys in by_leader.items():
            if outbound is None:
                unknown.extend(keys)
                continue
            pending.sent.update((key, leader) for key in keys)
            pending.attempts += 1
            outbound.send(endpoint, ApiKey.WRITE_TXN_MARKERS, self._body(pending.marker, keys),
                          lambda response, keys=keys, leader=leader:
                          self._answered(pending, leader, keys, response))
        if unknown:
            self._note(pending, unknown, "no leader known")
            self._retry_later(pending)
        self._maybe_done(pending)

    @staticmethod
    def _body(marker, keys) -> dict:
        topics: dict[str, list[int]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append(partition)
        return {"markers": [{
            "producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
            "transaction_result": bool(marker.commit),
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            "coordinator_epoch": marker.coordinator_epoch}]}

    def _answered(self, pending: PendingMarkers, leader: int, keys, response) -> None:
        current = [k for k in keys if pending.sent.get(k) == leader]
        for key in current:
            del pending.sent[key]
        if not pending.alive():
            self.pending.discard(pending)
            return
        codes = self._codes(keys, response)
        retry = []
        for key in keys:
            code = codes.get(key)
            if key not in pending.left:
                continue            # done meanwhile (an answer of its other leader)
            if key not in current:
                # sent again to a new leader meanwhile: this older answer counts only
                # if the marker made it (committed there, acks=all)
                if code == ErrorCode.NONE:
                    pending.results[key] = code
                    pending.left.discard(key)
                continue
            if code == ErrorCode.NONE or code in SKIP_PARTITION:
                pending.results[key] = code
                pending.left.discard(key)
            elif code in STOP_SENDING:
                logger.info("%s: the marker for %s-%d was refused with %s (producer %d "
                            "epoch %d, coordinator epoch %d): the transaction has moved on, "
                            "no more markers are sent", pending.marker.transactional_id,
                            key[0], key[1], ErrorCode(code).name,
                            pending.marker.producer_id, pending.marker.producer_epoch,
                            pending.marker.coordinator_epoch)
                pending.stopped = True
                self._cancel(pending)
                return
            else:
                retry.append((key, code))
        if retry:
            self._note(pending, [k for k, _ in retry],
                       f"broker {leader} answered " + ", ".join(sorted(
                           {"no answer" if c is None else _name(c) for _, c in retry})))
            self._retry_later(pending)
        self._maybe_done(pending)

    @staticmethod
    def _codes(keys, response) -> dict:
        """(topic, partition) -> error code from a WriteTxnMarkers answer (None: no
        answer for it)."""
        if response is None or not isinstance(response.body, dict):
            return {}
        out = {}
        for marker in response.body.get("markers") or ():
            for topic in marker.get("topics") or ():
                for part in topic.get("partitions") or ():
                    out[(topic.get("name"), part.get("partition_index"))] = \
                        part.get("error_code")
        if not out and response.body.get("error"):
            return {key: None for key in keys}
        return out

    def _note(self, pending: PendingMarkers, keys, why: str) -> None:
        now = now_ms()
        if now - pending.logged_ms < MARKER_LOG_INTERVAL_MS:
            return
        pending.logged_ms = now
        logger.info("%s: markers for %s not written yet (%s); retrying every %d ms",
                    pending.marker.transactional_id,
                    ", ".join(f"{t}-{p}" for t, p in keys[:5]) +
                    (f" and {len(keys) - 5} more" if len(keys) > 5 else ""),
                    why, MARKER_RETRY_BACKOFF_MS)

    def _retry_later(self, pending: PendingMarkers) -> None:
        if pending.timer is not None:
            return

        def again() -> None:
            pending.timer = None
            self._dispatch(pending)
        pending.timer = self.loop.call_later(MARKER_RETRY_BACKOFF_MS, again)

    def _cancel(self, pending: PendingMarkers) -> None:
        self.loop.cancel(pending.timer)
        pending.timer = None
        self.pending.discard(pending)

    def _maybe_done(self, pending: PendingMarkers) -> None:
        if pending.left or not pending.alive() or pending not in self.pending:
            return
        pending.stopped = True      # answers still in flight (a re-sent marker's) are ignored
        self._cancel(pending)
        self.runtime.markers_done(pending.hosted, pending.marker, dict(pending.results))

    def leaders_changed(self) -> None:
        """The metadata changed: a marker in flight to a broker that no longer leads its
        partition goes to the new leader now (not after request.timeout.ms); writing
        it twice is harmless (a marker closes nothing the second time)."""
        for pending in list(self.pending):
            moved = [key for key, leader in pending.sent.items()
                     if self._leader(key) not in (None, leader)]
            if not moved:
                continue
            for key in moved:
                del pending.sent[key]
            self._dispatch(pending)

    def _leader(self, key) -> int | None:
        meta = self.metadata.partition(*key)
        return None if meta is None or meta.leader < 0 else meta.leader

    def unloaded(self, hosted) -> None:
        """A partition unloaded: its deliveries stop (the next coordinator resumes them
        from the log)."""
        for pending in [p for p in self.pending if p.hosted is hosted]:
            self._cancel(pending)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
