"""Transactions with the native client (and librdkafka's offsets) on a real 3-broker
cluster (the transaction coordinator, the partition leaders' markers and LSO, the group
coordinator's TxnOffsetCommit):

- a committed transaction is read by a read_committed consumer, an aborted one is not
  (a read_uncommitted one sees its records); neither returns a marker, both end at the
  same position;
- read-process-write: a group member's offsets sent in an aborted transaction are not
  committed; in a committed one they are, with the output written exactly once;
- a zombie: a second producer with the same transactional id fences the first, whose
  open transaction is aborted and whose commit raises ProducerFencedError;
- the group coordinator's broker SIGKILLed: the new one rebuilds committed and pending
  transactional offsets from __consumer_offsets (records of transactional batches,
  markers), and a transaction committed after the move makes its offsets visible;
- KIP-890 for TxnOffsetCommit: a late one outside its transaction is refused;
- Kafka's wire: confluent-kafka's and kafka-python's send_offsets_to_transaction with a
  classic group member's metadata (TxnOffsetCommit through the Kafka listener).
"""
from __future__ import annotations

import time
import uuid

import pytest

from node.client import Consumer, Producer, ProducerFencedError, TopicPartition
from node.client import coordinator as coord
from node.client.coordinator import Coordinators
from node.client.metadata import MetadataFetcher, parse_bootstrap
from node.client.network import Network
from node.core.groups.hashing import partition_for
from node.wire.errors import ErrorCode
from node.wire.protocol import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, ApiKey
from tests.node.kafka.clients import create_topic, running_cluster
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]
CONFIG = {"transaction.state.log.num.partitions": "3", "min.insync.replicas": "2"}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("txc") / "c", config=CONFIG) as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read(cluster, tps: list, level: str, ends: dict) -> list[bytes]:
    """Every value of ``tps`` up to ``ends`` {tp: offset the position must reach}."""
    consumer = Consumer(cluster.bootstrap_servers, isolation_level=level,
                        auto_offset_reset="earliest")
    values: list[bytes] = []
    try:
        consumer.assign(tps)

        def done() -> bool:
            values.extend(r.value for r in consumer.poll(200))
            return all(consumer.position(tp) >= end for tp, end in ends.items())
        poll_until(done, WAIT_S, f"{level} reading up to {ends}")
        assert all(consumer.position(tp) == end for tp, end in ends.items())
    finally:
        consumer.close()
    return values


def test_read_committed_sees_committed_transactions_only(cluster):
    topic, tid = _name("out"), _name("tx")
    create_topic(cluster, topic, 2, 3)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with Producer(cluster.bootstrap_servers, transactional_id=tid) as p:
        p.init_transactions(timeout_s=WAIT_S)
        p.begin_transaction()
        for i in range(4):
            p.send(topic, b"c%d" % i, partition=i % 2)
        p.commit_transaction(timeout_s=WAIT_S)
        p.begin_transaction()
        futures = [p.send(topic, b"a%d" % i, partition=i % 2) for i in range(3)]
        p.flush()                   # written to the log, then aborted
        assert all(f.get(WAIT_S).offset >= 0 for f in futures)
        p.abort_transaction(timeout_s=WAIT_S)
        p.begin_transaction()
        p.send(topic, b"last", partition=0)
        p.commit_transaction(timeout_s=WAIT_S)
    # partition 0: c0 c2 COMMIT a0 a2 ABORT last COMMIT; partition 1: c1 c3 COMMIT a1 ABORT
    ends = {tps[0]: 8, tps[1]: 5}
    committed = _read(cluster, tps, "read_committed", ends)
    assert sorted(committed) == [b"c0", b"c1", b"c2", b"c3", b"last"]
    everything = _read(cluster, tps, "read_uncommitted", ends)
    assert sorted(everything) == [b"a0", b"a1", b"a2", b"c0", b"c1", b"c2", b"c3", b"last"]


