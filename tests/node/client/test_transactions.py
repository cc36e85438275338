"""The transactional producer's TransactionManager, driven directly: the test is the I/O
thread (``step``, ``on_completion``) and the coordinators (it answers what was sent).

A call that would block is made with ``timeout_s=0``: it times out, its operation stays
pending, the test answers the requests, and the same call again returns at once (Kafka's
retry of a timed-out transactional call)."""
from __future__ import annotations

import time

import pytest

from node.client.producer.transactions import State, TransactionManager
from node.client.producer.txn_requests import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN,
                                               END_TXN, TXN_OFFSET_COMMIT)
from node.client.types import (CommitFailedError, ConsumerGroupMetadata, IllegalStateError,
                               KafkaTimeoutError, OffsetAndMetadata, ProducerFencedError)
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

LATER = 1e9     # a ``now`` past every backoff


class FakeIO:
    """What the sender gives the manager; records the requests sent."""

    def __init__(self):
        self.sent: list = []
        self.incomplete = False
        self.aborted: list = []

    def endpoint_of(self, node_id):
        return f"tcp://broker{node_id}:9092"

    def any_endpoint(self):
        return "tcp://bootstrap:9092"

    def has_incomplete(self):
        return self.incomplete

    def abort_undrained(self, error):
        self.aborted.append(error)

    def send(self, endpoint, api_key, body, context):
        assert context[0] == "txn"
        self.sent.append((endpoint, int(api_key), body, context[1]))


def _tm():
    return TransactionManager("tx-1", 60_000, retry_backoff_s=0.05), FakeIO()


def _next(tm, io, now=LATER):
    """Step once; the one request sent (endpoint, api key, body, handler)."""
    before = len(io.sent)
    tm.step(now, io)
    assert len(io.sent) == before + 1, f"expected one request, got {io.sent[before:]}"
    return io.sent[-1]


def _answer(tm, sent, body):
    tm.on_completion(sent[3], body, 0)


def _coordinator_found(tm, io, node=2, key_type=1, key="tx-1"):
    sent = _next(tm, io)
    assert sent[:3] == ("tcp://bootstrap:9092", ApiKey.FIND_COORDINATOR,
                        {"key_type": key_type, "coordinator_keys": [key]})
    _answer(tm, sent, {"coordinators": [{"key": key, "node_id": node, "host": "h", "port": 1,
                                         "error_code": 0, "error_message": None}]})


def _ready(tm, io, pid=5, epoch=0):
    with pytest.raises(KafkaTimeoutError):
        tm.init_transactions(timeout_s=0)
    _coordinator_found(tm, io)
    sent = _next(tm, io)
    assert sent[0] == "tcp://broker2:9092" and sent[1] == ApiKey.INIT_PRODUCER_ID
    assert sent[2] == {"transactional_id": "tx-1", "transaction_timeout_ms": 60_000,
                       "producer_id": -1, "producer_epoch": -1}
    _answer(tm, sent, {"error_code": 0, "producer_id": pid, "producer_epoch": epoch,
                       "throttle_time_ms": 0})
    tm.init_transactions(timeout_s=0)       # the pending call, done now
    assert tm.state is State.READY and tm.producer() == (pid, epoch)


