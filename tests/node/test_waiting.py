"""node.waiting.poll_until: the one poll-until-deadline helper of the project."""
from __future__ import annotations

import pytest

from node.waiting import poll_until


def test_returns_the_first_truthy_value():
    values = iter([0, None, [], "ready"])
    assert poll_until(lambda: next(values), 5, "a value", interval_s=0.001) == "ready"


def test_a_timeout_raises_the_callers_error_naming_what_it_waited_for():
    class Mine(Exception):
        pass

    calls = []
    with pytest.raises(Mine, match=r"^timed out after 0.05 s waiting for a leader of t-0$"):
        poll_until(lambda: calls.append(1), 0.05, "a leader of t-0", interval_s=0.01,
                   error=Mine)
    assert len(calls) >= 2  # polled, then once more at the deadline
    with pytest.raises(TimeoutError):
        poll_until(lambda: False, 0, "nothing")


def test_each_runs_before_every_check():
    seen = []
    poll_until(lambda: len(seen) >= 3, 5, interval_s=0.001, each=[lambda: seen.append(1)])
    assert len(seen) == 3
