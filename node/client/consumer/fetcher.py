"""Kafka's Fetcher: Fetch requests to the leaders, what they bring back parsed into
buffered batches, and leader following. A mixin of ``api.Consumer``.

Rules:
- At most one Fetch in flight per leader broker, carrying every fetchable partition it
  leads with ``current_leader_epoch`` (KIP-320). The next one goes out as soon as the
  answer is buffered, so fetching overlaps processing.
- An answer is applied only if the partition is still assigned and its fetch_offset
  and leader are still the ones asked for (a ``seek`` in between makes it stale).
- Leadership errors and lost connections pause the partition ``retry_backoff_ms`` and
  refresh metadata; fresh metadata with a newer leader epoch ends the pause at once.
  OFFSET_OUT_OF_RANGE applies ``auto_offset_reset``.
- A region may start inside a batch (the records before the position are skipped) and
  end with a cut batch (fetched again). A compacted log has holes between batches: a
  fetch at an offset inside one gets the next batch, which starts later; an empty answer
  below the HW means the rest up to it is a hole (``hole_until``). A corrupt batch is raised once every batch
  before it is delivered.
- Transactions (Kafka's CompletedFetch): control batches (COMMIT/ABORT markers) are
  never returned, whatever the isolation level. At read_committed the Fetch asks for
  isolation_level 1 (the leader answers up to the last stable offset, with the aborted
  transactions of the range: [producer id, first offset]); walking the batches in
  order, an aborted transaction whose first offset is at or before a batch's last
  offset makes its producer "aborted", its transactional batches are dropped, and its
  ABORT marker ends that. The position moves past what is dropped (``through``), so a
  reader's position never stops on a marker or an aborted batch.
"""
from __future__ import annotations

import collections
import functools
import logging
import time
from dataclasses import dataclass
from itertools import repeat

from node.client.consumer.subscription import _PartitionState
from node.client.types import METADATA_STALE_CODES, ConsumerRecord, TopicPartition, error
from node.wire import errors
from node.wire import protocol
from node.wire.errors import ErrorCode
from shm import record_headers
from shm.batch import (ATTR_CONTROL, ATTR_TRANSACTIONAL, HEADER_BYTES,
                       LENGTH_OVERHEAD_BYTES, CorruptRecordError, RecordBatch, parse_batch,
                       read_header)

log = logging.getLogger("minikafka.consumer")

FETCH_MAX_BYTES = 50 * 1024 * 1024  # fetch.max.bytes
# A fetch unanswered this long after its max wait makes the consumer check metadata:
# if the leader moved, the partition is fetched from the new leader without waiting
# for the request timeout of the old one (a SIGSTOPped broker keeps its connection).
FETCH_SUSPECT_MS = 1000


@dataclass(frozen=True)
class FetchedBatch:
    """A batch as ``poll_batches`` returns it: records ``skip..record_count-1`` are new."""

    topic: str
    partition: int
    batch: RecordBatch
    skip: int  # records before the consumer's position
    # The position once its last record is consumed, when batches dropped after it
    # (control, aborted) move it further than the batch's end; -1: the batch's end.
    through: int = -1

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
        """Records ``skip..`` as ConsumerRecords. Headers are decoded only when the batch
        has the headers column; records without headers all share the empty tuple."""
        b, skip = self.batch, self.skip
        n = b.record_count - skip
        offsets = b.offsets.tolist()[skip:]
        timestamps = b.timestamps.tolist()[skip:]
        keys = b.keys.to_pylist()[skip:]
        values = b.values.to_pylist()[skip:]
        headers = repeat((), n) if b.headers is None else \
            header_tuples(b.headers.slice(skip).to_pylist())
        return list(map(_new_record, zip(repeat(self.topic, n), repeat(self.partition, n),
                                         offsets, timestamps, keys, values, headers)))


# ConsumerRecord from a 7-tuple without namedtuple's per-call argument handling (the
# per-record path of ``poll``; a third cheaper than ``ConsumerRecord(...)``).
_new_record = functools.partial(tuple.__new__, ConsumerRecord)


def header_tuples(entries: list) -> list[tuple]:
    """Per headers entry (``shm.record_headers``' encoding, as bytes) its headers as a
    tuple of (key, value) pairs. Immutable, so a run of equal entries (the same headers
    on every record, or none) decodes once and shares one tuple."""
    out = []
    previous, decoded = None, ()
    try:
        for entry in entries:
            if entry != previous:
                previous, decoded = entry, tuple(record_headers.decode_entry(entry))
            out.append(decoded)
    except record_headers.HeaderFormatError as e:  # not reached for a checked batch
        raise CorruptRecordError(f"record headers: {e}") from None
    return out


