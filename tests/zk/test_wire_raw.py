"""Wire details kazoo hides, checked with the raw jute client (ZK_PROTOCOL.md §3, §6.7-§6.9)."""
from __future__ import annotations

import struct

import pytest

from .jute_client import OP_GET_DATA, Event, RawSession, buffer, path_and_watch, ustring

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
