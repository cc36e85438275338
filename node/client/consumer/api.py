"""The Consumer (kafka-python-like): its configs, ``poll`` / ``poll_batches``,
``position``, ``highwater``, deserialization and ``close``. Its other parts are the
mixins of this package (see the package's docstring); this module puts them together
and runs the poll loop.

Rules:
- ``poll`` loops until something is buffered or its timeout passes. Each turn steps the
  group, refreshes metadata when wanted, resolves resets, sends validations, raises
  truncations and sends fetches, then waits on the network (at most 100 ms while
  something is pending, GROUP_STEP_MS in a group).
- Records are handed out round-robin over the partitions, up to ``max_poll_records``;
  a corrupt batch is raised only once every record before it has been returned.
- A record the deserializer refuses is not skipped: the records before it are
  returned, and the next ``poll`` raises DeserializationError until the caller seeks.
"""
from __future__ import annotations

import itertools
import os
import time

from node.client.broker_group import GROUP_CONTEXTS
from node.client.consumer.fetcher import FETCH_MAX_BYTES, FETCH_SUSPECT_MS, FetchedBatch, Fetcher
from node.client.consumer.membership import GROUP_STEP_MS, GroupMembership
from node.client.consumer.offset_fetcher import OffsetFetcher
from node.client.consumer.subscription import SubscriptionState, _PartitionState, _Validation
from node.client.consumer.validation import PositionValidation
from node.client.metadata import MetadataFetcher, parse_bootstrap
from node.client.network import Network
from node.client.types import (ConsumerGroupMetadata, ConsumerRecord, KafkaTimeoutError,
                               TopicPartition)

_client_ids = itertools.count(1)
# "consumer": the brokers' group coordinator, KIP-848 (Kafka 4's name and default);
# "classic": the same coordinator, JoinGroup/SyncGroup (node.client.classic_group);
# "zookeeper": the Kafka paper's groups, registries in ZooKeeper (node.client.group).
GROUP_PROTOCOLS = ("consumer", "classic", "zookeeper")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")   # Kafka's isolation.level


class DeserializationError(ValueError):
    """A record the consumer's deserializer refused (``tp``, ``offset``)."""

    def __init__(self, message: str, tp, offset: int):
        super().__init__(message)
        self.tp = tp
        self.offset = offset


class Consumer(GroupMembership, PositionValidation, Fetcher, OffsetFetcher,
               SubscriptionState):
    """A consumer of assigned partitions (``assign``), or a member of a consumer group
    (``group_id`` and ``subscribe``; see the package's docstring)."""

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
                 rebalance_backoff_ms: int = 250, group_protocol: str = "consumer",
                 group_remote_assignor: str | None = None,
                 max_poll_interval_ms: int = 300_000, heartbeat_interval_ms: int = 3000,
                 group_instance_id: str | None = None,
                 isolation_level: str = "read_uncommitted"):
        if group_id is not None:
            from node.client.group import check_group_id
            check_group_id(group_id)
        if group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"group_protocol must be one of {', '.join(GROUP_PROTOCOLS)}, "
                             f"got {group_protocol!r}")
        if max_poll_interval_ms < 1:
            raise ValueError("max_poll_interval_ms must be positive")
        if group_instance_id is not None and (not group_instance_id or
                                              group_protocol == "zookeeper"):
            raise ValueError("group_instance_id (static membership) is a non-empty id, "
                             "for the brokers' groups")
        self.group_instance_id = group_instance_id
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, "
                             f"got {isolation_level!r}")
        self.isolation_level = isolation_level
        self.read_committed = isolation_level == "read_committed"
        if heartbeat_interval_ms < 1:
            raise ValueError("heartbeat_interval_ms must be positive")
        # Classic groups (Kafka's heartbeat.interval.ms; a third of the session at most).
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.group_protocol = group_protocol
        self.group_remote_assignor = group_remote_assignor
        self.max_poll_interval_ms = max_poll_interval_ms
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

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What ``Producer.send_offsets_to_transaction`` checks the group with (Kafka's
        ConsumerGroupMetadata): the group id, the generation (the member epoch in a
        KIP-848 group), the member id and the group instance id."""
        if self.group_id is None:
            raise RuntimeError("group_metadata() of a consumer without a group_id")
        group = self._group
        if group is None or self.group_protocol == "zookeeper":
            return ConsumerGroupMetadata(self.group_id)    # not the brokers': not checked
        return ConsumerGroupMetadata(self.group_id, group._epoch(), group.member_id or "",
                                     self.group_instance_id)

    def highwater(self, tp) -> int:
        """The last high watermark a fetch of ``tp`` reported (-1 before any)."""
        return self._state(tp).high_watermark

    def hole_until(self, tp) -> int:
        """When the last fetch of ``tp`` found no record from the fetch offset up to the
        high watermark it reported (a compacted log's hole at its end): that HW, else
        -1. A reader of a fixed offset range ends there instead of waiting."""
        state = self._state(tp)
        return state.hole_until if not state.buffered else -1

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
                            fetched.skip + room, fetched.through))
                        state.buffered_bytes += fetched.batch.size_bytes
                    out += records
                    consumed_to = records[-1].offset + 1
                    if fetched.through > consumed_to and \
                            fetched.skip + len(records) == fetched.batch.record_count:
                        consumed_to = fetched.through   # past skipped batches after it
                    state.consumed(fetched.batch, consumed_to)
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
                    state.consumed(fetched.batch, max(fetched.next_offset, fetched.through))
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
                elif isinstance(c.context, GROUP_CONTEXTS):
                    if self._group is not None:
                        self._group.on_completion(c)
                else:
                    self._on_fetch(c)

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
