"""Transactional batches at the partition leader: the pure rules (KIP-98, KIP-890 part 1).

The Produce handler (``node.broker.apis.produce``) asks these before it appends a frame;
the shell that sends the verification (``node.broker.apis.txn_verify``) and the
WriteTxnMarkers handler (``node.broker.apis.txn_markers``) share the guards. No I/O here.

- ``frame_error``: Kafka's checks of one partition's frame (LogValidator, then
  ProducerAppendInfo): a control batch from a client is INVALID_RECORD; a transactional
  batch without a producer id, epoch or sequence is INVALID_RECORD; a frame mixing
  transactional and plain batches is INVALID_RECORD; a non-transactional batch of a
  producer with a transaction open on the partition is INVALID_TXN_STATE.
- ``needs_verification``: KIP-890 part 1: the first transactional batch of a producer
  with no transaction open on the partition is appended only once the transaction
  coordinator said the partition is in the producer's transaction (AddPartitionsToTxn
  v4+ ``verify_only``); ``plan_verification`` decides it for a whole Produce request
  (Kafka verifies a request's partitions together, one producer per request:
  INVALID_PRODUCER_ID_MAPPING for transactional batches of two producers).
- ``VerificationGuards`` (Kafka's VerificationStateEntry): a verification started for
  (partition, producer) holds a guard; a marker for that producer on the partition (the
  transaction ended while the answer travelled) drops it, and an append whose guard is
  gone is INVALID_TXN_STATE ("Record was not part of an ongoing transaction"): the
  stale "yes" of an ended transaction never opens a new one (the ABA case).
- ``verify_body`` / ``verify_outcome`` / ``produce_error``: the AddPartitionsToTxn
  request, its answer per partition, and Kafka's mapping of the coordinator's errors for
  a Produce (ReplicaManager: retriable coordinator errors become NOT_ENOUGH_REPLICAS, an
  error every producer retries without a metadata refresh).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from node.wire.errors import ErrorCode
from shm.batch_format import BatchHeader

ATTR_TRANSACTIONAL = 0x10       # Kafka's bits (shm.batch_format names them too)
ATTR_CONTROL = 0x20
CONTROL_MESSAGE = "clients are not allowed to write control records"
NOT_IN_TXN_MESSAGE = "Record was not part of an ongoing transaction"
NOT_ADDED_MESSAGE = "Partition was not added to the transaction"
# The coordinator's retriable answers, as Kafka maps them for a Produce.
_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
CLUSTER_AUTHORIZATION_FAILED = 31  # Kafka's: never shown to a producer (INVALID_TXN_STATE)
# Kafka's AddPartitionsToTxnManager: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to a
# producer (the caller maps TRANSACTION_ABORTABLE for its request's version).
_AS_PRODUCER_SEES = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH}
GUARDED_PARTITIONS_MAX = 100_000    # a bound on the guards kept (one per verification)


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & ATTR_TRANSACTIONAL)


def is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & ATTR_CONTROL)


def frame_error(headers: list[BatchHeader], ongoing: Mapping[int, int]
                ) -> tuple[int, str] | None:
    """(error, message) if a client's frame breaks a transactional rule, else None.
    ``ongoing``: producer id -> first offset of its open transaction on the partition."""
    kinds = set()
    for h in headers:
        if is_control(h):
            return ErrorCode.INVALID_RECORD, CONTROL_MESSAGE
        if is_transactional(h):
            if h.producer_id < 0 or h.producer_epoch < 0 or h.base_sequence < 0:
                return ErrorCode.INVALID_RECORD, (
                    f"a transactional batch needs a producer id, epoch and sequence (got "
                    f"{h.producer_id}, {h.producer_epoch}, {h.base_sequence})")
            kinds.add(True)
        else:
            kinds.add(False)
            if h.producer_id >= 0 and h.producer_id in ongoing:
                return ErrorCode.INVALID_TXN_STATE, (
                    f"Expected transactional write from producer {h.producer_id} at offset "
                    f"{h.base_offset}: it has a transaction open since offset "
                    f"{ongoing[h.producer_id]}")
    if len(kinds) > 1:
        return ErrorCode.INVALID_RECORD, "a frame mixes transactional and plain batches"
    return None


def transactional_producer(headers: list[BatchHeader]) -> tuple[int, int] | None:
    """(producer id, epoch) of a frame's transactional batches (the first one's)."""
    for h in headers:
        if is_transactional(h) and not is_control(h):
            return h.producer_id, h.producer_epoch
    return None


def needs_verification(headers: list[BatchHeader], ongoing: Mapping[int, int]
                       ) -> tuple[int, int] | None:
    """(producer id, epoch) when this frame would open its producer's transaction on the
    partition (so the coordinator must be asked first), else None."""
    producer = transactional_producer(headers)
    if producer is None or producer[0] in ongoing:
        return None
    return producer


@dataclass(frozen=True)
class VerificationPlan:
    """What a Produce request needs before its appends: ``verify`` maps a request entry's
    index to its partition key; ``producer`` is the (id, epoch) asked about; ``errors``
    maps entries answered at once (index -> (error, message))."""

    producer: tuple[int, int] | None
    verify: dict[int, tuple[str, int]]
    errors: dict[int, tuple[int, str]]


def plan_verification(frames: list[tuple[int, tuple[str, int], list[BatchHeader],
                                         Mapping[int, int]]],
                      transactional_id: str | None) -> VerificationPlan:
    """``frames``: per hosted partition the leader may append to, (request index, key,
    its batch headers, its open transactions). One producer per request (Kafka's
    InvalidPidMappingException: every such partition INVALID_PRODUCER_ID_MAPPING)."""
    producers = {}
    for index, key, headers, ongoing in frames:
        producer = needs_verification(headers, ongoing)
        if producer is not None:
            producers[index] = (key, producer)
    if not producers:
        return VerificationPlan(None, {}, {})
    if len({p for _, p in producers.values()}) > 1:
        message = "Transactional records contained more than one producer ID"
        return VerificationPlan(None, {}, {i: (ErrorCode.INVALID_PRODUCER_ID_MAPPING, message)
                                           for i in producers})
    if not transactional_id:
        message = "transactional batches need the request's transactional_id"
        return VerificationPlan(None, {}, {i: (ErrorCode.INVALID_REQUEST, message)
                                           for i in producers})
    producer = next(iter(producers.values()))[1]
    return VerificationPlan(producer, {i: key for i, (key, _) in producers.items()}, {})


class VerificationGuards:
    """Kafka's VerificationStateEntry per (partition key, producer id): a token."""

    def __init__(self) -> None:
        self._guards: dict[tuple[tuple[str, int], int], object] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._guards)

    def start(self, key: tuple[str, int], producer_id: int) -> object:
        """The guard of a verification of (partition, producer): the one already
        started if any (Kafka reuses its entry: requests of a producer pipelined
        behind one another share it; the coordinator answers them in order), else a
        new one."""
        existing = self._guards.get((key, producer_id))
        if existing is not None:
            return existing
        if len(self._guards) >= GUARDED_PARTITIONS_MAX:
            self._guards.pop(next(iter(self._guards)))      # the oldest: it fails later
        self._next += 1
        self._guards[(key, producer_id)] = self._next
        return self._next

    def holds(self, key: tuple[str, int], producer_id: int, token) -> bool:
        return token is not None and self._guards.get((key, producer_id)) == token

    def clear(self, key: tuple[str, int], producer_id: int) -> None:
        """The transaction opened (the batch appended) or ended (a marker)."""
        self._guards.pop((key, producer_id), None)

    def clear_partition(self, key: tuple[str, int]) -> None:
        """The partition is no longer led here."""
        for k in [k for k in self._guards if k[0] == key]:
            del self._guards[k]


