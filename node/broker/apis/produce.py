"""Produce (Kafka's handleProduceRequest and the leader's append).

Each partition's frame (whole batches, never re-encoded) is appended by its leader, which
stamps offsets and its epoch in place. acks 0 and 1 are answered after the append (acks=0
with nothing, as Kafka); acks=all waits in a ``ProduceRequest`` until the core's
``CompleteProduce`` (the replica manager calls ``on_produce_complete``). A frame of an
idempotent producer (KIP-98) is checked first (``producer_verdict``): a retry of batches
already appended gets their original offsets and nothing is appended twice.

Transactions (KIP-98; the rules are ``txn_rules``'): a client's control batch is
INVALID_RECORD, a plain batch of a producer with a transaction open on the partition
INVALID_TXN_STATE. With ``transaction.partition.verification.enable`` (KIP-890 part 1)
a request whose frames would open a producer's transaction on some partitions waits,
whole, until the transactional id's coordinator says those partitions are in the
transaction (``txn_verify``: AddPartitionsToTxn ``verify_only``); a partition it does
not confirm gets INVALID_TXN_STATE (or NOT_ENOUGH_REPLICAS: retry), the others are
appended then. A marker landing meanwhile voids the answer (``VerificationGuards``).

A compacted topic (cleanup.policy has "compact") refuses a frame with a record whose key
is null, as Kafka's LogValidator: INVALID_RECORD, "Compacted topic cannot accept message
without key" (the cleaner keeps the last record per key; a keyless one has none).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from node.broker import limits
from node.broker.apis import txn_rules, txn_verify
from node.broker.apis.common import not_hosted_error
from node.broker.apis.tracing import start_trace
from node.broker.failures import STORAGE_ERRORS
from node.wire.protocol import INTERNAL_TOPICS
from node.broker.loop import now_ms
from node.broker.purgatory import ProduceRequest
from node.core.replication import CompleteProduce, Role
from node.wire import errors
from node.wire import protocol
from node.wire.errors import ErrorCode
from shm import batch
from shm.batch import CorruptRecordError
from shm.producer_state import Verdict, check_frame

if TYPE_CHECKING:     # the replica manager imports the handlers (no import cycle)
    from node.broker.replica_manager import Partition


def handle_produce(apis, identity, request: protocol.Request) -> None:
    body = request.body
    acks = protocol.field(body, "acks", int)
    if acks not in (-1, 0, 1):
        raise protocol.ProtocolError(f"acks must be -1, 0 or 1, got {acks}")
    timeout_ms = min(max(protocol.field(body, "timeout_ms", int), 0),
                     limits.PRODUCE_TIMEOUT_MS_MAX)
    entries = protocol.entries(body, "partitions", 2)
    if len(request.frames) != len(entries):
        raise protocol.ProtocolError(f"{len(entries)} partitions but {len(request.frames)} "
                              f"batch frames")
    transactional_id = protocol.field(body, "transactional_id", str, optional=True)
    produce = ProduceRequest(identity, request.correlation_id, acks,
                             [[t, p, None, -1, -1, None] for t, p in entries], len(entries))
    if "trace" in body:
        produce.trace = start_trace(body["trace"])
    # Kafka's wire closes the connection of an acks=0 producer whose write failed (its
    # only way to say so): the listener asks for the acks=0 answer to learn it.
    produce.answer_acks_0 = protocol.field(body, "answer_acks_0", bool, optional=True,
                                           default=False)
    # The leader stamps offsets and its epoch in place: a zmq frame is writable.
    frames = [frame.buffer if hasattr(frame, "buffer") else bytearray(frame)
              for frame in request.frames]
    headers = [frame_headers(data) for data in frames]      # parsed once per request
    plan = _verification_plan(apis, entries, headers, transactional_id) \
        if apis.config.transaction_partition_verification_enable else None
    if plan is None or not (plan.verify or plan.errors):
        _append_all(apis, produce, entries, frames, headers, timeout_ms, {}, {})
        return
    guards = {i: apis.txn_guards.start(key, plan.producer[0]) for i, key in plan.verify.items()}

    def verified(outcome: dict) -> None:
        failed = {i: txn_rules.produce_error(outcome.get(key, ErrorCode.INVALID_TXN_STATE))
                  for i, key in plan.verify.items() if outcome.get(key)}
        for i in failed:
            apis.txn_guards.clear(plan.verify[i], plan.producer[0])
        _append_all(apis, produce, entries, frames, headers, timeout_ms,
                    {**plan.errors, **failed}, guards)

    if not plan.verify:
        _append_all(apis, produce, entries, frames, headers, timeout_ms, plan.errors, {})
        return
    txn_verify.verify(apis, transactional_id, plan.producer, plan.verify.values(), verified)


def _append_all(apis, produce: ProduceRequest, entries: list, frames: list, headers: list,
                timeout_ms: int, refused: dict, guards: dict) -> None:
    """Append every partition's frame (those ``refused`` get their error), answer."""
    now = now_ms()
    appended = []
    for i, ((topic, partition), data) in enumerate(zip(entries, frames)):
        if i in refused:
            code, message = refused[i]
            produce.complete(i, code, -1, -1, message)
            continue
        part = _produce_partition(apis, produce, i, topic, partition, data, headers[i],
                                  timeout_ms, now, guards.get(i))
        if part is not None:
            appended.append(part)
    produce.in_handler = False
    answer_produce(apis, produce)
    if produce.acks != -1:
        # The producer's answer first; then the parked fetches get the new bytes.
        for part in appended:
            apis.purgatory.wake(part.key, leo_moved=True)


