"""The consumer: manual assignment or a group, fetch pipelining, leader following. One
thread.

Groups (``group_id=``, then ``subscribe``): the Kafka paper's consumer groups, in the
coordinator as Kafka 0.8 kept them (``node.client.group``, its rebalance decided by
``node.core.group``). The rebalance runs inside ``poll``/``commit``/``close``, in the
caller's thread; a member that stops polling holds its partitions until its session
ends (Kafka 0.8's consumer rebalanced on a thread of its own; Kafka's current consumer
also rebalances in ``poll``). The coordinator's address comes from ``zookeeper_connect``
or, as a Kafka client would ask for a broker config, from a broker's DescribeConfigs
(``zookeeper.connect``). Committed offsets are the next offsets to read; a member that
joins reads from them, or from ``auto_offset_reset`` where there are none; with
``enable_auto_commit`` the positions are committed every ``auto_commit_interval_ms``,
before each rebalance and on ``close``, so a record is never skipped: what a member
had not committed when it died is read again by the next owner (at least once).

Theory of operation (Kafka's Fetcher, without groups):

- Per assigned partition the consumer keeps ``position`` (the next offset ``poll``
  returns) and ``fetch_offset`` (the next offset to ask for: position plus what is
  buffered). A partition whose position is unknown (just assigned, ``seek_to_*``, or
  ErrorCode.OFFSET_OUT_OF_RANGE) is reset with ListOffsets (earliest -2 / latest -1) first.
- At most one Fetch is in flight per leader broker; it carries every fetchable
  partition that broker leads, with ``current_leader_epoch`` from metadata (KIP-320),
  so a stale leader answers FENCED_LEADER_EPOCH instead of serving a diverged log.
  The next Fetch goes out as soon as the previous answer is buffered — before the
  records are handed to the caller — so fetching overlaps processing.
- A response entry is applied only if the partition is still assigned and its
  fetch_offset is still the one asked for (a ``seek`` in between makes it stale).
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
  UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE and lost connections refresh
  metadata (after ``retry_backoff_ms``) and fetch from the new leader; ErrorCode.OFFSET_OUT_OF_RANGE
  applies ``auto_offset_reset`` ("earliest", "latest", or "none" = raise).
- KIP-320: the position carries the leader epoch of the last batch consumed and the
  leader it is known good with. When metadata names another leader or a newer leader
  epoch, what was fetched from the old leader is dropped and the partition awaits
  validation: no Fetch until the new leader has answered OffsetForLeaderEpoch (current
  leader epoch, last consumed epoch) and ``node.client.offset_validation`` has judged
  the answer. A log truncated beneath the position (an unclean election, a deposed
  leader's tail) moves the position back to the first offset known to diverge, logged
  as Kafka's "Truncation detected for partition ..."; with ``auto_offset_reset="none"``
  every ``poll`` raises LogTruncationException (an OffsetOutOfRangeError carrying the
  divergent offsets) until the caller seeks. Failed validations refresh metadata and
  are retried. A position set by ``seek`` or a reset has no epoch and is not validated
  (as in Kafka; committed offsets carry no epoch here).
- A fetched region may start inside a batch (records before the position are skipped)
  and may end with a partial batch (ignored; fetched again).
- A corrupt batch (bad header, wrong CRC, or no whole batch at the fetch offset although
  the broker always sends at least one) is not skipped silently: the valid batches before
  it are delivered first, then ``poll`` raises CorruptMessageError naming the partition
  and the offset, and keeps raising until the caller seeks past it (Kafka's behaviour).

``poll()`` returns ConsumerRecord tuples (per-record Python work); ``poll_batches()``
returns the parsed batches themselves (``FetchedBatch``), for the perf tool.

``key_deserializer`` / ``value_deserializer`` (kafka-python's names) are applied by
``poll``. A record that cannot be deserialized is not skipped: the records before it are
returned, the partition's position stays on it, and the next ``poll`` raises the
deserializer's error naming the partition and offset until the caller seeks past it
(Kafka's RecordDeserializationException).
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import time
from dataclasses import dataclass

from node.wire import errors as E
from node.wire.errors import ErrorCode
from node.wire import protocol as P
from node.client.metadata import MetadataFetcher, parse_bootstrap
from node.client.network import Network
from node.client import offset_validation as V
from node.client.types import (METADATA_STALE_CODES, ConsumerRecord, KafkaTimeoutError,
                               TopicPartition, error)
from shm.batch import (HEADER_BYTES, LENGTH_OVERHEAD_BYTES, CorruptRecordError,
                       RecordBatch, parse_batch, read_header)

log = logging.getLogger("minikafka.consumer")

FETCH_MAX_BYTES = 50 * 1024 * 1024  # fetch.max.bytes
# A fetch unanswered this long after its max wait makes the consumer check metadata:
# if the leader moved, the partition is fetched from the new leader without waiting
# for the request timeout of the old one (a SIGSTOPped broker keeps its connection).
FETCH_SUSPECT_MS = 1000
_client_ids = itertools.count(1)


@dataclass(frozen=True)
class FetchedBatch:
    """A batch as ``poll_batches`` returns it: records ``skip..record_count-1`` are new."""

    topic: str
    partition: int
    batch: RecordBatch
    skip: int  # records before the consumer's position

    @property
    def record_count(self) -> int:
        return self.batch.record_count - self.skip

    @property
    def first_offset(self) -> int:
        return self.batch.base_offset + self.skip

    @property
    def next_offset(self) -> int:
        return self.batch.header.next_offset

    def records(self) -> list[ConsumerRecord]:
        b = self.batch
        offsets = b.offsets.tolist()[self.skip:]
        timestamps = b.timestamps.tolist()[self.skip:]
        keys = b.keys.to_pylist()[self.skip:]
        values = b.values.to_pylist()[self.skip:]
        t, p = self.topic, self.partition
        return [ConsumerRecord(t, p, o, ts, k, v)
                for o, ts, k, v in zip(offsets, timestamps, keys, values)]


class NoOffsetForPartitionError(RuntimeError):
    """A group member got a partition with no committed offset and no reset policy."""


GROUP_STEP_MS = 50     # the longest a poll waits on the network before a group step


class _Listener:
    """The application's rebalance listener, its callbacks optional."""

    def __init__(self, listener):
        self.listener = listener

    def on_partitions_revoked(self, tps) -> None:
        if self.listener is not None and hasattr(self.listener, "on_partitions_revoked"):
            self.listener.on_partitions_revoked(tps)

    def on_partitions_assigned(self, tps) -> None:
        if self.listener is not None and hasattr(self.listener, "on_partitions_assigned"):
            self.listener.on_partitions_assigned(tps)