def verify_body(transactional_id: str, producer_id: int, producer_epoch: int,
                keys) -> dict:
    """AddPartitionsToTxn (v4+, Kafka's fields as a dict) asking whether ``keys`` are in
    the producer's transaction, adding nothing."""
    topics: dict[str, list[int]] = {}
    for topic, partition in keys:
        topics.setdefault(topic, []).append(partition)
    return {"transactions": [{
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": producer_epoch, "verify_only": True,
        "topics": [{"name": t, "partitions": sorted(set(ps))} for t, ps in topics.items()]}]}


def verify_outcome(body: dict | None, transactional_id: str, keys
                   ) -> dict[tuple[str, int], int]:
    """The coordinator's answer (None: none came) -> error code per partition key, as a
    producer is told (``_AS_PRODUCER_SEES``). A partition it does not name is
    INVALID_TXN_STATE (not verified)."""
    keys = list(keys)
    if body is None:
        return {k: ErrorCode.NETWORK_EXCEPTION for k in keys}
    top = body.get("error_code") or body.get("error") or 0
    if top:
        code = ErrorCode.INVALID_TXN_STATE if top == CLUSTER_AUTHORIZATION_FAILED else top
        return {k: code for k in keys}
    found: dict[tuple[str, int], int] = {}
    for result in body.get("results_by_transaction") or ():
        if result.get("transactional_id") != transactional_id:
            continue
        for topic in result.get("topic_results") or ():
            for p in topic.get("results_by_partition") or ():
                found[(topic.get("name"), p.get("partition_index"))] = \
                    p.get("partition_error_code", 0)
    codes = {k: found.get(k, ErrorCode.INVALID_TXN_STATE) for k in keys}
    return {k: _AS_PRODUCER_SEES.get(code, code) for k, code in codes.items()}


def produce_error(code: int) -> tuple[int, str | None]:
    """A failed verification as a Produce partition's answer (Kafka's ReplicaManager;
    TRANSACTION_ABORTABLE is INVALID_TXN_STATE before Produce v12, every version here)."""
    if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE):
        return ErrorCode.INVALID_TXN_STATE, NOT_ADDED_MESSAGE
    if code in _RETRIABLE:
        name = ErrorCode(code).name
        return ErrorCode.NOT_ENOUGH_REPLICAS, (
            f"Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {name}")
    return code, None