def _verification_plan(apis, entries: list, frame_headers: list,
                       transactional_id: str | None):
    """KIP-890 part 1: which partitions need the coordinator's word first (the pure
    decision is ``txn_rules.plan_verification``); None when no frame is transactional."""
    candidates = []
    for i, ((topic, partition), headers) in enumerate(zip(entries, frame_headers)):
        if not headers or not any(txn_rules.is_transactional(h) for h in headers):
            continue
        part = apis.replicas.partitions.get((topic, partition))
        if part is None or part.core.role is not Role.LEADER or apis.replicas.is_offline(part):
            continue                    # refused by the append path with its error
        try:
            ongoing = part.log.ongoing_transactions()
        except STORAGE_ERRORS:
            continue                    # the append path answers the storage error
        candidates.append((i, (topic, partition), headers, ongoing))
    if not candidates:
        return None
    return txn_rules.plan_verification(candidates, transactional_id)


def _produce_partition(apis, produce: ProduceRequest, index: int, topic: str,
                       partition: int, data, headers: list | None, timeout_ms: int, now: int,
                       guard=None) -> Partition | None:
    """Append one partition's batches (one frame, whole batches, never re-encoded);
    the partition if they were appended. With acks=all the parked follower fetches
    get them at once (their next fetch is what completes the request); with acks 0
    and 1 the caller wakes them after answering the producer."""
    replicas = apis.replicas
    if topic in INTERNAL_TOPICS:      # only its coordinator writes it (Kafka's ReplicaManager)
        produce.complete(index, ErrorCode.INVALID_TOPIC_EXCEPTION, -1, -1,
                         f"Cannot append to internal topic {topic}")
        return None
    part = replicas.partitions.get((topic, partition))
    if part is None:
        produce.complete(index, not_hosted_error(apis.metadata, topic, partition), -1, -1)
        return None
    log = part.log
    if replicas.is_offline(part):
        produce.complete(index, ErrorCode.KAFKA_STORAGE_ERROR, -1, -1,
                         f"the replica of {topic}-{partition} is offline")
        return None
    error = part.core.check_produce(produce.acks)
    if error:
        produce.complete(index, error, -1, log.log_start_offset)
        return None
    if produce.acks == -1 and apis.pending_produces >= limits.PENDING_PRODUCE_REQUESTS_MAX:
        produce.complete(index, ErrorCode.REQUEST_TIMED_OUT, -1, log.log_start_offset,
                         "too many produce requests waiting for acks")
        return None
    if "compact" in getattr(log.config, "cleanup_policy", ()) and has_null_key(data):
        produce.complete(index, ErrorCode.INVALID_RECORD, -1, log.log_start_offset,
                         NULL_KEY_MESSAGE)
        return None
    try:
        refused = _transaction_error(apis, part, headers, guard)
        verdict = None if refused else producer_verdict(log, headers)
    except STORAGE_ERRORS as e:     # building the producers' state read the log
        produce.complete(index, errors.code_for_exception(e), -1, log.log_start_offset, str(e))
        return None
    if refused:
        produce.complete(index, refused[0], -1, log.log_start_offset, refused[1])
        return None
    if verdict is not None:
        code, first, last = verdict
        if code:
            produce.complete(index, code, -1, log.log_start_offset)
            return None
        # A retry of batches already appended (their answer was lost): the original
        # offsets, once committed (acks=all), and nothing appended twice.
        if produce.acks != -1 or last < log.high_watermark:
            produce.complete(index, ErrorCode.NONE, first, log.log_start_offset)
            return None
        apis.pending_produces += 1
        effects = part.core.on_leader_append((produce, index), produce.acks, first, last,
                                             timeout_ms, now, part.view)
        replicas.apply_effects(part, effects)
        return None
    try:
        info = log.append_as_leader(data, part.core.leader_epoch)
    except STORAGE_ERRORS as e:  # CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, KAFKA_STORAGE_ERROR
        code = errors.code_for_exception(e)
        if isinstance(e, OSError):      # a full or failing disk: the dir goes offline
            code = ErrorCode.KAFKA_STORAGE_ERROR
            replicas.storage_failed(part, e)
        elif code == ErrorCode.UNKNOWN_SERVER_ERROR:
            replicas.log_storage_error(part, "append", e)
        produce.complete(index, code, -1, log.log_start_offset, str(e))
        return None
    producer = txn_rules.transactional_producer(headers) if headers else None
    if producer is not None:
        apis.txn_guards.clear(part.key, producer[0])    # its transaction is open now
    if produce.trace is not None:
        produce.trace["append"] = time.monotonic_ns()
        if produce.acks == -1 and len(apis.traces) < limits.TRACED_WRITES_MAX:
            apis.traces[part.key] = (info.last_offset, produce.trace)
    if produce.acks == -1:
        apis.pending_produces += 1
        apis.purgatory.wake(part.key, leo_moved=True)
    effects = part.core.on_leader_append((produce, index), produce.acks, info.first_offset,
                                         info.last_offset, timeout_ms, now, part.view)
    replicas.apply_effects(part, effects)
    return part


