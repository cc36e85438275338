"""The partition leader's side of transactions on a real broker, driven by hand (the test
plays the transaction coordinator: tests.node.txn_wire): transactional Produce, Kafka's
INVALID_TXN_STATE, WriteTxnMarkers (epochs, acks=all answers, errors), read_committed
Fetch (stops at the LSO, the aborted list, markers returned as control batches),
ListOffsets read_committed, the LSO on the board, and real Kafka consumers
(kafka-python, confluent-kafka) with isolation_level read_committed seeing committed
data only. One single-broker cluster for the module, KIP-890's verification off (no
coordinator here: the verification path is checked against a missing one)."""
from __future__ import annotations

import uuid

import pytest

from node.net import Channel
from node.wire.errors import ErrorCode
from shm import batch
from shm.board import BoardReader
from tests.node import txn_wire as tw
from node.cluster import Cluster
from shm.names import cluster_objects
from tests.conftest import new_cluster_id
from tests.node.kafka.clients import CLUSTER_CONFIG, create_topic, needs
from tests.waiting import poll_until

pytestmark = [pytest.mark.process]

P1, P2, P3 = 1000, 2000, 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Broker 0 without KIP-890's verification (the test plays the coordinator), broker 1
    with it (and no coordinator: nothing can verify)."""
    cid = new_cluster_id()
    c = Cluster.up(tmp_path_factory.mktemp("txn") / "c", brokers=2, cluster_id=cid,
                   config={**CLUSTER_CONFIG,
                           "transaction.partition.verification.enable": "false"},
                   broker_config={1: {"transaction.partition.verification.enable": "true"}})
    try:
        yield c
    finally:
        c.down(grace_s=5)
        assert cluster_objects(cid) == [], "the cluster leaked shared memory"


@pytest.fixture(scope="module")
def channel(cluster):
    ch = Channel("tcp://" + cluster.broker_address(0), client_id="txn-test")
    try:
        yield ch
    finally:
        ch.close()


@pytest.fixture(scope="module")
def history(cluster, channel):
    """One partition written by hand:
        0 plain "p0" | 1-2 P1 "a1","a2" (aborted) | 3 P2 "b1" (committed) |
        4 P1 ABORT | 5 P2 "b2" | 6 P2 COMMIT | 7 P3 "c1" (left open)
    with the LSO checked at each step."""
    topic = "txn" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, 1, 1, assignment={0: [0]})
    key = (topic, 0)
    steps = {}

    def ok(answer, offset):
        assert answer[2] == 0 and answer[3] == offset, answer

    ok(tw.produce(channel, topic, 0, batch.build_batch([b"p0"])), 0)
    ok(tw.produce(channel, topic, 0, tw.txn_batch([b"a1", b"a2"], P1, 0, 0)), 1)
    ok(tw.produce(channel, topic, 0, tw.txn_batch([b"b1"], P2, 0, 0)), 3)
    steps["open"] = tw.fetch(channel, topic, 0, 0, tw.READ_COMMITTED)
    steps["open_uncommitted"] = tw.fetch(channel, topic, 0, 0, tw.READ_UNCOMMITTED)
    steps["latest_open"] = (tw.latest_offset(channel, topic, 0, tw.READ_COMMITTED),
                            tw.latest_offset(channel, topic, 0, tw.READ_UNCOMMITTED))
    # A plain batch of a producer inside its transaction: Kafka's INVALID_TXN_STATE.
    steps["plain_in_txn"] = tw.produce(channel, topic, 0,
                                       tw.txn_batch([b"x"], P1, 0, 2, transactional=False))
    assert tw.write_markers(channel, P1, 0, False, [key]) == {key: 0}
    steps["after_abort"] = tw.fetch(channel, topic, 0, 0, tw.READ_COMMITTED)
    ok(tw.produce(channel, topic, 0, tw.txn_batch([b"b2"], P2, 0, 1)), 5)
    assert tw.write_markers(channel, P2, 0, True, [key]) == {key: 0}
    ok(tw.produce(channel, topic, 0, tw.txn_batch([b"c1"], P3, 0, 0)), 7)
    return topic, steps


def test_read_committed_stops_at_the_lso(history):
    _, steps = history
    entry, batches = steps["open"]
    assert entry[2] == 0 and entry[3] == 4 and entry[6] == 1       # HW 4, LSO 1
    assert [v for _, records in batches for _, v in records] == [b"p0"]
    assert entry[7] == []
    entry, batches = steps["open_uncommitted"]
    assert entry[6] == 1 and entry[7] == []                         # no aborted list
    assert [v for _, records in batches for _, v in records] == [b"p0", b"a1", b"a2", b"b1"]
    assert steps["latest_open"] == (1, 4)


def test_a_plain_batch_inside_a_transaction_is_invalid_txn_state(history):
    _, steps = history
    assert steps["plain_in_txn"][2] == ErrorCode.INVALID_TXN_STATE


def test_the_lso_moves_past_ended_transactions_only(history):
    _, steps = history
    entry, batches = steps["after_abort"]      # P1 aborted at 4, P2 open since 3
    assert entry[6] == 3 and entry[7] == [[P1, 1]]
    assert tw.committed_values(batches, entry[7]) == [b"p0"]


def test_aborted_list_and_control_batches(history, channel):
    topic, _ = history
    entry, batches = tw.fetch(channel, topic, 0, 0, tw.READ_COMMITTED)
    assert entry[3] == 8 and entry[6] == 7                          # P3 still open at 7
    assert entry[7] == [[P1, 1]]
    controls = [(h.base_offset, h.producer_id) for h, _ in batches
                if h.attributes & batch.ATTR_CONTROL]
    assert controls == [(4, P1), (6, P2)]
    assert tw.committed_values(batches, entry[7]) == [b"p0", b"b1", b"b2"]
    # From past the aborted transaction's data: it is not named.
    entry, batches = tw.fetch(channel, topic, 0, 5, tw.READ_COMMITTED)
    assert entry[7] == [] and tw.committed_values(batches, entry[7]) == [b"b2"]
    assert tw.latest_offset(channel, topic, 0, tw.READ_COMMITTED) == 7


def test_markers_check_epochs_and_partitions(history, channel, cluster):
    topic, _ = history
    key = (topic, 0)
    # P2 bumped to epoch 1: a marker of epoch 0 is from a fenced producer.
    answer = tw.produce(channel, topic, 0, tw.txn_batch([b"b3"], P2, 1, 0))
    assert answer[2] == 0
    assert tw.write_markers(channel, P2, 0, True, [key]) == \
        {key: ErrorCode.INVALID_PRODUCER_EPOCH}
    assert tw.write_markers(channel, P2, 1, False, [key]) == {key: 0}
    # A marker from a coordinator older than the one that wrote P2's last marker.
    assert tw.produce(channel, topic, 0, tw.txn_batch([b"b4"], P2, 2, 0))[2] == 0
    assert tw.write_markers(channel, P2, 2, False, [key], coordinator_epoch=3) == {key: 0}
    assert tw.produce(channel, topic, 0, tw.txn_batch([b"b5"], P2, 3, 0))[2] == 0
    assert tw.write_markers(channel, P2, 3, False, [key], coordinator_epoch=2) == \
        {key: ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    assert tw.write_markers(channel, P2, 3, False, [key], coordinator_epoch=3) == {key: 0}
    # A partition that does not exist, and one of an unknown topic.
    assert tw.write_markers(channel, P3, 0, True, [(topic, 5), ("nope", 0)]) == \
        {(topic, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # A marker for a producer without a transaction here is appended anyway (Kafka).
    assert tw.write_markers(channel, 4242, 0, True, [key]) == {key: 0}


def test_the_board_shows_the_lso(history, cluster, channel):
    topic, _ = history
    with BoardReader.open(cluster.cluster_id, 0) as reader:
        row = poll_until(lambda: (lambda r: r if r is not None and
                                  r.last_stable_offset is not None
                                  else None)(reader.get(topic, 0)), 10, "the board's row")
        entry, _ = tw.fetch(channel, topic, 0, 0, tw.READ_COMMITTED)
        poll_until(lambda: reader.get(topic, 0).last_stable_offset == entry[6], 10,
                   f"the board's LSO {entry[6]}")
        assert row.last_stable_offset <= row.high_watermark


def test_a_control_batch_from_a_client_is_refused(history, channel):
    topic, _ = history
    from shm import control
    answer = tw.produce(channel, topic, 0, control.build_marker(P1, 0, True, 0, 1000))
    assert answer[2] == ErrorCode.INVALID_RECORD


def test_the_first_transactional_batch_waits_for_the_coordinator(cluster):
    """Broker 1 verifies (KIP-890 part 1): with no __transaction_state there is no
    coordinator, so the batch is not appended and the producer is told to retry
    (NOT_ENOUGH_REPLICAS, Kafka's mapping); without a transactional id it cannot ask."""
    topic = "ver" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, 1, 1, assignment={0: [1]})
    ch = Channel("tcp://" + cluster.broker_address(1), client_id="txn-test-1")
    try:
        answer = tw.produce(ch, topic, 0, tw.txn_batch([b"v"], P1, 0, 0), transactional_id="t1")
        assert answer[2] == ErrorCode.NOT_ENOUGH_REPLICAS and \
            "COORDINATOR_NOT_AVAILABLE" in answer[5], answer
        answer = tw.produce(ch, topic, 0, tw.txn_batch([b"v"], P1, 0, 0))
        assert answer[2] == ErrorCode.INVALID_REQUEST, answer
        # Plain and idempotent batches never wait.
        assert tw.produce(ch, topic, 0, batch.build_batch([b"p"]))[2] == 0
        assert tw.produce(ch, topic, 0, tw.txn_batch([b"i"], P2, 0, 0,
                                                     transactional=False))[2] == 0
        entry, batches = tw.fetch(ch, topic, 0, 0)
        assert [v for _, records in batches for _, v in records] == [b"p", b"i"]
    finally:
        ch.close()


