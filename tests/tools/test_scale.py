"""Growing and shrinking a real cluster: add-broker moves a balanced share of replicas onto
the new broker (data still readable), remove-broker empties a broker and removes it."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.client import Admin, Consumer, Producer
from node.cluster import Cluster, ClusterError
from node.cluster.scale import load, remove_broker
from node.tools.reassign import current_assignment
from shm.names import cluster_objects

pytestmark = [pytest.mark.process, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
CONFIG = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
          "replica.fetch.wait.max.ms": "50", "auto.leader.rebalance.enable": "false"}
RECORDS = 300


def read_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < RECORDS and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(200)]
        return values


def test_add_broker_then_remove_broker(tmp_path, cluster_id):
    cluster = Cluster.up(tmp_path / "c", brokers=3, config=CONFIG, cluster_id=cluster_id)
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("data", 6, 2)
            admin.create_topic("small", 2, 3)
        with Producer(cluster.bootstrap_servers, acks="all") as producer:
            for i in range(RECORDS):
                producer.send("data", b"v%d" % i, key=b"k%d" % (i % 17))
            producer.flush(30)
        # add-broker through the CLI, as a user runs it.
        added = subprocess.run([sys.executable, "-m", "node.cli", "cluster", "add-broker",
                                "--dir", str(cluster.dir)], cwd=REPO, capture_output=True,
                               text=True, timeout=180)
        assert added.returncode == 0, added.stderr
        out = added.stdout.splitlines()
        assert out[0] == "Plan: broker 3 takes 4 of 18 replicas (2 as preferred leader); " \
                         "4 partition(s) move:"
        assert all(" -> " in line and "->3" in line for line in out[1:5])
        assert "Started broker 3 at 127.0.0.1:" in out[5]
        assert out[-1] == "Broker 3 now holds 4 replica(s), 2 as preferred leader."
        cluster = Cluster.open(cluster.dir)  # cluster.json now has broker 3
        assert cluster.broker_ids == [0, 1, 2, 3]
        with Admin(cluster.bootstrap_servers) as admin:
            assignment = current_assignment(admin, ["data", "small"])
            loads = load(assignment)
            assert loads[3] == (4, 2)
            assert max(r for r, _ in loads.values()) - min(r for r, _ in loads.values()) <= 1
            led = [tp for tp, r in assignment.items() if r[0] == 3]
            described = admin.describe_topics(["data", "small"])
            assert all(described[t][p].leader == 3 for t, p in led)
        assert sorted(read_all(cluster.bootstrap_servers, "data", 6)) == \
            sorted(b"v%d" % i for i in range(RECORDS))

        lines: list[str] = []
        remove_broker(cluster, 0, out=lines.append)
        assert lines[0].startswith("Plan: move ") and "off broker 0" in lines[0]
        assert lines[-1].startswith("Stopped broker 0 and removed it")
        assert cluster.broker_ids == [1, 2, 3]
        assert sorted(json.loads((cluster.dir / "cluster.json").read_text())["brokers"]) == \
            ["1", "2", "3"]
        assert not (cluster.dir / "broker-0").exists()
        assert cluster.registered_brokers() == [1, 2, 3]
        with Admin(cluster.bootstrap_servers) as admin:
            assignment = current_assignment(admin, ["data", "small"])
            assert all(0 not in r and len(r) in (2, 3) for r in assignment.values())
        assert sorted(read_all(cluster.bootstrap_servers, "data", 6)) == \
            sorted(b"v%d" % i for i in range(RECORDS))
        # "small" has 3 replicas on the 3 brokers left: another removal cannot place them.
        with pytest.raises(ClusterError, match="only 2 brokers remain"):
            remove_broker(cluster, 1, out=lines.append)
        with pytest.raises(ClusterError, match="not part of the cluster"):
            remove_broker(cluster, 7, out=lines.append)
    finally:
        cluster.down(grace_s=5)
    assert cluster_objects(cluster_id) == []
