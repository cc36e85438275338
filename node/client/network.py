"""``Network``: the channels of one client thread to every broker it talks to, with request
timeouts and fast detection of a dead connection.

Threading: a ``Network`` (like the ZeroMQ sockets under it) belongs to one thread. The
producer's I/O thread owns its own; a consumer or an admin client is used from one
thread at a time.

Dead connections: ZeroMQ hides TCP, so every channel has a socket monitor. When a
connection with requests in flight drops (the broker died) or cannot be made (nobody
listens), those requests fail at once with NETWORK_EXCEPTION (retriable) and the
channel is closed and made anew — a broker that is restarted later never sees the
stale requests that were queued for it. A broker that is alive but silent (SIGSTOP)
is only noticed by the request timeout.

Local links: a broker on this host is reached over its local link
(``node.local_link``: a Unix socket, no ZeroMQ I/O threads) when it has one; there a
dead broker is an end of stream, handled like a dropped connection.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

from node.wire import errors
from node.wire import protocol
from node import local_link
from node.local_link import LinkClosed, LocalChannel
from node.net import ChannelError, RequestChannel, context
from node.client.types import error
from node.wire.errors import ErrorCode

MONITOR_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CONNECTED
RECEIVE_EVENTS_MAX = 64


@dataclass
class _InFlight:
    endpoint: str
    correlation_id: int
    deadline_s: float
    context: object


@dataclass
class Completion:
    """What ``Network.poll`` hands back: a response, or the failure of a request."""

    endpoint: str
    context: object
    response: protocol.Response | None = None
    error_code: int = 0
    error_message: str = ""


class _Connection:
    def __init__(self, endpoint: str, client_id: str):
        self.endpoint = endpoint
        self.channel: RequestChannel = local_link.open_channel(endpoint, client_id=client_id)
        self.local = isinstance(self.channel, LocalChannel)
        self.monitor = None if self.local else \
            self.channel.socket.get_monitor_socket(MONITOR_EVENTS)
        self.connected = self.local
        self.failures = 0

    def close(self) -> None:
        if self.monitor is not None:
            try:
                self.channel.socket.disable_monitor()
            except zmq.ZMQError:
                pass
            self.monitor.close(linger=0)
        self.channel.close()


class Network:
    """One thread's channels to the brokers, keyed by endpoint ("tcp://host:port")."""

    def __init__(self, client_id: str, request_timeout_ms: int):
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connections: dict[str, _Connection] = {}
        self.in_flight: dict[tuple[str, int], _InFlight] = {}
        self.poller = zmq.Poller()
        self.extra_fds: list[int] = []
        self.backlog: list[Completion] = []  # completions a blocking call set aside
        self.closed = False
        context()  # make sure the process-wide context exists in this thread too

    # -- connections
    def connection(self, endpoint: str) -> _Connection:
        conn = self.connections.get(endpoint)
        if conn is None:
            conn = _Connection(endpoint, self.client_id)
            self.connections[endpoint] = conn
            self.poller.register(conn.channel.socket, zmq.POLLIN)
            if conn.monitor is not None:
                self.poller.register(conn.monitor, zmq.POLLIN)
        return conn

    def in_flight_count(self, endpoint: str) -> int:
        conn = self.connections.get(endpoint)
        return 0 if conn is None else len(conn.channel.in_flight)

    def register_fd(self, fd: int) -> None:
        self.poller.register(fd, zmq.POLLIN)
        self.extra_fds.append(fd)

    def _drop(self, conn: _Connection, code: int, message: str, out: list) -> None:
        """Fail every request in flight on ``conn`` and replace it by a fresh channel."""
        for key in [k for k in self.in_flight if k[0] == conn.endpoint]:
            entry = self.in_flight.pop(key)
            out.append(Completion(conn.endpoint, entry.context, None, code, message))
        self.poller.unregister(conn.channel.socket)
        if conn.monitor is not None:
            self.poller.unregister(conn.monitor)
        conn.close()
        del self.connections[conn.endpoint]

    # -- requests
    def send(self, endpoint: str, api_key: int, body: dict, frames=(), *, context=None,
             timeout_ms: int | None = None, expect_response: bool = True) -> int:
        conn = self.connection(endpoint)
        try:
            try:
                cid = conn.channel.send(api_key, body, frames,
                                        expect_response=expect_response)
            except ChannelError as e:
                # A local link whose broker went away: its requests fail now, and this
                # one goes on a fresh connection (ZeroMQ's if no local link answers,
                # which queues it and reports a refused connection as usual).
                self._drop(conn, ErrorCode.NETWORK_EXCEPTION, f"{endpoint}: {e}",
                           self.backlog)
                conn = self.connection(endpoint)
                cid = conn.channel.send(api_key, body, frames,
                                        expect_response=expect_response)
        except zmq.Again:
            raise errors.error_for(ErrorCode.NETWORK_EXCEPTION)(
                f"{endpoint}: send queue full") from None
        except ChannelError as e:
            self._drop(conn, ErrorCode.NETWORK_EXCEPTION, f"{endpoint}: {e}", self.backlog)
            raise errors.error_for(ErrorCode.NETWORK_EXCEPTION)(str(e)) from None
        if conn.local and conn.channel.output:
            self.poller.register(conn.channel.socket, zmq.POLLIN | zmq.POLLOUT)
        if expect_response:
            timeout_s = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
            self.in_flight[(endpoint, cid)] = _InFlight(endpoint, cid,
                                                        time.monotonic() + timeout_s, context)
        return cid

    def cancel(self, endpoint: str, correlation_id: int) -> None:
        self.in_flight.pop((endpoint, correlation_id), None)
        conn = self.connections.get(endpoint)
        if conn is not None:
            conn.channel.forget(correlation_id)

    def next_deadline_s(self) -> float | None:
        return min((e.deadline_s for e in self.in_flight.values()), default=None)

    def poll(self, timeout_ms: float) -> tuple[list[Completion], set[int]]:
        """Wait up to ``timeout_ms`` for responses; returns the completions and the
        extra fds (``register_fd``) that are readable."""
        out: list[Completion] = self.backlog
        self.backlog = []
        if out:
            timeout_ms = 0
        deadline = self.next_deadline_s()
        if deadline is not None:
            timeout_ms = min(timeout_ms, max(0.0, (deadline - time.monotonic()) * 1000))
        events = dict(self.poller.poll(max(0, int(timeout_ms + 0.999)) if timeout_ms > 0 else 0))
        ready_fds = {fd for fd in self.extra_fds if fd in events}
        for conn in list(self.connections.values()):
            if conn.local:
                if conn.channel.socket in events:
                    self._receive_local(conn, out)
                continue
            if conn.channel.socket in events:  # answers first: they may precede a drop
                for response in conn.channel.receive_ready():
                    entry = self.in_flight.pop((conn.endpoint, response.correlation_id), None)
                    if entry is not None:
                        out.append(Completion(conn.endpoint, entry.context, response))
            if conn.monitor in events:
                self._monitor(conn, out)
        now = time.monotonic()
        for key, entry in list(self.in_flight.items()):
            if entry.deadline_s <= now:
                self.cancel(*key)
                out.append(Completion(entry.endpoint, entry.context, None, ErrorCode.REQUEST_TIMED_OUT,
                                      f"no response from {entry.endpoint} in time"))
        return out, ready_fds

    def _receive_local(self, conn: _Connection, out: list) -> None:
        try:
            responses = conn.channel.receive_ready()
        except LinkClosed as e:
            self._drop(conn, ErrorCode.NETWORK_EXCEPTION, f"{conn.endpoint}: {e}", out)
            return
        if not conn.channel.output:
            self.poller.register(conn.channel.socket, zmq.POLLIN)
        for response in responses:
            entry = self.in_flight.pop((conn.endpoint, response.correlation_id), None)
            if entry is not None:
                out.append(Completion(conn.endpoint, entry.context, response))

    def _monitor(self, conn: _Connection, out: list) -> bool:
        """Handle monitor events; True if the connection was dropped."""
        for _ in range(RECEIVE_EVENTS_MAX):
            try:
                event = recv_monitor_message(conn.monitor, flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            kind = event["event"]
            if kind == zmq.EVENT_CONNECTED:
                conn.connected = True
                conn.failures = 0
            elif kind in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CONNECT_RETRIED):
                conn.connected = False
                conn.failures += 1
                if any(k[0] == conn.endpoint for k in self.in_flight):
                    what = "connection lost" if kind == zmq.EVENT_DISCONNECTED else \
                        "connection refused"
                    self._drop(conn, ErrorCode.NETWORK_EXCEPTION, f"{conn.endpoint}: {what}", out)
                    return True
        return False

    def request(self, endpoint: str, api_key: int, body: dict, frames=(), *,
                timeout_ms: int | None = None) -> protocol.Response:
        """Blocking request; raises the KafkaError of a network failure or timeout.
        Completions of other requests that arrive meanwhile are kept for ``poll``."""
        marker = object()
        self.send(endpoint, api_key, body, frames, context=marker, timeout_ms=timeout_ms)
        while True:
            found = None
            for c in self._poll_aside(100):
                if c.context is marker:
                    found = c
                else:
                    self.backlog.append(c)
            if found is not None:
                if found.response is None:
                    raise error(found.error_code, found.error_message)
                return found.response

    def _poll_aside(self, timeout_ms: float) -> list[Completion]:
        """Poll without consuming the backlog (for the blocking calls)."""
        saved, self.backlog = self.backlog, []
        try:
            completions, _ = self.poll(timeout_ms)
        finally:
            self.backlog = saved + self.backlog
        return completions

    def request_first(self, endpoints: list[str], api_key: int, body: dict, *,
                      timeout_ms: int | None = None) -> tuple[str, protocol.Response]:
        """Send to every endpoint at once; the first answer wins, the rest are cancelled.
        Raises the last failure if none answers."""
        pending = {}
        for endpoint in dict.fromkeys(endpoints):
            marker = object()
            pending[marker] = (endpoint, self.send(endpoint, api_key, body, context=marker,
                                                   timeout_ms=timeout_ms))
        last: Completion | None = None
        try:
            while pending:
                won = None
                for c in self._poll_aside(100):
                    if not any(c.context is marker for marker in pending):  # contexts
                        self.backlog.append(c)  # of other requests may be unhashable
                        continue
                    del pending[c.context]
                    if c.response is not None and won is None:
                        won = c     # and go on: the rest of the list is someone's too
                    elif c.response is None:
                        last = c
                if won is not None:
                    return won.endpoint, won.response
        finally:
            for endpoint, cid in pending.values():
                self.cancel(endpoint, cid)
        raise error(last.error_code, last.error_message)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for conn in list(self.connections.values()):
                conn.close()
            self.connections.clear()
            self.in_flight.clear()
