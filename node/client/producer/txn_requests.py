"""The requests of a transactional producer (Kafka's TransactionManager's
TxnRequestHandlers): each ``Handler`` builds its body when sent (the current producer id
and epoch) and decides what its answer does to the ``transactions.TransactionManager``
(the rules are that module's); also the states, their transitions and ``TxnResult``.
The wire: Kafka's API keys, bodies of Kafka's fields as dicts (contract section 3).
"""
from __future__ import annotations

import enum
import threading

from node.client.types import (CommitFailedError, ConsumerGroupMetadata, KafkaTimeoutError)
from node.wire import errors
from node.wire.errors import ErrorCode, KafkaError
from node.wire.protocol import ApiKey

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
# Kafka's API keys of the transaction coordinator (node.wire.protocol.ApiKey names them
# once the broker's side is merged; numbers here so the client does not depend on it).
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
# AddPartitionsToTxn v0-3 is the client's form (v4+ is batched, broker to coordinator);
# the native body names its Kafka version in ``kafka_version`` (else the newest).
KAFKA_VERSION = "kafka_version"
CLIENT_ADD_PARTITIONS_VERSION = 3
# Kafka's TransactionManager priorities (smaller first).
PRIORITY_FIND_COORDINATOR = 0
PRIORITY_INIT_PRODUCER_ID = 1
PRIORITY_ADD_PARTITIONS_OR_OFFSETS = 2
PRIORITY_END_TXN = 3
# Kafka retries AddPartitionsToTxn after CONCURRENT_TRANSACTIONS sooner than the
# ordinary backoff (20 ms): the previous transaction's markers are usually nearly done.
# Here the first retry comes after 2 ms, doubling up to Kafka's 20 ms: a transaction's
# completion takes a few ms, and a fixed 20 ms made back-to-back transactions of 100
# records four times slower (18 against 79 transactions/s on a 3-broker test cluster).
CONCURRENT_TRANSACTIONS_BACKOFF_MIN_S = 0.002
CONCURRENT_TRANSACTIONS_BACKOFF_MAX_S = 0.02
assert CONCURRENT_TRANSACTIONS_BACKOFF_MIN_S <= CONCURRENT_TRANSACTIONS_BACKOFF_MAX_S


def concurrent_backoff_s(retries: int) -> float:
    """The backoff before the ``retries``-th resend after CONCURRENT_TRANSACTIONS."""
    return min(CONCURRENT_TRANSACTIONS_BACKOFF_MAX_S,
               CONCURRENT_TRANSACTIONS_BACKOFF_MIN_S * 2 ** min(retries - 1, 16))

class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = State
# target state -> the states it may be entered from (FATAL_ERROR: from any).
TRANSITIONS = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.COMMITTING_TRANSACTION,
                               S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION,
                                  S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(State),
}


def code_error(code: int, message: str | None = None) -> KafkaError:
    return errors.error_for(code)(message)


def fenced() -> KafkaError:
    return code_error(ErrorCode.PRODUCER_FENCED)


def _retriable(code: int) -> bool:
    return errors.error_for(code).retriable


def _top_code(body: dict) -> int:
    """A whole answer's code: Kafka's ``error_code``, or the native refusal's ``error``."""
    if not isinstance(body, dict):
        return int(ErrorCode.INVALID_REQUEST)
    code = body.get("error_code")
    if code is None:
        code = body.get("error")
    return int(code or 0)


class TxnResult:
    """Kafka's TransactionalRequestResult: done once, maybe with an error."""

    def __init__(self, operation: str):
        self.operation = operation
        self._event = threading.Event()
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def succeed(self) -> None:
        self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self.error = error
            self._event.set()

    def wait(self, timeout_s: float | None) -> None:
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError(f"Timeout expired after {timeout_s} s while awaiting "
                                    f"{self.operation}")
        if self.error is not None:
            raise self.error


# ------------------------------------------------------------------ request handlers

class Handler:
    """One coordinator request: its body (built when sent: the current id/epoch) and
    what its answer does. ``coordinator``: (key type, key) or None (any broker)."""

    api_key: int = -1
    priority = PRIORITY_ADD_PARTITIONS_OR_OFFSETS
    is_end_txn = False

    def __init__(self, result: TxnResult | None):
        self.result = result or TxnResult(type(self).__name__)
        self.coordinator: tuple[int, str] | None = None

    def body(self, tm) -> dict:
        raise NotImplementedError

    def handle(self, tm, body: dict) -> None:
        raise NotImplementedError

    def coordinator_error(self, tm, code: int) -> bool:
        """NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: look again, send again."""
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            tm.lookup(self.coordinator)
            tm.reenqueue(self)
            return True
        return False


