"""Avro values: the schema registry in the coordinator (real zk_lite, real kazoo) and the
serializers on a real producer and consumer."""
from __future__ import annotations

import threading
import time

import pytest

from node.client import Consumer, Producer
from node.client.avro import (AvroDeserializer, AvroSerializer, RegistryError,
                              SchemaRegistry, SerializationError, encode, schema_id_of)
from node.client.consumer import DeserializationError
from node.cluster import Cluster
from tests.conftest import new_cluster_id

pytestmark = [pytest.mark.process, pytest.mark.slow]

CLICK_V1 = {"type": "record", "name": "Click", "namespace": "test",
            "fields": [{"name": "user", "type": "string"},
                       {"name": "clicks", "type": "long"}]}
# v2 adds a field with a default: v1 values read with v2 get the default.
CLICK_V2 = {"type": "record", "name": "Click", "namespace": "test",
            "fields": [{"name": "user", "type": "string"},
                       {"name": "clicks", "type": "long"},
                       {"name": "page", "type": ["null", "string"], "default": None}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("avro"), brokers=1,
                         config={"num.partitions": "2", "default.replication.factor": "1"},
                         cluster_id=new_cluster_id())
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


_subjects = iter(range(10_000))


@pytest.fixture
def subject():
    return f"s{next(_subjects)}-value"


@pytest.fixture
def registry(cluster):
    with SchemaRegistry(cluster.zookeeper) as registry:
        yield registry


def test_ids_are_global_and_versions_per_subject(registry, subject):
    first = registry.register(subject, CLICK_V1)
    assert registry.register(subject, CLICK_V1) == first          # the same schema again
    assert registry.register(subject + "-other", CLICK_V1) == first  # same id elsewhere
    second = registry.register(subject, CLICK_V2)
    assert second != first
    assert registry.versions(subject) == {1: first, 2: second}
    assert registry.latest(subject)[:2] == (second, 2)
    assert registry.schema(first)["name"] == "test.Click"
    assert subject in registry.subjects()
    # Key order does not make a new schema; the stored text is what was registered.
    reordered = {"fields": CLICK_V1["fields"], "namespace": "test", "name": "Click",
                 "type": "record"}
    assert registry.register(subject, reordered) == first


def test_concurrent_registrations_race_on_conditional_writes(cluster, subject):
    """Eight clients register four schemas at once: every schema gets one id, distinct
    schemas distinct ids, and the subject one version per schema."""
    schemas = [{"type": "record", "name": f"R{i}", "fields": [{"name": "a", "type": "int"}]}
               for i in range(4)]
    results: dict[int, list[int]] = {i: [] for i in range(4)}
    errors = []
    start = threading.Barrier(8)

    def register(k: int) -> None:
        try:
            with SchemaRegistry(cluster.zookeeper) as registry:
                start.wait(10)
                for i in range(4):
                    results[(i + k) % 4].append(registry.register(subject, schemas[(i + k) % 4]))
        except Exception as e:      # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=register, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    ids = {i: set(found) for i, found in results.items()}
    assert all(len(found) == 1 for found in ids.values()), ids
    assert len({next(iter(found)) for found in ids.values()}) == 4
    with SchemaRegistry(cluster.zookeeper) as registry:
        versions = registry.versions(subject)
    assert sorted(versions.values()) == sorted(next(iter(f)) for f in ids.values())
    assert sorted(versions) == [1, 2, 3, 4]


def test_bad_schemas_subjects_and_addresses_are_clear_errors(registry):
    with pytest.raises(RegistryError, match="not a valid Avro schema"):
        registry.register("x-value", {"type": "record", "name": "R", "fields": "nope"})
    with pytest.raises(RegistryError, match="not JSON"):
        registry.register("x-value", "{oops")
    with pytest.raises(RegistryError, match="invalid subject"):
        registry.register("a/b", CLICK_V1)
    with pytest.raises(RegistryError, match="no schema with id 999999"):
        registry.schema(999999)
    with pytest.raises(RegistryError, match="no schema registered under subject"):
        registry.latest("never-registered")
    started = time.monotonic()
    with pytest.raises(RegistryError, match="cannot reach the coordinator"):
        SchemaRegistry("127.0.0.1:1", timeout_s=1.0)
    assert time.monotonic() - started < 10


def test_serializer_rejects_values_that_do_not_match(registry, subject):
    serializer = AvroSerializer(registry, CLICK_V1, subject)
    with pytest.raises(SerializationError, match="does not match schema"):
        serializer({"user": "ann", "clicks": "many"})
    assert schema_id_of(serializer({"user": "ann", "clicks": 1})) == serializer.schema_id
    with pytest.raises(SerializationError, match="magic byte"):
        schema_id_of(b"\x07\x00\x00\x00\x01payload")
    with pytest.raises(SerializationError, match="header takes 5"):
        schema_id_of(b"ab")


def _topic(cluster, name: str) -> str:
    from node.client import Admin
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(name, 2, 1)
    return name


def test_producer_and_consumer_round_trip_with_schema_evolution(cluster, registry):
    topic = _topic(cluster, f"clicks{next(_subjects)}")
    subject = f"{topic}-value"
    with Producer(cluster.bootstrap_servers,
                  value_serializer=AvroSerializer(registry, CLICK_V1, subject)) as old, \
            Producer(cluster.bootstrap_servers,
                     value_serializer=AvroSerializer(registry, CLICK_V2, subject)) as new:
        for i in range(50):
            old.send(topic, {"user": f"u{i % 3}", "clicks": i}, partition=0)
            new.send(topic, {"user": f"u{i % 3}", "clicks": i, "page": f"/p{i}"},
                     partition=1)
        old.flush()
        new.flush()
    # Read with the newest schema: the old values get the new field's default.
    deserializer = AvroDeserializer(registry, reader_schema=CLICK_V2)
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest",
                  value_deserializer=deserializer) as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        records = _poll(consumer, 100)
    by_partition = {p: [r.value for r in records if r.partition == p] for p in (0, 1)}
    assert by_partition[0] == [{"user": f"u{i % 3}", "clicks": i, "page": None}
                               for i in range(50)]
    assert by_partition[1] == [{"user": f"u{i % 3}", "clicks": i, "page": f"/p{i}"}
                               for i in range(50)]


