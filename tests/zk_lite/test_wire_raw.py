"""Wire details kazoo hides, checked with the raw jute client (ZK_PROTOCOL.md §3, §6.7-§6.9)."""
from __future__ import annotations

import struct
import time

import pytest
from kazoo.protocol.states import EventType

from .jute_client import (
    OP_CREATE,
    OP_DELETE,
    OP_EXISTS,
    OP_GET_DATA,
    OP_SET_DATA,
    Event,
    RawSession,
    buffer,
    create_request,
    delete_request,
    path_and_watch,
    read_buffer,
    set_data_request,
    ustring,
)
from .conftest import DEFAULT_TICK_TIME_MS
from .util import EventLog

pytestmark = pytest.mark.process

OP_PING, OP_AUTH = 11, 100
XID_PING, XID_AUTH = -2, -4
NODE_DATA_CHANGED = 3


def _raw(zk_server, **kwargs) -> RawSession:
    host, port = zk_server.hosts.split(":")
    return RawSession(host, int(port), **kwargs)


def _root(zk) -> str:
    return zk.chroot


def _send_special(session: RawSession, xid: int, opcode: int, body: bytes = b""):
    session.sock.sendall(struct.pack("!i", 8 + len(body)) + struct.pack("!ii", xid, opcode) + body)
    return session.read_reply()


def test_ping_is_answered_with_xid_minus_2_and_the_last_zxid(zk, zk_server):
    czxid = zk.create("/p", include_data=True)[1].czxid
    session = _raw(zk_server)
    try:
        reply = _send_special(session, XID_PING, OP_PING)
        assert (reply.xid, reply.err, reply.body) == (XID_PING, 0, b"")
        assert reply.zxid >= czxid
    finally:
        session.close_session()


def test_auth_packet_is_answered_with_xid_minus_4(zk_server):
    session = _raw(zk_server)
    try:
        reply = _send_special(session, XID_AUTH, OP_AUTH,
                              struct.pack("!i", 0) + ustring("digest") + buffer(b"user:pw"))
        assert (reply.xid, reply.err) == (XID_AUTH, 0)
    finally:
        session.close_session()


def test_reply_zxid_is_the_last_committed_zxid_even_for_reads(zk, zk_server):
    session = _raw(zk_server)
    try:
        zk.create("/r")
        mzxid = zk.set("/r", b"x").mzxid
        reply, _ = session.call(OP_GET_DATA, path_and_watch(f"{_root(zk)}/r", False))
        assert reply.err == 0 and reply.zxid >= mzxid
        later = zk.set("/r", b"y").mzxid
        missing, _ = session.call(OP_GET_DATA, path_and_watch(f"{_root(zk)}/nope", False))
        assert missing.err == -101 and missing.zxid >= later  # errors carry it too
    finally:
        session.close_session()


def test_other_connections_see_the_watch_event_before_a_read_of_the_new_state(zk, zk_server):
    zk.create("/n", b"0")
    path = f"{_root(zk)}/n"
    session = _raw(zk_server)
    try:
        session.call(OP_GET_DATA, path_and_watch(path, True))
        zk.set("/n", b"1")  # applied and acknowledged to the writer
        reply, events_before = session.call(OP_GET_DATA, path_and_watch(path, False))
        assert reply.err == 0
        assert events_before == [Event(NODE_DATA_CHANGED, 3, path)]
    finally:
        session.close_session()


def test_resuming_a_session_closes_its_old_connection(zk_server):
    first = _raw(zk_server)
    second = _raw(zk_server, session_id=first.session_id, password=first.password)
    try:
        assert second.session_id == first.session_id and second.timeout_ms > 0
        first.sock.settimeout(10)
        with pytest.raises((ConnectionError, OSError)):
            first.read_reply()  # EOF or reset: the server closed it
        reply, _ = second.call(OP_GET_DATA, path_and_watch("/", False))
        assert reply.err == 0
    finally:
        first.sock.close()
        second.close_session()


