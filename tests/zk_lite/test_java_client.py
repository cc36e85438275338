"""The Java client of ZooKeeper 3.8 (zkCli and the ZooKeeper class) against both servers.

The Java client is the one that re-arms watches with SetWatches after a reconnect and
checks reply xids against its FIFO of pending requests (ZK_PROTOCOL.md §2.4, §3.2, §7.2).
Needs Java and Debian's zookeeper package (for the client jar); skipped without them.
"""
from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path

import pytest

from .servers import missing_reason
from .tcp_proxy import TcpProxy
from .workers import REPO_ROOT

pytestmark = [pytest.mark.process, pytest.mark.slow]

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
PROBE_SOURCE = Path(__file__).with_name("java") / "WatchProbe.java"
API_PROBE_SOURCE = Path(__file__).with_name("java") / "ApiProbe.java"
JAVA_TIMEOUT_S = 60


@pytest.fixture(autouse=True)
def java_client_available():
    reason = missing_reason("zookeeper")
    if reason:
        pytest.skip(f"no Java ZooKeeper client: {reason}")


def zkcli(hosts: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["java", "-cp", ZOOKEEPER_JAR, "org.apache.zookeeper.ZooKeeperMain", "-server", hosts, *command],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=JAVA_TIMEOUT_S,
        cwd=REPO_ROOT)  # zkCli prints some results on stderr: read both


def test_zkcli_commands(zk, chroot_hosts):
    created = zkcli(chroot_hosts, "create", "/x", "hello")
    assert created.returncode == 0 and "Created /x" in created.stdout, created
    assert "Created /x/s-0000000000" in zkcli(chroot_hosts, "create", "-s", "/x/s-", "d").stdout
    got = zkcli(chroot_hosts, "get", "-s", "/x").stdout
    assert "hello" in got and "dataVersion = 0" in got and "numChildren = 1" in got and "cversion = 1" in got
    assert "[s-0000000000]" in zkcli(chroot_hosts, "ls", "/x").stdout
    missing = zkcli(chroot_hosts, "stat", "/missing")
    assert missing.returncode == 1 and "Node does not exist: /missing" in missing.stdout
    assert zkcli(chroot_hosts, "deleteall", "/x").returncode == 0  # getChildren + multi of deletes
    assert zk.exists("/x") is None
    assert "'world,'anyone\n: r" in zkcli(chroot_hosts.split("/")[0], "getAcl", "/zookeeper/config").stdout


class Probe:
    """WatchProbe.java running, its stdout lines in a queue."""

    def __init__(self, hosts: str, source: Path = PROBE_SOURCE):
        self.proc = subprocess.Popen(
            ["java", "-cp", ZOOKEEPER_JAR, str(source), hosts], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, predicate, timeout_s: float = JAVA_TIMEOUT_S) -> str:
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"Java probe: nothing matching within {timeout_s} s; saw {self.seen}") from None
            assert line is not None, f"Java probe exited; saw {self.seen}"
            self.seen.append(line)
            if predicate(line):
                return line

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def test_java_client_rearms_watches_with_set_watches_after_reconnect(zk, zk_server, chroot_hosts):
    zk.create("/n", b"0")
    zk.create("/gone")
    host, port = zk_server.hosts.split(":")
    proxy = TcpProxy((host, int(port))).start()
    chroot = "/" + chroot_hosts.split("/", 1)[1]
    probe = Probe(f"127.0.0.1:{proxy.port}{chroot}")
    try:
        session = probe.wait_for(lambda line: line.startswith("READY")).split()[1]
        proxy.cut()
        probe.wait_for(lambda line: line == "STATE Disconnected")
        zk.set("/n", b"1")
        zk.create("/n/child")
        zk.create("/later")
        zk.delete("/gone")
        proxy.start()  # the client reconnects, resumes its session, sends SetWatches
        expected = {"EVENT NodeDataChanged /n", "EVENT NodeChildrenChanged /n",
                    "EVENT NodeCreated /later", "EVENT NodeDeleted /gone"}
        seen = set()
        while not expected <= seen:
            seen.add(probe.wait_for(lambda line: line.startswith("EVENT")))
        assert seen == expected
        assert "STATE SyncConnected" in probe.seen[probe.seen.index("STATE Disconnected"):]
        probe.proc.stdin.write("\n")
        probe.proc.stdin.flush()
        assert probe.wait_for(lambda line: line.startswith("SESSION")) == f"SESSION {session} CONNECTED"
        probe.wait_for(lambda line: line == "CLOSED")
        assert probe.proc.wait(timeout=JAVA_TIMEOUT_S) == 0
    finally:
        probe.kill()
        proxy.close()