OffsetAndTimestamp = collections.namedtuple("OffsetAndTimestamp", "offset timestamp")


class DeserializationError(ValueError):
    """A record the consumer's deserializer refused (``tp``, ``offset``)."""

    def __init__(self, message: str, tp, offset: int):
        super().__init__(message)
        self.tp = tp
        self.offset = offset


class LogTruncationException(E.OffsetOutOfRangeError):
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
                 "truncation")

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
        # A corrupt batch at fetch_offset: raised once the position reaches it.
        self.corrupt: E.KafkaError | None = None

    def seek(self, offset: int) -> None:
        self.position = self.fetch_offset = offset
        self.reset = None
        self.buffered.clear()
        self.buffered_bytes = 0
        self.corrupt = None
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


class Consumer:
    """A consumer of assigned partitions (``assign``), or a member of a consumer group
    (``group_id`` and ``subscribe``; see the module docstring)."""

    def __init__(self, bootstrap_servers="127.0.0.1:9092", *, auto_offset_reset: str = "latest",
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = FETCH_MAX_BYTES,
                 max_partition_fetch_bytes: int = 1024 * 1024, max_poll_records: int = 500,
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 100,
                 metadata_backoff_ms: int | None = None, check_crcs: bool = True,
                 client_id: str | None = None, key_deserializer=None,
                 value_deserializer=None, group_id: str | None = None,
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 zookeeper_connect: str | None = None, session_timeout_ms: int = 6000,
                 rebalance_backoff_ms: int = 250):
        if group_id is not None:
            from node.client.group import check_group_id
            check_group_id(group_id)
        if auto_commit_interval_ms < 1 or session_timeout_ms < 1 or rebalance_backoff_ms < 0:
            raise ValueError("group configs out of range")
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.zookeeper_connect = zookeeper_connect
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_backoff_ms = rebalance_backoff_ms
        self._group = None
        self._next_auto_commit = 0.0
        self._commit_pool = None
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, "
                             f"got {auto_offset_reset!r}")
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id or f"consumer-{os.getpid()}-{next(_client_ids)}"
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.metadata_backoff_s = (retry_backoff_ms if metadata_backoff_ms is None
                                   else metadata_backoff_ms) / 1000
        self.check_crcs = check_crcs
        self.net = Network(self.client_id, request_timeout_ms)
        self.meta = MetadataFetcher(self.net, self.bootstrap, request_timeout_ms)
        self._states: dict[TopicPartition, _PartitionState] = {}
        # leader endpoint -> ({tp: (fetch_offset, leader) asked}, monotonic time sent)
        self._fetches: dict[str, tuple[dict, float]] = {}
        self._metadata_wanted = True
        self._metadata_next_s = 0.0
        self._rotation = 0
        self._fetch_suspect_s = (fetch_max_wait_ms + FETCH_SUSPECT_MS) / 1000
        self._closed = False

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

    # ------------------------------------------------------------- groups
    def subscribe(self, topics=(), pattern: str | None = None, listener=None) -> None:
        """Join ``group_id`` for ``topics`` (or every topic matching the regular
        expression ``pattern``); ``listener`` may have ``on_partitions_revoked(tps)``
        and ``on_partitions_assigned(tps)``. The assignment follows in ``poll``."""
        if self.group_id is None:
            raise RuntimeError("subscribe() needs a group_id")
        if self._group is None:
            if self._states:
                raise RuntimeError("subscribe() after assign(): subscription to topics "
                                   "and manual assignment are mutually exclusive")
            from node.client.group import GroupMember
            self._group = GroupMember(
                self, self.group_id, self._coordinator_address(), client_id=self.client_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_backoff_ms=self.rebalance_backoff_ms,
                auto_commit=self.enable_auto_commit)
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        if isinstance(topics, str):
            topics = [topics]
        self._group.subscribe(topics, pattern, _Listener(listener))

    def _coordinator_address(self) -> str:
        if self.zookeeper_connect:
            return self.zookeeper_connect
        from node.client.admin import Admin
        with Admin(self.bootstrap, request_timeout_ms=self.request_timeout_ms,
                   client_id=self.client_id) as admin:
            _, configs = admin.describe_broker_config()
        self.zookeeper_connect = configs["zookeeper.connect"]
        return self.zookeeper_connect

    def subscription(self) -> set[str] | None:
        if self._group is None or self._group.subscription is None:
            return None
        return set(self._group.subscription.topics) or {self._group.subscription.pattern}

    def member_id(self) -> str | None:
        return None if self._group is None else self._group.member_id

    def commit(self, offsets: dict | None = None) -> dict:
        """Write the committed offsets (the next offsets to read): ``offsets`` {tp:
        offset} or, by default, the position of every assigned partition. Only the
        partitions this member owns are written; returns those."""
        group = self._need_group("commit")
        group.step()
        return group.commit_offsets(self._commit_map(offsets))

    def commit_async(self, offsets: dict | None = None, callback=None):
        """``commit`` on a helper thread, in order; returns a Future of the written
        offsets, and calls ``callback(offsets, exception)`` when done."""
        import concurrent.futures
        group = self._need_group("commit_async")
        wanted = self._commit_map(offsets)
        if self._commit_pool is None:
            self._commit_pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"{self.client_id}-commit")
        future = self._commit_pool.submit(group.commit_offsets, wanted)
        if callback is not None:
            future.add_done_callback(lambda f: callback(
                wanted, f.exception() if not f.cancelled() else None))
        return future

    def committed(self, tp) -> int | None:
        """The group's committed offset of ``tp`` (None if there is none)."""
        tp = _tp(tp)
        return self._need_group("committed").committed_offsets([tp]).get(
            (tp.topic, tp.partition))

    def _need_group(self, what: str):
        if self._group is None:
            raise RuntimeError(f"{what}() needs a group_id and subscribe()")
        return self._group

    def _commit_map(self, offsets: dict | None) -> dict:
        if offsets is None:
            return self._group_positions(self._states)
        return {(tp[0], tp[1]): getattr(o, "offset", o) for tp, o in
                ((_tp(k), v) for k, v in offsets.items())}

    # The group's hooks (node.client.group calls them in this thread).
    def _group_revoke(self, partitions) -> None:
        gone = {_tp(tp) for tp in partitions}
        self._set_assignment([tp for tp in self._states if tp not in gone])

    def _group_assign(self, partitions, committed: dict) -> None:
        self._set_assignment(list(self._states) + [_tp(tp) for tp in sorted(partitions)])
        for tp in partitions:
            offset = committed.get(tuple(tp))
            if offset is not None:
                self.seek(tp, offset)
            elif self.auto_offset_reset == "none":
                raise NoOffsetForPartitionError(
                    f"no committed offset for {tp[0]}-{tp[1]} in group {self.group_id} "
                    f"and auto_offset_reset is none")

    def _group_positions(self, partitions) -> dict:
        out = {}
        for tp in partitions:
            state = self._states.get(_tp(tp))
            if state is not None and state.position is not None:
                out[(state.tp.topic, state.tp.partition)] = state.position
        return out

    def _group_step(self) -> None:
        group = self._group
        if group is None:
            return
        group.step()
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
            positions = self._group_positions(self._states)
            if positions and group.stable:
                try:
                    group.commit_offsets(positions)
                except Exception as e:   # the coordinator is away: the next one will do
                    log.warning("auto-commit of group %s failed: %s", self.group_id, e)

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

    def position(self, tp, timeout_ms: int | None = None) -> int:
        """The offset of the next record ``poll`` returns (resolving a reset if needed)."""
        state = self._state(tp)
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        while state.position is None:
            self._update_metadata_if_needed(deadline)
            self._resolve_resets(deadline)
            if state.position is None:
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"position of {tp} not known in time")
                time.sleep(self.retry_backoff_s)
        return state.position

    def highwater(self, tp) -> int:
        """The last high watermark a fetch of ``tp`` reported (-1 before any)."""
        return self._state(tp).high_watermark

    def beginning_offsets(self, tps, timeout_ms: int | None = None) -> dict:
        return self._list_offsets([_tp(t) for t in tps], P.EARLIEST_TIMESTAMP, timeout_ms)

    def end_offsets(self, tps, timeout_ms: int | None = None) -> dict:
        return self._list_offsets([_tp(t) for t in tps], P.LATEST_TIMESTAMP, timeout_ms)

    def offsets_for_times(self, timestamps: dict, timeout_ms: int | None = None) -> dict:
        """{tp: OffsetAndTimestamp(offset, timestamp) or None}: for each partition the
        first record whose timestamp is at or after the given one (ms), with that
        record's own timestamp; None when every record is older (kafka-python's)."""
        out = {}
        by_time: dict[int, list] = collections.defaultdict(list)
        for tp, ms in timestamps.items():
            if not isinstance(ms, int) or ms < 0:
                raise ValueError(f"timestamps must be non-negative ms, got {ms!r} for {tp}")
            by_time[ms].append(_tp(tp))
        for ms, tps in by_time.items():
            found = self._list_offsets(tps, ms, timeout_ms, with_timestamps=True)
            for tp, entry in found.items():
                out[tp] = None if entry is None or entry[1] < 0 else \
                    OffsetAndTimestamp(entry[1], entry[0])
        return out

    # ------------------------------------------------------------- polling
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records after each partition's position, up to ``max_records``; waits up to
        ``timeout_ms`` when nothing is buffered."""
        limit = max_records or self.max_poll_records
        out: list[ConsumerRecord] = []
        if self._poll(timeout_ms):
            states = list(self._states.values())
            start = self._rotation % len(states)
            self._rotation += 1
            for state in states[start:] + states[:start]:
                if not state.buffered and state.corrupt is not None:
                    if not out:
                        raise state.corrupt     # every record before it is delivered
                    continue                    # raised by the next poll
                while state.buffered and len(out) < limit:
                    fetched = state.buffered.popleft()
                    state.buffered_bytes -= fetched.batch.size_bytes
                    records = fetched.records()
                    room = limit - len(out)
                    if len(records) > room:  # give the rest back, at the front
                        records = records[:room]
                        state.buffered.appendleft(FetchedBatch(
                            fetched.topic, fetched.partition, fetched.batch,
                            fetched.skip + room))
                        state.buffered_bytes += fetched.batch.size_bytes
                    out += records
                    state.consumed(fetched.batch, records[-1].offset + 1)
        self._send_fetches()
        if out and (self.key_deserializer or self.value_deserializer):
            out = self._deserialized(out)
        return out

    def _deserialized(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        keys, values = self.key_deserializer, self.value_deserializer
        out = []
        for i, r in enumerate(records):
            try:
                out.append(r._replace(
                    key=keys(r.key) if keys and r.key is not None else r.key,
                    value=values(r.value) if values and r.value is not None else r.value))
            except Exception as e:
                # Every partition goes back to its first record not returned.
                rewind: dict = {}
                for later in records[i:]:
                    rewind.setdefault((later.topic, later.partition), later.offset)
                for tp, offset in rewind.items():
                    self._state(tp).seek(offset)
                if out:
                    return out
                raise DeserializationError(
                    f"cannot deserialize the record at {r.topic}-{r.partition} offset "
                    f"{r.offset} ({type(e).__name__}: {e}); seek past it to go on",
                    TopicPartition(r.topic, r.partition), r.offset) from e
        return out

    def poll_batches(self, timeout_ms: int = 0) -> list[FetchedBatch]:
        """Every buffered batch (whole batches, no per-record work)."""
        out = []
        if self._poll(timeout_ms):
            for state in self._states.values():
                if not state.buffered and state.corrupt is not None and not out:
                    raise state.corrupt
                while state.buffered:
                    fetched = state.buffered.popleft()
                    state.consumed(fetched.batch, fetched.next_offset)
                    out.append(fetched)
                state.buffered_bytes = 0
        self._send_fetches()
        return out

    def _poll(self, timeout_ms: int) -> bool:
        """Fetch until something is buffered or timeout_ms passes; True if buffered."""
        if self._closed:
            raise RuntimeError("poll() on a closed consumer")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            self._group_step()
            self._update_metadata_if_needed(deadline)
            self._resolve_resets(deadline)
            self._send_validations()
            self._raise_truncations()
            self._send_fetches()
            if any(s.buffered or s.corrupt is not None for s in self._states.values()):
                return True
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0:
                return False
            now = time.monotonic()
            if any(now - sent_s > self._fetch_suspect_s for _, sent_s in self._fetches.values()) \
                    or any(s.validation is not None and
                           now - s.validation.sent_s > self._fetch_suspect_s
                           for s in self._states.values()):
                self._metadata_wanted = True  # a silent leader (paused?): did it move?
            busy = self._metadata_wanted or self._pending_resets() or any(
                s.paused_until_s > now or s.validating for s in self._states.values())
            wait_ms = min(remaining_ms, 100) if busy else remaining_ms
            if self._group is not None:
                wait_ms = min(wait_ms, GROUP_STEP_MS)   # watches are seen in poll
            completions, _ = self.net.poll(wait_ms)
            for c in completions:
                if isinstance(c.context, _Validation):
                    self._on_validation(c)
                else:
                    self._on_fetch(c)

    def _pending_resets(self) -> bool:
        return any(s.reset is not None for s in self._states.values())

    # ------------------------------------------------------------- metadata & resets
    def _update_metadata_if_needed(self, deadline: float) -> None:
        now = time.monotonic()
        if not self._states or not self._metadata_wanted or now < self._metadata_next_s:
            return
        self._metadata_next_s = now + self.metadata_backoff_s
        topics = sorted({tp.topic for tp in self._states})
        timeout_ms = int(max(100.0, min(self.request_timeout_ms, (deadline - now) * 1000)))
        try:
            md = self.meta.refresh(topics, timeout_ms=timeout_ms)
        except E.KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
            return
        self._metadata_wanted = any(md.leader_endpoint(*tp) is None for tp in self._states)
        for tp, state in self._states.items():  # a newer leader: no need to wait more
            pm = md.partition(*tp)
            if state.paused_until_s > now and pm is not None and pm.leader >= 0 and \
                    state.paused_epoch >= 0 and pm.leader_epoch > state.paused_epoch:
                state.paused_until_s = 0.0

    def _leader(self, tp: TopicPartition) -> tuple[str | None, int]:
        pm = self.meta.current.partition(*tp)
        if pm is None or pm.leader < 0:
            return None, -1
        return self.meta.current.endpoint(pm.leader), pm.leader_epoch

    def _resolve_resets(self, deadline: float) -> None:
        pending = [s for s in self._states.values() if s.reset is not None]
        if not pending:
            return
        for how in ("earliest", "latest"):
            tps = [s.tp for s in pending if s.reset == how]
            if not tps:
                continue
            timestamp = P.EARLIEST_TIMESTAMP if how == "earliest" else P.LATEST_TIMESTAMP
            remaining_ms = int(max(100.0, (deadline - time.monotonic()) * 1000))
            try:
                offsets = self._list_offsets(tps, timestamp,
                                             min(remaining_ms, self.request_timeout_ms),
                                             raise_errors=False)
            except E.KafkaError:
                self._metadata_wanted = True
                continue
            for tp, offset in offsets.items():
                state = self._states.get(tp)
                if state is not None and state.reset == how and offset is not None:
                    state.seek(offset)

    def _list_offsets(self, tps: list[TopicPartition], timestamp: int,
                      timeout_ms: int | None = None, raise_errors: bool = True,
                      with_timestamps: bool = False) -> dict:
        """{tp: offset} via ListOffsets to each leader (offset None on a partition error
        when raise_errors is False); {tp: (timestamp, offset)} with_timestamps."""
        if any(self.meta.current.partition(*tp) is None for tp in tps):
            try:
                self.meta.refresh(sorted({tp.topic for tp in tps}), timeout_ms=timeout_ms)
            except E.KafkaError:
                if raise_errors:
                    raise
        by_leader = collections.defaultdict(list)
        out = {}
        for tp in tps:
            endpoint, _ = self._leader(tp)
            if endpoint is None:
                if raise_errors:
                    raise error(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp}")
                self._metadata_wanted = True
                out[tp] = None
                continue
            by_leader[endpoint].append(tp)
        for endpoint, group in by_leader.items():
            body = {"replica_id": P.CONSUMER_REPLICA_ID,
                    "partitions": [[tp.topic, tp.partition, timestamp] for tp in group]}
            try:
                response = self.net.request(endpoint, P.ApiKey.LIST_OFFSETS, body,
                                            timeout_ms=timeout_ms or self.request_timeout_ms)
            except E.KafkaError:
                self._metadata_wanted = True
                if raise_errors:
                    raise
                continue
            for topic, partition, code, ts, offset in response.body.get("partitions", []):
                tp = TopicPartition(topic, partition)
                if code:
                    if code in METADATA_STALE_CODES:
                        self._metadata_wanted = True
                    if raise_errors:
                        raise error(code, f"ListOffsets {topic}-{partition}")
                    out[tp] = None
                else:
                    out[tp] = (ts, offset) if with_timestamps else offset
        return out

    # ------------------------------------------------------------- validation (KIP-320)
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
            body = {"replica_id": P.CONSUMER_REPLICA_ID,
                    "partitions": [[s.tp.topic, s.tp.partition, s.leader[1], s.position_epoch]
                                   for s in group]}
            try:
                self.net.send(endpoint, P.ApiKey.OFFSET_FOR_LEADER_EPOCH, body,
                              context=request, timeout_ms=self.request_timeout_ms)
            except E.KafkaError as e:
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
            entries = P.entries(c.response.body, "partitions", 5)
        except (P.ProtocolError, TypeError) as e:
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
                self._retry_validation([state], E.NAMES.get(code, str(code)))
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
        decision = V.complete_validation(position, state.position_epoch, epoch, end_offset,
                                         self.auto_offset_reset != "none")
        name = f"{tp.topic}-{tp.partition}"
        if isinstance(decision, V.Validated):
            state.validating = False
        elif isinstance(decision, V.SeekValidated):
            log.info("Truncation detected for partition %s at offset %d, resetting offset to "
                     "the first offset known to diverge %d", name, position, decision.offset)
            leader = state.leader
            state.seek(decision.offset)
            state.position_epoch, state.leader = decision.leader_epoch, leader
        elif isinstance(decision, V.ResetOffset):
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

    # ------------------------------------------------------------- fetching
    def _send_fetches(self) -> None:
        now = time.monotonic()
        by_leader: dict[str, list] = collections.defaultdict(list)
        in_flight = {tp: endpoint for endpoint, (asked, _) in self._fetches.items()
                     for tp in asked}
        for tp, state in self._states.items():
            if state.reset is not None or state.fetch_offset is None or \
                    state.corrupt is not None or state.paused_until_s > now or \
                    state.buffered_bytes >= self.max_partition_fetch_bytes:
                continue
            endpoint, epoch = self._leader(tp)
            if endpoint is None:
                self._metadata_wanted = True
                continue
            if not self._on_current_leader(state):
                continue  # awaiting validation (or truncated) after a leader change
            if endpoint in self._fetches or in_flight.get(tp) == endpoint:
                continue
            by_leader[endpoint].append((tp, state, epoch))
        for endpoint, items in by_leader.items():
            entries = [[tp.topic, tp.partition, state.fetch_offset, epoch,
                        self.max_partition_fetch_bytes] for tp, state, epoch in items]
            body = {"replica_id": P.CONSUMER_REPLICA_ID, "max_wait_ms": self.fetch_max_wait_ms,
                    "min_bytes": self.fetch_min_bytes, "max_bytes": self.fetch_max_bytes,
                    "partitions": entries}
            asked = {tp: (state.fetch_offset, state.leader) for tp, state, _ in items}
            try:
                self.net.send(endpoint, P.ApiKey.FETCH, body, context=(endpoint, asked),
                              timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms)
            except E.KafkaError:
                self._metadata_wanted = True
                continue
            self._fetches[endpoint] = (asked, time.monotonic())

    def _on_fetch(self, c) -> None:
        endpoint, asked = c.context
        if self._fetches.get(endpoint, (None,))[0] is asked:
            del self._fetches[endpoint]
        if c.response is None:
            self._backoff(asked, metadata=True)
            return
        body = c.response.body
        try:
            entries = body["partitions"]
        except (KeyError, TypeError):
            self._backoff(asked, metadata=True)
            return
        frames = c.response.frames
        for i, entry in enumerate(entries):
            try:
                topic, partition, code, high_watermark, _log_start, _leo = entry
            except (TypeError, ValueError):
                continue
            tp = TopicPartition(topic, partition)
            state = self._states.get(tp)
            if state is None or tp not in asked or \
                    (state.fetch_offset, state.leader) != asked[tp] or \
                    state.reset is not None or state.validating:
                continue  # unassigned, sought meanwhile, or from a former leader: stale
            if code:
                self._on_partition_error(state, code)
                continue
            state.high_watermark = high_watermark
            frame = frames[i] if i < len(frames) else b""
            self._buffer(state, frame)

    def _on_partition_error(self, state: _PartitionState, code: int) -> None:
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                raise error(code, f"{state.tp.topic}-{state.tp.partition} offset "
                                  f"{state.fetch_offset}")
            self._mark_reset(state, self.auto_offset_reset)
            return
        if code in METADATA_STALE_CODES or E.error_for(code).retriable:
            self._backoff({state.tp: None}, metadata=code in METADATA_STALE_CODES)
            return
        raise error(code, f"fetching {state.tp.topic}-{state.tp.partition}")

    def _backoff(self, tps, metadata: bool) -> None:
        until = time.monotonic() + self.retry_backoff_s
        for tp in tps:
            state = self._states.get(tp)
            if state is not None:
                state.paused_until_s = until
                _, state.paused_epoch = self._leader(tp)
        if metadata:
            self._metadata_wanted = True

    def _buffer(self, state: _PartitionState, frame) -> None:
        buf = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
        position = 0
        end = len(buf)
        offset = state.fetch_offset
        delivered = False           # a whole batch at or after the fetch offset
        while position < end:
            try:
                header = read_header(buf, position)
            except CorruptRecordError as e:
                # The broker sends whole batches, at least one from the fetch offset on.
                # A cut batch after whole ones is the end of the region (fetched again);
                # anything else at the fetch offset is corruption in the leader's log.
                if delivered and _truncated(buf, position):
                    break
                self._corrupt(state, offset, str(e))
                break
            size = header.size_bytes
            if header.next_offset > offset:
                try:
                    batch = parse_batch(buf, position, verify_crc=self.check_crcs)
                except CorruptRecordError as e:
                    self._corrupt(state, offset, str(e))
                    break
                skip = max(0, offset - header.base_offset)
                state.buffered.append(FetchedBatch(state.tp.topic, state.tp.partition,
                                                   batch, skip))
                state.buffered_bytes += size
                offset = header.next_offset
                delivered = True
            position += size
        if end and not delivered and state.corrupt is None:
            self._corrupt(state, offset, f"the {end}-byte region the leader sent holds "
                                         f"no whole batch at or after the fetch offset")
        state.fetch_offset = offset

    def _corrupt(self, state: _PartitionState, offset: int, why: str) -> None:
        tp = state.tp
        log.error("%s-%d: corrupt batch at offset %d: %s", tp.topic, tp.partition, offset, why)
        state.corrupt = error(ErrorCode.CORRUPT_MESSAGE,
                              f"{tp.topic}-{tp.partition} at offset {offset}: {why}; seek "
                              f"past it to go on")

    # ------------------------------------------------------------- closing
    def close(self) -> None:
        """Leave the group at once (commit with auto-commit, release, end the session),
        then close the connections."""
        if not self._closed:
            self._closed = True
            try:
                if self._commit_pool is not None:
                    self._commit_pool.shutdown(wait=True)
                if self._group is not None:
                    self._group.close()
            finally:
                self.net.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _truncated(buf, position: int) -> bool:
    """True if the batch at ``position`` is cut short by the end of ``buf`` (and its
    length is otherwise plausible), as opposed to malformed."""
    available = len(buf) - position
    if available < HEADER_BYTES:
        return True
    length = int.from_bytes(buf[position + 8:position + 12], "little", signed=True)
    return length >= HEADER_BYTES - LENGTH_OVERHEAD_BYTES and \
        length + LENGTH_OVERHEAD_BYTES > available