def test_offsets_sent_to_a_transaction_commit_with_it(cluster):
    source, sink, group, tid = _name("in"), _name("out"), _name("g"), _name("tx")
    create_topic(cluster, source, 2, 3)
    create_topic(cluster, sink, 2, 3)
    with Producer(cluster.bootstrap_servers) as plain:
        for i in range(6):
            plain.send(source, b"v%d" % i, partition=i % 2)
        plain.flush()
    in_tps = [TopicPartition(source, 0), TopicPartition(source, 1)]
    consumer = Consumer(cluster.bootstrap_servers, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest", isolation_level="read_committed")
    producer = Producer(cluster.bootstrap_servers, transactional_id=tid)
    try:
        consumer.subscribe([source])
        producer.init_transactions(timeout_s=WAIT_S)
        for attempt in ("abort", "commit"):
            records: list = []
            poll_until(lambda: records.extend(consumer.poll(200)) or len(records) >= 6,
                       WAIT_S, "the input read")
            producer.begin_transaction()
            for r in records:
                producer.send(sink, r.value.upper(), partition=r.partition)
            offsets = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata(),
                                                 timeout_s=WAIT_S)
            if attempt == "abort":
                producer.abort_transaction(timeout_s=WAIT_S)
                assert {tp: consumer.committed(tp) for tp in in_tps} == \
                    {tp: None for tp in in_tps}, "an aborted transaction's offsets"
                for tp in in_tps:
                    consumer.seek(tp, 0)
            else:
                producer.commit_transaction(timeout_s=WAIT_S)
        assert {tp: consumer.committed(tp) for tp in in_tps} == {tp: 3 for tp in in_tps}
    finally:
        producer.close()
        consumer.close()
    out_tps = [TopicPartition(sink, 0), TopicPartition(sink, 1)]
    # each partition: 3 aborted, ABORT, 3 committed, COMMIT
    out = _read(cluster, out_tps, "read_committed", {tp: 8 for tp in out_tps})
    assert sorted(out) == [b"V%d" % i for i in range(6)], "written exactly once"


def test_a_new_instance_fences_the_zombie_and_aborts_its_transaction(cluster):
    topic, tid = _name("z"), _name("tx")
    create_topic(cluster, topic, 1, 3)
    tp = TopicPartition(topic, 0)
    zombie = Producer(cluster.bootstrap_servers, transactional_id=tid)
    fresh = Producer(cluster.bootstrap_servers, transactional_id=tid)
    try:
        zombie.init_transactions(timeout_s=WAIT_S)
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0).get(WAIT_S)
        fresh.init_transactions(timeout_s=WAIT_S)       # bumps the epoch, aborts the open one
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction(timeout_s=WAIT_S)
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
        fresh.begin_transaction()
        fresh.send(topic, b"fresh", partition=0)
        fresh.commit_transaction(timeout_s=WAIT_S)
    finally:
        zombie.close()
        fresh.close()
    # zombie, ABORT (written by the coordinator at the fencing), fresh, COMMIT
    assert _read(cluster, [tp], "read_committed", {tp: 4}) == [b"fresh"]


def _group_offsets(cluster, group: str, partitions: list, stable: bool = True) -> dict:
    """The group's committed offsets (OffsetFetch with require_stable, through the native
    coordinator client: a moved coordinator is found again, UNSTABLE_OFFSET_COMMIT is
    asked again until the transaction ends)."""
    net = Network("txc-test", 10_000)
    try:
        coordinators = Coordinators(net, MetadataFetcher(net, parse_bootstrap(
            cluster.bootstrap_servers), 10_000), request_timeout_ms=10_000)
        answer = coordinators.request(
            group, ApiKey.OFFSET_FETCH,
            coord.offset_fetch_body(group, partitions, require_stable=stable),
            error_of=coord.offset_fetch_error, deadline_s=time.monotonic() + WAIT_S)
        return coord.offset_fetch_offsets(answer)
    finally:
        net.close()