class ApiProbe(Probe):
    """ApiProbe.java: one command in, one OK/ERR line out (events may come in between)."""

    def __init__(self, hosts: str):
        super().__init__(hosts, source=API_PROBE_SOURCE)
        self.wait_for(lambda line: line == "READY")
        self.events: list[str] = []

    def run(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.wait_for(lambda line: True)
            if line.startswith("EVENT "):
                self.events.append(line)
            else:
                return line

    def wait_events(self, count: int) -> list[str]:
        while len(self.events) < count:
            self.events.append(self.wait_for(lambda line: line.startswith("EVENT ")))
        return self.events


def test_java_persistent_recursive_watch_sees_the_whole_subtree(zk, chroot_hosts):
    zk.create("/r")
    probe = ApiProbe(chroot_hosts)
    try:
        assert probe.run("addWatch /r recursive") == "OK"
        zk.create("/r/a")
        zk.set("/r/a", b"1")
        zk.create("/r/a/b")
        zk.set("/r/a", b"2")  # still armed: persistent watches are not one-shot
        zk.delete("/r/a/b")
        assert probe.wait_events(5) == [
            "EVENT NodeCreated /r/a", "EVENT NodeDataChanged /r/a", "EVENT NodeCreated /r/a/b",
            "EVENT NodeDataChanged /r/a", "EVENT NodeDeleted /r/a/b"]  # no NodeChildrenChanged
        assert probe.run("quit") == "OK closed"
    finally:
        probe.kill()


def test_java_persistent_watch_fires_every_time_on_its_node(zk, chroot_hosts):
    zk.create("/p")
    probe = ApiProbe(chroot_hosts)
    try:
        assert probe.run("addWatch /p plain") == "OK"
        zk.set("/p", b"1")
        zk.set("/p", b"2")
        zk.create("/p/c")
        zk.create("/p/c/deeper")  # not its node nor a child: nothing
        zk.set("/p/c", b"x")  # a child's data: nothing
        zk.delete("/p/c/deeper")
        zk.delete("/p/c")
        assert probe.wait_events(4) == [
            "EVENT NodeDataChanged /p", "EVENT NodeDataChanged /p",
            "EVENT NodeChildrenChanged /p", "EVENT NodeChildrenChanged /p"]
        assert probe.run("allChildren /p") == "OK 0"  # a round trip: no late extra events
        assert len(probe.events) == 4
        assert probe.run("quit") == "OK closed"
    finally:
        probe.kill()


def test_java_whoami_ephemerals_children_count_and_create2(zk, chroot_hosts):
    zk.create("/tree/a/b", makepath=True)
    zk.create("/tree/c")
    hosts, chroot = chroot_hosts.split("/", 1)
    tree = f"/{chroot}/tree"
    probe = ApiProbe(hosts)  # no chroot: 3.8.0 answers getEphemerals under a chroot with []
    try:
        assert probe.run("whoAmI") == "OK ip:127.0.0.1"
        assert probe.run("addAuth digest alice:secret") == "OK"
        assert probe.run("whoAmI") == "OK digest:alice,ip:127.0.0.1"
        assert probe.run(f"allChildren {tree}") == "OK 3"
        assert probe.run(f"createEphemeral /{chroot}/e1") == f"OK /{chroot}/e1"
        assert probe.run(f"createEphemeral {tree}/e2") == f"OK {tree}/e2"
        assert probe.run(f"getEphemerals {tree}") == f"OK {tree}/e2"
        assert probe.run(f"getEphemerals /{chroot}") == f"OK /{chroot}/e1,{tree}/e2"
        assert probe.run(f"create2 {tree}/s- hello") == f"OK {tree}/s-0000000003 0 5 true"
        assert probe.run("quit") == "OK closed"
        assert zk.exists("/e1") is None
    finally:
        probe.kill()
