"""Sessions: ephemerals die with their session, survive a resume, and SetWatches catch up.

ZK_PROTOCOL.md §6.8: a session outlives its TCP connection until it expires (between T
and T + tickTime after the last packet); its ephemerals go then, with their watches
firing. A client may resume it with (session id, password) before that. §6.7: after a
resume, SetWatches(relativeZxid) sends catch-up events before its own reply.
"""
from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, KazooState

from .conftest import CONNECT_TIMEOUT_S, DEFAULT_TICK_TIME_MS
from .jute_client import OP_EXISTS, OP_GET_CHILDREN, OP_GET_DATA, Event, RawSession, path_and_watch
from .tcp_proxy import TcpProxy
from .util import EventLog, wait_until

pytestmark = pytest.mark.process

SESSION_TIMEOUT_S = 2.0
TICK_S = DEFAULT_TICK_TIME_MS / 1000
EXPIRY_SLACK_S = 1.5  # scheduling on a loaded 2-core CI box
EARLY_TOLERANCE_S = 0.05

NODE_CREATED, NODE_DELETED, NODE_DATA_CHANGED, NODE_CHILDREN_CHANGED = 1, 2, 3, 4
NO_NODE = -101
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1, "max_delay": 0.1}


def test_ephemeral_removed_on_stop(zk, make_client):
    owner = make_client()
    owner.create("/eph", b"x", ephemeral=True)
    stat = zk.exists("/eph")
    assert stat.ephemeralOwner == owner.client_id[0] != 0
    owner.stop()
    assert zk.exists("/eph") is None  # closeSession deleted it before its reply


def test_ephemeral_removed_about_one_session_timeout_after_owner_sigkill(zk, spawn_worker):
    owner = spawn_worker("ephemeral", path="/eph", timeout_s=SESSION_TIMEOUT_S)
    report = owner.next_message(timeout_s=30)
    assert report["owner"] == report["session_id"]
    log = EventLog()
    assert zk.exists("/eph", watch=log) is not None
    owner.kill()
    killed_at = time.monotonic()
    log.wait(1, timeout_s=SESSION_TIMEOUT_S + TICK_S + 10)
    assert log.kinds() == [(EventType.DELETED, "/eph")]
    gone_at = log.times[0]
    # Not before the timeout has run from the owner's last packet...
    assert gone_at - report["t"] >= SESSION_TIMEOUT_S - EARLY_TOLERANCE_S
    # ...and within one tick of it, plus scheduling slack.
    assert gone_at - killed_at <= SESSION_TIMEOUT_S + TICK_S + EXPIRY_SLACK_S
    assert zk.exists("/eph") is None


def test_resumed_session_keeps_its_ephemerals(zk, spawn_worker, chroot_hosts):
    owner = spawn_worker("ephemeral", path="/eph", timeout_s=SESSION_TIMEOUT_S)
    report = owner.next_message(timeout_s=30)
    owner.kill()
    session_id, password = report["session_id"], bytes.fromhex(report["password"])
    resumed = KazooClient(hosts=chroot_hosts, timeout=SESSION_TIMEOUT_S,
                          client_id=(session_id, password))
    states = []
    resumed.add_listener(states.append)
    resumed.start(timeout=CONNECT_TIMEOUT_S)
    try:
        assert resumed.client_id[0] == session_id
        # Well past the timeout: the resumed session keeps it alive (kazoo pings).
        deadline = time.monotonic() + 2 * SESSION_TIMEOUT_S + TICK_S
        while time.monotonic() < deadline:
            stat = zk.exists("/eph")
            assert stat is not None and stat.ephemeralOwner == session_id
            time.sleep(0.1)  # sampling, not synchronisation
        assert resumed.exists("/eph").ephemeralOwner == session_id
        assert KazooState.LOST not in states
        resumed.stop()
        assert zk.exists("/eph") is None
    finally:
        resumed.stop()
        resumed.close()


def test_resume_with_wrong_password_gets_a_new_session(zk, spawn_worker, chroot_hosts):
    owner = spawn_worker("ephemeral", path="/eph", timeout_s=SESSION_TIMEOUT_S)
    report = owner.next_message(timeout_s=30)
    session_id = report["session_id"]
    wrong = bytes(b ^ 0xFF for b in bytes.fromhex(report["password"]))
    client = KazooClient(hosts=chroot_hosts, timeout=SESSION_TIMEOUT_S, client_id=(session_id, wrong))
    try:
        client.start(timeout=CONNECT_TIMEOUT_S)
        wait_until(lambda: client.connected and client.client_id[0] not in (None, session_id),
                   timeout_s=CONNECT_TIMEOUT_S, what="a new session")
        # (kazoo was never connected, so the "expired" answer shows no LOST transition)
        assert zk.exists("/eph").ephemeralOwner == session_id  # the real owner is untouched
    finally:
        client.stop()
        client.close()


def _raw_session(zk_server, **kwargs) -> RawSession:
    host, port = zk_server.hosts.split(":")
    return RawSession(host, int(port), **kwargs)


def _root(chroot_hosts: str) -> str:
    return "/" + chroot_hosts.split("/", 1)[1]


