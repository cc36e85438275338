"""Fetch (Kafka's handleFetchRequest): consumers read below the HW, followers up to the
LEO, as zero-copy views of whole batches. A follower's fetch offset is its LEO, told to
the leader core before the read (it may advance the HW). A fetch that finds fewer than
``min_bytes`` waits in the purgatory (Kafka's DelayedFetch), which reads it again with
``read_fetch`` and answers it with ``answer_fetch``.

Transactions (KIP-98): a consumer's fetch with ``isolation_level`` 1 (read_committed)
reads below the last stable offset (Kafka's LSO: the first offset of the oldest open
transaction, or the HW) and is told the aborted transactions overlapping what it read
(``[[producer_id, first_offset], ...]``, from the log's aborted index) so it drops their
records; control batches (markers) are returned like any batch, clients skip them.
Every result entry ends with the LSO and that list (empty for read_uncommitted).
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
from shm.batch_format import (LAST_OFFSET_DELTA, LAST_OFFSET_DELTA_POSITION,
                              LENGTH_OVERHEAD_BYTES, PREFIX)
from shm.errors import OffsetOutOfRangeError


READ_UNCOMMITTED, READ_COMMITTED = 0, 1      # Kafka's isolation levels


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
    isolation = protocol.field(body, "isolation_level", int, optional=True,
                               default=READ_UNCOMMITTED)
    if isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise protocol.ProtocolError(f"isolation_level must be 0 or 1, got {isolation}")
    fetch = ParkedFetch(identity, request.correlation_id, replica_id, min_bytes,
                        max(max_bytes, 0), entries, isolation_level=isolation)
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
    batch in all, below the HW for consumers (below the LSO for read_committed ones) and
    up to the LEO for followers."""
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
            results.append([topic, partition, error, -1, -1, -1, -1, []])
            frames.append(b"")
            errors = True
            continue
        log = part.log
        data = b""
        aborted = []
        stable = -1
        committed = fetch.isolation_level == READ_COMMITTED and not follower
        budget = min(partition_max_bytes, fetch.max_bytes - size)
        try:
            stable = log.last_stable_offset()
            if budget > 0 or size == 0:
                data = log.read(offset, max(budget, 0),
                                max_offset=None if follower else
                                stable if committed else log.high_watermark)
            if committed and len(data):
                # Up to the LSO first (no walk of the read when none was aborted there).
                aborted = log.aborted_transactions(offset, stable)
                if aborted:
                    end = read_end(data, offset)
                    aborted = [[pid, first] for pid, first in aborted if first < end]
        except OffsetOutOfRangeError:
            error, errors, data = ErrorCode.OFFSET_OUT_OF_RANGE, True, b""
        except CorruptRecordError as e:     # a damaged segment (or transaction index)
            data = b""
            # Offline: clients retry at the new leader; the last in-sync replica
            # serves on and says where the damage is.
            error = ErrorCode.KAFKA_STORAGE_ERROR \
                if replicas.replica_corrupt(part, e) else ErrorCode.CORRUPT_MESSAGE
            errors = True
        results.append([topic, partition, error, log.high_watermark, log.log_start_offset,
                        log.log_end_offset, stable, aborted])
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


def read_end(data, offset: int) -> int:
    """The offset after the last whole batch of a read (``offset`` if none): the upper
    bound of the aborted transactions a read_committed consumer needs (Kafka's)."""
    view = memoryview(data).cast("B")
    position, end = 0, offset
    while len(view) - position >= PREFIX.size:
        base, length = PREFIX.unpack_from(view, position)
        size = length + LENGTH_OVERHEAD_BYTES
        if length < 0 or position + size > len(view):
            break
        delta = LAST_OFFSET_DELTA.unpack_from(view, position + LAST_OFFSET_DELTA_POSITION)[0]
        end = base + delta + 1
        position += size
    return end
