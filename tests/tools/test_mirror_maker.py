"""``minikafka mirror-maker`` between two real clusters on this host: killed mid-stream
and restarted, every record arrives, in order per partition, with its headers."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from node.client import Admin, Consumer, Producer
from node.cluster import Cluster
from tests.conftest import new_cluster_id
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

RECORDS = 6000


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    base = tmp_path_factory.mktemp("mirror")
    source = Cluster.up(base / "source", brokers=1, cluster_id=new_cluster_id(),
                        config={"default.replication.factor": "1"})
    try:
        target = Cluster.up(base / "target", brokers=1, cluster_id=new_cluster_id(),
                            config={"default.replication.factor": "1"})
        try:
            yield source, target
        finally:
            target.down(grace_s=5)
    finally:
        source.down(grace_s=5)


def _configs(tmp_path, source, target, group="mirror"):
    consumer = tmp_path / "consumer.properties"
    consumer.write_text(f"bootstrap.servers={source.bootstrap_servers}\ngroup.id={group}\n"
                        f"auto.offset.reset=earliest\n")
    producer = tmp_path / "producer.properties"
    producer.write_text(f"# the target\nbootstrap.servers={target.bootstrap_servers}\n"
                        f"linger.ms=5\n")
    return str(consumer), str(producer)


def _start(consumer, producer, include="orders|clicks"):
    return subprocess.Popen(
        [sys.executable, "-m", "node.cli", "mirror-maker", "--consumer.config", consumer,
         "--producer.config", producer, "--include", include,
         "--offset.commit.interval.ms", "200"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _read_all(cluster, topic: str, partitions: int) -> dict[int, list[tuple]]:
    """Per partition, (value, headers) of each record."""
    out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        ends = consumer.end_offsets([(topic, p) for p in range(partitions)])
        want = sum(ends.values())
        got = 0
        deadline = time.monotonic() + 30
        while got < want and time.monotonic() < deadline:
            for r in consumer.poll(200):
                out[r.partition].append((r.value, r.headers))
                got += 1
    return out


def _count(cluster, topic: str, partitions: int) -> int:
    try:
        with Consumer(cluster.bootstrap_servers) as consumer:
            return sum(consumer.end_offsets([(topic, p) for p in range(partitions)]).values())
    except Exception:       # the topic is not there yet
        return 0


def test_a_mirror_killed_mid_stream_and_restarted_delivers_everything_in_order(
        clusters, tmp_path):
    source, target = clusters
    with Admin(source.bootstrap_servers) as admin:
        admin.create_topic("orders", 3, 1)
        admin.create_topic("ignored", 1, 1)
    with Producer(source.bootstrap_servers) as producer:
        for i in range(RECORDS):
            producer.send("orders", b"order-%d" % i, key=b"k%d" % (i % 7),
                          headers=[("i", b"%d" % i), ("n", None)] if i % 3 else None)
        producer.send("ignored", b"not mirrored")
        producer.flush()
    consumer_config, producer_config = _configs(tmp_path, source, target)
    mirror = _start(consumer_config, producer_config)
    try:
        poll_until(lambda: _count(target, "orders", 3) >= RECORDS // 3, 60,
                   "a third of the records mirrored")
        mirror.send_signal(signal.SIGKILL)
        mirror.wait(10)
        with Producer(source.bootstrap_servers) as producer:   # more while it is down
            for i in range(RECORDS, RECORDS + 600):
                producer.send("orders", b"order-%d" % i, key=b"k%d" % (i % 7))
            producer.flush()
        mirror = _start(consumer_config, producer_config)
        # Distinct values: the restart repeats some, so a count would arrive early.
        wanted = {b"order-%d" % i for i in range(RECORDS + 600)}
        poll_until(lambda: _count(target, "orders", 3) >= RECORDS + 600 and wanted <= {
            v for values in _read_all(target, "orders", 3).values() for v, _ in values},
            90, "every record mirrored", interval_s=0.5)
    finally:
        mirror.send_signal(signal.SIGTERM)
        _, err = mirror.communicate(timeout=30)
    assert mirror.returncode == 0, err
    original = _read_all(source, "orders", 3)
    copied = _read_all(target, "orders", 3)
    assert sum(1 for records in original.values() for _, h in records if h) > RECORDS // 2
    for p in range(3):
        # At least once: a restart may repeat what was sent after the last commit; the
        # first copy of each record is in the source's order, and none is missing.
        firsts = list(dict.fromkeys(copied[p]))
        assert firsts == original[p], f"partition {p}"
    with Admin(target.bootstrap_servers) as admin:
        topics = admin.list_topics()
    assert "orders" in topics and "ignored" not in topics


def test_mirror_maker_mistakes_are_one_line(clusters, tmp_path):
    source, target = clusters
    consumer_config, producer_config = _configs(tmp_path, source, target)
    bad_consumer = tmp_path / "bad.properties"
    bad_consumer.write_text(f"bootstrap.servers={source.bootstrap_servers}\n")
    for args, words in (
            (["--consumer.config", consumer_config, "--producer.config", producer_config],
             "--include"),
            (["--consumer.config", str(bad_consumer), "--producer.config", producer_config,
              "--include", "x"], "missing group.id"),
            (["--consumer.config", "/nonexistent", "--producer.config", producer_config,
              "--include", "x"], "cannot read /nonexistent"),
            (["--consumer.config", consumer_config, "--producer.config", producer_config,
              "--include", "("], "not a valid regular expression")):
        result = subprocess.run([sys.executable, "-m", "node.cli", "mirror-maker", *args],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and words in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
