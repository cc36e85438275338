"""Every compression codec (none, gzip, snappy, lz4, zstd) produced by confluent-kafka
(librdkafka) and kafka-python, read back by every client: confluent-kafka, kafka-python,
aiokafka, kafkajs and kcat. One topic per (producer, codec), written once per module;
and the raw Fetch answers keep the producer's codec (librdkafka's lz4 excepted for now:
see RDKAFKA_LZ4)."""
from __future__ import annotations

import pytest

from tests.node.kafka import raw
from tests.node.kafka.clients import (create_topic, describe_partition, kafka_bootstrap,
                                      skip_if_missing)
from tests.node.kafka.drivers import (CONSUMERS, PRODUCERS, Rec, assert_records,
                                      sample_records)

pytestmark = [pytest.mark.process, pytest.mark.slow]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
WRITERS = ["confluent-kafka", "kafka-python"]
READERS = ["confluent-kafka", "kafka-python", "aiokafka", "kafkajs", "kcat"]
RECORDS = 60   # several batches' worth of compressible text
LINGER_MS = 10_000   # longer than writing RECORDS takes; the flush sends the last batch


def _records(writer: str, codec: str) -> list[Rec]:
    # Text (kcat prints text), compressible, with keys and headers; no null keys or values
    # (kcat's JSON cannot tell them from the strings "null").
    return [Rec(f"{writer}-{codec}-key-{i % 5}".encode(),
                (f"{codec} value {i} " * (1 + i % 9)).encode(),
                (("codec", codec.encode()), ("i", str(i).encode())) if i % 2 else (),
                1_700_000_000_000 + i)
            for i in range(RECORDS)]


_written: dict = {}


def written(cluster, writer: str, codec: str) -> tuple[str, list[Rec]]:
    """The topic ``writer`` filled with ``codec``-compressed batches (once per module)."""
    if (writer, codec) not in _written:
        topic = f"z-{writer}-{codec}"
        create_topic(cluster, topic)
        records = _records(writer, codec)
        b = kafka_bootstrap(cluster)
        # Both clients send a batch uncompressed when its codec does not shrink it
        # (librdkafka's msgset writer, kafka-python's _maybe_compress), as a batch of one
        # short record. A long linger closes a batch only when it is full or at the
        # flush, so the batches are the same however slowly the records are handed over
        # (with linger.ms=20 a loaded machine's first batch held one record, sent
        # uncompressed).
        if writer == "confluent-kafka":
            offsets = PRODUCERS[writer](b, topic, records, conf={
                "compression.type": codec, "linger.ms": LINGER_MS, "batch.num.messages": 16})
        else:
            offsets = PRODUCERS[writer](b, topic, records, compression_type=None
                                        if codec == "none" else codec, batch_size=2048,
                                        linger_ms=LINGER_MS)
        assert offsets == list(range(RECORDS))
        _written[(writer, codec)] = (topic, records)
    return _written[(writer, codec)]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("writer", WRITERS)
def test_codec_written_by_one_client_reads_back_in_another(kafka_cluster, writer, codec, reader):
    skip_if_missing(writer)
    skip_if_missing(reader, codec)
    topic, records = written(kafka_cluster, writer, codec)
    got = CONSUMERS[reader](kafka_bootstrap(kafka_cluster), topic, 0, RECORDS)
    assert_records(got, records, reader, offsets=range(RECORDS))


def test_sample_records_with_binary_and_nulls_survive_every_codec(kafka_cluster):
    """The awkward records (null and empty keys, binary values, repeated headers) through
    every codec, librdkafka to librdkafka."""
    skip_if_missing("confluent-kafka")
    b = kafka_bootstrap(kafka_cluster)
    for codec in CODECS:
        topic = f"zs-{codec}"
        create_topic(kafka_cluster, topic)
        records = sample_records(50, prefix=codec)
        PRODUCERS["confluent-kafka"](b, topic, records, conf={"compression.type": codec})
        assert_records(CONSUMERS["confluent-kafka"](b, topic, 0, 50), records,
                       "confluent-kafka", offsets=range(50))


# librdkafka takes a broker's LZ4 support from FindCoordinator in its ApiVersions (a proxy
# for Kafka >= 0.8.2, rdkafka_feature.c): advertised since the group coordinator
# (issue 26), so its lz4 batches stay lz4.
@pytest.mark.parametrize("writer,codec", [(w, c) for w in WRITERS for c in CODECS])
def test_fetched_batches_keep_the_codec_they_were_written_with(kafka_cluster, writer, codec):
    """compression.type=producer (the default): a Fetch answer's batches carry the codec
    the producer chose (attribute bits 0-2), read here from the raw answer."""
    skip_if_missing(writer)
    topic, _ = written(kafka_cluster, writer, codec)
    address = kafka_cluster.kafka_address(describe_partition(kafka_cluster, topic).leader)
    version = min(12, raw.api_versions(address)[1][1])    # v13+ names topics by id
    answer = raw.call(address, 1, version, raw.fetch_request(topic))
    partition = answer.responses[0].partitions[0]
    assert partition.error_code == 0
    shapes = raw.batch_shapes(partition.records)
    assert sum(count for _, count in shapes) == RECORDS, shapes
    codecs = {a & 0x07 for a, _ in shapes}
    assert codecs == {CODECS.index(codec)}, shapes    # (attributes, records) per batch