def on_produce_complete(apis, part: Partition, effect: CompleteProduce) -> None:
    produce, index = effect.request_id
    if produce.acks == -1:
        apis.pending_produces -= 1
    if produce.trace is not None:
        produce.trace["high_watermark"] = time.monotonic_ns()
        produce.trace["by"] = apis.trace_replica
        apis.traces.pop(part.key, None)
    produce.complete(index, effect.error, effect.base_offset, part.log.log_start_offset)
    answer_produce(apis, produce)


def answer_produce(apis, produce: ProduceRequest) -> None:
    # Kafka sends nothing for acks=0 (unless the listener asked: answer_acks_0).
    if produce.ready() and (produce.acks != 0 or produce.answer_acks_0):
        body = {"partitions": produce.results}
        if produce.trace is not None:
            produce.trace["answer"] = time.monotonic_ns()
            body["trace"] = produce.trace
        apis.send_response(produce.identity, produce.correlation_id, protocol.ApiKey.PRODUCE, body)


NULL_KEY_MESSAGE = "Compacted topic cannot accept message without key"


def has_null_key(data) -> bool:
    """Whether a frame holds a record with a null key (each batch's key validity bitmap:
    absent = no nulls). A frame that does not parse is not ours to judge: the append
    refuses it with CORRUPT_MESSAGE."""
    view = memoryview(data).cast("B")
    position = 0
    while position < len(view):
        try:
            columns = batch.read_columns(view, position, verify_crc=False)
        except CorruptRecordError:
            return False
        n = columns.header.record_count
        if columns.key_validity is not None and n:
            bits = np.unpackbits(np.frombuffer(columns.key_validity, dtype=np.uint8),
                                 bitorder="little")[:n]
            if not bits.all():
                return True
        position += columns.header.size_bytes
    return False


def frame_headers(data) -> list | None:
    """The batch headers of a frame; None if it does not parse (the append refuses it
    with CORRUPT_MESSAGE)."""
    view = memoryview(data).cast("B")
    headers, position = [], 0
    while position < len(view):
        try:
            header = batch.read_header(view, position)
        except CorruptRecordError:
            return None
        headers.append(header)
        position += header.size_bytes
    return headers


def _transaction_error(apis, part: Partition, headers: list | None, guard
                       ) -> tuple[int, str] | None:
    """Kafka's transactional rules for a client's frame (``txn_rules.frame_error``), and
    KIP-890's: a frame that would open its producer's transaction must hold the guard of
    a verification that is still valid."""
    if not headers or not any(h.producer_id >= 0 or h.attributes & txn_rules.ATTR_CONTROL
                              for h in headers):
        return None
    ongoing = part.log.ongoing_transactions()
    error = txn_rules.frame_error(headers, ongoing)
    if error or not apis.config.transaction_partition_verification_enable:
        return error
    producer = txn_rules.needs_verification(headers, ongoing)
    if producer is not None and not apis.txn_guards.holds(part.key, producer[0], guard):
        return ErrorCode.INVALID_TXN_STATE, txn_rules.NOT_IN_TXN_MESSAGE
    return None


_VERDICT_ERRORS = {Verdict.OUT_OF_ORDER: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                   Verdict.UNKNOWN_PRODUCER: ErrorCode.UNKNOWN_PRODUCER_ID,
                   Verdict.FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                   Verdict.MIXED: ErrorCode.INVALID_REQUEST}


def producer_verdict(log, headers: list | None) -> tuple[int, int, int] | None:
    """For a frame of an idempotent producer (KIP-98): None to append it; (error, -1, -1)
    to refuse it; (0, first offset, last offset) when every batch of it was appended
    before (a retry whose answer was lost). The decision is ``check_frame``'s."""
    if not headers:
        return None                     # the append refuses it with CORRUPT_MESSAGE
    if not any(h.producer_id >= 0 for h in headers):
        return None                     # not idempotent: no state is needed
    found = check_frame(log.producer_states(), headers)
    if found is None or found[0] is Verdict.APPEND:
        return None
    verdict, first, last = found
    if verdict is Verdict.DUPLICATE:
        return ErrorCode.NONE, first, last
    return _VERDICT_ERRORS[verdict], -1, -1
