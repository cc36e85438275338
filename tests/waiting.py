"""The suite's one poll-until-deadline helper: tests wait on conditions, never on sleeps."""
from __future__ import annotations

import time


def poll_until(predicate, timeout_s: float, what: str = "condition", *,
               interval_s: float = 0.02, error: type[Exception] = AssertionError,
               each=()):
    """Call ``predicate()`` (after every callable in ``each``) until it returns something
    truthy, and return that; raise ``error`` once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        for step in each:
            step()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
