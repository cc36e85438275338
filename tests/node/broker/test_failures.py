"""node.broker.failures: which errors the shell serves on, and the one line a bug gets."""
from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss

from node.broker import failures
from node.wire.protocol import ProtocolError
from shm.errors import LogError


def _raised(e: BaseException) -> BaseException:
    try:
        raise e
    except BaseException as caught:  # noqa: BLE001 - the test wants the traceback
        return caught


@pytest.mark.parametrize("error", [OSError("disk"), LogError("x"), ConnectionLoss(),
                                   ProtocolError("garbage")])
def test_the_world_failing_is_expected(error):
    assert isinstance(error, failures.EXPECTED_ERRORS)


@pytest.mark.parametrize("error", [AssertionError("x"), KeyError("k"), TypeError("t")])
def test_bugs_are_not_expected(error):
    assert not isinstance(error, failures.EXPECTED_ERRORS)


def test_a_broken_invariant_is_one_line_naming_it_and_where(caplog):
    e = _raised(AssertionError("hw 7 > leo 5\nsecond line"))
    with caplog.at_level("CRITICAL", logger="node.broker"):
        assert failures.fatal(e) == failures.EXIT_BROKEN_INVARIANT == 70
    [record] = caplog.records
    message = record.getMessage()
    assert "\n" not in message
    assert message.startswith("broken invariant: hw 7 > leo 5 second line at ")
    assert "test_failures.py:" in message and "in _raised" in message
    assert failures.describe(_raised(KeyError("k"))).startswith("unexpected KeyError: 'k'")