def _add(tm, io, *tps, errors=None):
    for tp in tps:
        tm.add_partition(tp)
    sent = _next(tm, io)
    assert sent[1] == ADD_PARTITIONS_TO_TXN
    results = {}
    for topic, partition in tps:
        results.setdefault(topic, []).append(
            {"partition_index": partition,
             "partition_error_code": (errors or {}).get((topic, partition), 0)})
    _answer(tm, sent, {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": t, "results_by_partition": ps} for t, ps in results.items()]})
    return sent


def test_init_transactions_finds_the_transaction_coordinator_then_gets_an_id():
    tm, io = _tm()
    _ready(tm, io)
    assert tm.coordinators == {(1, "tx-1"): "tcp://broker2:9092"}


def test_init_retries_concurrent_transactions_after_the_backoff_and_refinds_a_moved_coordinator():
    tm, io = _tm()
    with pytest.raises(KafkaTimeoutError):
        tm.init_transactions(timeout_s=0)
    _coordinator_found(tm, io)
    _answer(tm, _next(tm, io), {"error_code": ErrorCode.CONCURRENT_TRANSACTIONS})
    tm.step(time.monotonic(), io)                     # inside the backoff: nothing
    assert io.sent[-1][1] == ApiKey.INIT_PRODUCER_ID and len(io.sent) == 2
    _answer(tm, _next(tm, io), {"error_code": ErrorCode.NOT_COORDINATOR})
    _coordinator_found(tm, io, node=3)
    sent = _next(tm, io)
    assert sent[0] == "tcp://broker3:9092" and sent[1] == ApiKey.INIT_PRODUCER_ID
    tm.on_completion(sent[3], None, ErrorCode.NETWORK_EXCEPTION)     # a lost connection
    _coordinator_found(tm, io, node=3)
    _answer(tm, _next(tm, io), {"error_code": 0, "producer_id": 9, "producer_epoch": 4})
    tm.init_transactions(timeout_s=0)
    assert tm.producer() == (9, 4)


def test_another_call_while_a_timed_out_one_is_pending_is_refused():
    tm, io = _tm()
    with pytest.raises(KafkaTimeoutError):
        tm.init_transactions(timeout_s=0)
    with pytest.raises(IllegalStateError, match="initTransactions"):
        tm.begin_transaction()


def test_send_outside_a_transaction_is_refused():
    tm, io = _tm()
    _ready(tm, io)
    with pytest.raises(IllegalStateError):
        tm.add_partition(("t", 0))


def test_partitions_are_added_together_before_their_batches_may_go():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    tm.add_partition(("a", 0))
    tm.add_partition(("b", 1))
    tm.add_partition(("a", 0))
    assert not tm.may_send(("a", 0))
    sent = _next(tm, io)
    assert sent[:3] == ("tcp://broker2:9092", ADD_PARTITIONS_TO_TXN, {
        "kafka_version": 3, "v3_and_below_transactional_id": "tx-1", "v3_and_below_producer_id": 5,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "a", "partitions": [0]},
                                {"name": "b", "partitions": [1]}]})
    tm.add_partition(("a", 0))          # pending: not asked again
    tm.step(LATER, io)
    assert len(io.sent) == 3, "one request in flight at a time, and no second add"
    _answer(tm, sent, {"results_by_topic_v3_and_below": [
        {"name": "a", "results_by_partition": [{"partition_index": 0,
                                                 "partition_error_code": 0}]},
        {"name": "b", "results_by_partition": [{"partition_index": 1,
                                                 "partition_error_code": 0}]}]})
    assert tm.may_send(("a", 0)) and tm.may_send(("b", 1)) and tm.transaction_started


def test_commit_waits_for_every_batch_then_takes_the_epoch_endtxn_v5_answers():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    _add(tm, io, ("a", 0))
    io.incomplete = True
    with pytest.raises(KafkaTimeoutError):
        tm.commit(0, None)
    tm.step(LATER, io)
    assert io.sent[-1][1] == ADD_PARTITIONS_TO_TXN, "EndTxn went before the batches completed"
    io.incomplete = False
    sent = _next(tm, io)
    assert sent[1:3] == (END_TXN, {"transactional_id": "tx-1", "producer_id": 5,
                                   "producer_epoch": 0, "committed": True})
    _answer(tm, sent, {"error_code": 0, "producer_id": 5, "producer_epoch": 1})
    tm.commit(0, None)
    assert tm.state is State.READY and tm.producer() == (5, 1)
    assert not tm.partitions_in_txn


def test_a_transaction_that_added_nothing_ends_without_endtxn():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    with pytest.raises(KafkaTimeoutError):
        tm.abort(0)
    tm.step(LATER, io)
    assert len(io.sent) == 2        # FindCoordinator, InitProducerId: nothing more
    tm.abort(0)
    assert tm.state is State.READY


def test_a_fenced_producer_is_fatal_for_every_later_call():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    _add(tm, io, ("a", 0))
    with pytest.raises(KafkaTimeoutError):
        tm.commit(0, None)
    _answer(tm, _next(tm, io), {"error_code": ErrorCode.PRODUCER_FENCED})
    with pytest.raises(ProducerFencedError):
        tm.commit(0, None)
    assert tm.state is State.FATAL_ERROR
    for call in (tm.begin_transaction, lambda: tm.abort(0), lambda: tm.add_partition(("a", 1))):
        with pytest.raises(ProducerFencedError):
            call()


