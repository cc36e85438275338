"""WriteTxnMarkers (Kafka's handleWriteTxnMarkersRequest): the transaction coordinator's
broker tells each partition leader to end a producer's transaction there; the leader
appends the control batch (``shm.control.build_marker``, one COMMIT or ABORT record)
as leader with acks=all semantics and answers each partition once the HW passed it.

Body (native, Kafka's WriteTxnMarkersRequest fields as dicts):

    req  {"markers": [{"producer_id", "producer_epoch", "transaction_result" (bool:
          True = COMMIT), "coordinator_epoch", "topics": [{"name", "partition_indexes"}]}]}
    resp {"markers": [{"producer_id", "topics": [{"name", "partitions":
          [{"partition_index", "error_code"}]}]}]}

Per partition, as Kafka: not hosted here -> NOT_LEADER_OR_FOLLOWER (known topic) or
UNKNOWN_TOPIC_OR_PARTITION; offline -> KAFKA_STORAGE_ERROR; a follower ->
NOT_LEADER_OR_FOLLOWER; fewer in-sync replicas than min.insync.replicas ->
NOT_ENOUGH_REPLICAS; a marker epoch older than the partition's epoch for the producer ->
INVALID_PRODUCER_EPOCH; a coordinator epoch older than the one of the producer's last
marker -> TRANSACTION_COORDINATOR_FENCED (Kafka's ProducerAppendInfo); append errors as a
Produce's; REQUEST_TIMED_OUT after request.timeout.ms without the HW passing it.

A marker that lands drops the producer's KIP-890 verification guard on the partition
(``txn_rules.VerificationGuards``). A committed marker on a ``__consumer_offsets``
partition is told to the group coordinator (``apis.groups.transaction_completed(
partition, producer_id, commit)``, when it has that method): its pending transactional
offsets become visible or are dropped (Kafka's onTransactionCompleted).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from node.broker.apis.common import not_hosted_error
from node.broker.failures import STORAGE_ERRORS
from node.broker.loop import now_ms
from node.core.replication import CompleteProduce
from node.wire import errors, protocol
from node.wire.errors import ErrorCode
from node.wire.protocol import OFFSETS_TOPIC
from shm import control
from shm.txn_state import marker_problem

logger = logging.getLogger("node.broker.server")

MARKERS_MAX = 10_000      # markers in one request (Kafka's coordinator batches per broker)


@dataclass(eq=False)
class MarkerRequest:
    """One WriteTxnMarkers request: answered once every partition is."""

    identity: object
    correlation_id: int
    results: list                         # per marker: {(topic, partition): error or None}
    remaining: int = 0
    in_handler: bool = True
    answered: bool = False
    commits: list = field(default_factory=list)   # per marker: its transaction_result
    producer_ids: list = field(default_factory=list)

    def complete(self, marker: int, key: tuple[str, int], error: int) -> None:
        assert self.results[marker][key] is None, ("completed twice", marker, key)
        self.results[marker][key] = int(error)
        self.remaining -= 1
        assert self.remaining >= 0


@dataclass(frozen=True, eq=False)
class MarkerAppend:
    """An appended marker waiting for the HW (the replication core's request id)."""

    request: MarkerRequest
    marker: int
    key: tuple[str, int]
    producer_id: int


def _markers(body: dict) -> list[dict]:
    markers = protocol.field(body, "markers", list)
    if len(markers) > MARKERS_MAX:
        raise protocol.ProtocolError(f"markers: {len(markers)} exceed {MARKERS_MAX}")
    for m in markers:
        if not isinstance(m, dict):
            raise protocol.ProtocolError("markers: every entry is a map")
        for name in ("producer_id", "producer_epoch", "coordinator_epoch"):
            protocol.field(m, name, int)
        protocol.field(m, "transaction_result", bool)
        for t in protocol.field(m, "topics", list):
            if not isinstance(t, dict):
                raise protocol.ProtocolError("topics: every entry is a map")
            protocol.field(t, "name", str)
            indexes = protocol.field(t, "partition_indexes", list)
            if not all(isinstance(p, int) and not isinstance(p, bool) for p in indexes):
                raise protocol.ProtocolError("partition_indexes must be ints")
    return markers


def handle_write_txn_markers(apis, identity, request: protocol.Request) -> None:
    markers = _markers(request.body)
    keys = [[(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]]
            for m in markers]
    if sum(map(len, keys)) > protocol.PARTITIONS_PER_REQUEST_MAX:
        raise protocol.ProtocolError("too many partitions in one request")
    results = [dict.fromkeys(k) for k in keys]
    req = MarkerRequest(identity, request.correlation_id, results,
                        sum(len(r) for r in results),
                        commits=[m["transaction_result"] for m in markers],
                        producer_ids=[m["producer_id"] for m in markers])
    now = now_ms()
    woken = []
    for i, (marker, marker_keys) in enumerate(zip(markers, results)):
        for key in marker_keys:
            part = _append_marker(apis, req, i, key, marker, now)
            if part is not None:
                woken.append(part)
    req.in_handler = False
    _maybe_answer(apis, req)
    for part in woken:
        apis.purgatory.wake(part.key, leo_moved=True)


def _append_marker(apis, req: MarkerRequest, index: int, key: tuple[str, int], marker: dict,
                   now: int):
    replicas = apis.replicas
    part = replicas.partitions.get(key)
    if part is None:
        req.complete(index, key, not_hosted_error(apis.metadata, *key))
        return None
    if replicas.is_offline(part):
        req.complete(index, key, ErrorCode.KAFKA_STORAGE_ERROR)
        return None
    error = part.core.check_produce(-1)
    if error:
        req.complete(index, key, error)
        return None
    pid, epoch = marker["producer_id"], marker["producer_epoch"]
    log = part.log
    try:
        error = marker_error(log.producer_states(), log.transaction_state(), pid, epoch,
                             marker["coordinator_epoch"])
        if error:
            logger.info("marker for producer %d epoch %d on %s-%d refused: %s", pid, epoch,
                        key[0], key[1], ErrorCode(error).name)
            req.complete(index, key, error)
            return None
        data = control.build_marker(pid, epoch, marker["transaction_result"],
                                    marker["coordinator_epoch"], now)
        info = log.append_as_leader(data, part.core.leader_epoch)
    except STORAGE_ERRORS as e:
        code = errors.code_for_exception(e)
        if isinstance(e, OSError):
            code = ErrorCode.KAFKA_STORAGE_ERROR
            replicas.storage_failed(part, e)
        req.complete(index, key, code)
        return None
    apis.txn_guards.clear(key, pid)
    apis.pending_produces += 1
    effects = part.core.on_leader_append(MarkerAppend(req, index, key, pid), -1,
                                         info.first_offset, info.last_offset,
                                         apis.config.request_timeout_ms, now, part.view)
    replicas.apply_effects(part, effects)
    return part


def marker_error(states, txns, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int) -> int:
    """Kafka's ProducerAppendInfo checks of a marker (``shm.txn_state.marker_problem``)
    against the partition's producers (``shm.producer_state.ProducerStates``) and
    transactions (``shm.txn_state.TxnState``): an older producer epoch is
    INVALID_PRODUCER_EPOCH, an older coordinator epoch than the one of the producer's
    last marker TRANSACTION_COORDINATOR_FENCED."""
    entry = states.entries.get(producer_id)
    problem = marker_problem(None if entry is None else entry.epoch, txns, producer_id,
                             producer_epoch, coordinator_epoch)
    return ErrorCode[problem] if problem else ErrorCode.NONE


def on_marker_complete(apis, part, effect: CompleteProduce) -> None:
    append: MarkerAppend = effect.request_id
    apis.pending_produces -= 1
    req = append.request
    req.complete(append.marker, append.key, effect.error)
    if not effect.error and append.key[0] == OFFSETS_TOPIC:
        hook = getattr(apis.groups, "transaction_completed", None)
        if hook is not None:
            try:
                hook(append.key[1], append.producer_id, req.commits[append.marker])
            except Exception:       # Kafka: logged, the partition answered UNKNOWN_SERVER_ERROR
                logger.exception("the group coordinator failed on a transaction marker")
                req.results[append.marker][append.key] = ErrorCode.UNKNOWN_SERVER_ERROR
    _maybe_answer(apis, req)


def _maybe_answer(apis, req: MarkerRequest) -> None:
    if req.remaining or req.in_handler or req.answered:
        return
    req.answered = True
    apis.send_response(req.identity, req.correlation_id, protocol.ApiKey.WRITE_TXN_MARKERS,
                       answer_body(req))


def answer_body(req: MarkerRequest) -> dict:
    out = []
    for results, pid in zip(req.results, req.producer_ids):
        topics: dict[str, list] = {}
        for (topic, partition), error in results.items():
            topics.setdefault(topic, []).append({"partition_index": partition,
                                                 "error_code": error})
        out.append({"producer_id": pid, "topics": [{"name": t, "partitions": ps}
                                                   for t, ps in topics.items()]})
    return {"markers": out}
