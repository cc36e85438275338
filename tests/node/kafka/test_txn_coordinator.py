"""The transaction coordinator's runtime (node.broker.txn) on a real 3-broker cluster,
through Kafka's wire by hand (the generated codec) and through confluent-kafka:

- FindCoordinator with key type TRANSACTION creates ``__transaction_state`` (internal,
  compacted, min.insync.replicas 2) and answers the leader of the id's partition;
  InitProducerId with a transactional id there gives a producer id, the next one bumps
  its epoch; another broker answers NOT_COORDINATOR;
- a transaction over two partitions (transactional batches produced to their leaders,
  which verify them with the coordinator, KIP-890): committed, its COMMIT markers are
  written to both partitions' leaders (a read_committed Fetch returns the data and the
  control batch) and it completes (DescribeTransactions: CompleteCommit); aborted,
  ABORT markers (the read_committed Fetch lists it aborted) and CompleteAbort;
- confluent-kafka's ``init_transactions`` fences an older instance of the same id;
- the coordinator's broker SIGKILLed: another broker loads the partition and knows the
  transactional id (its producer id, a bumped epoch).
"""
from __future__ import annotations

import uuid

import pytest

from node.core.groups.hashing import partition_for
from node.net import Channel
from node.kafka.protocol.messages import (AddPartitionsToTxnRequest, DescribeTransactionsRequest,
                                          EndTxnRequest, FindCoordinatorRequest,
                                          InitProducerIdRequest, ListTransactionsRequest)
from node.wire.errors import ErrorCode
from node.wire.protocol import TRANSACTION_STATE_TOPIC, ApiKey
from tests.node import txn_wire as tw
from tests.node.kafka.clients import create_topic, running_cluster
from tests.node.kafka.kafka_wire import KafkaWire
from tests.waiting import poll_until

pytestmark = [pytest.mark.process]
TXN_PARTITIONS = 3
CONFIG = {"transaction.state.log.num.partitions": str(TXN_PARTITIONS),
          "min.insync.replicas": "2"}
WAIT_S = 60.0
TIMEOUT_MS = 1000         # a transaction timeout the test waits out
PARKED_ROUNDS = 20        # transactions back to back
RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("txn") / "c", config=CONFIG) as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _leader_of(cluster, tid: str) -> int | None:
    state = cluster.partition_state(TRANSACTION_STATE_TOPIC,
                                    partition_for(tid, TXN_PARTITIONS))
    return None if state is None or state.leader < 0 else state.leader


def _find(cluster, tid: str):
    """FindCoordinator(TRANSACTION) v4 at the first broker that answers: (node id,
    "host:port") once found, else None."""
    for broker in cluster.broker_ids:
        try:
            with KafkaWire(cluster.kafka_address(broker)) as wire:
                answer = wire.request(FindCoordinatorRequest(key_type=1,
                                                             coordinator_keys=[tid]), 4)
        except OSError:
            continue            # a broker that is down
        entry = answer.coordinators[0]
        if entry.error_code:
            assert entry.error_code in RETRIABLE, entry
            return None
        return entry.node_id, f"{entry.host}:{entry.port}"
    return None


def _call(address: str, request, version: int, error=lambda r: r.error_code):
    """One request; None while the answer is a retriable coordinator error."""
    try:
        with KafkaWire(address) as wire:
            answer = wire.request(request, version)
    except OSError:
        return None
    code = error(answer)
    if code in RETRIABLE:
        return None
    return answer


def _init(address: str, tid: str, pid: int = -1, epoch: int = -1):
    return poll_until(lambda: _call(address, InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=pid,
        producer_epoch=epoch), 5), WAIT_S, f"InitProducerId of {tid}")


def _describe(address: str, tid: str):
    return poll_until(lambda: _call(
        address, DescribeTransactionsRequest(transactional_ids=[tid]), 0,
        error=lambda r: r.transaction_states[0].error_code), WAIT_S,
        f"DescribeTransactions of {tid}").transaction_states[0]


def _state(address: str, tid: str) -> str:
    return _describe(address, tid).transaction_state