class FindCoordinator(Handler):
    api_key = ApiKey.FIND_COORDINATOR
    priority = PRIORITY_FIND_COORDINATOR

    def __init__(self, key: tuple[int, str]):
        super().__init__(None)
        self.key = key

    def body(self, tm):
        return {"key_type": self.key[0], "coordinator_keys": [self.key[1]]}

    def handle(self, tm, body):
        code = _top_code(body)
        entry = ((body.get("coordinators") or [body]) if isinstance(body, dict) else [{}])[0]
        code = code or int(entry.get("error_code") or 0)
        if not code and isinstance(entry.get("node_id"), int) and entry["node_id"] >= 0:
            endpoint = tm.io.endpoint_of(entry["node_id"]) or \
                f"tcp://{entry.get('host')}:{int(entry.get('port', -1))}"
            tm.coordinators[self.key] = endpoint
            self.result.succeed()
        elif not code:
            tm.reenqueue(self)          # no node yet: ask again
        elif _retriable(code):
            tm.reenqueue(self)
        elif code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            tm.fatal(code_error(code))
        elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            tm.abortable(code_error(code, f"group {self.key[1]}"))
        else:
            tm.fatal(code_error(code, f"FindCoordinator for {self.key}: "
                                      f"{entry.get('error_message') or ''}"))


class InitProducerId(Handler):
    api_key = ApiKey.INIT_PRODUCER_ID
    priority = PRIORITY_INIT_PRODUCER_ID

    def __init__(self, result, tm, bump: bool):
        super().__init__(result)
        self.coordinator = (KEY_TYPE_TRANSACTION, tm.transactional_id)
        self.bump = bump

    def body(self, tm):
        bump = self.bump and tm.producer_id >= 0
        return {"transactional_id": tm.transactional_id,
                "transaction_timeout_ms": tm.transaction_timeout_ms,
                "producer_id": tm.producer_id if bump else -1,
                "producer_epoch": tm.producer_epoch if bump else -1}

    def handle(self, tm, body):
        code = _top_code(body)
        if not code:
            tm.set_producer(int(body["producer_id"]), int(body["producer_epoch"]))
            tm.reset_transaction()
            tm.transition(S.READY)
            self.result.succeed()
        elif self.coordinator_error(tm, code):
            pass
        elif _retriable(code):
            tm.reenqueue(self)
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                      ErrorCode.TRANSACTION_ABORTABLE):
            tm.abortable(code_error(code), self)
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            tm.fatal(fenced(), self)
        else:
            tm.fatal(code_error(code, "unexpected error in InitProducerId"), self)


class AddPartitions(Handler):
    api_key = ADD_PARTITIONS_TO_TXN

    def __init__(self, tm, partitions: set):
        super().__init__(None)
        self.coordinator = (KEY_TYPE_TRANSACTION, tm.transactional_id)
        self.partitions = frozenset(partitions)
        self.concurrent_retries = 0

    def body(self, tm):
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return {KAFKA_VERSION: CLIENT_ADD_PARTITIONS_VERSION,
                "v3_and_below_transactional_id": tm.transactional_id,
                "v3_and_below_producer_id": tm.producer_id,
                "v3_and_below_producer_epoch": tm.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps}
                                        for t, ps in by_topic.items()]}

    @staticmethod
    def partition_errors(body: dict) -> dict:
        topics = body.get("results_by_topic_v3_and_below")
        if not topics:
            for txn in body.get("results_by_transaction") or ():
                topics = txn.get("topic_results")
        return {(t["name"], int(p["partition_index"])): int(p.get("partition_error_code") or 0)
                for t in topics or () for p in t.get("results_by_partition") or ()}

    def handle(self, tm, body):
        code = _top_code(body)
        found = {} if code else self.partition_errors(body)
        if not code and set(found) != set(self.partitions):
            code = int(ErrorCode.UNKNOWN_SERVER_ERROR)
        codes = [code] if code else [c for c in found.values() if c]
        failed = False
        for c in codes:
            if self.coordinator_error(tm, c):
                return
            if c == ErrorCode.CONCURRENT_TRANSACTIONS:
                self.concurrent_retries += 1
                tm.reenqueue(self, concurrent_backoff_s(self.concurrent_retries))
                return
            if _retriable(c):
                tm.reenqueue(self)
                return
            if c in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
                tm.fatal(fenced())
                return
            if c in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                     ErrorCode.INVALID_TXN_STATE):
                tm.fatal(code_error(c))
                return
            if c in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
                tm.abortable_if_possible(code_error(c))
                return
            if c == ErrorCode.TRANSACTION_ABORTABLE:
                tm.abortable(code_error(c))
                return
            failed = True       # OPERATION_NOT_ATTEMPTED or an unexpected code
        tm.pending_partitions -= self.partitions
        if failed:
            tm.abortable(KafkaError(f"Could not add partitions to transaction due to "
                                    f"errors: {found or code}"))
            return
        tm.partitions_in_txn |= self.partitions
        tm.transaction_started = True
        self.result.succeed()


