"""A tiny blocking ZooKeeper wire client for what kazoo cannot do (SetWatches, raw frames).

Written from ZK_PROTOCOL.md §1-§4: big-endian jute records, each frame prefixed by its
int32 length; the first frame each way is the connect request/response.
"""
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

OP_GET_DATA = 4
OP_EXISTS = 3
OP_GET_CHILDREN = 8
OP_SET_WATCHES = 101
OP_CLOSE = -11
XID_NOTIFICATION = -1
ZERO_PASSWORD = bytes(16)


def ustring(text: str | None) -> bytes:
    if text is None:
        return struct.pack("!i", -1)
    raw = text.encode()
    return struct.pack("!i", len(raw)) + raw


def buffer(raw: bytes) -> bytes:
    return struct.pack("!i", len(raw)) + raw


def string_vector(items: list[str]) -> bytes:
    return struct.pack("!i", len(items)) + b"".join(ustring(i) for i in items)


def path_and_watch(path: str, watch: bool) -> bytes:
    return ustring(path) + struct.pack("!?", watch)


def connect_request(timeout_ms: int, session_id: int = 0, password: bytes = ZERO_PASSWORD,
                    last_zxid: int = 0) -> bytes:
    return struct.pack("!iqiq", 0, last_zxid, timeout_ms, session_id) + buffer(password) + b"\x00"


def frame(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


@dataclass(frozen=True)
class Reply:
    xid: int
    zxid: int
    err: int
    body: bytes


@dataclass(frozen=True)
class Event:
    type: int
    state: int
    path: str


def parse_event(body: bytes) -> Event:
    event_type, state, length = struct.unpack_from("!iii", body)
    return Event(event_type, state, body[12:12 + length].decode())


class RawSession:
    """One TCP connection bound to a session (new, or resumed with id and password)."""

    def __init__(self, host: str, port: int, timeout_ms: int = 5000, session_id: int = 0,
                 password: bytes = ZERO_PASSWORD, last_zxid: int = 0, io_timeout_s: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=io_timeout_s)
        self.io_timeout_s = io_timeout_s
        self.sock.sendall(frame(connect_request(timeout_ms, session_id, password, last_zxid)))
        body = self.read_frame()
        _, self.timeout_ms, self.session_id = struct.unpack_from("!iiq", body)
        (password_length,) = struct.unpack_from("!i", body, 16)
        self.password = body[20:20 + password_length]
        self.last_zxid = last_zxid
        self.next_xid = 1

    def _read_exactly(self, count: int) -> bytes:
        chunks, remaining = [], count
        while remaining:
            chunk = self.sock.recv(remaining)
            if not chunk:
                raise ConnectionError("server closed the connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def read_frame(self) -> bytes:
        (length,) = struct.unpack("!i", self._read_exactly(4))
        return self._read_exactly(length)

    def read_reply(self) -> Reply:
        body = self.read_frame()
        xid, zxid, err = struct.unpack_from("!iqi", body)
        if xid != XID_NOTIFICATION:
            self.last_zxid = max(self.last_zxid, zxid)
        return Reply(xid, zxid, err, body[16:])

    def send(self, opcode: int, body: bytes = b"") -> int:
        xid = self.next_xid
        self.next_xid += 1
        self.sock.sendall(frame(struct.pack("!ii", xid, opcode) + body))
        return xid

    def call(self, opcode: int, body: bytes = b"") -> tuple[Reply, list[Event]]:
        """Send one request; return its reply and the events that arrived before it."""
        xid = self.send(opcode, body)
        events = []
        while True:
            reply = self.read_reply()
            if reply.xid == XID_NOTIFICATION:
                events.append(parse_event(reply.body))
            elif reply.xid == xid:
                return reply, events
            else:
                raise AssertionError(f"reply xid {reply.xid}, expected {xid}")

    def next_event(self, timeout_s: float) -> Event:
        deadline = time.monotonic() + timeout_s
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                reply = self.read_reply()
            finally:
                self.sock.settimeout(self.io_timeout_s)
            if reply.xid == XID_NOTIFICATION:
                return parse_event(reply.body)

    def set_watches(self, relative_zxid: int, data: list[str] = (), exist: list[str] = (),
                    child: list[str] = ()) -> tuple[Reply, list[Event]]:
        body = (struct.pack("!q", relative_zxid) + string_vector(list(data))
                + string_vector(list(exist)) + string_vector(list(child)))
        return self.call(OP_SET_WATCHES, body)

    def drop(self) -> None:
        """Close the TCP connection without closing the session."""
        self.sock.close()

    def close_session(self) -> None:
        try:
            self.call(OP_CLOSE)
        finally:
            self.sock.close()


OP_CREATE = 1
OP_DELETE = 2
OP_SET_DATA = 5
OPEN_ACL = struct.pack("!ii", 1, 31) + ustring("world") + ustring("anyone")  # vector of one ACL


def create_request(path: str, data: bytes, flags: int = 0) -> bytes:
    return ustring(path) + buffer(data) + OPEN_ACL + struct.pack("!i", flags)


def set_data_request(path: str, data: bytes, version: int = -1) -> bytes:
    return ustring(path) + buffer(data) + struct.pack("!i", version)


def delete_request(path: str, version: int = -1) -> bytes:
    return ustring(path) + struct.pack("!i", version)


def read_buffer(body: bytes, offset: int = 0) -> bytes | None:
    (length,) = struct.unpack_from("!i", body, offset)
    return None if length < 0 else body[offset + 4:offset + 4 + length]