def test_find_coordinator_and_init_producer_id(cluster):
    tid = _name("init")
    node, address = poll_until(lambda: _find(cluster, tid), WAIT_S, "a transaction coordinator")
    assert node == _leader_of(cluster, tid)
    first = _init(address, tid)
    assert first.error_code == ErrorCode.NONE and first.producer_id >= 0
    assert first.producer_epoch == 0
    again = _init(address, tid)
    assert (again.error_code, again.producer_id, again.producer_epoch) == \
        (ErrorCode.NONE, first.producer_id, 1)
    other = next(b for b in cluster.broker_ids if b != node)
    with KafkaWire(cluster.kafka_address(other)) as wire:
        refused = wire.request(InitProducerIdRequest(transactional_id=tid,
                                                     transaction_timeout_ms=60_000), 5)
    assert refused.error_code == ErrorCode.NOT_COORDINATOR
    assert _state(address, tid) == "Empty"
    # The native wire: the same coordinator, Kafka's fields as a dict.
    channel = Channel("tcp://" + cluster.broker_address(node), client_id="txn-test")
    try:
        native = channel.request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": tid, "transaction_timeout_ms": 60_000}).body
    finally:
        channel.close()
    assert (native["error_code"], native["producer_id"], native["producer_epoch"]) == \
        (ErrorCode.NONE, first.producer_id, 2)
    # A partition that does not exist is refused by the broker (Kafka's KafkaApis).
    unknown = _call(address, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=first.producer_id,
        v3_and_below_producer_epoch=2,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=_name("nope"), partitions=[0])]), 3, error=lambda r: None)
    assert [p.partition_error_code for t in unknown.results_by_topic_v3_and_below
            for p in t.results_by_partition] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert _state(address, tid) == "Empty"
    listed = _call(address, ListTransactionsRequest(), 1)
    assert tid in {t.transactional_id for t in listed.transaction_states}


def _transaction(cluster, commit: bool):
    tid = _name("commit" if commit else "abort")
    topic = _name("t")
    create_topic(cluster, topic, 2, 3, config={"min.insync.replicas": "2"})
    _, address = poll_until(lambda: _find(cluster, tid), WAIT_S, "a transaction coordinator")
    ids = _init(address, tid)
    added = poll_until(lambda: _call(address, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=ids.producer_id,
        v3_and_below_producer_epoch=ids.producer_epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=topic, partitions=[0, 1])]), 3,
        error=lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0]
        .partition_error_code), WAIT_S, "AddPartitionsToTxn")
    assert {(t.name, p.partition_index, p.partition_error_code)
            for t in added.results_by_topic_v3_and_below for p in t.results_by_partition} == \
        {(topic, 0, 0), (topic, 1, 0)}
    described = _describe(address, tid)
    assert described.transaction_state == "Ongoing"
    assert [(t.topic, sorted(t.partitions)) for t in described.topics] == [(topic, [0, 1])]
    channels = {p: _leader_channel(cluster, topic, p) for p in (0, 1)}
    try:
        for p, channel in channels.items():
            answer = tw.produce(channel, topic, p, tw.txn_batch(
                [f"v{p}".encode()], ids.producer_id, ids.producer_epoch, 0),
                transactional_id=tid)
            assert answer[2] == ErrorCode.NONE and answer[3] == 0, answer
        _end(cluster, address, tid, ids, commit)
        for p, channel in channels.items():
            entry, batches = poll_until(lambda: _read_to_marker(channel, topic, p), WAIT_S,
                                        f"the marker on {topic}-{p}")
            (data_header, data), (marker_header, _) = batches
            assert data == [(0, f"v{p}".encode())] and data_header.transactional
            assert marker_header.control and marker_header.producer_id == ids.producer_id
            aborted = [list(a) for a in entry[7]]
            assert aborted == ([] if commit else [[ids.producer_id, 0]])
            values = tw.committed_values(batches, entry[7])
            assert values == ([f"v{p}".encode()] if commit else [])
    finally:
        for channel in channels.values():
            channel.close()
    return tid, topic, ids


def _leader_channel(cluster, topic: str, partition: int) -> Channel:
    def leader():
        state = cluster.partition_state(topic, partition)
        return None if state is None or state.leader < 0 else (state.leader,)
    (broker,) = poll_until(leader, WAIT_S, f"a leader of {topic}-{partition}")
    return Channel("tcp://" + cluster.broker_address(broker), client_id="txn-test")


def _read_to_marker(channel, topic: str, partition: int):
    """The read_committed Fetch of the partition once it ends with a marker."""
    entry, batches = tw.fetch(channel, topic, partition, 0, tw.READ_COMMITTED)
    if len(batches) != 2 or not batches[-1][0].control:
        return None
    return entry, batches


def _end(cluster, address: str, tid: str, ids, commit: bool) -> None:
    # retried on a retriable error, as clients do (a replica just killed may hold the
    # coordinator's acks=all write until the ISR shrinks)
    ended = poll_until(lambda: _call(address, EndTxnRequest(
        transactional_id=tid, producer_id=ids.producer_id, producer_epoch=ids.producer_epoch,
        committed=commit), 3), WAIT_S, f"EndTxn of {tid}")
    assert ended.error_code == ErrorCode.NONE
    done = "CompleteCommit" if commit else "CompleteAbort"
    poll_until(lambda: _state(address, tid) == done, WAIT_S,
               f"{tid} to reach {done} (markers written to both partitions)")


