"""A client connection (``Conn``: its bound session, auth ids) and a session
(``Session``: id, password, timeout, deadline), the state the core and its request
processors share (pure).
"""
from __future__ import annotations

ZERO_PASSWD = b"\x00" * 16


class Conn:
    """Per-connection state: the bound session, auth ids and this connection's watches."""

    __slots__ = ("key", "peer", "sid", "auth", "closed")

    def __init__(self, key, peer: str):
        self.key = key
        self.peer = peer
        self.sid = 0
        self.auth: list[tuple[str, str]] = [("ip", peer)]
        self.closed = False


class Session:
    __slots__ = ("sid", "passwd", "timeout_ms", "deadline_ms", "conn", "closing")

    def __init__(self, sid: int, passwd: bytes, timeout_ms: int):
        self.sid = sid
        self.passwd = passwd
        self.timeout_ms = timeout_ms
        self.deadline_ms = 0
        self.conn: Conn | None = None
        self.closing = False

