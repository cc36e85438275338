"""Produce, Fetch, ListOffsets, topic ids and the idempotent producer through Kafka's wire
with real clients on real brokers (records crossing between the two wires:
test_cross_wire.py)."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install -e '.[kafka-clients]')")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, OffsetSpec  # noqa: E402

from node.kafka.protocol.messages import FetchRequest, MetadataRequest
from node.kafka.records import kafka_to_log  # noqa: F401  (the converter under test)
from node.wire.errors import ErrorCode
from tests.node.kafka.kafka_wire import KafkaWire

pytestmark = pytest.mark.process

RECORDS = 3000
VALUE_BYTES = 100
BASE_TIMESTAMP_MS = 1_700_000_000_000


def produce(cluster, topic: str, count: int, **config) -> list:
    """Produce ``count`` records (key i, 100-byte value, a header, timestamp base + i);
    the delivery reports (error, partition, offset, key) in order."""
    reports = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                         "linger.ms": 5, **config})
    for i in range(count):
        producer.produce(topic, key=b"key-%d" % i, value=(b"%d-" % i).ljust(VALUE_BYTES, b"v"),
                         headers=[("index", b"%d" % i), ("empty", b"")],
                         timestamp=BASE_TIMESTAMP_MS + i,
                         on_delivery=lambda err, msg: reports.append(
                             (err, msg.partition(), msg.offset(), msg.key())))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return reports


def consume_all(cluster, topic: str, count: int, timeout_s: float = 60,
                partitions: int = 3) -> list:
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                         "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m)
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("acks", ["all", "1"])
def test_produce_and_consume_keep_keys_values_headers_and_timestamps(kafka_cluster,
                                                                     kafka_topic, acks):
    reports = produce(kafka_cluster, kafka_topic, RECORDS, acks=acks)
    assert [r[0] for r in reports] == [None] * RECORDS
    reported = {r[3]: (r[1], r[2]) for r in reports}
    records = consume_all(kafka_cluster, kafka_topic, RECORDS)
    assert len(records) == RECORDS
    for m in records:
        i = int(m.key().split(b"-")[1])
        assert m.value() == (b"%d-" % i).ljust(VALUE_BYTES, b"v")
        assert m.headers() == [("index", b"%d" % i), ("empty", b"")]
        assert m.timestamp() == (1, BASE_TIMESTAMP_MS + i)   # CreateTime
        assert (m.partition(), m.offset()) == reported[m.key()]
    # Offsets are dense per partition: nothing lost, nothing twice.
    for p in range(3):
        offsets = sorted(m.offset() for m in records if m.partition() == p)
        assert offsets == list(range(len(offsets)))


def test_idempotent_producer_writes_each_record_once(kafka_cluster, kafka_topic):
    reports = produce(kafka_cluster, kafka_topic, 2000, **{"enable.idempotence": True})
    assert [r[0] for r in reports] == [None] * 2000
    records = consume_all(kafka_cluster, kafka_topic, 2000)
    assert sorted(m.key() for m in records) == sorted(r[3] for r in reports)
    assert len({(m.partition(), m.offset()) for m in records}) == 2000


def test_list_offsets_earliest_latest_by_time_and_max_timestamp(kafka_cluster, kafka_topic):
    producer = Producer({"bootstrap.servers": kafka_cluster.kafka_bootstrap_servers})
    stamps = [BASE_TIMESTAMP_MS + d for d in (10, 30, 20, 5)]
    for t in stamps:
        producer.produce(kafka_topic, value=b"x", partition=0, timestamp=t)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": kafka_cluster.kafka_bootstrap_servers})
    tp = TopicPartition(kafka_topic, 0)

    def ask(spec):
        futures = admin.list_offsets({tp: spec}, request_timeout=20)
        return futures[tp].result(timeout=30)

    assert ask(OffsetSpec.earliest()).offset == 0
    assert ask(OffsetSpec.latest()).offset == 4
    found = ask(OffsetSpec.max_timestamp())
    assert (found.offset, found.timestamp) == (1, BASE_TIMESTAMP_MS + 30)
    by_time = ask(OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 15))
    assert (by_time.offset, by_time.timestamp) == (1, BASE_TIMESTAMP_MS + 30)
    assert ask(OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 99)).offset == -1


def test_fetch_v13_names_topics_by_id(kafka_cluster, kafka_topic):
    produce(kafka_cluster, kafka_topic, 10, acks="all")
    with KafkaWire(kafka_cluster.kafka_bootstrap_servers.split(",")[0]) as wire:
        md = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=kafka_topic)]), 12).topics[0]
        leader = next(p.leader_id for p in md.partitions if p.partition_index == 0)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        def fetch(topic_id):
            return wire.request(FetchRequest(
                max_wait_ms=0, max_bytes=1 << 20, session_epoch=-1,
                topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                partition_max_bytes=1 << 20)])]), 13)
        known = fetch(md.topic_id).responses[0]
        unknown = fetch(md.topic_id.__class__(int=md.topic_id.int ^ 1)).responses[0]
    part = known.partitions[0]
    assert known.topic_id == md.topic_id and part.error_code == 0
    assert part.high_watermark >= 0 and part.last_stable_offset == part.high_watermark
    assert (part.high_watermark == 0) == (not bytes(part.records or b""))
    assert unknown.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def kafka_batch(values, *, producer_id=-1, producer_epoch=-1, base_sequence=-1) -> bytes:
    """Kafka v2 batch bytes of ``values`` (built as our batch, converted as a fetch would)."""
    from shm.batch import build_batch
    from node.kafka.records import log_to_kafka
    ours = build_batch(list(values), producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)
    return b"".join(bytes(b) for b in log_to_kafka(ours, compression="none"))


def leader_and_follower(cluster, topic: str) -> tuple[int, int, int]:
    """(leader, a follower or None, leader epoch) of partition 0."""
    with KafkaWire(cluster.kafka_bootstrap_servers.split(",")[0]) as wire:
        md = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic)]), 12).topics[0]
    p0 = next(p for p in md.partitions if p.partition_index == 0)
    follower = next((r for r in p0.replica_nodes if r != p0.leader_id), None)
    return p0.leader_id, follower, p0.leader_epoch


def produce_request(topic: str, records: bytes, acks: int = -1):
    from node.kafka.protocol.messages import ProduceRequest
    return ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])])


def test_a_retried_idempotent_batch_gets_its_original_offset(kafka_cluster, kafka_topic):
    from node.kafka.protocol.messages import InitProducerIdRequest
    leader, _, _ = leader_and_follower(kafka_cluster, kafka_topic)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        ids = wire.request(InitProducerIdRequest(transactional_id=None,
                                                 transaction_timeout_ms=60_000), 4)
        assert ids.error_code == 0 and ids.producer_id >= 0
        first = kafka_batch([b"a", b"b"], producer_id=ids.producer_id,
                            producer_epoch=ids.producer_epoch, base_sequence=0)
        second = kafka_batch([b"c"], producer_id=ids.producer_id,
                             producer_epoch=ids.producer_epoch, base_sequence=2)
        gap = kafka_batch([b"d"], producer_id=ids.producer_id,
                          producer_epoch=ids.producer_epoch, base_sequence=7)

        def base_offset(records):
            answer = wire.request(produce_request(kafka_topic, records), 9)
            part = answer.responses[0].partition_responses[0]
            return part.error_code, part.base_offset

        assert base_offset(first) == (0, 0)
        assert base_offset(second) == (0, 2)
        assert base_offset(first) == (0, 0)        # a duplicate: the original offset
        assert base_offset(gap)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    records = consume_all(kafka_cluster, kafka_topic, 3, timeout_s=10)
    assert sorted(m.value() for m in records) == [b"a", b"b", b"c"]


def test_a_follower_names_the_leader_kip_951(kafka_cluster, kafka_topic):
    leader, follower, epoch = leader_and_follower(kafka_cluster, kafka_topic)
    with KafkaWire(kafka_cluster.kafka_address(follower)) as wire:
        produced = wire.request(produce_request(kafka_topic, kafka_batch([b"x"])), 11)
        fetched = wire.request(FetchRequest(max_wait_ms=0, topics=[FetchRequest.FetchTopic(
            topic=kafka_topic, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1024)])]), 12)
        fenced = wire.request(FetchRequest(max_wait_ms=0, topics=[FetchRequest.FetchTopic(
            topic=kafka_topic, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, current_leader_epoch=epoch + 5,
                partition_max_bytes=1024)])]), 12)
    part = produced.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, f"{n.host}:{n.port}") for n in produced.node_endpoints] == [
        (leader, kafka_cluster.kafka_address(leader))]
    fetch_part = fetched.responses[0].partitions[0]
    assert fetch_part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_part.current_leader.leader_id == leader
    assert fenced.responses[0].partitions[0].error_code in (
        ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_a_corrupt_batch_costs_only_its_partition(kafka_cluster, kafka_topic):
    leader, _, _ = leader_and_follower(kafka_cluster, kafka_topic)
    good = kafka_batch([b"fine"])
    bad = bytearray(good)
    bad[-1] ^= 0xFF          # the CRC no longer matches
    from node.kafka.protocol.messages import ProduceRequest
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=kafka_topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=bytes(bad)),
            ProduceRequest.PartitionProduceData(index=0, records=good)])])
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        answer = wire.request(request, 9)
    codes = [p.error_code for p in answer.responses[0].partition_responses]
    assert codes == [ErrorCode.CORRUPT_MESSAGE, 0]
    records = consume_all(kafka_cluster, kafka_topic, 1, timeout_s=10)
    assert [m.value() for m in records] == [b"fine"]


def test_acks_all_below_min_insync_replicas_is_not_enough_replicas(kafka_cluster):
    from node.client import Admin
    topic = "lonely-" + str(time.monotonic_ns())
    with Admin(kafka_cluster.bootstrap_servers) as admin:   # one replica, two required
        admin.create_topic(topic, 1, 1, config={"min.insync.replicas": "2"})
    leader, _, _ = leader_and_follower(kafka_cluster, topic)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        refused = wire.request(produce_request(topic, kafka_batch([b"x"])), 9)
        taken = wire.request(produce_request(topic, kafka_batch([b"y"]), acks=1), 9)
    assert refused.responses[0].partition_responses[0].error_code == \
        ErrorCode.NOT_ENOUGH_REPLICAS
    assert [(p.error_code, p.base_offset) for p in taken.responses[0].partition_responses] == \
        [(0, 0)]


def test_leader_epochs_are_checked_and_answered_kip_320(kafka_cluster, kafka_topic):
    from node.kafka.protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest
    produce(kafka_cluster, kafka_topic, 30, acks="all")
    leader, _, epoch = leader_and_follower(kafka_cluster, kafka_topic)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        def fetch_error(current_epoch):
            answer = wire.request(FetchRequest(max_wait_ms=0, topics=[FetchRequest.FetchTopic(
                topic=kafka_topic, partitions=[FetchRequest.FetchPartition(
                    partition=0, fetch_offset=0, current_leader_epoch=current_epoch,
                    partition_max_bytes=1024)])]), 12)
            return answer.responses[0].partitions[0].error_code

        assert fetch_error(epoch) == 0 and fetch_error(-1) == 0
        assert fetch_error(epoch + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH
        latest = wire.request(ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=kafka_topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=epoch, timestamp=-1)])]), 7)
        end = wire.request(OffsetForLeaderEpochRequest(replica_id=-1, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=kafka_topic, partitions=[
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=epoch, leader_epoch=epoch)])]), 4)
    answer = latest.topics[0].partitions[0]
    assert (answer.error_code, answer.leader_epoch) == (0, epoch) and answer.offset > 0
    found = end.topics[0].partitions[0]
    assert (found.error_code, found.leader_epoch, found.end_offset) == (0, epoch, answer.offset)


@pytest.mark.parametrize("setting,codec", [("gzip", 1), ("zstd", 4), ("uncompressed", 0)])
def test_a_topics_compression_type_is_what_consumers_get(kafka_cluster, setting, codec):
    from node.client import Admin
    topic = f"z{setting}{time.monotonic_ns()}"
    with Admin(kafka_cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, 1, 3, config={"compression.type": setting})
    reports = produce(kafka_cluster, topic, 200, acks="all",
                      **{"compression.type": "lz4" if setting == "uncompressed" else "none"})
    assert [r[0] for r in reports] == [None] * 200
    leader, _, _ = leader_and_follower(kafka_cluster, topic)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        answer = wire.request(FetchRequest(max_wait_ms=0, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 11)
    records = bytes(answer.responses[0].partitions[0].records)
    assert records and records[16] == 2                   # magic v2
    attributes = int.from_bytes(records[21:23], "big")
    assert attributes & 0x7 == codec
    values = sorted(m.value() for m in consume_all(kafka_cluster, topic, 200, partitions=1))
    assert values == sorted((b"%d-" % i).ljust(VALUE_BYTES, b"v") for i in range(200))


def test_acks_0_is_not_answered_and_a_failed_one_closes_the_connection(kafka_cluster,
                                                                         kafka_topic):
    leader, follower, _ = leader_and_follower(kafka_cluster, kafka_topic)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        wire.send(produce_request(kafka_topic, kafka_batch([b"fire"]), acks=0), 9)
        # The next answer on the connection is the next request's: acks=0 got none.
        answer = wire.request(produce_request(kafka_topic, kafka_batch([b"and"]), acks=1), 9)
        assert answer.responses[0].partition_responses[0].base_offset == 1
    with KafkaWire(kafka_cluster.kafka_address(follower)) as wire:
        wire.send(produce_request(kafka_topic, kafka_batch([b"lost"]), acks=0), 9)
        assert wire.closed_by_broker(), "a failed acks=0 write must close the connection"
    records = consume_all(kafka_cluster, kafka_topic, 2, timeout_s=10)
    assert sorted(m.value() for m in records) == [b"and", b"fire"]


def test_acks_other_than_minus_one_zero_or_one_are_invalid_required_acks(kafka_cluster,
                                                                         kafka_topic):
    leader, _, _ = leader_and_follower(kafka_cluster, kafka_topic)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        answer = wire.request(produce_request(kafka_topic, kafka_batch([b"x"]), acks=2), 9)
    assert answer.responses[0].partition_responses[0].error_code == \
        ErrorCode.INVALID_REQUIRED_ACKS