@needs("kafka-python")
def test_kafka_python_read_committed_sees_committed_data_only(history, cluster):
    from kafka import KafkaConsumer, TopicPartition
    topic, _ = history
    seen = {}
    for level, count in (("read_committed", 3), ("read_uncommitted", 6)):
        consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers,
                                 isolation_level=level, enable_auto_commit=False,
                                 auto_offset_reset="earliest")
        values = seen[level] = []
        try:
            consumer.assign([TopicPartition(topic, 0)])

            def more(values=values, consumer=consumer):
                for records in consumer.poll(timeout_ms=200).values():
                    values.extend(r.value for r in records)
                return len(values) >= count
            poll_until(more, 15, f"{count} records {level}")
            more()                      # and nothing past them (read_committed: the LSO)
        finally:
            consumer.close()
    assert seen["read_committed"] == [b"p0", b"b1", b"b2"]
    assert seen["read_uncommitted"][:6] == [b"p0", b"a1", b"a2", b"b1", b"b2", b"c1"]


@needs("confluent-kafka")
def test_confluent_read_committed_sees_committed_data_only(history, cluster):
    from confluent_kafka import Consumer, TopicPartition
    topic, _ = history
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                         "group.id": "g" + uuid.uuid4().hex[:6],
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    values = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def more():
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            return len(values) >= 3
        poll_until(more, 15, "three committed records")
        for _ in range(5):          # nothing more arrives: c1 and b3 are not committed
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"p0", b"b1", b"b2"]