def test_set_watches_after_reconnect_sends_catch_up_events_before_its_reply(zk, zk_server, chroot_hosts):
    root = _root(chroot_hosts)
    zk.create("/n", b"0")
    zk.create("/gone")
    first = _raw_session(zk_server)
    try:
        assert first.call(OP_GET_DATA, path_and_watch(f"{root}/n", True))[0].err == 0
        assert first.call(OP_GET_CHILDREN, path_and_watch(f"{root}/n", True))[0].err == 0
        assert first.call(OP_GET_DATA, path_and_watch(f"{root}/gone", True))[0].err == 0
        assert first.call(OP_EXISTS, path_and_watch(f"{root}/later", True))[0].err == NO_NODE
        unchanged = zk.create("/unchanged")
        assert first.call(OP_GET_DATA, path_and_watch(f"{root}/unchanged", True))[0].err == 0
    finally:
        first.drop()  # the session lives on; the connection's watches are gone
    relative_zxid = first.last_zxid
    zk.set("/n", b"1")
    zk.create("/n/child")
    zk.create("/later")
    zk.delete("/gone")
    second = _raw_session(zk_server, session_id=first.session_id, password=first.password,
                          last_zxid=relative_zxid)
    try:
        assert second.session_id == first.session_id and second.timeout_ms > 0
        reply, events = second.set_watches(
            relative_zxid,
            data=[f"{root}/n", f"{root}/gone", f"{root}/{unchanged.lstrip('/')}"],
            exist=[f"{root}/later"], child=[f"{root}/n"])
        assert reply.err == 0 and reply.body == b""
        assert sorted(events, key=lambda e: (e.path, e.type)) == sorted([
            Event(NODE_DELETED, 3, f"{root}/gone"),
            Event(NODE_CREATED, 3, f"{root}/later"),
            Event(NODE_DATA_CHANGED, 3, f"{root}/n"),
            Event(NODE_CHILDREN_CHANGED, 3, f"{root}/n"),
        ], key=lambda e: (e.path, e.type))
        # The unchanged node's watch was re-armed, not fired: it fires on the next change.
        zk.set("/unchanged", b"now")
        assert second.next_event(timeout_s=10) == Event(NODE_DATA_CHANGED, 3, f"{root}/unchanged")
    finally:
        second.close_session()


def test_set_watches_rearms_watches_when_nothing_changed(zk, zk_server, chroot_hosts):
    root = _root(chroot_hosts)
    zk.create("/n", b"0")
    first = _raw_session(zk_server)
    try:
        first.call(OP_GET_DATA, path_and_watch(f"{root}/n", True))
    finally:
        first.drop()
    second = _raw_session(zk_server, session_id=first.session_id, password=first.password,
                          last_zxid=first.last_zxid)
    try:
        reply, events = second.set_watches(first.last_zxid, data=[f"{root}/n"],
                                           exist=[f"{root}/missing"], child=[f"{root}/n"])
        assert reply.err == 0 and events == []
        zk.create("/missing")
        assert second.next_event(timeout_s=10) == Event(NODE_CREATED, 3, f"{root}/missing")
        zk.create("/n/c")
        assert second.next_event(timeout_s=10) == Event(NODE_CHILDREN_CHANGED, 3, f"{root}/n")
        zk.set("/n", b"1")
        assert second.next_event(timeout_s=10) == Event(NODE_DATA_CHANGED, 3, f"{root}/n")
    finally:
        second.close_session()


def test_dropped_connection_loses_its_watches_but_not_its_session(zk, zk_server, chroot_hosts):
    root = _root(chroot_hosts)
    zk.create("/n")
    first = _raw_session(zk_server)
    first.call(OP_GET_DATA, path_and_watch(f"{root}/n", True))
    first.drop()
    zk.set("/n", b"x")
    second = _raw_session(zk_server, session_id=first.session_id, password=first.password,
                          last_zxid=first.last_zxid)
    try:
        assert second.timeout_ms > 0 and second.session_id == first.session_id
        zk.set("/n", b"y")
        with pytest.raises(TimeoutError):  # no watch survived the dropped connection
            second.next_event(timeout_s=0.5)
        reply, events = second.call(OP_EXISTS, path_and_watch(f"{root}/n", False))
        assert reply.err == 0 and events == []  # and the session still serves requests
    finally:
        second.close_session()


@pytest.mark.parametrize("requested_ticks", [0.2, 2, 7, 20, 1000])
def test_session_timeout_is_clamped_to_two_and_twenty_ticks(zk_server, requested_ticks):
    session = _raw_session(zk_server, timeout_ms=int(requested_ticks * DEFAULT_TICK_TIME_MS))
    try:
        expected_ticks = min(max(requested_ticks, 2), 20)
        assert session.timeout_ms == int(expected_ticks * DEFAULT_TICK_TIME_MS)
        assert session.session_id != 0 and len(session.password) == 16
    finally:
        session.close_session()


def test_resume_of_unknown_session_is_answered_expired(zk_server):
    session = _raw_session(zk_server, session_id=0x1234_5678_9ABC, password=bytes(16))
    try:
        assert (session.timeout_ms, session.session_id) == (0, 0)
    finally:
        session.sock.close()


def test_kazoo_keeps_its_session_across_a_dropped_connection(zk, zk_server, chroot_hosts):
    host, port = zk_server.hosts.split(":")
    proxy = TcpProxy((host, int(port))).start()
    client = KazooClient(hosts=f"127.0.0.1:{proxy.port}/{chroot_hosts.split('/', 1)[1]}",
                         timeout=5.0, connection_retry=FAST_RECONNECT)
    states = []
    client.add_listener(states.append)
    try:
        client.start(timeout=CONNECT_TIMEOUT_S)
        session_id = client.client_id[0]
        client.create("/eph", ephemeral=True)
        proxy.cut()
        wait_until(lambda: KazooState.SUSPENDED in states, timeout_s=10, what="SUSPENDED")
        zk.create("/while-away")
        proxy.start()
        wait_until(lambda: client.connected, timeout_s=10, what="reconnected")
        assert client.client_id[0] == session_id
        assert KazooState.LOST not in states
        assert client.exists("/eph").ephemeralOwner == session_id
        assert client.exists("/while-away") is not None
    finally:
        client.stop()
        client.close()
        proxy.close()
    assert zk.exists("/eph") is None