def test_a_committed_transaction_completes_once_its_markers_are_written(cluster):
    _transaction(cluster, commit=True)


def test_an_aborted_transaction_completes_too(cluster):
    _transaction(cluster, commit=False)


@pytest.mark.slow
def test_the_coordinators_sigkill_moves_the_transactional_id(cluster):
    tid, _, ids = _transaction(cluster, commit=True)
    old = _leader_of(cluster, tid)
    assert old is not None
    try:
        cluster.kill(old, "KILL")
        new = poll_until(lambda: _find(cluster, tid) if _leader_of(cluster, tid) not in
                         (None, old) else None, WAIT_S, "another transaction coordinator")
        assert new[0] != old
        assert _state(new[1], tid) == "CompleteCommit"
        bumped = _init(new[1], tid)        # the loaded state: same id, next epoch
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == \
            (ErrorCode.NONE, ids.producer_id, ids.producer_epoch + 1)
    finally:
        if cluster.process(old).pid() is None:
            cluster.start(old)


def test_confluent_transactions_commit_abort_and_fence(cluster):
    confluent = pytest.importorskip("confluent_kafka")
    tid, topic = _name("cf"), _name("cft")
    create_topic(cluster, topic, 2, 3, config={"min.insync.replicas": "2"})
    conf = {"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": tid,
            "transaction.timeout.ms": 60_000}
    first = confluent.Producer(conf)
    first.init_transactions(WAIT_S)
    first.begin_transaction()
    for p in (0, 1):
        first.produce(topic, value=f"committed-{p}".encode(), partition=p)
    first.commit_transaction(WAIT_S)
    first.begin_transaction()
    first.produce(topic, value=b"aborted", partition=0)
    first.abort_transaction(WAIT_S)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=1)
    first.flush(WAIT_S)
    second = confluent.Producer(conf)        # the new instance fences the first
    second.init_transactions(WAIT_S)
    with pytest.raises(confluent.KafkaException) as fenced:
        first.commit_transaction(WAIT_S)
    assert fenced.value.args[0].code() in (confluent.KafkaError._FENCED,
                                           confluent.KafkaError.PRODUCER_FENCED,
                                           confluent.KafkaError.INVALID_PRODUCER_EPOCH)
    second.begin_transaction()
    second.produce(topic, value=b"second", partition=0)
    second.commit_transaction(WAIT_S)
    consumer = confluent.Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                                   "group.id": _name("g"), "auto.offset.reset": "earliest",
                                   "isolation.level": "read_committed",
                                   "enable.auto.commit": False})
    try:
        consumer.assign([confluent.TopicPartition(topic, p, 0) for p in (0, 1)])
        seen: list[bytes] = []

        def read_all():
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.value())
            return sorted(seen) == [b"committed-0", b"committed-1", b"second"]
        poll_until(read_all, WAIT_S, f"the committed records (seen {seen})")
    finally:
        consumer.close()
    assert _state(_find(cluster, tid)[1], tid) == "CompleteCommit"


def test_kafka_python_transactions_commit_and_fence(cluster):
    kafka = pytest.importorskip("kafka")
    from kafka.errors import KafkaError as KafkaPythonError
    tid, topic = _name("kp"), _name("kpt")
    create_topic(cluster, topic, 1, 3, config={"min.insync.replicas": "2"})
    servers = cluster.kafka_bootstrap_servers.split(",")
    first = kafka.KafkaProducer(bootstrap_servers=servers, transactional_id=tid)
    second = None
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"one", partition=0)
        first.commit_transaction()
        first.begin_transaction()
        first.send(topic, b"zombie", partition=0).get(WAIT_S)
        second = kafka.KafkaProducer(bootstrap_servers=servers, transactional_id=tid)
        second.init_transactions()             # fences the first, aborting its transaction
        with pytest.raises(KafkaPythonError):
            first.commit_transaction()
        second.begin_transaction()
        second.send(topic, b"two", partition=0)
        second.commit_transaction()
    finally:
        first.close(timeout=5)
        if second is not None:
            second.close(timeout=5)
    consumer = kafka.KafkaConsumer(bootstrap_servers=servers, isolation_level="read_committed",
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        seen: list[bytes] = []

        def read_all():
            for records in consumer.poll(500).values():
                seen.extend(r.value for r in records)
            return seen == [b"one", b"two"] or len(seen) > 2
        poll_until(read_all, WAIT_S, f"the committed records (seen {seen})")
        assert seen == [b"one", b"two"]
    finally:
        consumer.close()


def test_a_partition_not_added_is_refused_and_a_timed_out_transaction_aborted(cluster):
    tid, topic = _name("timeout"), _name("tt")
    create_topic(cluster, topic, 2, 3, config={"min.insync.replicas": "2"})
    _, address = poll_until(lambda: _find(cluster, tid), WAIT_S, "a transaction coordinator")
    ids = poll_until(lambda: _call(address, InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=TIMEOUT_MS), 5), WAIT_S, "InitProducerId")
    poll_until(lambda: _call(address, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=ids.producer_id,
        v3_and_below_producer_epoch=ids.producer_epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=topic, partitions=[0])]), 3,
        error=lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0]
        .partition_error_code), WAIT_S, "AddPartitionsToTxn")
    channel = _leader_channel(cluster, topic, 1)
    try:     # partition 1 was not added: its leader's verify_only question says so
        answer = tw.produce(channel, topic, 1, tw.txn_batch(
            [b"x"], ids.producer_id, ids.producer_epoch, 0), transactional_id=tid)
    finally:
        channel.close()
    # (Kafka's INVALID_TXN_STATE, or TRANSACTION_ABORTABLE for a client that knows it)
    assert answer[2] in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE), answer
    # The coordinator's timer aborts the transaction after its timeout, fencing the
    # producer (epoch + 1).
    poll_until(lambda: _state(address, tid) == "CompleteAbort", WAIT_S,
               f"{tid} to be aborted after its {TIMEOUT_MS} ms timeout")
    assert _describe(address, tid).producer_epoch == ids.producer_epoch + 1