def test_a_value_that_cannot_be_deserialized_stops_its_partition_until_skipped(
        cluster, registry):
    """The records before it are delivered, then poll raises naming the offset (no
    record is skipped silently); after seeking past it the rest follow."""
    topic = _topic(cluster, f"mixed{next(_subjects)}")
    schema_id = registry.register(f"{topic}-value", CLICK_V1)
    from fastavro import parse_schema
    parsed = parse_schema(CLICK_V1)
    values = [encode(schema_id, parsed, {"user": "a", "clicks": i}) for i in range(3)]
    values.append(b"not avro at all")
    values += [encode(schema_id, parsed, {"user": "b", "clicks": i}) for i in range(3)]
    with Producer(cluster.bootstrap_servers) as producer:
        for value in values:
            producer.send(topic, value, partition=0)
        producer.flush()
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest",
                  value_deserializer=AvroDeserializer(registry)) as consumer:
        consumer.assign([(topic, 0)])
        before = _poll(consumer, 3)
        assert [r.value["clicks"] for r in before] == [0, 1, 2]
        with pytest.raises(DeserializationError, match="offset 3") as raised:
            _poll(consumer, 1)
        assert raised.value.offset == 3
        with pytest.raises(DeserializationError):   # still there: nothing skipped
            _poll(consumer, 1)
        consumer.seek((topic, 0), 4)
        after = _poll(consumer, 3)
    assert [(r.offset, r.value) for r in after] == [
        (4 + i, {"user": "b", "clicks": i}) for i in range(3)]


def _poll(consumer, n: int, timeout_s: float = 20.0) -> list:
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += consumer.poll(200)
    assert len(out) >= n, f"{len(out)} of {n} records within {timeout_s} s"
    return out