def test_close_session_is_answered_then_the_connection_closed(zk_server):
    session = _raw(zk_server)
    reply, _ = session.call(-11)
    assert reply.err == 0
    session.sock.settimeout(10)
    assert session.sock.recv(1) == b""
    session.sock.close()
    resumed = _raw(zk_server, session_id=session.session_id, password=session.password)
    try:
        assert resumed.timeout_ms == 0  # a closed session cannot be resumed
    finally:
        resumed.sock.close()


def test_pipelined_requests_are_answered_in_order_and_see_earlier_writes(zk, zk_server):
    root = _root(zk)
    session = _raw(zk_server)
    requests = [
        (OP_CREATE, create_request(f"{root}/a", b"one")),
        (OP_GET_DATA, path_and_watch(f"{root}/a", False)),
        (OP_SET_DATA, set_data_request(f"{root}/a", b"two")),
        (OP_GET_DATA, path_and_watch(f"{root}/a", False)),
        (OP_SET_DATA, set_data_request(f"{root}/a", b"three", version=0)),  # BadVersion: it is 1
        (OP_GET_DATA, path_and_watch(f"{root}/a", False)),
        (OP_DELETE, delete_request(f"{root}/a")),
        (OP_EXISTS, path_and_watch(f"{root}/a", False)),
    ] * 5
    try:
        frames = b"".join(
            struct.pack("!i", 8 + len(body)) + struct.pack("!ii", xid, opcode) + body
            for xid, (opcode, body) in enumerate(requests, start=1))
        session.sock.sendall(frames)  # all at once: the server sees them pipelined
        replies = [session.read_reply() for _ in requests]
    finally:
        session.close_session()
    assert [r.xid for r in replies] == list(range(1, len(requests) + 1))
    zxids = [r.zxid for r in replies]
    assert zxids == sorted(zxids), "reply zxids went backwards"
    for round_start in range(0, len(requests), 8):
        created, got1, set1, got2, bad_set, got3, deleted, exists = replies[round_start:round_start + 8]
        assert created.err == 0 and got1.err == 0 and read_buffer(got1.body) == b"one"
        assert set1.err == 0 and read_buffer(got2.body) == b"two"
        assert bad_set.err == -103 and read_buffer(got3.body) == b"two"
        assert deleted.err == 0 and exists.err == -101


def test_silent_session_expires_and_its_connection_is_closed(zk, zk_server):
    root = _root(zk)
    timeout_ms = 2 * DEFAULT_TICK_TIME_MS  # the minimum
    session = _raw(zk_server, timeout_ms=timeout_ms)
    assert session.timeout_ms == timeout_ms
    reply, _ = session.call(OP_CREATE, create_request(f"{root}/eph", b"", flags=1))
    assert reply.err == 0
    heard_at = time.monotonic()
    log = EventLog()
    assert zk.exists("/eph", watch=log) is not None
    try:
        session.sock.settimeout(10)
        assert session.sock.recv(1) == b"", "the server sent something to an expiring session"
        closed_at = time.monotonic()
    finally:
        session.sock.close()
    log.wait(1, timeout_s=10)
    assert log.kinds() == [(EventType.DELETED, "/eph")]
    timeout_s, tick_s = timeout_ms / 1000, DEFAULT_TICK_TIME_MS / 1000
    assert timeout_s - 0.05 <= closed_at - heard_at <= timeout_s + tick_s + 1.5
    resumed = _raw(zk_server, session_id=session.session_id, password=session.password)
    try:
        assert resumed.timeout_ms == 0
    finally:
        resumed.sock.close()


def test_pings_keep_a_session_alive_past_its_timeout(zk, zk_server):
    root = _root(zk)
    session = _raw(zk_server, timeout_ms=4 * DEFAULT_TICK_TIME_MS)
    try:
        assert session.call(OP_CREATE, create_request(f"{root}/eph", b"", flags=1))[0].err == 0
        deadline = time.monotonic() + 1.5 * 4 * DEFAULT_TICK_TIME_MS / 1000  # 1.5 timeouts
        while time.monotonic() < deadline:
            time.sleep(0.1)  # well inside the timeout: this is the heartbeat
            assert _send_special(session, XID_PING, OP_PING).err == 0
        assert zk.exists("/eph").ephemeralOwner == session.session_id
    finally:
        session.close_session()
    assert zk.exists("/eph") is None
