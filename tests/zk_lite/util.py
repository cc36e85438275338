"""Small helpers for the kazoo-level tests: waiting on conditions with deadlines."""
from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar
from tests.waiting import poll_until

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = 0.02,
               what: str = "condition") -> T:
    """Poll `predicate` until it returns a truthy value; fail after `timeout_s`."""
    return poll_until(predicate, timeout_s, what, interval_s=interval_s)


class EventLog:
    """A kazoo watch callback that records every event it receives, with waiting."""

    def __init__(self):
        self.events = []
        self.times = []  # time.monotonic() of each event's arrival
        self._cond = threading.Condition()

    def __call__(self, event) -> None:
        with self._cond:
            self.events.append(event)
            self.times.append(time.monotonic())
            self._cond.notify_all()

    def wait(self, count: int = 1, timeout_s: float = 10.0) -> list:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.events) >= count, timeout_s):
                raise AssertionError(f"expected {count} event(s) within {timeout_s} s, got {self.events}")
            return list(self.events)

    def kinds(self) -> list[tuple[str, str]]:
        with self._cond:
            return [(e.type, e.path) for e in self.events]


def drain_callbacks(client, timeout_s: float = 10.0) -> None:
    """Return once every watch event the server sent `client` so far has been dispatched.

    The server sends a watch event before any later reply on the same connection, and
    kazoo runs watch callbacks in order on one callback thread. So a round trip followed
    by a callback queued behind it proves that earlier events have been handled.
    """
    client.sync("/")
    done = threading.Event()
    client.handler.dispatch_callback(_Callback(done.set))
    assert done.wait(timeout_s), "kazoo callback queue did not drain"


class _Callback:
    """The shape kazoo's handler.dispatch_callback expects: func, args."""

    def __init__(self, func):
        self.type = "marker"
        self.func = func
        self.args = ()
