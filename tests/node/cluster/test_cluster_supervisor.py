"""The cluster supervisor with zk_lite only (no brokers): process lifecycle and CLI errors.

The tests with brokers are in test_cluster_brokers.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.cluster import Cluster, ClusterError
from node.cluster.process import _proc_stat
from shm.names import cluster_objects

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.cli", "cluster", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


def gone(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is None or stat[0] in "ZX"


@pytest.fixture
def zk_cluster(tmp_path, cluster_id):
    cluster = Cluster.up(tmp_path / "c", brokers=0, cluster_id=cluster_id)
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


def test_up_starts_zk_lite_with_pid_and_log_files(zk_cluster):
    zk = zk_cluster.processes["zk"]
    pid = zk.pid()
    assert pid is not None and os.getpgid(pid) == pid  # own process group
    assert zk.log_path.read_text().count("zk_lite listening on") == 1
    assert (zk_cluster.dir / "zk.pid").read_text().split()[0] == str(pid)
    assert [s.state for s in zk_cluster.status()] == ["alive"]
    assert zk_cluster.zk().exists("/") is not None


def test_stop_cont_kill_start_cycle(zk_cluster):
    first = zk_cluster.kill("zk", "STOP")
    assert zk_cluster.wait_for(lambda: zk_cluster.status()[0].state == "stopped", 10)
    zk_cluster.kill("zk", "CONT")
    assert zk_cluster.wait_for(lambda: zk_cluster.status()[0].state == "alive", 10)
    zk_cluster.kill("zk", "STOP")
    assert zk_cluster.wait_for(lambda: zk_cluster.status()[0].state == "stopped", 10)
    assert zk_cluster.start("zk") == first  # starting a paused process resumes it
    assert zk_cluster.wait_for(lambda: zk_cluster.status()[0].state == "alive", 10)
    zk_cluster.kill("zk", "KILL")
    assert gone(first)
    assert zk_cluster.status()[0].state == "dead" and zk_cluster.status()[0].pid is None
    with pytest.raises(ClusterError, match="not running"):
        zk_cluster.kill("zk", "TERM")
    second = zk_cluster.start("zk")
    assert second != first and zk_cluster.status()[0].state == "alive"
    with pytest.raises(ClusterError, match="already running"):
        zk_cluster.start("zk")


def test_down_stops_a_sigstopped_process(tmp_path, cluster_id):
    cluster = Cluster.up(tmp_path / "c", brokers=0, cluster_id=cluster_id)
    pid = cluster.kill("zk", "STOP")
    cluster.down(grace_s=5)
    assert gone(pid)
    assert not (tmp_path / "c" / "zk.pid").exists()
    assert cluster_objects(cluster_id) == []


def test_context_manager_brings_the_cluster_down(tmp_path, cluster_id):
    with Cluster.up(tmp_path / "c", brokers=0, cluster_id=cluster_id) as cluster:
        pid = cluster.processes["zk"].pid()
    assert gone(pid)


def test_up_again_restarts_the_same_cluster_from_its_directory(tmp_path, cluster_id):
    with Cluster.up(tmp_path / "c", brokers=0, cluster_id=cluster_id) as cluster:
        cluster.zk().create("/kept", b"1")
        with pytest.raises(ClusterError, match="already holds a running cluster"):
            Cluster.up(tmp_path / "c", brokers=0)
    with Cluster.up(tmp_path / "c", brokers=0) as again:
        assert again.cluster_id == cluster_id
        assert again.zk().get("/kept")[0] == b"1"


def test_unknown_ids_and_signals_are_clear_errors(zk_cluster):
    with pytest.raises(ClusterError, match="unknown process id '7'"):
        zk_cluster.kill(7)
    with pytest.raises(ClusterError, match="unknown signal"):
        zk_cluster.kill("zk", "HUP2")
    with pytest.raises(ClusterError, match="no controller"):
        zk_cluster.kill("controller")


def test_bad_cluster_ids_and_unreachable_zookeeper_are_refused(tmp_path):
    with pytest.raises(ClusterError, match="cluster id"):
        Cluster.up(tmp_path / "a", brokers=0, cluster_id="has-dash")
    with pytest.raises(ClusterError, match="cannot reach ZooKeeper at 127.0.0.1:1"):
        Cluster.up(tmp_path / "b", brokers=1, zookeeper="127.0.0.1:1")
    assert not (tmp_path / "b").exists()


def test_cli_lifecycle(tmp_path, cluster_id):
    d = str(tmp_path / "c")
    try:
        up = cli("up", "--dir", d, "--brokers", "0", "--cluster-id", cluster_id)
        assert up.returncode == 0, up.stderr
        assert "bootstrap servers:" in up.stdout
        status = cli("status", "--dir", d)
        assert status.returncode == 0 and "zk" in status.stdout and "alive" in status.stdout
        killed = cli("kill", "--dir", d, "zk", "--signal", "STOP")
        assert killed.returncode == 0 and "sent SIGSTOP to zk" in killed.stdout
        assert "stopped" in cli("status", "--dir", d).stdout
    finally:
        down = cli("down", "--dir", d)
    assert down.returncode == 0, down.stderr
    assert "dead" in cli("status", "--dir", d).stdout


@pytest.mark.parametrize("args,message", [
    (("status", "--dir", "{tmp}/missing"), "no such directory"),
    (("kill", "--dir", "{tmp}", "0"), "no cluster in"),
    (("start", "--dir", "{tmp}", "zk"), "no cluster in"),
    (("down", "--dir", "{tmp}"), "no cluster in"),
    (("up", "--dir", "{tmp}/x", "--zookeeper", "127.0.0.1:1"), "cannot reach ZooKeeper"),
    (("up", "--dir", "{tmp}/y", "--brokers", "0", "--config", "novalue"), "key=value"),
])
def test_cli_errors_are_one_line_without_traceback(tmp_path, args, message):
    result = cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_unknown_id_is_one_line(zk_cluster):
    result = cli("kill", "--dir", str(zk_cluster.dir), "9")
    assert result.returncode == 1 and "unknown process id '9'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_external_zookeeper_is_used_and_not_managed(tmp_path, cluster_id):
    from bench.perf import zkservers

    server = zkservers.start("zk_lite")
    try:
        with Cluster.up(tmp_path / "c", brokers=0, cluster_id=cluster_id,
                        zookeeper=server.hosts) as cluster:
            assert cluster.zookeeper == server.hosts and "zk" not in cluster.processes
            assert cluster.status() == []
            assert cluster.controller_id() is None
            with pytest.raises(ClusterError, match="external"):
                cluster.kill("zk")
        assert server.alive()  # down leaves an external ZooKeeper alone
    finally:
        server.close()