def _name_led_by(cluster, prefix: str, topic: str, broker: int) -> str:
    """A new name whose partition of ``topic`` (3 partitions) ``broker`` leads."""
    for _ in range(1000):
        name = _name(prefix)
        if cluster.partition_state(topic, partition_for(name, 3)).leader == broker:
            return name
    raise AssertionError(f"broker {broker} leads no partition of {topic}")


def test_transactional_offsets_survive_a_group_coordinator_failover(cluster):
    """A committed transaction's offsets are rebuilt by the new coordinator from the
    transactional records and the COMMIT marker in __consumer_offsets; an open
    transaction's stay pending there and become committed when it commits later.
    Broker 0 leads both the group's and the open transaction's coordinator partitions
    and is the one killed: the producer must find its new transaction coordinator
    through another broker (it once asked the first broker of its metadata forever)."""
    source = _name("in")
    create_topic(cluster, source, 2, 3)
    done = Producer(cluster.bootstrap_servers, transactional_id=_name("tx"))
    open_ = None
    try:
        done.init_transactions(timeout_s=WAIT_S)        # __transaction_state exists
        _group_offsets(cluster, _name("g"), [(source, 0)])  # __consumer_offsets exists
        group = _name_led_by(cluster, "g", OFFSETS_TOPIC, 0)
        open_ = Producer(cluster.bootstrap_servers,
                         transactional_id=_name_led_by(cluster, "tx", TRANSACTION_STATE_TOPIC, 0))
        open_.init_transactions(timeout_s=WAIT_S)
        for p in (done, open_):
            p.begin_transaction()
        done.send_offsets_to_transaction({TopicPartition(source, 0): 3}, group,
                                         timeout_s=WAIT_S)
        done.commit_transaction(timeout_s=WAIT_S)
        open_.send_offsets_to_transaction({TopicPartition(source, 1): 5}, group,
                                          timeout_s=WAIT_S)
        # its COMMIT marker is written (the coordinator sends markers after EndTxn's
        # answer): the new leader must rebuild it from the log, not from a late marker
        assert _group_offsets(cluster, group, [(source, 0)]) == {(source, 0): 3}
        leader = cluster.partition_state(OFFSETS_TOPIC, partition_for(group, 3)).leader
        assert leader == 0
        cluster.kill(leader)
        try:
            assert _group_offsets(cluster, group, [(source, 0)]) == {(source, 0): 3}
            # the open transaction's offset: pending (not read as a committed one)
            assert _group_offsets(cluster, group, [(source, 1)], stable=False) == {}
            open_.commit_transaction(timeout_s=WAIT_S)
            assert _group_offsets(cluster, group, [(source, 0), (source, 1)]) == \
                {(source, 0): 3, (source, 1): 5}
        finally:
            cluster.start(leader)
    finally:
        done.close()
        if open_ is not None:
            open_.close()


def test_confluent_kafka_sends_a_consumer_groups_offsets_to_its_transaction(cluster):
    """Kafka's wire: librdkafka's read-process-write (a classic group member, its
    consumer_group_metadata, TxnOffsetCommit through the Kafka listener)."""
    confluent = pytest.importorskip("confluent_kafka")
    source, sink, group = _name("cin"), _name("cout"), _name("cg")
    create_topic(cluster, source, 1, 3)
    create_topic(cluster, sink, 1, 3)
    with Producer(cluster.bootstrap_servers) as plain:
        for i in range(4):
            plain.send(source, b"v%d" % i, partition=0)
        plain.flush()
    consumer = confluent.Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                                   "group.id": group, "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False,
                                   "isolation.level": "read_committed"})
    producer = confluent.Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                                   "transactional.id": _name("ctx")})
    try:
        consumer.subscribe([source])
        producer.init_transactions(WAIT_S)
        seen: list = []

        def read():
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg)
            return len(seen) == 4
        poll_until(read, WAIT_S, "librdkafka's consumer reading the input")
        producer.begin_transaction()
        for msg in seen:
            producer.produce(sink, value=msg.value().upper(), partition=0)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), WAIT_S)
        producer.commit_transaction(WAIT_S)
        (committed,) = consumer.committed([confluent.TopicPartition(source, 0)], WAIT_S)
        assert committed.offset == 4 and committed.error is None
    finally:
        consumer.close()
    tp = TopicPartition(sink, 0)
    assert _read(cluster, [tp], "read_committed", {tp: 5}) == [b"V0", b"V1", b"V2", b"V3"]