def _read(cluster, topic: str, partitions: int, level: str, count: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers,
                             isolation_level=level, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def more():
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value for r in records)
            return len(values) >= count
        poll_until(more, 20, f"{count} records {level}")
        more()
    finally:
        consumer.close()
    return sorted(values)


@pytest.mark.slow     # the first use of the coordinator creates __transaction_state
@needs("confluent-kafka", "kafka-python")
def test_a_transactional_producer_end_to_end_through_verification(cluster, channel):
    """librdkafka's transactional producer against the coordinator: partition 0 on broker
    1 (KIP-890's verification asks the coordinator before the first batch of each
    transaction), partition 1 on broker 0; a committed, an aborted and a committed
    transaction; read_committed readers see the committed ones only, and the LSO comes
    back to the HW once the markers are in."""
    from confluent_kafka import Producer
    topic = "e2e" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, 2, 1, assignment={0: [1], 1: [0]})
    transactional_id = "tx-" + uuid.uuid4().hex[:8]
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                         "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(60)
    for values, commit in (((b"c1", b"c2"), True), ((b"x1", b"x2"), False),
                           ((b"c3", b"c4"), True)):
        producer.begin_transaction()
        for partition, value in enumerate(values):
            producer.produce(topic, value, partition=partition)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)
    assert _read(cluster, topic, 2, "read_committed", 4) == [b"c1", b"c2", b"c3", b"c4"]
    assert _read(cluster, topic, 2, "read_uncommitted", 6) == \
        [b"c1", b"c2", b"c3", b"c4", b"x1", b"x2"]
    entry, _ = tw.fetch(channel, topic, 1, 0, tw.READ_COMMITTED)
    assert entry[6] == entry[3] and len(entry[7]) == 1     # LSO = HW; one abort
    # A batch of that producer outside any transaction: the coordinator says no.
    ch = Channel("tcp://" + cluster.broker_address(1), client_id="txn-test-e2e")
    try:
        entry, batches = tw.fetch(ch, topic, 0, 0)
        last = batches[-1][0]
        assert last.attributes & batch.ATTR_CONTROL
        answer = tw.produce(ch, topic, 0, tw.txn_batch([b"zombie"], last.producer_id,
                                                       last.producer_epoch, 0),
                            transactional_id=transactional_id)
        assert answer[2] in (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH), \
            answer
        assert tw.fetch(ch, topic, 0, 0)[0][3] == entry[3]          # nothing appended
    finally:
        ch.close()


