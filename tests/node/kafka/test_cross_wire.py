"""Issue 25: "a record produced through either wire reads back through the other with the
same offset, key, value, headers and timestamp" - on a real 3-broker cluster, between
node.client (the native wire) and Kafka's clients (the Kafka listener): confluent-kafka
(librdkafka) both ways, and kafka-python reading (its producer refuses null header values).

The records carry what must survive: null and empty keys, a null value, binary bytes,
headers with a null value, an empty value and a repeated key (in order), explicit
CreateTime timestamps, and records without headers in the same batch as records with.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from node.client import Consumer as NativeConsumer
from node.client import Producer as NativeProducer
from node.client import TopicPartition as NativeTopicPartition
from tests.node.kafka.clients import REPO, create_topic, needs, skip_if_missing
from tests.node.kafka.drivers import (TIMEOUT_S, Got, Rec, assert_records, consume_confluent,
                                      consume_kafka_python, produce_confluent)

pytestmark = [pytest.mark.process, pytest.mark.slow]

BASE_TIMESTAMP_MS = 1_700_000_000_000
COUNT = 40

KAFKA_READERS = {"confluent-kafka": consume_confluent, "kafka-python": consume_kafka_python}


def cross_records(n: int = COUNT, prefix: str = "x") -> list[Rec]:
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else (b"" if i % 5 == 1 else f"{prefix}-key-{i % 3}".encode())
        value = None if i % 11 == 4 else f"{prefix}-{i}-".encode() + bytes(range(i % 7 * 30))
        headers = ()
        if i % 3 == 0:
            headers = (("trace", f"{prefix}-{i}".encode()), ("null", None), ("empty", b""),
                       ("trace", b"again \xff"))
        elif i % 3 == 1:
            headers = (("\u00e9t\u00e9", b"\x00\x01"),)
        out.append(Rec(key, value, headers, BASE_TIMESTAMP_MS + i * 997 + (i % 5)))
    return out


# ------------------------------------------------------------------ node.client
def produce_native(bootstrap: str, topic: str, records: list[Rec], partition: int = 0,
                   **config) -> list[int]:
    """Send ``records`` through node.client's Producer (lingering, so records with and
    without headers share batches); the offsets its futures give."""
    producer = NativeProducer(bootstrap, acks="all", linger_ms=20, **config)
    try:
        futures = [producer.send(topic, r.value, key=r.key, partition=partition,
                                 timestamp_ms=r.timestamp, headers=list(r.headers) or None)
                   for r in records]
        producer.flush(TIMEOUT_S)
        return [f.get(TIMEOUT_S).offset for f in futures]
    finally:
        producer.close()


def consume_native(bootstrap: str, topic: str, partition: int, count: int) -> list[Got]:
    """Read ``count`` records from the beginning through node.client's Consumer.poll."""
    consumer = NativeConsumer(bootstrap, auto_offset_reset="earliest")
    got: list[Got] = []
    try:
        consumer.assign([NativeTopicPartition(topic, partition)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"node.client read {len(got)} of {count}"
            for r in consumer.poll(timeout_ms=500):
                assert (r.topic, r.partition) == (topic, partition)
                assert isinstance(r.headers, tuple)
                got.append(Got(r.offset, r.key, r.value, tuple(r.headers), r.timestamp))
    finally:
        consumer.close()
    return got


def _kafka(cluster) -> str:
    return cluster.kafka_bootstrap_servers


def _native(cluster) -> str:
    return cluster.bootstrap_servers


# ------------------------------------------------------------------ the tests
@needs("confluent-kafka")     # (kafka-python's producer refuses null header values)
def test_a_record_produced_through_kafkas_wire_reads_back_natively(kafka_cluster, kafka_topic):
    records = cross_records(prefix="rdkafka")
    offsets = produce_confluent(_kafka(kafka_cluster), kafka_topic, records, partition=1)
    assert offsets == list(range(COUNT))
    got = consume_native(_native(kafka_cluster), kafka_topic, 1, COUNT)
    assert_records(got, records, "node.client", offsets=offsets)
    assert got[0].headers == (("trace", b"rdkafka-0"), ("null", None), ("empty", b""),
                              ("trace", b"again \xff"))
    assert got[2].headers == () and got[4].value is None and got[0].key is None


@pytest.mark.parametrize("reader", sorted(KAFKA_READERS))
def test_a_record_produced_natively_reads_back_through_kafkas_wire(kafka_cluster, kafka_topic,
                                                                   reader):
    skip_if_missing(reader)
    records = cross_records(prefix="native")
    offsets = produce_native(_native(kafka_cluster), kafka_topic, records, partition=2)
    assert offsets == list(range(COUNT))
    got = KAFKA_READERS[reader](_kafka(kafka_cluster), kafka_topic, 2, COUNT)
    assert_records(got, records, reader, offsets=offsets)
    assert got[0].headers == (("trace", b"native-0"), ("null", None), ("empty", b""),
                              ("trace", b"again \xff"))


@needs("confluent-kafka")
def test_native_batches_after_kafka_batches_keep_offsets_and_headers_both_ways(kafka_cluster,
                                                                               kafka_topic):
    """Both wires write the same partition in turns; each reader sees all of it."""
    first, second, third = (cross_records(15, prefix=p) for p in ("k1", "n1", "k2"))
    b_kafka, b_native = _kafka(kafka_cluster), _native(kafka_cluster)
    assert produce_confluent(b_kafka, kafka_topic, first, partition=0) == list(range(15))
    assert produce_native(b_native, kafka_topic, second, partition=0) == list(range(15, 30))
    assert produce_confluent(b_kafka, kafka_topic, third, partition=0) == list(range(30, 45))
    everything = first + second + third
    assert_records(consume_native(b_native, kafka_topic, 0, 45), everything, "node.client",
                   offsets=range(45))
    assert_records(consume_confluent(b_kafka, kafka_topic, 0, 45), everything,
                   "confluent-kafka", offsets=range(45))


def _tool(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "node.cli", *map(str, args)], cwd=REPO,
                          input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


@needs("confluent-kafka")
def test_console_tools_parse_and_print_headers_across_wires(kafka_cluster):
    """console-producer ``parse.headers`` (native wire) -> librdkafka; librdkafka ->
    console-consumer ``print.headers`` (native wire), as Kafka's console tools."""
    topic = "console-headers"
    create_topic(kafka_cluster, topic, partitions=1)
    _tool("console-producer", "--bootstrap-server", _native(kafka_cluster), "--topic", topic,
          "--property", "parse.headers=true", "parse.key=true", "null.marker=NULL",
          stdin="trace:1,null:NULL,trace:2\tk0\tv0\nNULL\tk1\tv1\n\u00e9:\u00e9\tNULL\tv2\n")
    got = consume_confluent(_kafka(kafka_cluster), topic, 0, 3)
    assert_records(got, [Rec(b"k0", b"v0", (("trace", b"1"), ("null", None), ("trace", b"2"))),
                         Rec(b"k1", b"v1"),
                         Rec(None, b"v2", (("\u00e9", "\u00e9".encode()),))], "confluent-kafka")
    produce_confluent(_kafka(kafka_cluster), topic,
                      [Rec(b"k3", b"v3", (("a", b"1"), ("a", None))), Rec(None, b"v4")])
    printed = _tool("console-consumer", "--bootstrap-server", _native(kafka_cluster),
                    "--topic", topic, "--from-beginning", "--max-messages", 5,
                    "--property", "print.headers=true", "print.key=true", "print.offset=true")
    assert printed.stdout.splitlines() == [
        "Offset:0\ttrace:1,null:null,trace:2\tk0\tv0", "Offset:1\tNO_HEADERS\tk1\tv1",
        "Offset:2\t\u00e9:\u00e9\tnull\tv2", "Offset:3\ta:1,a:null\tk3\tv3",
        "Offset:4\tNO_HEADERS\tnull\tv4"]
