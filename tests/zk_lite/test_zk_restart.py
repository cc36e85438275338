"""kill -9 the server under load, restart it on the same data dir and port.

Acknowledged writes must all be there, the zxid sequence must go on, and a client that
reconnects within its session timeout keeps its session and its ephemerals (ZooKeeper
restores sessions from its log and snapshot; ZK_PROTOCOL.md §6.8, issue 3
"Durability"). The same tests run against a real ZooKeeper, the reference.
"""
from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from kazoo.security import make_acl, make_digest_acl

from .conftest import CONNECT_TIMEOUT_S
from .servers import missing_reason, start
from .util import EventLog, wait_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

TICK_TIME_MS = 250
SESSION_TIMEOUT_S = 4.0
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1, "max_delay": 0.1}
WRITES_BEFORE_KILL = 300
LOAD_TIMEOUT_S = 60


@pytest.fixture(params=["zk_lite", "zookeeper"])
def server(request):
    reason = missing_reason(request.param)
    if reason:
        pytest.skip(reason)
    handle = start(request.param, TICK_TIME_MS)
    try:
        yield handle
    finally:
        handle.close()


def client_for(server, **kwargs) -> KazooClient:
    kwargs.setdefault("timeout", SESSION_TIMEOUT_S)
    client = KazooClient(hosts=server.hosts, **kwargs)
    client.start(timeout=CONNECT_TIMEOUT_S)
    return client


class Writer(threading.Thread):
    """Creates /acked/PREFIX-NNNNNN in a loop; records what the server acknowledged."""

    def __init__(self, client: KazooClient, prefix: str, writes_max: int = 100_000):
        super().__init__(daemon=True)
        self.client = client
        self.prefix = prefix
        self.writes_max = writes_max
        self.acked: list[int] = []
        self.in_doubt: list[int] = []  # failed with connection loss: may or may not be applied
        self.stop_requested = threading.Event()

    def run(self) -> None:
        for i in range(self.writes_max):
            if self.stop_requested.is_set():
                return
            try:
                self.client.create(f"/acked/{self.name_of(i)}", str(i).encode())
            except KazooException:
                self.in_doubt.append(i)
                return
            self.acked.append(i)

    def name_of(self, i: int) -> str:
        return f"{self.prefix}-{i:06d}"


class AsyncWriter(Writer):
    """Keeps a window of create_async requests in flight (group commit territory)."""

    window = 50

    def run(self) -> None:
        for first in range(0, self.writes_max, self.window):
            if self.stop_requested.is_set():
                return
            batch = [(i, self.client.create_async(f"/acked/{self.name_of(i)}", str(i).encode()))
                     for i in range(first, first + self.window)]
            for i, result in batch:
                if not self._wait(result):
                    self.in_doubt.extend(j for j, _ in batch if j >= i)
                    return
                self.acked.append(i)

    def _wait(self, result) -> bool:
        """True once acknowledged; False on an error, or when the test stops us while
        the request still waits (kazoo holds unsent requests across a disconnect)."""
        while True:
            try:
                result.get(timeout=0.1)
                return True
            except self.client.handler.timeout_exception:
                if self.stop_requested.is_set():
                    return False
            except KazooException:
                return False


def test_every_acknowledged_write_survives_kill_9(server):
    writer_client = client_for(server)
    writers = []
    try:
        writer_client.ensure_path("/acked")
        # Several writers on one connection keep requests in flight together.
        writers = [Writer(writer_client, f"w{n}") for n in range(3)]
        writers.append(AsyncWriter(writer_client, "async"))
        for writer in writers:
            writer.start()
        wait_until(lambda: len(writers[0].acked) >= WRITES_BEFORE_KILL, timeout_s=LOAD_TIMEOUT_S,
                   what=f"{WRITES_BEFORE_KILL} acknowledged writes")
        last_czxid = writer_client.exists(f"/acked/{writers[0].name_of(writers[0].acked[-1])}").czxid
        server.kill()
        for writer in writers:
            writer.stop_requested.set()
        # Requests kazoo had not sent yet wait for a reconnect; stop() fails them.
        writer_client.stop()
        for writer in writers:
            writer.join(timeout=30)
            assert not writer.is_alive()
    finally:
        writer_client.stop()
        writer_client.close()
    server.restart()
    reader = client_for(server)
    try:
        present = set(reader.get_children("/acked"))
        acked = {w.name_of(i) for w in writers for i in w.acked}
        in_doubt = {w.name_of(i) for w in writers for i in w.in_doubt}
        assert acked <= present, f"lost acknowledged writes: {sorted(acked - present)[:10]}"
        assert present <= acked | in_doubt, "writes appeared that nobody sent"
        for name in sorted(acked)[-20:]:
            assert reader.get(f"/acked/{name}")[0] == str(int(name.split("-")[1])).encode()
        new_czxid = reader.create("/after-restart", include_data=True)[1].czxid
        assert new_czxid > last_czxid, "the zxid sequence went backwards after restart"
    finally:
        reader.stop()
        reader.close()