class Fetcher:
    """Fetching and leader following (rules above; state: ``api.Consumer``)."""

    # ------------------------------------------------------------- metadata & leaders
    def _update_metadata_if_needed(self, deadline: float) -> None:
        now = time.monotonic()
        if not self._states or not self._metadata_wanted or now < self._metadata_next_s:
            return
        self._metadata_next_s = now + self.metadata_backoff_s
        topics = sorted({tp.topic for tp in self._states})
        timeout_ms = int(max(100.0, min(self.request_timeout_ms, (deadline - now) * 1000)))
        try:
            md = self.meta.refresh(topics, timeout_ms=timeout_ms)
        except errors.KafkaError as e:
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
            body = {"replica_id": protocol.CONSUMER_REPLICA_ID,
                    "max_wait_ms": self.fetch_max_wait_ms,
                    "min_bytes": self.fetch_min_bytes, "max_bytes": self.fetch_max_bytes,
                    "partitions": entries}
            if self.read_committed:
                body["isolation_level"] = 1
            asked = {tp: (state.fetch_offset, state.leader) for tp, state, _ in items}
            try:
                self.net.send(endpoint, protocol.ApiKey.FETCH, body, context=(endpoint, asked),
                              timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms)
            except errors.KafkaError:
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
                topic, partition, code, high_watermark, _log_start, _leo = entry[:6]
                # txbroker's fields after them: the LSO and the aborted transactions
                last_stable = entry[6] if len(entry) > 6 else -1
                aborted = entry[7] if len(entry) > 7 else None
            except (TypeError, ValueError, IndexError):
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
            state.last_stable_offset = last_stable
            frame = frames[i] if i < len(frames) else b""
            self._buffer(state, frame, aborted if self.read_committed else None)

    def _on_partition_error(self, state: _PartitionState, code: int) -> None:
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                raise error(code, f"{state.tp.topic}-{state.tp.partition} offset "
                                  f"{state.fetch_offset}")
            self._mark_reset(state, self.auto_offset_reset)
            return
        if code in METADATA_STALE_CODES or errors.error_for(code).retriable:
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

    def _buffer(self, state: _PartitionState, frame, aborted=None) -> None:
        buf = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
        position = 0
        end = len(buf)
        offset = state.fetch_offset
        # read_committed: the answer stops at the LSO, so an empty one below it is a hole
        bound = state.high_watermark if not self.read_committed or \
            state.last_stable_offset < 0 else state.last_stable_offset
        state.hole_until = bound if end == 0 and bound > offset else -1
        filter_ = AbortedFilter(aborted) if aborted else None
        delivered = False           # a whole batch at or after the fetch offset
        while position < end:
            try:
                header = read_header(buf, position)
            except CorruptRecordError as e:
                # The broker sends whole batches, at least one from the fetch offset on.
                # A cut batch after whole ones is the end of the region (fetched again);
                # anything else at the fetch offset is corruption in the leader's log.
                if delivered and cut_short(buf, position):
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
                offset = header.next_offset
                delivered = True
                if header.attributes & ATTR_CONTROL:
                    if filter_ is not None:
                        filter_.control(header)
                    self._skipped(state, offset)
                elif filter_ is not None and filter_.drops(header):
                    self._skipped(state, offset)
                else:
                    state.buffered.append(FetchedBatch(state.tp.topic, state.tp.partition,
                                                       batch, skip))
                    state.buffered_bytes += size
            position += size
        if end and not delivered and state.corrupt is None:
            self._corrupt(state, offset, f"the {end}-byte region the leader sent holds "
                                         f"no whole batch at or after the fetch offset")
        state.fetch_offset = offset

    @staticmethod
    def _skipped(state: _PartitionState, next_offset: int) -> None:
        """A batch not returned (control, aborted) ends at ``next_offset``: the position
        moves there once what is buffered before it is consumed."""
        if state.buffered:
            last = state.buffered[-1]
            state.buffered[-1] = FetchedBatch(last.topic, last.partition, last.batch,
                                              last.skip, next_offset)
        else:
            state.position = next_offset

    def _corrupt(self, state: _PartitionState, offset: int, why: str) -> None:
        tp = state.tp
        log.error("%s-%d: corrupt batch at offset %d: %s", tp.topic, tp.partition, offset, why)
        state.corrupt = error(ErrorCode.CORRUPT_MESSAGE,
                              f"{tp.topic}-{tp.partition} at offset {offset}: {why}; seek "
                              f"past it to go on")


class AbortedFilter:
    """Kafka's read_committed filter over one fetch answer's batches, in offset order:
    ``aborted`` is the answer's [[producer id, first offset], ...]."""

    def __init__(self, aborted):
        # by first offset (Kafka's priority queue)
        self.pending = sorted(((int(first), int(pid)) for pid, first in aborted), reverse=True)
        self.producers: set[int] = set()

    def _up_to(self, last_offset: int) -> None:
        while self.pending and self.pending[-1][0] <= last_offset:
            self.producers.add(self.pending.pop()[1])

    def drops(self, header) -> bool:
        """Whether a data batch belongs to an aborted transaction."""
        if header.producer_id < 0:
            return False
        self._up_to(header.next_offset - 1)
        return bool(header.attributes & ATTR_TRANSACTIONAL) and \
            header.producer_id in self.producers

    def control(self, header) -> None:
        """A control batch: its producer's ABORT marker ends its aborted transaction (a
        COMMIT marker cannot follow an aborted one of the same producer)."""
        self._up_to(header.next_offset - 1)
        self.producers.discard(header.producer_id)


def cut_short(buf, position: int) -> bool:
    """True if the batch at ``position`` is cut short by the end of ``buf`` (and its
    length is otherwise plausible), as opposed to malformed."""
    available = len(buf) - position
    if available < HEADER_BYTES:
        return True
    length = int.from_bytes(buf[position + 8:position + 12], "little", signed=True)
    return length >= HEADER_BYTES - LENGTH_OVERHEAD_BYTES and \
        length + LENGTH_OVERHEAD_BYTES > available
