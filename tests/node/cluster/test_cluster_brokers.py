"""The supervisor with real brokers: up, status, kill the controller, start, down."""
from __future__ import annotations

import subprocess
import time
import sys
from pathlib import Path

import pytest

from node.cluster import Cluster
from node.cluster.process import _proc_stat
from shm.names import cluster_objects

pytestmark = [pytest.mark.process, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]
CONFIG = {"zookeeper.session.timeout.ms": "3000"}


def gone(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is None or stat[0] in "ZX"


def test_up_kill_controller_start_down_leaves_nothing(tmp_path, cluster_id):
    cluster = Cluster.up(tmp_path / "c", brokers=3, config=CONFIG, cluster_id=cluster_id)
    pids = []
    try:
        rows = cluster.status()
        pids = [r.pid for r in rows]
        assert [r.name for r in rows] == ["zk", "broker 0", "broker 1", "broker 2"]
        assert all(r.state == "alive" for r in rows)
        assert [r.role for r in rows].count("controller") == 1
        assert cluster.registered_brokers() == [0, 1, 2]
        props = (cluster.broker_dir(1) / "server.properties").read_text()
        assert f"cluster.id={cluster_id}" in props and "broker.id=1" in props
        assert cluster.bootstrap_servers.count("127.0.0.1:") == 3
        old = cluster.controller_id()
        killed = cluster.kill("controller", "KILL")
        assert gone(killed)
        cluster.wait_for(lambda: cluster.controller_id() not in (None, old), 30,
                         "a new controller")
        assert cluster.status()[1 + old].state == "dead"
        cluster.start(old)
        assert cluster.status()[1 + old].state == "alive"
        assert cluster.registered_brokers() == [0, 1, 2]
        cluster.kill(2 if old != 2 else 1, "STOP")
    finally:
        cluster.down(grace_s=5)
    for pid in pids:
        assert gone(pid)
    assert cluster_objects(cluster_id) == []
    assert not list((tmp_path / "c").glob("*.pid"))


def test_cli_up_status_down_with_brokers(tmp_path, cluster_id):
    d = str(tmp_path / "c")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "node.cli", "cluster", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=180)

    try:
        up = cli("up", "--dir", d, "--brokers", "2", "--cluster-id", cluster_id,
                 "--config", "zookeeper.session.timeout.ms=3000")
        assert up.returncode == 0, up.stderr
        line = [x for x in up.stdout.splitlines() if x.startswith("bootstrap servers: ")][0]
        assert len(line.split(": ")[1].split(",")) == 2
        status = cli("status", "--dir", d)
        assert status.returncode == 0 and status.stdout.count("alive") == 3
        assert "controller" in status.stdout
        assert cli("kill", "--dir", d, "1", "--signal", "TERM").returncode == 0
    finally:
        down = cli("down", "--dir", d, "--grace", "5")
    assert down.returncode == 0, down.stderr
    assert cluster_objects(cluster_id) == []


@pytest.mark.parametrize("victim", [0, 1])
def test_a_broker_whose_port_was_taken_starts_again_with_new_ports(tmp_path, cluster_id,
                                                                   monkeypatch, victim):
    """The supervisor picks free ports and the broker binds them later: a port taken in
    between (another test, another program) used to fail ``up``. The broker gets new
    ports and starts again. Broker 1 is the case CI met: ``up`` waited for broker 0 to
    learn of broker 1, which had exited, and timed out instead of starting it again."""
    import socket

    from node.cluster import ClusterError, supervisor

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    picks = []
    real = supervisor._free_port

    def pick() -> int:          # the native ports first, broker by broker
        picks.append(port if len(picks) == victim else real())
        return picks[-1]

    monkeypatch.setattr(supervisor, "_free_port", pick)
    try:
        with Cluster.up(tmp_path / "c", brokers=2, cluster_id=cluster_id,
                        ready_timeout_s=30) as cluster:
            assert port in picks
            assert cluster.broker_ports[victim] != port
            log = cluster.processes[str(victim)].log_path.read_text()
            assert "Address already in use" in log
            assert sorted(cluster.broker_metadata(0)[0]) == [0, 1]
            cluster.kill(1, "KILL")        # a peer that is gone ends a wait at once
            started = time.monotonic()
            with pytest.raises(ClusterError, match="broker 1 is not running .while "
                                                   "broker 0 waits to learn of it"):
                cluster.wait_broker_ready(0, 30, peers=[0, 1])
            assert time.monotonic() - started < 10
    finally:
        taken.close()


