"""Fetch (Kafka's handleFetchRequest): consumers read below the HW, followers up to the
LEO, as zero-copy views of whole batches. A follower's fetch offset is its LEO, told to
the leader core before the read (it may advance the HW). A fetch that finds fewer than
``min_bytes`` waits in the purgatory (Kafka's DelayedFetch), which reads it again with
``read_fetch`` and answers it with ``answer_fetch``.
"""
from __future__ import annotations

from node.broker import limits
from node.broker.apis.common import not_hosted_error
from node.broker.apis.tracing import follower_traced, trace_marks
from node.broker.loop import now_ms
from node.broker.purgatory import FetchRead, ParkedFetch
from node.core.replication import Role
from node.wire import protocol
from node.wire.errors import ErrorCode
from shm.batch import CorruptRecordError
from shm.errors import OffsetOutOfRangeError


def handle_fetch(apis, identity, request: protocol.Request) -> None:
    body = request.body
    replica_id = protocol.field(body, "replica_id", int)
    max_wait_ms = min(max(protocol.field(body, "max_wait_ms", int), 0), limits.FETCH_WAIT_MS_MAX)
    min_bytes = protocol.field(body, "min_bytes", int)
    max_bytes = protocol.field(body, "max_bytes", int)
    entries = protocol.entries(body, "partitions", 5)
    for entry in entries:
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in entry[2:]):
            raise protocol.ProtocolError("fetch entries are [topic, partition, offset, epoch, "
                                  "max_bytes] with int fields")
    fetch = ParkedFetch(identity, request.correlation_id, replica_id, min_bytes,
                        max(max_bytes, 0), entries)
    if "trace" in body and apis.traces:
        follower_traced(apis.traces, replica_id, body["trace"])
    if fetch.from_follower:
        apis.trace_replica = replica_id
        try:
            _follower_fetched(apis, fetch)
        finally:
            apis.trace_replica = -1
    read = read_fetch(apis, fetch)
    if max_wait_ms == 0 or read[2] >= min_bytes or read[3] or not entries or \
            not apis.purgatory.may_park(identity):
        answer_fetch(apis, fetch, read)
    else:
        apis.purgatory.park(fetch, max_wait_ms)


def _follower_fetched(apis, fetch: ParkedFetch) -> None:
    """A follower's fetch offset is its LEO: tell the leader cores (before reading:
    it may advance the HW)."""
    now = now_ms()
    partitions = apis.replicas.partitions
    for topic, partition, offset, epoch, _ in fetch.entries:
        part = partitions.get((topic, partition))
        if part is not None and part.core.role is Role.LEADER and \
                part.core.check_fetch_epoch(epoch) == 0:
            effects = part.core.on_follower_fetch(fetch.replica_id, offset, now, part.view)
            apis.replicas.apply_effects(part, effects)


def read_fetch(apis, fetch: ParkedFetch) -> FetchRead:
    """Read every partition of a fetch: zero-copy views, whole batches, at least one
    batch in all, below the HW for consumers and up to the LEO for followers."""
    results, frames, size, errors = [], [], 0, False
    follower = fetch.from_follower
    replicas = apis.replicas
    for topic, partition, offset, epoch, partition_max_bytes in fetch.entries:
        part = replicas.partitions.get((topic, partition))
        if part is None:
            error = not_hosted_error(apis.metadata, topic, partition)
        elif replicas.is_offline(part):
            error = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            error = part.core.check_fetch_epoch(epoch)
            if not error and part.core.role is not Role.LEADER:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if error:
            results.append([topic, partition, error, -1, -1, -1])
            frames.append(b"")
            errors = True
            continue
        log = part.log
        data = b""
        budget = min(partition_max_bytes, fetch.max_bytes - size)
        if budget > 0 or size == 0:
            try:
                data = log.read(offset, max(budget, 0),
                                max_offset=None if follower else log.high_watermark)
            except OffsetOutOfRangeError:
                error, errors = ErrorCode.OFFSET_OUT_OF_RANGE, True
            except CorruptRecordError as e:     # a damaged segment
                # Offline: clients retry at the new leader; the last in-sync replica
                # serves on and says where the damage is.
                error = ErrorCode.KAFKA_STORAGE_ERROR \
                    if replicas.replica_corrupt(part, e) else ErrorCode.CORRUPT_MESSAGE
                errors = True
        results.append([topic, partition, error, log.high_watermark, log.log_start_offset,
                        log.log_end_offset])
        frames.append(data)
        size += len(data)
    return results, frames, size, errors


def answer_fetch(apis, fetch: ParkedFetch, read: FetchRead) -> None:
    body = {"partitions": read[0]}
    if apis.traces and fetch.from_follower:
        marks = trace_marks(apis.traces, fetch, read)
        if marks:
            body["trace"] = marks
    apis.send_response(fetch.identity, fetch.correlation_id, protocol.ApiKey.FETCH, body, read[1])
