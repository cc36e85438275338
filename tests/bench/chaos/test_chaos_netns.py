"""Real network partitions: a ``--netns`` cluster, links cut and healed, chaos runs that
cut them, and nothing left behind (namespaces, host routes, shared memory). These need
root; without it they skip, and ``--netns`` is refused with one line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from node.cluster import Cluster, ClusterError
from node.cluster import netns
from shm.names import cluster_objects

pytestmark = [pytest.mark.process, pytest.mark.netns]
needs_root = pytest.mark.skipif(netns.available() is not None,
                                reason=f"no network namespaces here: {netns.available()}")


def _connect_from(cluster, node: str, address: str) -> str:
    """Open a TCP connection from inside ``node``'s namespace; 'ok' or the error."""
    code = ("import socket,sys\nhost,port=sys.argv[1].rsplit(':',1)\n"
            "try:\n    socket.create_connection((host,int(port)),timeout=2).close();print('ok')\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno)\n")
    done = subprocess.run(cluster.mesh.command(node) + [sys.executable, "-c", code, address],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or done.stderr.strip()


def _routes_of(subnet: int) -> str:
    out = subprocess.run(["ip", "route", "show"], capture_output=True, text=True).stdout
    return "\n".join(line for line in out.splitlines()
                     if line.split()[0:2] and f"198.18.{subnet}." in line)


@needs_root
def test_a_netns_cluster_cuts_and_heals_real_links_and_leaves_nothing(tmp_path, cluster_id):
    cluster = Cluster.up(tmp_path / "c", 2, cluster_id=cluster_id, netns=True)
    try:
        mesh = cluster.mesh
        subnet = mesh.subnet
        assert sorted(mesh.nodes) == ["b0", "b1", "zk"]
        assert cluster.zookeeper.startswith(f"198.18.{subnet}.1:")
        assert cluster.broker_address(1).startswith(f"198.18.{subnet}.11:")
        assert len(netns.leftovers(cluster_id)) == 3
        # one /dev/shm for every namespace: the brokers replicate by Fetch
        assert "replica.transport=fetch" in \
            (cluster.broker_dir(1) / "server.properties").read_text().splitlines()
        # The broker's own listener, from the other broker's namespace and from zk's.
        assert _connect_from(cluster, "b0", cluster.broker_address(1)) == "ok"
        assert _connect_from(cluster, "zk", cluster.broker_address(1)) == "ok"
        assert cluster.cut(0, "zk") == ("b0", "zk")
        assert _connect_from(cluster, "b0", cluster.zookeeper) == "OSError 101"  # unreachable
        assert _connect_from(cluster, "b1", cluster.zookeeper) == "ok"          # others: fine
        assert cluster.mesh.cut_links() == [("zk", "b0")]
        assert cluster.heal() == [("zk", "b0")]
        assert _connect_from(cluster, "b0", cluster.zookeeper) == "ok"
        with pytest.raises(ClusterError, match="not a node"):
            cluster.cut(0, "b7")
        # The supervisor's management links are never cut: it still sees everything.
        cluster.isolate(1)
        assert cluster.registered_brokers() == [0, 1] and cluster.broker_metadata(0)
        cluster.heal()
    finally:
        cluster.down(grace_s=5)
    assert netns.leftovers(cluster_id) == []
    assert _routes_of(subnet) == "" and not cluster_objects(cluster_id)
    assert not (tmp_path / "c" / "netns.json").exists()


@needs_root
def test_a_netns_cluster_refuses_the_shm_transport(tmp_path, cluster_id):
    for config, per_broker in (({"replica.transport": "shm"}, None),
                               (None, {1: {"replica.transport": "shm"}})):
        with pytest.raises(ClusterError, match="replica.transport=shm does not go with "
                                               "--netns"):
            Cluster.up(tmp_path / "c", 2, cluster_id=cluster_id, netns=True,
                       config=config, broker_config=per_broker)
        assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())
    assert netns.leftovers(cluster_id) == []


@needs_root
def test_the_cli_partitions_and_heals(tmp_path, cluster_id):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "node.cli", "cluster", *args, "--dir",
                               str(tmp_path / "c")], capture_output=True, text=True,
                              timeout=120)
    up = subprocess.run([sys.executable, "-m", "node.cli", "cluster", "up", "--dir",
                         str(tmp_path / "c"), "--brokers", "2", "--netns", "--cluster-id",
                         cluster_id], capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        assert "198.18." in up.stdout
        cut = cli("partition", "0")
        assert cut.returncode == 0 and "b0 | zk" in cut.stdout and "b0 | b1" in cut.stdout
        bad = cli("partition", "0", "mars")
        assert bad.returncode == 1 and "not a node" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        healed = cli("heal")
        assert healed.returncode == 0 and "zk - b0" in healed.stdout and "b0 - b1" in healed.stdout
    finally:
        down = cli("down", "--grace", "5")
    assert down.returncode == 0, down.stderr
    assert netns.leftovers(cluster_id) == []


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
@pytest.mark.skipif(os.geteuid() != 0, reason="runs the check as another user, from root")
def test_netns_without_root_is_refused_with_one_line():
    import tempfile
    with tempfile.TemporaryDirectory(prefix="minikafka-noroot-") as where:
        os.chmod(where, 0o777)  # pytest's own tmp_path is private to root
        _refused_as_nobody(Path(where))


def _refused_as_nobody(tmp_path: Path) -> None:
    for command in (["cluster", "up", "--dir", str(tmp_path / "c"), "--netns"],
                    ["chaos", "run", "--dir", str(tmp_path / "r"), "--netns"]):
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-m", "bench.cli", *command],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "HOME": str(tmp_path)})
        assert done.returncode in (1, 2), done.stdout + done.stderr
        assert "need root" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_partition_without_netns_is_bad_usage(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"at_ms": 1000, "duration_ms": 1000, "fault": "partition",
                                 "target": "leader|zk"}]))
    done = subprocess.run([sys.executable, "-m", "bench.cli", "chaos", "run", "--dir",
                           str(tmp_path / "r"), "--schedule", str(plan)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs --netns" in done.stderr


@needs_root
@pytest.mark.slow
def test_a_safe_run_through_the_seed_partition_scenarios_is_valid(tmp_path):
    """Scenario 4 (the leader cut from the coordinator), 6 (the leader isolated from
    everyone: for a while two brokers think they lead) and 1 (a follower cut from its
    leader), one after another, under ``safe``: nothing lost, nothing divergent."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([
        {"at_ms": 2000, "duration_ms": 6000, "fault": "partition", "target": "leader|zk"},
        {"at_ms": 11000, "duration_ms": 6000, "fault": "partition", "target": "isolate:leader"},
        {"at_ms": 20000, "duration_ms": 6000, "fault": "partition",
         "target": "follower|leader"}]))
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "bench.cli", "chaos", "run", "--dir", str(run),
                           "--netns", "--schedule", str(plan), "--duration", "30",
                           "--rate", "150", "--partitions", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["valid"] and verdict["acknowledged"] > 1000
    assert verdict["lost"] == verdict["divergent"] == verdict["duplicate"] == 0
    faults = json.loads((run / "faults.json").read_text())
    assert [f["fault"] for f in faults] == ["partition"] * 3
    assert all(f["links"] and f["end_ns"] > f["start_ns"] and not f["error"] for f in faults)
    assert [len(f["links"]) for f in faults][:2] == [1, 6]  # isolated: zk, 2 brokers, p0, p1, c0
    cluster_id = json.loads((run / "cluster" / "cluster.json").read_text())["cluster_id"]
    assert netns.leftovers(cluster_id) == [] and not cluster_objects(cluster_id)
