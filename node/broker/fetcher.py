"""Follower fetchers: the broker's copies of Kafka's ReplicaFetcherThread, on the loop.

One fetch session per leader broker: at most one outstanding Fetch per leader, carrying
every partition this broker follows from it (those whose core says where to fetch:
``ReplicaCore.fetch_state``), with ``replica_id`` = this broker and ``max_wait_ms`` =
``replica.fetch.wait.max.ms``. The leader parks the fetch until there are new bytes or
the wait expires, so an idle follower costs one request per wait interval.

A response's batches are appended with ``Log.append_as_follower`` only if the partition
is still where the request left it (same leader, leader epoch and fetch offset: a
LeaderAndIsr or a truncation in between makes the answer stale), then
``core.on_fetch_response`` runs and its effects are performed by the broker. After a
clean response (no partition error) the next Fetch goes out right after the appends,
before that bookkeeping: it is what lets the leader advance its HW. A partition
that got an error backs off ``replica.fetch.backoff.ms`` (Kafka's delay on partition
errors); a lost or timed-out request backs the whole leader off the same way.

OffsetForLeaderEpoch requests (the core's ``SendOffsetForLeaderEpoch``) go to the leader
on the same channel; the answer, or REQUEST_TIMED_OUT, goes to
``core.on_offset_for_leader_epoch``.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from node.wire import errors
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.broker.loop import Outbound, now_ms
from node.core.replication import SendOffsetForLeaderEpoch
from shm.batch import CorruptRecordError
from shm.errors import LogError

if TYPE_CHECKING:
    from node.broker.replica_manager import Partition, ReplicaManager

logger = logging.getLogger("node.broker.server")
# A Fetch answer's partition entry (node.wire.protocol): topic, partition, error, HW, log
# start, LEO, last stable offset, aborted transactions.
FETCH_ENTRY_FIELDS = 8
@dataclass
class _Session:
    leader: int
    endpoint: str
    correlation_id: int | None = None      # the outstanding Fetch, if any
    sent: dict = field(default_factory=dict)  # (topic, partition) -> (epoch, fetch offset)
    backoff_until_ms: int = 0


class ReplicaFetcherManager:
    def __init__(self, replicas: "ReplicaManager", outbound: Outbound) -> None:
        self.replicas = replicas
        self.outbound = outbound
        self.config = replicas.config
        self.sessions: dict[int, _Session] = {}
        # leader id -> partition keys this broker follows from it
        self.following: dict[int, set[tuple[str, int]]] = {}
        # replica.transport=shm: node.broker.shm_replication.ShmReplication, set by the
        # broker; the partitions it serves are not fetched.
        self.shm = None

    # ---- membership ----------------------------------------------------------------------

    def follow(self, key: tuple[str, int], leader: int) -> None:
        """Fetch ``key`` from ``leader`` (after a LeaderAndIsr). An outstanding fetch to
        that leader is abandoned, so the partition's new state is fetched at once instead
        of after the leader's long poll (and a restarted leader that lost the request
        does not stall its followers until the request times out)."""
        self.unfollow(key)
        if self.shm is not None:
            self.shm.follow(key, leader)
        if leader >= 0:
            self.following.setdefault(leader, set()).add(key)
            session = self.sessions.get(leader)
            if session is not None and session.correlation_id is not None:
                self.outbound.cancel(session.endpoint, session.correlation_id)
                session.correlation_id = None

    def unfollow(self, key: tuple[str, int]) -> None:
        if self.shm is not None:
            self.shm.unfollow(key)
        for leader, keys in list(self.following.items()):
            if key in keys:
                keys.discard(key)
                if not keys:
                    del self.following[leader]
                    self._drop_session(leader)

    def _drop_session(self, leader: int) -> None:
        session = self.sessions.pop(leader, None)
        if session is not None and session.correlation_id is not None:
            self.outbound.cancel(session.endpoint, session.correlation_id)

    def _session(self, leader: int) -> _Session | None:
        endpoint = self.replicas.endpoint_of(leader)
        if endpoint is None:
            return None
        session = self.sessions.get(leader)
        if session is not None and session.endpoint != endpoint:
            self._drop_session(leader)   # the leader came back on another port
            self.outbound.close_channel(session.endpoint)
            session = None
        if session is None:
            session = self.sessions[leader] = _Session(leader, endpoint)
        return session

    # ---- fetching ------------------------------------------------------------------------

    def maybe_fetch(self) -> None:
        """Send a Fetch to every leader that has none outstanding and work to do."""
        now = now_ms()
        for leader, keys in self.following.items():
            session = self._session(leader)
            if session is None or session.correlation_id is not None or \
                    now < session.backoff_until_ms:
                continue
            self._fetch(session, keys, now)

    def _fetch(self, session: _Session, keys, now: int, trace: list | None = None) -> None:
        leader = session.leader
        entries, sent = [], {}
        partitions = self.replicas.partitions
        fetch_max_bytes = self.config.replica_fetch_max_bytes
        serving = self.shm.serving if self.shm is not None else ()
        for key in keys:
            part = partitions.get(key)
            if part is None or now < part.fetch_backoff_until_ms or key in serving:
                continue
            state = part.core.fetch_state(part.view)
            if state is None or state.leader != leader:
                continue
            entries.append([key[0], key[1], state.fetch_offset, state.leader_epoch,
                            fetch_max_bytes])
            sent[key] = (state.leader_epoch, state.fetch_offset)
        if not entries:
            return
        body = {"replica_id": self.replicas.broker_id,
                "max_wait_ms": self.config.replica_fetch_wait_max_ms,
                "min_bytes": self.config.replica_fetch_min_bytes,
                "max_bytes": self.config.replica_fetch_response_max_bytes,
                "partitions": entries}
        session.sent = sent
        if trace:
            # The leader's trace marks of the last response, with this follower's
            # stamps: [topic, partition, offset, answered, received, appended, sent].
            sent_ns = time.monotonic_ns()
            body["trace"] = [[*mark, sent_ns] for mark in trace]
        timeout = self.config.replica_fetch_wait_max_ms + self.config.request_timeout_ms
        session.correlation_id = self.outbound.send(
            session.endpoint, protocol.ApiKey.FETCH, body,
            lambda response, s=session: self._on_fetch_response(s, response),
            timeout_ms=timeout)
        if session.correlation_id is None:
            session.backoff_until_ms = now + self.config.replica_fetch_backoff_ms

    def _on_fetch_response(self, session: _Session, response: protocol.Response | None) -> None:
        session.correlation_id = None
        if self.sessions.get(session.leader) is not session:
            return  # the session was dropped while the request was out
        now = now_ms()
        if response is None:
            logger.warning("fetch from broker %d (%s) got no response", session.leader,
                           session.endpoint)
            session.backoff_until_ms = now + self.config.replica_fetch_backoff_ms
            return
        trace = None
        if "trace" in response.body:
            trace = _trace_marks(response.body["trace"], time.monotonic_ns())
        try:
            # (a consumer's fields: ..., log_end_offset, last_stable_offset, aborted)
            entries = protocol.entries(response.body, "partitions", FETCH_ENTRY_FIELDS)
        except protocol.ProtocolError as e:
            logger.warning("malformed fetch response from broker %d: %s", session.leader, e)
            session.backoff_until_ms = now + self.config.replica_fetch_backoff_ms
            return
        appended, clean = self._append_fetched(session, entries, response.frames, now)
        if trace:
            appended_ns = time.monotonic_ns()
            for mark in trace:
                mark.append(appended_ns)
        if clean:
            # The next fetch is what lets the leader advance its HW (acks=all waits for
            # it): send it before the bookkeeping. Only HW updates are left to do, and
            # they never change where this follower fetches from.
            keys = self.following.get(session.leader)
            if keys and self._session(session.leader) is session:
                self._fetch(session, keys, now, trace)
        for part, error, hw, log_start, leo in appended:
            effects = part.core.on_fetch_response(
                error=error, leader_high_watermark=hw, leader_log_start_offset=log_start,
                leader_log_end_offset=leo, now_ms=now, log=part.view)
            self.replicas.apply_effects(part, effects)
            if error:
                logger.info("%s-%d: fetch from broker %d: %s", part.topic, part.partition,
                            session.leader, errors.name_of(error))
                part.fetch_backoff_until_ms = now + self.config.replica_fetch_backoff_ms

    def _append_fetched(self, session: _Session, entries: list, frames, now: int
                        ) -> tuple[list, bool]:
        """Append every fresh partition's batches; the partitions whose core must hear
        the response, and whether the response was clean (no error, no failed append:
        the fetch offsets are final, so the next fetch may go out at once)."""
        appended, clean = [], True
        for i, entry in enumerate(entries):
            topic, partition, error, hw, log_start, leo = entry[:6]   # (LSO, aborted: unused)
            key = (topic, partition)
            expected = session.sent.get(key)
            part = self.replicas.partitions.get(key)
            if expected is None or part is None:
                continue
            state = part.core.fetch_state(part.view)
            if state is None or (state.leader, state.leader_epoch, state.fetch_offset) != \
                    (session.leader, *expected):
                continue  # stale: a LeaderAndIsr or a truncation happened meanwhile
            if error:
                clean = False
            else:
                data = frames[i] if i < len(frames) else b""
                data = data.buffer if hasattr(data, "buffer") else memoryview(data)
                if len(data):
                    try:
                        part.log.append_as_follower(data)
                    except OSError as e:        # a full or failing disk
                        self.replicas.storage_failed(part, e)
                        clean = False
                        continue
                    except (CorruptRecordError, LogError, ValueError) as e:
                        logger.error("%s-%d: cannot append fetched data from broker %d: %s",
                                     topic, partition, session.leader, e)
                        part.fetch_backoff_until_ms = \
                            now + self.config.replica_fetch_backoff_ms
                        clean = False
                        continue
            appended.append((part, error, hw, log_start, leo))
        return appended, clean

    # ---- OffsetForLeaderEpoch ----------------------------------------------------------------

    def send_offset_for_leader_epoch(self, part: "Partition",
                                     effect: SendOffsetForLeaderEpoch) -> None:
        key = (part.topic, part.partition)
        endpoint = self.replicas.endpoint_of(effect.leader)

        def answer(response: protocol.Response | None) -> None:
            if self.replicas.partitions.get(key) is not part:
                return
            error, epoch, end_offset = ErrorCode.REQUEST_TIMED_OUT, protocol.UNDEFINED_EPOCH, \
                protocol.UNDEFINED_EPOCH_OFFSET
            if response is not None:
                try:
                    entry = protocol.entries(response.body, "partitions", 5)[0]
                    error, epoch, end_offset = entry[2], entry[3], entry[4]
                except (protocol.ProtocolError, IndexError):
                    error = ErrorCode.UNKNOWN_SERVER_ERROR
            effects = part.core.on_offset_for_leader_epoch(
                error=error, leader_epoch=epoch, end_offset=end_offset, now_ms=now_ms(),
                log=part.view)
            self.replicas.apply_effects(part, effects)
            self.replicas.mark_dirty(part)

        if endpoint is None:
            self.replicas.loop.post(lambda: answer(None))
            return
        body = {"replica_id": self.replicas.broker_id,
                "partitions": [[part.topic, part.partition, effect.current_leader_epoch,
                                effect.leader_epoch]]}
        self.outbound.send(endpoint, protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH, body, answer)

    def close(self) -> None:
        for leader in list(self.sessions):
            self._drop_session(leader)
        self.following.clear()


def _trace_marks(value, received_ns: int) -> list:
    """A fetch response's trace marks [topic, partition, offset, answered ns] with this
    follower's receive stamp added; malformed marks are dropped."""
    if not isinstance(value, list):
        return []
    return [[*mark, received_ns] for mark in value
            if isinstance(mark, list) and len(mark) == 4]
