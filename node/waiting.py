"""The one poll-until-deadline helper: the clients, the tools, the supervisor, the demo,
the benchmarks and the test suite wait on conditions with it, never on bare sleeps.

Each caller names what it waits for and which error a timeout is in its own terms
(``KafkaTimeoutError`` for the client, ``ToolError`` for a tool, ``TimeoutError`` for the
supervisor), so a user reads "timed out after 30 s waiting for a leader of t-0".
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

INTERVAL_S = 0.02


def poll_until(predicate: Callable[[], T], timeout_s: float, what: str = "a condition", *,
               interval_s: float = INTERVAL_S,
               error: Callable[[str], BaseException] = TimeoutError,
               each: Iterable[Callable[[], object]] = ()) -> T:
    """Call ``predicate()`` (after every callable in ``each``) until it returns something
    truthy, and return that; raise ``error(message)`` once ``timeout_s`` has passed.
    The predicate is always called at least once, and once more at the deadline."""
    assert timeout_s >= 0 and interval_s > 0, (timeout_s, interval_s)
    deadline = time.monotonic() + timeout_s
    while True:
        for step in each:
            step()
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise error(f"timed out after {_seconds(timeout_s)} waiting for {what}")
        time.sleep(min(interval_s, left))


def _seconds(timeout_s: float) -> str:
    return f"{timeout_s:g} s"
