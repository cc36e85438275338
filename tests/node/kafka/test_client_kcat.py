"""Debian's kcat against the Kafka listeners of a real 3-broker cluster: ``-L`` (the
command that failed in issue 25), ``-P`` with keys and headers, ``-C`` with ``-e``."""
from __future__ import annotations

import json

import pytest

from tests.node.kafka.clients import create_topic, describe_partition, kafka_bootstrap, needs
from tests.node.kafka.drivers import (Rec, assert_records, consume_confluent, consume_kcat,
                                      kcat, produce_confluent, produce_kcat, sample_records)

pytestmark = [pytest.mark.process, pytest.mark.slow, needs("kcat")]


def test_list_metadata_names_every_broker_and_partition(kafka_cluster):
    create_topic(kafka_cluster, "kcat-listed", partitions=3, replication_factor=2)
    b = kafka_bootstrap(kafka_cluster)
    addresses = b.split(",")
    text = kcat("-b", b, "-L", "-t", "kcat-listed")
    assert f" {len(addresses)} brokers:" in text, text
    for broker_id, address in zip(kafka_cluster.broker_ids, addresses):
        assert f"broker {broker_id} at {address}" in text, text
    assert 'topic "kcat-listed" with 3 partitions:' in text, text

    md = json.loads(kcat("-b", b, "-L", "-J"))
    assert {(x["id"], x["name"]) for x in md["brokers"]} == \
        set(zip(kafka_cluster.broker_ids, addresses))
    assert md["controllerid"] in kafka_cluster.broker_ids
    topic = next(t for t in md["topics"] if t["topic"] == "kcat-listed")
    for p in topic["partitions"]:
        native = describe_partition(kafka_cluster, "kcat-listed", p["partition"])
        assert p["leader"] == native.leader
        assert [r["id"] for r in p["replicas"]] == list(native.replicas)
        assert sorted(r["id"] for r in p["isrs"]) == sorted(native.isr)


@needs("confluent-kafka")
def test_produce_with_keys_and_headers_then_consume_to_the_end(kafka_cluster):
    create_topic(kafka_cluster, "kcat-io", partitions=2)
    b = kafka_bootstrap(kafka_cluster)
    headers = (("source", b"kcat"), ("empty", b""))
    records = [Rec(f"key-{i % 4}".encode(), f"value {i}: {'x' * i}".encode(), headers)
               for i in range(25)]
    produce_kcat(b, "kcat-io", records, partition=1, headers=headers)
    got = consume_kcat(b, "kcat-io", 1, 25)
    assert_records(got, records, "kcat", offsets=range(25))
    assert all(g.timestamp > 0 for g in got)
    # What kcat wrote reads the same through librdkafka's consumer in Python, and -e ends
    # at the high watermark: exactly 25 records, no wait for more.
    assert_records(consume_confluent(b, "kcat-io", 1, 25), records, "confluent-kafka")
    assert len(kcat("-b", b, "-C", "-t", "kcat-io", "-p", "1", "-o", "beginning", "-e",
                    "-J").splitlines()) == 25
    assert kcat("-b", b, "-C", "-t", "kcat-io", "-p", "0", "-o", "beginning", "-e") == ""


@needs("confluent-kafka")
def test_consumes_what_librdkafka_wrote_from_an_offset(kafka_cluster):
    create_topic(kafka_cluster, "kcat-from-rd")
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(20, binary=False, prefix="rd")
    records = [Rec(r.key or b"k", r.value or b"v", r.headers, r.timestamp) for r in records]
    produce_confluent(b, "kcat-from-rd", records)
    assert_records(consume_kcat(b, "kcat-from-rd", 0, 20), records, "kcat")
    assert_records(consume_kcat(b, "kcat-from-rd", 0, 5, start=15), records[15:], "kcat",
                   offsets=range(15, 20))
    formatted = kcat("-b", b, "-C", "-t", "kcat-from-rd", "-o", "18", "-e", "-f",
                     "%o %k %s\n")
    assert formatted.splitlines() == [f"{18 + i} {r.key.decode()} {r.value.decode()}"
                                      for i, r in enumerate(records[18:])]