@pytest.mark.slow
def test_markers_reach_a_partitions_new_leader(cluster):
    """The data partition's leader is SIGKILLed before EndTxn: the markers are retried
    until the partition's new leader takes them, then the transaction completes."""
    tid, topic = _name("moved"), _name("mt")
    coordinator, address = poll_until(lambda: _find(cluster, tid), WAIT_S,
                                      "a transaction coordinator")
    others = [b for b in cluster.broker_ids if b != coordinator]
    create_topic(cluster, topic, 1, 3, config={"min.insync.replicas": "2"},
                 assignment={0: [others[0], others[1], coordinator]})
    ids = _init(address, tid)
    poll_until(lambda: _call(address, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=ids.producer_id,
        v3_and_below_producer_epoch=ids.producer_epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=topic, partitions=[0])]), 3,
        error=lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0]
        .partition_error_code), WAIT_S, "AddPartitionsToTxn")
    channel = _leader_channel(cluster, topic, 0)
    try:
        answer = tw.produce(channel, topic, 0, tw.txn_batch(
            [b"moved"], ids.producer_id, ids.producer_epoch, 0), transactional_id=tid)
    finally:
        channel.close()
    assert answer[2] == ErrorCode.NONE, answer
    old = cluster.partition_state(topic, 0).leader
    assert old != coordinator
    try:
        cluster.kill(old, "KILL")
        _end(cluster, address, tid, ids, commit=True)     # waits for CompleteCommit
        channel = _leader_channel(cluster, topic, 0)
        try:
            entry, batches = poll_until(lambda: _read_to_marker(channel, topic, 0), WAIT_S,
                                        "the marker on the new leader")
        finally:
            channel.close()
        assert tw.committed_values(batches, entry[7]) == [b"moved"]
        assert cluster.partition_state(topic, 0).leader != old
    finally:
        if cluster.process(old).pid() is None:
            cluster.start(old)


def test_requests_wait_for_the_markers_instead_of_concurrent_transactions(cluster):
    """AddPartitionsToTxn sent right after EndTxn would find the markers still being
    written (CONCURRENT_TRANSACTIONS, a client retry with backoff): it waits for them
    at the coordinator and succeeds."""
    tid, topic = _name("parked"), _name("pt")
    create_topic(cluster, topic, 1, 3, config={"min.insync.replicas": "2"})
    _, address = poll_until(lambda: _find(cluster, tid), WAIT_S, "a transaction coordinator")
    ids = _init(address, tid)
    channel = _leader_channel(cluster, topic, 0)
    add = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=ids.producer_id,
        v3_and_below_producer_epoch=ids.producer_epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=topic, partitions=[0])])
    codes = []
    try:
        with KafkaWire(address) as wire:
            for n in range(PARKED_ROUNDS):
                codes.append(wire.request(add, 3).results_by_topic_v3_and_below[0]
                             .results_by_partition[0].partition_error_code)
                answer = tw.produce(channel, topic, 0, tw.txn_batch(
                    [b"%d" % n], ids.producer_id, ids.producer_epoch, n),
                    transactional_id=tid)
                assert answer[2] == ErrorCode.NONE, answer
                ended = wire.request(EndTxnRequest(
                    transactional_id=tid, producer_id=ids.producer_id,
                    producer_epoch=ids.producer_epoch, committed=True), 3)
                assert ended.error_code == ErrorCode.NONE
    finally:
        channel.close()
    assert codes == [ErrorCode.NONE] * PARKED_ROUNDS