def test_invalid_producer_epoch_from_the_coordinator_is_fenced_too():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    tm.add_partition(("a", 0))
    _answer(tm, _next(tm, io), {"results_by_topic_v3_and_below": [
        {"name": "a", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": ErrorCode.INVALID_PRODUCER_EPOCH}]}]})
    assert tm.state is State.FATAL_ERROR and isinstance(tm.last_error, ProducerFencedError)


def test_a_failed_batch_makes_the_commit_fail_and_the_abort_takes_a_new_epoch():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    _add(tm, io, ("a", 0))
    failure = RuntimeError("NOT_ENOUGH_REPLICAS after retries")
    tm.batch_failed(failure)
    assert tm.state is State.ABORTABLE_ERROR
    with pytest.raises(RuntimeError, match="NOT_ENOUGH_REPLICAS"):
        tm.commit(0, None)
    with pytest.raises(RuntimeError, match="NOT_ENOUGH_REPLICAS"):
        tm.add_partition(("a", 1))
    with pytest.raises(KafkaTimeoutError):
        tm.abort(0)
    sent = _next(tm, io)
    assert sent[1] == END_TXN and sent[2]["committed"] is False
    _answer(tm, sent, {"error_code": 0})            # no v5 epoch: KIP-360's InitProducerId
    sent = _next(tm, io)
    assert sent[1] == ApiKey.INIT_PRODUCER_ID and \
        (sent[2]["producer_id"], sent[2]["producer_epoch"]) == (5, 0)
    assert tm.producer() is None, "batches must wait for the new epoch"
    _answer(tm, sent, {"error_code": 0, "producer_id": 5, "producer_epoch": 1})
    tm.abort(0)
    assert tm.state is State.READY and tm.producer() == (5, 1)


def test_aborting_fails_the_batches_not_sent():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    _add(tm, io, ("a", 0))
    io.incomplete = True
    with pytest.raises(KafkaTimeoutError):
        tm.abort(0)
    tm.step(LATER, io)
    assert len(io.aborted) == 1 and io.sent[-1][1] == ADD_PARTITIONS_TO_TXN


def test_send_offsets_adds_the_group_then_commits_at_its_coordinator():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    group = ConsumerGroupMetadata("g1", 7, "member-1", None)
    offsets = {("in", 0): OffsetAndMetadata(42), ("in", 1): OffsetAndMetadata(9, "m", 3)}
    with pytest.raises(KafkaTimeoutError):
        tm.send_offsets(offsets, group, 0)
    sent = _next(tm, io)
    assert sent[:3] == ("tcp://broker2:9092", ADD_OFFSETS_TO_TXN, {
        "transactional_id": "tx-1", "producer_id": 5, "producer_epoch": 0, "group_id": "g1"})
    _answer(tm, sent, {"error_code": 0})
    _coordinator_found(tm, io, node=1, key_type=0, key="g1")
    sent = _next(tm, io)
    assert sent[0] == "tcp://broker1:9092" and sent[1] == TXN_OFFSET_COMMIT
    assert sent[2] == {
        "transactional_id": "tx-1", "group_id": "g1", "producer_id": 5, "producer_epoch": 0,
        "generation_id": 7, "member_id": "member-1", "group_instance_id": None,
        "topics": [{"name": "in", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
             "committed_metadata": ""},
            {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": 3,
             "committed_metadata": "m"}]}]}
    _answer(tm, sent, {"topics": [{"name": "in", "partitions": [
        {"partition_index": 0, "error_code": 0},
        {"partition_index": 1, "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}]}]})
    sent = _next(tm, io)                 # only the partition left
    assert [p["partition_index"] for p in sent[2]["topics"][0]["partitions"]] == [1]
    _answer(tm, sent, {"topics": [{"name": "in", "partitions": [
        {"partition_index": 1, "error_code": 0}]}]})
    tm.send_offsets(offsets, group, 0)
    assert tm.transaction_started and tm.state is State.IN_TRANSACTION


def test_a_stale_member_makes_the_offsets_commit_failed_and_abortable():
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    group = ConsumerGroupMetadata("g1", 7, "member-1", None)
    with pytest.raises(KafkaTimeoutError):
        tm.send_offsets({("in", 0): OffsetAndMetadata(1)}, group, 0)
    _answer(tm, _next(tm, io), {"error_code": 0})
    _coordinator_found(tm, io, node=1, key_type=0, key="g1")
    _answer(tm, _next(tm, io), {"topics": [{"name": "in", "partitions": [
        {"partition_index": 0, "error_code": ErrorCode.ILLEGAL_GENERATION}]}]})
    with pytest.raises(CommitFailedError):
        tm.send_offsets({("in", 0): OffsetAndMetadata(1)}, group, 0)
    assert tm.state is State.ABORTABLE_ERROR


def test_a_native_refusal_of_a_request_is_its_error():
    tm, io = _tm()
    with pytest.raises(KafkaTimeoutError):
        tm.init_transactions(timeout_s=0)
    _coordinator_found(tm, io)
    _answer(tm, _next(tm, io), {"error": ErrorCode.UNSUPPORTED_VERSION,
                                "error_message": "no"})
    assert tm.state is State.FATAL_ERROR


def test_concurrent_transactions_on_add_partitions_retries_soon_then_backs_off():
    """The previous transaction's markers are still being written: asked again after
    2 ms, then 4, 8, ... up to Kafka's 20 ms."""
    tm, io = _tm()
    _ready(tm, io)
    tm.begin_transaction()
    tm.add_partition(("a", 0))
    waits = []
    for _ in range(5):
        sent = _next(tm, io)
        assert sent[1] == ADD_PARTITIONS_TO_TXN
        before = time.monotonic()
        _answer(tm, sent, {"results_by_topic_v3_and_below": [
            {"name": "a", "results_by_partition": [
                {"partition_index": 0,
                 "partition_error_code": ErrorCode.CONCURRENT_TRANSACTIONS}]}]})
        waits.append(tm.next_send_s - before)
    for wait, expected in zip(waits, [0.002, 0.004, 0.008, 0.016, 0.02]):
        assert expected <= wait < expected + 0.015, waits   # + the test's own delay
    assert not tm.may_send(("a", 0)) and tm.state is State.IN_TRANSACTION