@pytest.mark.slow
@needs("kafka-python")
def test_kafka_pythons_transactional_producer(cluster):
    """kafka-python's transactions (its own producer state machine) against the same
    leaders: an aborted transaction between two committed ones."""
    from kafka import KafkaProducer
    topic = "kp" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, 2, 1, assignment={0: [1], 1: [0]})
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers,
                             transactional_id="kp-" + uuid.uuid4().hex[:8])
    try:
        producer.init_transactions()
        for values, commit in (((b"k1", b"k2"), True), ((b"y1", b"y2"), False),
                               ((b"k3", b"k4"), True)):
            producer.begin_transaction()
            for partition, value in enumerate(values):
                producer.send(topic, value, partition=partition)
            producer.flush(30)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    assert _read(cluster, topic, 2, "read_committed", 4) == [b"k1", b"k2", b"k3", b"k4"]
    assert _read(cluster, topic, 2, "read_uncommitted", 6) == \
        [b"k1", b"k2", b"k3", b"k4", b"y1", b"y2"]


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_on_kafkas_wire(history, cluster, channel, version):
    """WriteTxnMarkers through the Kafka listener (as a Kafka coordinator's broker would
    send it): the marker lands, answered per partition; an unknown topic is refused."""
    from node.kafka.protocol.messages import WriteTxnMarkersRequest as Req
    from tests.node.kafka.kafka_wire import KafkaWire
    topic, _ = history
    pid = 5000 + version
    marker = Req.WritableTxnMarker(
        producer_id=pid, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[Req.WritableTxnMarkerTopic(name=topic, partition_indexes=[0]),
                Req.WritableTxnMarkerTopic(name="nope", partition_indexes=[0])])
    with KafkaWire(cluster.kafka_address(0)) as wire:
        response = wire.request(Req(markers=[marker]), version)
    (result,) = response.markers
    assert result.producer_id == pid
    errors = {(t.name, p.partition_index): p.error_code
              for t in result.topics for p in t.partitions}
    assert errors == {(topic, 0): 0, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    entry, batches = tw.fetch(channel, topic, 0, 0)
    assert any(h.producer_id == pid and h.attributes & batch.ATTR_CONTROL
               for h, _ in batches)


_COORDINATOR_RETRY = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS)


def _coordinator_call(address: str, request, version: int):
    """One Kafka-wire request to the coordinator; None while it answers a retriable error."""
    from tests.node.kafka.kafka_wire import KafkaWire
    with KafkaWire(address) as wire:
        answer = wire.request(request, version)
    code = answer.coordinators[0].error_code if hasattr(answer, "coordinators") else \
        getattr(answer, "error_code", 0)
    return None if code in _COORDINATOR_RETRY else answer


@pytest.mark.slow
def test_pipelined_produces_of_one_transaction_share_one_verification(cluster):
    """A producer that pipelines two requests of a transaction's first batches (seq 0 and
    1, sent before either is answered) to a verifying leader: both wait for the
    coordinator, neither voids the other's verification, both land in order."""
    from node.kafka.protocol.messages import (AddPartitionsToTxnRequest, EndTxnRequest,
                                              FindCoordinatorRequest, InitProducerIdRequest)
    from node.wire import protocol
    topic = "pipe" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, 1, 1, assignment={0: [1]})
    tid = "pipe-" + uuid.uuid4().hex[:8]
    found = poll_until(lambda: _coordinator_call(cluster.kafka_address(0), FindCoordinatorRequest(
        key_type=1, coordinator_keys=[tid]), 4), 30, "the transaction coordinator")
    address = cluster.kafka_address(found.coordinators[0].node_id)
    init = poll_until(lambda: _coordinator_call(address, InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1,
        producer_epoch=-1), 4), 30, "InitProducerId")
    pid, epoch = init.producer_id, init.producer_epoch
    added = poll_until(lambda: _coordinator_call(address, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
        3), 30, "AddPartitionsToTxn")
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
        .partition_error_code == 0
    ch = Channel("tcp://" + cluster.broker_address(1), client_id="txn-pipe")
    try:
        ids = []
        for seq, value in ((0, b"one"), (1, b"two")):
            body = {"acks": -1, "timeout_ms": 10_000, "partitions": [[topic, 0]],
                    "transactional_id": tid}
            ids.append(ch.send(protocol.ApiKey.PRODUCE, body,
                               [tw.txn_batch([value], pid, epoch, seq)]))
        answers = {}

        def both():
            for response in ch.receive_ready():
                answers[response.correlation_id] = response.body["partitions"][0]
            return len(answers) == 2
        poll_until(both, 20, "both produce answers")
        assert [answers[i][2:4] for i in ids] == [[0, 0], [0, 1]], answers
        ended = poll_until(lambda: _coordinator_call(address, EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True), 3),
            30, "EndTxn")
        assert ended.error_code == 0
        poll_until(lambda: tw.fetch(ch, topic, 0, 0, tw.READ_COMMITTED)[0][6] == 3, 20,
                   "the LSO past the commit marker")
        entry, batches = tw.fetch(ch, topic, 0, 0, tw.READ_COMMITTED)
        assert tw.committed_values(batches, entry[7]) == [b"one", b"two"]
    finally:
        ch.close()
