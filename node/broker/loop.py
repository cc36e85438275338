"""The broker's event loop: one thread, one ``zmq.Poller``, every piece of state owned here.

- Sockets are registered with a handler called when they are readable.
- ``post(fn)`` is the one thread-safe entry: kazoo callbacks and signal handlers post a
  function, and a byte on a pipe wakes the poller; the loop runs posted functions in
  order.
- Timers (``call_later``) run on the loop; ``every`` repeats.
- An event that raises is logged and the loop goes on (a failed assertion, a broken
  invariant, stops the process instead).
- ``Outbound`` is a pool of request channels (one ``node.net.RequestChannel`` per endpoint)
  whose responses and timeouts become callbacks on the loop: ``on_response(Response)``
  or ``on_response(None)`` after the timeout or when the request could not be sent.

Time: ``now_ms()`` is the monotonic clock in ms (what cores and timers see).
"""
from __future__ import annotations

import collections
import heapq
import itertools
import logging
import os
import time
from typing import Callable

import zmq

from node.wire import protocol
from node import local_link
from node.local_link import LinkClosed, LocalChannel
from node.net import ChannelError, RequestChannel
from node.broker.failures import EXPECTED_ERRORS

logger = logging.getLogger("node.broker.server")

POSTED_PER_ITERATION_MAX = 10_000
TIMERS_PER_ITERATION_MAX = 10_000
POLL_TIMEOUT_MS_MAX = 100


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class EventLoop:
    def __init__(self) -> None:
        self.poller = zmq.Poller()
        self._handlers: dict[object, Callable[[], None]] = {}
        self._posted: collections.deque = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.poller.register(self._wake_r, zmq.POLLIN)
        self._timers: list = []
        self._timer_ids = itertools.count()
        self._cancelled: set[int] = set()
        self.stopped = False
        # Called after every iteration.
        self.after_iteration: Callable[[], None] = lambda: None

    # ---- thread-safe -------------------------------------------------------------------

    def post(self, fn: Callable[[], None]) -> None:
        self._posted.append(fn)
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop will wake anyway) or closed (stopping)

    # ---- loop thread only ----------------------------------------------------------------

    def add_socket(self, socket, handler: Callable[[], None]) -> None:
        self.poller.register(socket, zmq.POLLIN)
        self._handlers[socket] = handler

    def watch_writable(self, socket, writable: bool) -> None:
        """Also call ``socket``'s handler when it becomes writable (a local link with
        queued output), or stop doing so."""
        if socket in self._handlers:
            self.poller.register(socket, zmq.POLLIN | (zmq.POLLOUT if writable else 0))

    def watch(self, socket, readable: bool, writable: bool) -> None:
        """Call ``socket``'s handler when it is readable and/or writable; neither keeps
        it registered but unwatched (a connection whose output is full stops reading)."""
        if socket in self._handlers:
            self.poller.register(socket, (zmq.POLLIN if readable else 0) |
                                 (zmq.POLLOUT if writable else 0))

    def remove_socket(self, socket) -> None:
        if socket in self._handlers:
            try:
                self.poller.unregister(socket)
            except KeyError:
                pass                # unwatched (``watch`` with neither): not in the poller
            del self._handlers[socket]

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> int:
        timer_id = next(self._timer_ids)
        heapq.heappush(self._timers, (now_ms() + max(0, delay_ms), timer_id, fn))
        return timer_id

    def cancel(self, timer_id: int | None) -> None:
        if timer_id is not None:
            self._cancelled.add(timer_id)

    def every(self, interval_ms: int, fn: Callable[[], None]) -> None:
        def run() -> None:
            self.call_later(interval_ms, run)
            fn()
        self.call_later(interval_ms, run)

    def run_once(self) -> None:
        timeout = POLL_TIMEOUT_MS_MAX
        if self._posted:
            timeout = 0
        elif self._timers:
            timeout = max(0, min(timeout, self._timers[0][0] - now_ms()))
        for socket, _ in self.poller.poll(timeout):
            if socket == self._wake_r:
                try:
                    os.read(self._wake_r, 65536)
                except BlockingIOError:
                    pass
                continue
            handler = self._handlers.get(socket)
            if handler is not None:
                self._call(handler)
        for _ in range(POSTED_PER_ITERATION_MAX):
            if not self._posted:
                break
            self._call(self._posted.popleft())
        self._run_timers()
        self._call(self.after_iteration)

    @staticmethod
    def _call(fn: Callable[[], None]) -> None:
        """Run one event. An expected failure in one (a disk error in a truncation, a
        coordinator that is away) is logged and the loop goes on serving; anything else,
        a failed assertion first, is a bug: it propagates and stops the process
        (node.broker.failures)."""
        try:
            fn()
        except EXPECTED_ERRORS as e:
            logger.error("event %r failed: %s; the broker keeps serving", fn, e)

    def _run_timers(self) -> None:
        now = now_ms()
        for _ in range(TIMERS_PER_ITERATION_MAX):
            if not self._timers or self._timers[0][0] > now:
                break
            _, timer_id, fn = heapq.heappop(self._timers)
            if timer_id in self._cancelled:
                self._cancelled.discard(timer_id)
                continue
            self._call(fn)

    def close(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


OnResponse = Callable[[protocol.Response | None], None]


class Outbound:
    """Request channels to other brokers, one per endpoint, answered on the loop.
    With ``local``, a broker on this host is reached over a local link
    (``node.local_link``) when it has one, else over ZeroMQ."""

    def __init__(self, loop: EventLoop, client_id: str, timeout_ms: int,
                 local: bool = False) -> None:
        self.loop = loop
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self.local = local
        self.channels: dict[str, RequestChannel] = {}
        # (endpoint, correlation id) -> (deadline ms, callback)
        self._pending: dict[tuple[str, int], tuple[int, OnResponse]] = {}

    def channel(self, endpoint: str) -> RequestChannel:
        channel = self.channels.get(endpoint)
        if channel is None:
            channel = local_link.open_channel(endpoint, client_id=self.client_id,
                                              local=self.local)
            self.channels[endpoint] = channel
            self.loop.add_socket(channel.socket, lambda: self._receive(endpoint))
        return channel

    def send(self, endpoint: str, api_key: int, body: dict, on_response: OnResponse,
             frames=(), timeout_ms: int | None = None) -> int | None:
        """Non-blocking; the callback always runs later on the loop (never inside send)."""
        channel = self.channel(endpoint)
        try:
            cid = channel.send(api_key, body, frames)
        except (ChannelError, zmq.ZMQError) as e:
            logger.warning("cannot send api %d to %s: %s", int(api_key), endpoint, e)
            if isinstance(channel, LocalChannel):
                self.close_channel(endpoint)   # the next request connects again
            self.loop.post(lambda: on_response(None))
            return None
        if isinstance(channel, LocalChannel) and channel.output:
            self.loop.watch_writable(channel.socket, True)
        deadline = now_ms() + (self.timeout_ms if timeout_ms is None else timeout_ms)
        self._pending[(endpoint, cid)] = (deadline, on_response)
        return cid

    def cancel(self, endpoint: str, correlation_id: int | None) -> None:
        """Forget a request: its callback will not run."""
        if correlation_id is None:
            return
        self._pending.pop((endpoint, correlation_id), None)
        channel = self.channels.get(endpoint)
        if channel is not None:
            channel.forget(correlation_id)

    def _receive(self, endpoint: str) -> None:
        channel = self.channels.get(endpoint)
        if channel is None:
            return
        try:
            responses = channel.receive_ready()
        except LinkClosed as e:
            logger.info("local link to %s closed: %s", endpoint, e)
            self.close_channel(endpoint)
            return
        if isinstance(channel, LocalChannel) and not channel.output:
            self.loop.watch_writable(channel.socket, False)
        for response in responses:
            entry = self._pending.pop((endpoint, response.correlation_id), None)
            if entry is not None:
                EventLoop._call(lambda cb=entry[1], r=response: cb(r))

    def expire(self, now: int) -> None:
        """Time out overdue requests (call from a timer)."""
        overdue = [key for key, (deadline, _) in self._pending.items() if deadline <= now]
        for key in overdue:
            _, callback = self._pending.pop(key)
            channel = self.channels.get(key[0])
            if channel is not None:
                channel.forget(key[1])
            EventLoop._call(lambda cb=callback: cb(None))

    def close_channel(self, endpoint: str) -> None:
        channel = self.channels.pop(endpoint, None)
        if channel is not None:
            self.loop.remove_socket(channel.socket)
            channel.close()
        for key in [k for k in self._pending if k[0] == endpoint]:
            _, callback = self._pending.pop(key)
            self.loop.post(lambda cb=callback: cb(None))

    def close(self) -> None:
        for endpoint in list(self.channels):
            channel = self.channels.pop(endpoint)
            self.loop.remove_socket(channel.socket)
            channel.close()
        self._pending.clear()
