"""Offsets by time (ListOffsets from the time index), ``Consumer.offsets_for_times`` and
``minikafka get-offsets`` (Kafka's GetOffsetShell) on a real cluster."""
from __future__ import annotations

import subprocess
import sys

import pytest

from node.client import Admin, Consumer, Producer, TopicPartition
from node.cluster import Cluster
from tests.conftest import new_cluster_id

pytestmark = [pytest.mark.process, pytest.mark.slow]

BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Small index intervals, so a lookup crosses time-index entries and segments.
    cluster = Cluster.up(tmp_path_factory.mktemp("offsets"), brokers=1,
                         config={"default.replication.factor": "1",
                                 "log.index.interval.bytes": "256",
                                 "log.segment.bytes": "65536"},
                         cluster_id=new_cluster_id())
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("timed", 2, 1)
            admin.create_topic("other", 1, 1)
        with Producer(cluster.bootstrap_servers, batch_size=1024) as producer:
            # Partition 0: record i has timestamp BASE + 10 i (i < 2000).
            # Partition 1: timestamps BASE + 10 i for i < 100, then a jump to BASE + 50,000.
            for i in range(2000):
                producer.send("timed", b"x" * 40, partition=0, timestamp_ms=BASE_MS + 10 * i)
            for i in range(100):
                producer.send("timed", b"y", partition=1, timestamp_ms=BASE_MS + 10 * i)
            producer.send("timed", b"z", partition=1, timestamp_ms=BASE_MS + 50_000)
            producer.send("other", b"o", partition=0, timestamp_ms=BASE_MS)
            producer.flush()
        yield cluster
    finally:
        cluster.down(grace_s=5)


def test_offsets_for_times_answer_the_first_record_at_or_after_with_its_timestamp(cluster):
    p0, p1 = TopicPartition("timed", 0), TopicPartition("timed", 1)
    with Consumer(cluster.bootstrap_servers) as consumer:
        for asked, expected in ((BASE_MS - 5, (0, BASE_MS)),
                                (BASE_MS, (0, BASE_MS)),
                                (BASE_MS + 1, (1, BASE_MS + 10)),
                                (BASE_MS + 12_345, (1235, BASE_MS + 12_350)),
                                (BASE_MS + 19_990, (1999, BASE_MS + 19_990))):
            found = consumer.offsets_for_times({p0: asked})[p0]
            assert (found.offset, found.timestamp) == expected, asked
        assert consumer.offsets_for_times({p0: BASE_MS + 19_991}) == {p0: None}
        # The record's own timestamp, not the one asked for (Kafka's answer).
        found = consumer.offsets_for_times({p1: BASE_MS + 2_000})[p1]
        assert (found.offset, found.timestamp) == (100, BASE_MS + 50_000)
        with pytest.raises(ValueError, match="non-negative"):
            consumer.offsets_for_times({p0: -7})


def _get_offsets(cluster, *args):
    return subprocess.run([sys.executable, "-m", "node.cli", "get-offsets",
                           "--bootstrap-server", cluster.bootstrap_servers, *args],
                          capture_output=True, text=True, timeout=60)


def test_get_offsets_prints_kafka_lines(cluster):
    latest = _get_offsets(cluster, "--topic", "timed")
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == "timed:0:2000\ntimed:1:101\n"
    assert _get_offsets(cluster, "--topic", "t.*", "--time", "-2").stdout == \
        "timed:0:0\ntimed:1:0\n"
    by_time = _get_offsets(cluster, "--topic", "timed", "--time", str(BASE_MS + 995))
    assert by_time.stdout == "timed:0:100\ntimed:1:100\n"
    # A partition with no record that late is left out, as Kafka's tool does.
    late = _get_offsets(cluster, "--topic", "timed", "--time", str(BASE_MS + 30_000))
    assert late.stdout == "timed:1:100\n"
    every = _get_offsets(cluster, "--partitions", "0")
    assert every.stdout == "other:0:1\ntimed:0:2000\n"


@pytest.mark.parametrize("args, words", [
    (["--time", "yesterday"], "Malformed time argument yesterday"),
    (["--time", "-7"], "Malformed time argument -7"),
    (["--partitions", "a,b"], "--partitions expects a comma separated list"),
    (["--topic", "nothing-like-this"], "Could not match any topic-partitions"),
])
def test_get_offsets_mistakes_are_one_line(cluster, args, words):
    result = _get_offsets(cluster, *args)
    assert result.returncode != 0
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