class AddOffsets(Handler):
    api_key = ADD_OFFSETS_TO_TXN

    def __init__(self, result, tm, offsets: dict, group: ConsumerGroupMetadata):
        super().__init__(result)
        self.coordinator = (KEY_TYPE_TRANSACTION, tm.transactional_id)
        self.offsets = offsets
        self.group = group
        self.concurrent_retries = 0

    def body(self, tm):
        return {"transactional_id": tm.transactional_id, "producer_id": tm.producer_id,
                "producer_epoch": tm.producer_epoch, "group_id": self.group.group_id}

    def handle(self, tm, body):
        code = _top_code(body)
        if not code:
            tm.transaction_started = True
            tm.enqueue(TxnOffsetCommit(self.result, tm, self.offsets, self.group))
        elif self.coordinator_error(tm, code):
            pass
        elif code == ErrorCode.CONCURRENT_TRANSACTIONS:     # as AddPartitions'
            self.concurrent_retries += 1
            tm.reenqueue(self, concurrent_backoff_s(self.concurrent_retries))
        elif _retriable(code):
            tm.reenqueue(self)
        elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
            tm.abortable_if_possible(code_error(code), self)
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            tm.fatal(fenced(), self)
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                      ErrorCode.INVALID_TXN_STATE):
            tm.fatal(code_error(code), self)
        elif code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TRANSACTION_ABORTABLE):
            tm.abortable(code_error(code, f"group {self.group.group_id}"), self)
        else:
            tm.fatal(code_error(code, "unexpected error in AddOffsetsToTxn"), self)


class TxnOffsetCommit(Handler):
    api_key = TXN_OFFSET_COMMIT

    def __init__(self, result, tm, offsets: dict, group: ConsumerGroupMetadata):
        super().__init__(result)
        self.coordinator = (KEY_TYPE_GROUP, group.group_id)
        self.pending = dict(offsets)        # (topic, partition) -> OffsetAndMetadata
        self.group = group

    def body(self, tm):
        by_topic: dict[str, list] = {}
        for (topic, partition), om in sorted(self.pending.items()):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
        g = self.group
        return {"transactional_id": tm.transactional_id, "group_id": g.group_id,
                "producer_id": tm.producer_id, "producer_epoch": tm.producer_epoch,
                "generation_id": g.generation_id, "member_id": g.member_id,
                "group_instance_id": g.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def handle(self, tm, body):
        code = _top_code(body)
        if code:
            found = {tp: code for tp in self.pending}
        else:
            found = {(t["name"], int(p["partition_index"])): int(p.get("error_code") or 0)
                     for t in body.get("topics") or () for p in t.get("partitions") or ()}
        looked = False
        for tp, c in found.items():
            if not c:
                self.pending.pop(tp, None)
            elif c in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                       ErrorCode.REQUEST_TIMED_OUT):
                if not looked:
                    looked = True
                    tm.lookup(self.coordinator)
            elif _retriable(c):
                continue
            elif c in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.FENCED_INSTANCE_ID,
                       ErrorCode.TRANSACTION_ABORTABLE):
                tm.abortable(code_error(c, f"group {self.group.group_id}"), self)
                return
            elif c in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                tm.abortable(CommitFailedError(
                    f"Transaction offset Commit failed due to consumer group metadata "
                    f"mismatch: {errors.name_of(c)}"), self)
                return
            elif c in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
                tm.fatal(fenced(), self)
                return
            else:
                tm.fatal(code_error(c, "unexpected error in TxnOffsetCommit"), self)
                return
        if not self.pending:
            self.result.succeed()
        else:
            tm.reenqueue(self)


class EndTxn(Handler):
    api_key = END_TXN
    priority = PRIORITY_END_TXN
    is_end_txn = True

    def __init__(self, result, tm, commit: bool):
        super().__init__(result)
        self.coordinator = (KEY_TYPE_TRANSACTION, tm.transactional_id)
        self.commit = commit

    def body(self, tm):
        return {"transactional_id": tm.transactional_id, "producer_id": tm.producer_id,
                "producer_epoch": tm.producer_epoch, "committed": self.commit}

    def handle(self, tm, body):
        code = _top_code(body)
        if not code:
            pid, epoch = int(body.get("producer_id", -1)), int(body.get("producer_epoch", -1))
            if pid >= 0 and epoch >= 0:       # EndTxn v5 (KIP-890 part 2): the next epoch
                tm.set_producer(pid, epoch)
                tm.epoch_bump_required = False
            if tm.complete_transaction():
                self.result.succeed()
            else:       # KIP-360: a new epoch before the next transaction
                tm.enqueue(InitProducerId(self.result, tm, bump=True))
        elif self.coordinator_error(tm, code):
            pass
        elif _retriable(code):
            tm.reenqueue(self)
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            tm.fatal(fenced(), self)
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                      ErrorCode.INVALID_TXN_STATE):
            tm.fatal(code_error(code), self)
        elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
            tm.abortable_if_possible(code_error(code), self)
        elif code == ErrorCode.TRANSACTION_ABORTABLE:
            tm.abortable(code_error(code), self)
        else:
            tm.fatal(code_error(code, "unhandled error in EndTxn"), self)
