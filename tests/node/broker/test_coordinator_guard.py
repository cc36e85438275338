"""GuardedZk against a real zk_lite through a real kazoo client: calls work while the
coordinator is up, fail at once while it is gone, are bounded while it is paused, and
work again soon after it returns."""
from __future__ import annotations

import os
import signal
import time

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import NoNodeError

from bench.perf import zkservers
from node.broker import coordinator
from node.broker.coordinator import CoordinatorUnavailable
from node.wire.errors import ErrorCode, code_for_exception
from tests.waiting import poll_until

pytestmark = pytest.mark.process

CALL_TIMEOUT_S = 0.5


@pytest.fixture
def server():
    handle = zkservers.start("zk_lite")
    yield handle
    try:
        os.killpg(handle.proc.pid, signal.SIGCONT)
    except (ProcessLookupError, AttributeError):
        pass
    handle.close()


@pytest.fixture
def guarded(server):
    zk = coordinator.new_client(server.hosts, session_timeout_s=4.0)
    zk.call_timeout_s = CALL_TIMEOUT_S
    zk.start(timeout=10)
    yield zk
    zk.client.stop()
    zk.client.close()


def timed(fn):
    started = time.monotonic()
    try:
        fn()
    except CoordinatorUnavailable as e:
        return time.monotonic() - started, e
    raise AssertionError("the call did not fail")


def test_calls_pass_through_while_the_coordinator_is_up(guarded):
    assert guarded.available
    guarded.ensure_path("/a/b")
    assert guarded.create("/a/b/c", b"1") == "/a/b/c"
    data, stat = guarded.get("/a/b/c")
    assert data == b"1" and stat.version == 0
    assert guarded.set("/a/b/c", b"2", version=0).version == 1
    assert guarded.get_children("/a/b") == ["c"]
    assert guarded.exists("/a/b/c").version == 1
    txn = guarded.transaction()
    txn.check("/a/b/c", 1)
    txn.set_data("/a/b/c", b"3", version=1)
    txn.create("/a/b/d", b"x")
    results = txn.commit()
    assert results[0] is True and results[1].version == 2 and results[2] == "/a/b/d"
    guarded.delete("/a/b/d")
    with pytest.raises(NoNodeError):          # kazoo's own errors are unchanged
        guarded.get("/a/b/d")
    assert guarded.client_id == guarded.client.client_id   # the rest passes through
    assert guarded.timeouts == guarded.refused == 0


def test_a_paused_coordinator_costs_one_bounded_call_then_calls_fail_at_once(server, guarded):
    guarded.ensure_path("/p")
    os.killpg(server.proc.pid, signal.SIGSTOP)
    waited, error = timed(lambda: guarded.get("/p"))
    assert CALL_TIMEOUT_S * 0.9 <= waited < CALL_TIMEOUT_S + 1.0, waited
    assert "within" in str(error) and guarded.timeouts == 1
    assert not guarded.available
    for call in (lambda: guarded.exists("/p"), lambda: guarded.create("/p/x"),
                 lambda: guarded.transaction().commit()):
        waited, error = timed(call)
        assert waited < 0.1, waited
        assert "not attempted" in str(error)
    assert guarded.timeouts == 1 and guarded.refused == 3
    os.killpg(server.proc.pid, signal.SIGCONT)
    poll_until(lambda: guarded.available, 10, "the coordinator trusted again")
    assert guarded.exists("/p") is not None


@pytest.mark.slow
def test_a_killed_coordinator_fails_calls_at_once_and_its_return_is_noticed_soon(
        server, guarded):
    states = []
    guarded.add_listener(states.append)
    server.kill()
    poll_until(lambda: guarded.client.state != KazooState.CONNECTED, 10,
               "kazoo notices the lost connection")
    assert KazooState.SUSPENDED in states
    waited, error = timed(lambda: guarded.get_children("/"))
    assert waited < 0.1 and "suspended" in str(error)
    assert code_for_exception(error) == ErrorCode.REQUEST_TIMED_OUT
    # The outage: long enough for kazoo's default backoff (doubling from 0.1 s towards
    # an hour) to be waiting 6.4 s between attempts (it would notice the return about
    # 4.7 s late); the capped one never waits more than RECONNECT_DELAY_MAX_S + jitter.
    time.sleep(8.0)
    server.restart()
    returned = time.monotonic()
    poll_until(lambda: guarded.available, 10, "a session again")
    noticed = time.monotonic() - returned
    assert noticed < coordinator.RECONNECT_DELAY_MAX_S + coordinator.RECONNECT_JITTER_S + 1.5, \
        noticed
    guarded.ensure_path("/back")
    assert guarded.exists("/back") is not None


def test_the_brokers_client_reconnects_forever_with_a_capped_backoff():
    zk = coordinator.new_client("127.0.0.1:1", session_timeout_s=6.0)
    retry = zk.client._conn_retry
    assert retry.max_tries == -1
    assert retry.max_delay == coordinator.RECONNECT_DELAY_MAX_S <= 5.0
    assert not zk.available                    # never started: calls fail at once
    waited, error = timed(lambda: zk.get("/"))
    assert waited < 0.1 and "not attempted" in str(error)