def test_zk_lite_whose_port_was_taken_starts_on_another_and_a_wait_says_what_it_saw(
        tmp_path, cluster_id, monkeypatch):
    """zk_lite's port, picked free and bound later, can be taken in between. Whatever
    listens there passed for our zk_lite (the port answered), so the brokers went to
    it; zk_lite now gets another port. A broker wait that times out says what it saw
    (registration, Metadata answer, controller, zk_lite) with the broker's log tail; a
    zk_lite that is not running ends the wait at once."""
    import socket

    from node.cluster import ClusterError, supervisor

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(8)
    port = taken.getsockname()[1]
    picks = []
    real = supervisor._free_port

    def pick() -> int:       # picks: broker 0's two listeners, then zk_lite's port
        picks.append(port if len(picks) == 2 else real())
        return picks[-1]

    monkeypatch.setattr(supervisor, "_free_port", pick)
    try:
        with Cluster.up(tmp_path / "c", brokers=1, config=CONFIG,
                        cluster_id=cluster_id) as cluster:
            assert cluster.zookeeper != f"127.0.0.1:{port}"
            assert "address already in use" in cluster.processes["zk"].log_path.read_text()
            assert Cluster.open(tmp_path / "c").zookeeper == cluster.zookeeper
            assert f"zookeeper.connect={cluster.zookeeper}" in \
                (cluster.broker_dir(0) / "server.properties").read_text()
            assert cluster.broker_metadata(0) == ([0], 0)
            with pytest.raises(TimeoutError) as waited:
                cluster.wait_broker_ready(0, 0.5, peers=[0, 5])
            said = str(waited.value)
            assert "brokers [0, 5]: registered brokers [0]; its Metadata answer: " \
                   "brokers [0], controller 0; /controller: 0; zk_lite alive" in said
            assert "broker 0 started, listening on" in said       # the log tail
            cluster.kill("zk", "KILL")
            with pytest.raises(ClusterError, match="zk is not running .while waiting"):
                cluster.wait_broker_ready(0, 30)
    finally:
        taken.close()


def test_a_broker_does_not_join_another_clusters_coordinator_on_its_port(tmp_path,
                                                                         cluster_id):
    """A broker whose coordinator went away reconnects to the same address forever; a
    zk_lite of another cluster that got that port meanwhile (ports are reused) must not
    gain it: it does not register there (its cluster id is not there) and so does not
    compete for /controller. A broker started against it exits (Kafka's
    InconsistentClusterIdException)."""
    from kazoo.client import KazooClient

    from node.wire import zkdata
    from node.waiting import poll_until

    cluster = Cluster.up(tmp_path / "c", brokers=1, config=CONFIG, cluster_id=cluster_id)
    foreign = client = None
    try:
        cluster.stop("zk", grace_s=5)
        port = cluster.zookeeper.rsplit(":", 1)[1]
        foreign = subprocess.Popen(
            [sys.executable, "-m", "zk_lite", "--port", port, "--data-dir",
             str(tmp_path / "foreign"), "--tick-time", "500"], cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = KazooClient(hosts=cluster.zookeeper, timeout=10)
        client.start(timeout=30)
        log = cluster.processes["0"].log_path
        poll_until(lambda: "not registering again" in log.read_text(), 30,
                   "the broker to refuse the other coordinator")
        assert f"holds cluster id None, this broker's is {cluster_id}" in log.read_text()
        assert client.exists(zkdata.broker_path(0)) is None
        assert client.exists(zkdata.CONTROLLER) is None
        # Started against it, the broker reads the other cluster's id and exits.
        client.create("/cluster/id", b'{"version": "1", "id": "cother"}', makepath=True)
        cluster.stop(0, grace_s=5)
        cluster.start(0, wait=False)
        poll_until(lambda: cluster.processes["0"].pid() is None, 30, "the broker to exit")
        assert f"start-up failed: the coordinator at {cluster.zookeeper} holds cluster id " \
               f"cother, this broker's is {cluster_id}" in log.read_text()
        assert client.exists(zkdata.broker_path(0)) is None
    finally:
        if client is not None:
            client.stop()
            client.close()
        cluster.down(grace_s=5)
        if foreign is not None:
            foreign.kill()
            foreign.wait(10)
    assert cluster_objects(cluster_id) == []
