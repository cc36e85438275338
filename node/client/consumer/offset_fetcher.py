"""Kafka's OffsetFetcher: ListOffsets by timestamp (earliest, latest or a time in ms),
for ``auto_offset_reset`` and ``seek_to_*`` and for ``beginning_offsets``,
``end_offsets`` and ``offsets_for_times``. A mixin of ``api.Consumer``.

Rules:
- One ListOffsets per leader broker. A partition without a leader, a lost connection or
  a stale-metadata error asks for a metadata refresh.
- ``beginning_offsets``, ``end_offsets`` and ``offsets_for_times`` ask again on a
  retriable error (a leader that moved, none yet, a lost connection), with fresh
  metadata and ``retry_backoff_ms`` between, until their timeout (Kafka's
  ``Fetcher.fetchOffsetsByTimes``); other errors are raised at once.
- A reset lands only on a partition still assigned and still waiting for that reset.
"""
from __future__ import annotations

import collections
import time

from node.client.consumer.subscription import _tp
from node.client.types import METADATA_STALE_CODES, TopicPartition, error
from node.wire import errors
from node.wire import protocol
from node.wire.errors import ErrorCode

OffsetAndTimestamp = collections.namedtuple("OffsetAndTimestamp", "offset timestamp")


class OffsetFetcher:
    """Offsets by timestamp (rules above; state: ``api.Consumer``)."""

    def beginning_offsets(self, tps, timeout_ms: int | None = None) -> dict:
        return self._list_offsets_retrying([_tp(t) for t in tps], protocol.EARLIEST_TIMESTAMP,
                                           timeout_ms)

    def end_offsets(self, tps, timeout_ms: int | None = None) -> dict:
        return self._list_offsets_retrying([_tp(t) for t in tps], protocol.LATEST_TIMESTAMP,
                                           timeout_ms)

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
            found = self._list_offsets_retrying(tps, ms, timeout_ms, with_timestamps=True)
            for tp, entry in found.items():
                out[tp] = None if entry is None or entry[1] < 0 else \
                    OffsetAndTimestamp(entry[1], entry[0])
        return out

    def _list_offsets_retrying(self, tps: list[TopicPartition], timestamp: int,
                               timeout_ms: int | None, with_timestamps: bool = False) -> dict:
        """``_list_offsets``, asked again on a retriable error until ``timeout_ms``
        (default ``request_timeout_ms``) has passed (rules above)."""
        total_ms = timeout_ms or self.request_timeout_ms
        deadline = time.monotonic() + total_ms / 1000
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            try:
                return self._list_offsets(tps, timestamp,
                                          max(1, min(remaining_ms, self.request_timeout_ms)),
                                          with_timestamps=with_timestamps)
            except errors.KafkaError as e:
                if not e.retriable or time.monotonic() + self.retry_backoff_s >= deadline:
                    raise
            try:
                self.meta.refresh(sorted({tp.topic for tp in tps}),
                                  timeout_ms=max(1, int((deadline - time.monotonic()) * 1000)))
            except errors.KafkaError:
                pass                    # asked again below, until the deadline
            time.sleep(self.retry_backoff_s)

    # ------------------------------------------------------------- resets
    def _resolve_resets(self, deadline: float) -> None:
        pending = [s for s in self._states.values() if s.reset is not None]
        if not pending:
            return
        for how in ("earliest", "latest"):
            tps = [s.tp for s in pending if s.reset == how]
            if not tps:
                continue
            timestamp = (protocol.EARLIEST_TIMESTAMP if how == "earliest"
                         else protocol.LATEST_TIMESTAMP)
            remaining_ms = int(max(100.0, (deadline - time.monotonic()) * 1000))
            try:
                offsets = self._list_offsets(tps, timestamp,
                                             min(remaining_ms, self.request_timeout_ms),
                                             raise_errors=False)
            except errors.KafkaError:
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
            except errors.KafkaError:
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
            body = {"replica_id": protocol.CONSUMER_REPLICA_ID,
                    "partitions": [[tp.topic, tp.partition, timestamp] for tp in group]}
            if self.read_committed:
                body["isolation_level"] = 1     # latest = the last stable offset
            try:
                response = self.net.request(endpoint, protocol.ApiKey.LIST_OFFSETS, body,
                                            timeout_ms=timeout_ms or self.request_timeout_ms)
            except errors.KafkaError:
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
