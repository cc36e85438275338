"""Request/response channels over ZeroMQ DEALER sockets (the client side of node.wire.protocol).

``RequestChannel`` is the interface every channel to a broker offers: this module's
``Channel`` (ZeroMQ) and ``node.local_link.LocalChannel`` (a Unix socket on one host);
users hold a ``RequestChannel`` and need not know which it is.

``Channel`` is one DEALER connection to one broker listener. It is used two ways:
- inside an event loop (a broker's fetchers and controller): register ``channel.socket``
  with the loop's ``zmq.Poller``, ``send(...)`` returns a correlation id at once, and
  when the socket is readable ``receive_ready()`` returns the responses that arrived;
- blocking (clients, tools, tests): ``request(...)`` sends and waits for its response.

A channel is not thread-safe (ZeroMQ sockets are not): one thread owns it.
Limits: at most ``IN_FLIGHT_MAX`` requests wait on one channel; a response for an
unknown correlation id (an answer that came after its request timed out) is dropped.
"""
from __future__ import annotations

import itertools
import time
from typing import Any, Protocol

import zmq

from node.wire import protocol

IN_FLIGHT_MAX = 100_000
SEND_HWM = 100_000
RECEIVE_HWM = 100_000
RECEIVE_BATCH_MAX = 1024


class ChannelError(Exception):
    """The broker did not answer in time, or answered something undecodable."""


class RequestTimedOut(ChannelError):
    pass


class RequestChannel(Protocol):
    """A request/response channel to one broker listener, as its users drive it."""

    endpoint: str
    client_id: str
    in_flight: dict[int, int]   # correlation id -> api key, for requests awaiting answers
    socket: Any                 # what a poller watches: a zmq socket, or a socket object

    def send(self, api_key: int, body: dict, frames=(), *, expect_response: bool = True
             ) -> int:
        """Queue one request; returns its correlation id (never blocks)."""

    def forget(self, correlation_id: int) -> None:
        """Drop a request that will not be waited for; a late answer is discarded."""

    def receive_ready(self) -> list[protocol.Response]:
        """Every response already received (non-blocking); unknown ids are dropped."""

    def request(self, api_key: int, body: dict, frames=(), *, timeout_ms: int = 30_000
                ) -> protocol.Response:
        """Send and wait for this request's response (blocking)."""

    def close(self) -> None:
        """Close the channel; requests in flight are forgotten."""


_context: zmq.Context | None = None


def context() -> zmq.Context:
    """One ZeroMQ context per process (created lazily; after fork, make a new one)."""
    global _context
    if _context is None or _context.closed:
        _context = zmq.Context()
    return _context


class Channel:
    """A ``RequestChannel`` over a ZeroMQ DEALER socket."""

    def __init__(self, endpoint: str, *, client_id: str = "minikafka",
                 ctx: zmq.Context | None = None) -> None:
        self.endpoint = endpoint
        self.client_id = client_id
        self.socket = (ctx or context()).socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, SEND_HWM)
        self.socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        self.socket.connect(endpoint)
        self._ids = itertools.count(1)
        self.in_flight: dict[int, int] = {}  # correlation id -> api key
        self.closed = False

    def send(self, api_key: int, body: dict, frames=(), *, expect_response: bool = True
             ) -> int:
        """Queue one request; returns its correlation id (never blocks)."""
        if len(self.in_flight) >= IN_FLIGHT_MAX:
            raise ChannelError(f"{self.endpoint}: {IN_FLIGHT_MAX} requests in flight")
        correlation_id = next(self._ids)
        message = protocol.encode_request(api_key, correlation_id, self.client_id, body, frames)
        self.socket.send_multipart(message, copy=len(frames) == 0, flags=zmq.NOBLOCK)
        if expect_response:
            self.in_flight[correlation_id] = int(api_key)
        return correlation_id

    def forget(self, correlation_id: int) -> None:
        self.in_flight.pop(correlation_id, None)

    def receive_ready(self) -> list[protocol.Response]:
        """Every response already received (non-blocking); unknown ids are dropped."""
        out = []
        for _ in range(RECEIVE_BATCH_MAX):
            try:
                frames = self.socket.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                response = protocol.decode_response(frames)
            except protocol.ProtocolError:
                continue  # a garbled answer is treated as lost; the request times out
            if self.in_flight.pop(response.correlation_id, None) is not None:
                out.append(response)
        return out

    def request(self, api_key: int, body: dict, frames=(), *, timeout_ms: int = 30_000
                ) -> protocol.Response:
        """Send and wait for this request's response (blocking)."""
        correlation_id = self.send(api_key, body, frames)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                self.forget(correlation_id)
                raise RequestTimedOut(
                    f"no response from {self.endpoint} to api {int(api_key)} in {timeout_ms} ms")
            if not self.socket.poll(remaining_ms, zmq.POLLIN):
                continue
            for response in self.receive_ready():
                if response.correlation_id == correlation_id:
                    return response

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.socket.close(linger=0)
            self.in_flight.clear()
