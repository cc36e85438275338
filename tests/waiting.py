"""The suite waits with the project's one poll-until-deadline helper (node/waiting.py);
a timeout in a test is an assertion failure naming what it waited for."""
from __future__ import annotations

from node.waiting import poll_until as _poll_until


def poll_until(predicate, timeout_s: float, what: str = "condition", *,
               interval_s: float = 0.02, error: type[Exception] = AssertionError,
               each=()):
    """``node.waiting.poll_until`` with AssertionError as the default timeout error."""
    return _poll_until(predicate, timeout_s, what, interval_s=interval_s, error=error,
                       each=each)