def test_a_late_txn_offset_commit_outside_its_transaction_is_refused(cluster):
    """KIP-890 for TxnOffsetCommit: a zombie's request arriving after its transaction
    committed (replayed by hand) is refused: INVALID_PRODUCER_EPOCH with the epoch the
    commit bumped (part 2), INVALID_TXN_STATE (or TRANSACTION_ABORTABLE from v4) with
    the current one outside a transaction (part 1's verification); the next transaction of the same producer
    does not commit its offset."""
    source, group, tid = _name("in"), _name("g"), _name("tx")
    create_topic(cluster, source, 1, 3)
    tp = TopicPartition(source, 0)
    with Producer(cluster.bootstrap_servers, transactional_id=tid) as p:
        p.init_transactions(timeout_s=WAIT_S)
        p.begin_transaction()
        old_id, old_epoch = p._txn.producer()
        p.send_offsets_to_transaction({tp: 7}, group, timeout_s=WAIT_S)
        p.commit_transaction(timeout_s=WAIT_S)
        late = {"transactional_id": tid, "group_id": group, "producer_id": old_id,
                "producer_epoch": old_epoch, "generation_id": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": source, "partitions": [
                    {"partition_index": 0, "committed_offset": 99,
                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        answer = _group_request(cluster, group, ApiKey.TXN_OFFSET_COMMIT, late)
        # its epoch was bumped at the commit (KIP-890 part 2): fenced
        assert answer["topics"][0]["partitions"][0]["error_code"] == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        # the current epoch, but no transaction has the group: not in a transaction (the
        # coordinator's answer; its TRANSACTION_ABORTABLE is INVALID_TXN_STATE before v4)
        late["producer_id"], late["producer_epoch"] = p._txn.producer()
        answer = _group_request(cluster, group, ApiKey.TXN_OFFSET_COMMIT, late)
        assert answer["topics"][0]["partitions"][0]["error_code"] in \
            (ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.INVALID_TXN_STATE)
        answer = _group_request(cluster, group, ApiKey.TXN_OFFSET_COMMIT,
                                {**late, "kafka_version": 3})
        assert answer["topics"][0]["partitions"][0]["error_code"] == \
            ErrorCode.INVALID_TXN_STATE
        p.begin_transaction()                   # the same producer id's next transaction
        p.send(source, b"x", partition=0)
        p.commit_transaction(timeout_s=WAIT_S)
    assert _group_offsets(cluster, group, [(source, 0)]) == {(source, 0): 7}


def _first_partition_error(body: dict) -> int:
    return int(body.get("error_code") or
               body["topics"][0]["partitions"][0]["error_code"])


def _group_request(cluster, group: str, api_key: int, body: dict) -> dict:
    net = Network("txc-test", 10_000)
    try:
        coordinators = Coordinators(net, MetadataFetcher(net, parse_bootstrap(
            cluster.bootstrap_servers), 10_000), request_timeout_ms=10_000)
        # a coordinator's error for the partition (COORDINATOR_LOAD_IN_PROGRESS while
        # the offsets partition's new leader loads, after the fail-over test's restart)
        # is asked again, as Kafka's TxnOffsetCommitHandler does; the others are answers
        return coordinators.request(group, api_key, body, error_of=_first_partition_error,
                                    deadline_s=time.monotonic() + WAIT_S)
    finally:
        net.close()


def test_kafka_python_sends_a_consumer_groups_offsets_to_its_transaction(cluster):
    """Kafka's wire: kafka-python's transactional producer with a group member's
    metadata (TxnOffsetCommit through the Kafka listener)."""
    kafka = pytest.importorskip("kafka")
    source, sink, group = _name("kin"), _name("kout"), _name("kg")
    create_topic(cluster, source, 1, 3)
    create_topic(cluster, sink, 1, 3)
    with Producer(cluster.bootstrap_servers) as plain:
        for i in range(3):
            plain.send(source, b"v%d" % i, partition=0)
        plain.flush()
    consumer = kafka.KafkaConsumer(source, bootstrap_servers=cluster.kafka_bootstrap_servers,
                                   group_id=group, auto_offset_reset="earliest",
                                   enable_auto_commit=False,
                                   isolation_level="read_committed")
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers,
                                   transactional_id=_name("ktx"))
    try:
        seen: list = []
        poll_until(lambda: seen.extend(r for rs in consumer.poll(500).values() for r in rs)
                   or len(seen) >= 3, WAIT_S, "kafka-python's consumer reading the input")
        producer.init_transactions()
        producer.begin_transaction()
        for r in seen:
            producer.send(sink, r.value.upper(), partition=0)
        tp = kafka.TopicPartition(source, 0)
        producer.send_offsets_to_transaction({tp: kafka.OffsetAndMetadata(3, "", -1)},
                                             consumer.group_metadata())
        producer.commit_transaction()
        assert consumer.committed(tp) == 3
    finally:
        producer.close()
        consumer.close()
    out = TopicPartition(sink, 0)
    assert _read(cluster, [out], "read_committed", {out: 4}) == [b"V0", b"V1", b"V2"]


def test_the_transactions_tool_lists_and_describes_an_open_transaction(cluster, capsys):
    """`minikafka transactions list|describe` (kafka-transactions.sh's columns): an open
    transaction shows as Ongoing with its partition, then CompleteCommit once committed."""
    from node.tools.transactions import DESCRIBE_HEADERS, LIST_HEADERS
    from node.tools import transactions as tool
    import argparse
    topic, tid = _name("tool"), _name("tx")
    create_topic(cluster, topic, 1, 3)
    parser = argparse.ArgumentParser()
    tool.add_arguments(parser)

    def run(*argv) -> list[list[str]]:
        capsys.readouterr()
        args = parser.parse_args(["--bootstrap-server", cluster.bootstrap_servers, *argv])
        assert args.func(args) == 0
        return [line.split("\t") for line in capsys.readouterr().out.splitlines()]

    with Producer(cluster.bootstrap_servers, transactional_id=tid) as p:
        p.init_transactions(timeout_s=WAIT_S)
        p.begin_transaction()
        p.send(topic, b"v", partition=0).get(WAIT_S)
        table = run("describe", "--transactional-id", tid)
        assert table[0][:-1] == list(DESCRIBE_HEADERS) and table[0][-1] == ""
        row = dict(zip(DESCRIBE_HEADERS, (c.strip() for c in table[1])))
        assert row["TransactionalId"] == tid and row["TransactionState"] == "Ongoing"
        assert row["TopicPartitions"] == f"{topic}-0"
        assert int(row["CurrentTransactionStartTimeMs"]) > 0
        listed = {r[0].strip(): [c.strip() for c in r] for r in run("list")[1:]}
        assert run("list")[0][:-1] == list(LIST_HEADERS)
        assert listed[tid][1] == row["CoordinatorId"] and listed[tid][3] == "Ongoing"
        p.commit_transaction(timeout_s=WAIT_S)
    poll_until(lambda: dict(zip(DESCRIBE_HEADERS, (c.strip() for c in run(
        "describe", "--transactional-id", tid)[1])))["TransactionState"] == "CompleteCommit",
        WAIT_S, "the transaction described as CompleteCommit")