def test_session_and_ephemerals_survive_a_quick_restart(server):
    client = client_for(server, connection_retry=FAST_RECONNECT)
    states = []
    client.add_listener(states.append)
    try:
        session_id = client.client_id[0]
        client.create("/eph", b"mine", ephemeral=True)
        client.create("/persistent", b"p")
        server.kill()
        wait_until(lambda: not client.connected, timeout_s=10, what="client noticed the kill")
        server.restart()
        wait_until(lambda: client.connected, timeout_s=SESSION_TIMEOUT_S * 2,
                   what="client reconnected")
        assert client.client_id[0] == session_id
        assert KazooState.LOST not in states, f"session was lost: {states}"
        assert client.exists("/eph").ephemeralOwner == session_id
        # Still alive well after the timeout has run out: the session is really kept.
        deadline = time.monotonic() + SESSION_TIMEOUT_S + TICK_TIME_MS / 1000 + 0.5
        while time.monotonic() < deadline:
            assert client.exists("/eph") is not None
            time.sleep(0.2)  # sampling, not synchronisation
        assert KazooState.LOST not in states
    finally:
        client.stop()
        client.close()


def test_session_of_a_dead_client_still_expires_after_restart(server):
    owner = client_for(server, timeout=2.0)
    observer = None
    try:
        owner.create("/orphan", ephemeral=True)
        server.kill()
        owner.stop()  # its close cannot reach the dead server: the session stays open
        server.restart()
        restarted_at = time.monotonic()
        observer = client_for(server)
        log = EventLog()
        if observer.exists("/orphan", watch=log) is not None:
            log.wait(1, timeout_s=30)
        gone_after_s = (log.times[0] if log.times else time.monotonic()) - restarted_at
        assert observer.exists("/orphan") is None
        assert gone_after_s <= SESSION_TIMEOUT_S * 3, f"orphan ephemeral lived {gone_after_s:.1f} s"
    finally:
        owner.close()
        if observer is not None:
            observer.stop()
            observer.close()


def _snapshot(client: KazooClient, path: str = "/") -> dict:
    """Every node under `path`: data, stat and ACLs, as plain values."""
    result = {}
    for child in sorted(client.get_children(path)):
        child_path = f"{path.rstrip('/')}/{child}"
        if child_path == "/zookeeper":
            continue
        data, stat = client.get(child_path)
        acls = [(a.perms, a.id.scheme, a.id.id) for a in client.get_acls(child_path)[0]]
        result[child_path] = (data, tuple(stat), acls)
        result.update(_snapshot(client, child_path))
    return result


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_restart_restores_data_stats_acls_and_counters(server, how):
    client = client_for(server, auth_data=[("digest", "alice:secret")])
    try:
        client.create("/a", b"one")
        client.set("/a", b"two")
        client.create("/a/s-", b"", sequence=True)
        client.create("/a/plain")
        client.delete("/a/plain")
        client.create("/secret", b"s", acl=[make_digest_acl("alice", "secret", all=True)])
        client.set_acls("/a", [make_acl("world", "anyone", all=True)])
        client.create("/null", None)
        transaction = client.transaction()
        transaction.create("/multi", b"m")
        transaction.create("/multi/x", b"y")
        transaction.commit()
        before = _snapshot(client)
        last_zxid = max(stat[1] for _, stat, _ in before.values())  # mzxid
    finally:
        client.stop()
        client.close()
    if how == "kill":
        server.kill()
    else:
        server.stop()
    server.restart()
    client = client_for(server, auth_data=[("digest", "alice:secret")])
    try:
        assert _snapshot(client) == before
        # Counters go on where they were: the next sequence number and the zxid.
        assert client.create("/a/s-", sequence=True) == "/a/s-0000000002"
        assert client.create("/later", include_data=True)[1].czxid > last_zxid
    finally:
        client.stop()
        client.close()
