"""The broker's coordinator client: kazoo, with every call from the event loop bounded.

Kafka's brokers keep serving Produce and Fetch for the partitions they lead while
ZooKeeper is away; only what needs the coordinator (an ISR change, an election, an admin
request) waits for it. Our broker runs on one event loop, so a coordinator call made
there must never wait for a reconnect. kazoo queues a request made while it is
disconnected until the connection is back, and its default reconnect backoff grows
towards an hour. This module puts two bounds around that:

- ``GuardedZk`` wraps a ``KazooClient``. Its synchronous calls are kazoo's asynchronous
  ones waited on for at most ``CALL_TIMEOUT_S``. A call made while the session is not
  CONNECTED, or within ``SUSPECT_S`` of a call that timed out (a paused coordinator
  looks connected until kazoo's read timeout notices), fails at once with
  ``CoordinatorUnavailable``, a ``KazooException`` every caller already handles. Its
  ``kafka_error`` makes a request that needed the coordinator answer REQUEST_TIMED_OUT
  (retriable), as Kafka's admin requests do when ZooKeeper is away.
- ``connection_retry()`` caps kazoo's reconnect backoff at ``RECONNECT_DELAY_MAX_S``, so
  a broker notices the coordinator's return within about a second however long it was
  away.

Everything else (listeners, async calls, ``client_id``, ``stop``) passes through to the
wrapped client unchanged.
"""
from __future__ import annotations

import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

# A coordinator call made on the broker's loop waits at most this long for its answer
# (zk_lite and ZooKeeper answer in well under a millisecond when they are up).
CALL_TIMEOUT_S = 2.0
# After a call timed out, calls fail at once for this long instead of each waiting.
SUSPECT_S = 2.0
# Reconnect attempts: 0.1 s, then x1.5 up to this, forever (kazoo's default grows to 1 h).
RECONNECT_DELAY_S = 0.1
RECONNECT_BACKOFF = 1.5
RECONNECT_DELAY_MAX_S = 1.0
RECONNECT_JITTER_S = 0.1

assert 0 < CALL_TIMEOUT_S <= 5.0
assert RECONNECT_DELAY_MAX_S <= 5.0


class CoordinatorUnavailable(KazooException):
    """The coordinator did not answer in time, or the session is not connected."""
    kafka_error = "REQUEST_TIMED_OUT"


def connection_retry() -> KazooRetry:
    """Reconnect forever with a capped backoff."""
    return KazooRetry(max_tries=-1, delay=RECONNECT_DELAY_S, backoff=RECONNECT_BACKOFF,
                      max_delay=RECONNECT_DELAY_MAX_S, max_jitter=RECONNECT_JITTER_S)


def new_client(hosts: str, session_timeout_s: float) -> GuardedZk:
    return GuardedZk(KazooClient(hosts=hosts, timeout=session_timeout_s,
                                 connection_retry=connection_retry()))


class GuardedTransaction:
    """kazoo's TransactionRequest with a bounded ``commit``."""

    def __init__(self, zk: GuardedZk) -> None:
        self._zk = zk
        self._txn = zk.client.transaction()

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        self._txn.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)

    def set_data(self, path, value, version=-1):
        self._txn.set_data(path, value, version=version)

    def delete(self, path, version=-1):
        self._txn.delete(path, version=version)

    def check(self, path, version):
        self._txn.check(path, version)

    def commit(self) -> list:
        self._zk.check_available("multi", "")
        return self._zk.wait("multi", "", self._txn.commit_async())


class GuardedZk:
    """A KazooClient whose synchronous calls never wait longer than CALL_TIMEOUT_S."""

    def __init__(self, client: KazooClient, *, call_timeout_s: float = CALL_TIMEOUT_S,
                 suspect_s: float = SUSPECT_S,
                 clock=time.monotonic) -> None:
        self.client = client
        self.call_timeout_s = call_timeout_s
        self.suspect_s = suspect_s
        self._clock = clock
        self._suspect_until = 0.0
        self.timeouts = 0         # calls that timed out (for logs and tests)
        self.refused = 0          # calls failed at once (not connected or suspect)

    def __getattr__(self, name):
        return getattr(self.client, name)

    @property
    def available(self) -> bool:
        """Connected, and no call timed out in the last SUSPECT_S."""
        return self.client.state == KazooState.CONNECTED and \
            self._clock() >= self._suspect_until

    def check_available(self, what: str, path: str) -> None:
        state = self.client.state
        if state != KazooState.CONNECTED:
            self.refused += 1
            raise CoordinatorUnavailable(
                f"coordinator session is {state.lower()}: {what} {path} not attempted")
        if self._clock() < self._suspect_until:
            self.refused += 1
            raise CoordinatorUnavailable(
                f"coordinator did not answer lately: {what} {path} not attempted")

    def wait(self, what: str, path: str, result):
        try:
            return result.get(timeout=self.call_timeout_s)
        except KazooTimeoutError:
            self.timeouts += 1
            self._suspect_until = self._clock() + self.suspect_s
            raise CoordinatorUnavailable(
                f"coordinator did not answer {what} {path} within "
                f"{self.call_timeout_s:g} s") from None

    def _call(self, what: str, path: str, start):
        self.check_available(what, path)
        return self.wait(what, path, start())

    # ---------------------------------------------------------------- the calls

    def get(self, path, watch=None):
        return self._call("get", path, lambda: self.client.get_async(path, watch=watch))

    def exists(self, path, watch=None):
        return self._call("exists", path,
                          lambda: self.client.exists_async(path, watch=watch))

    def get_children(self, path, watch=None, include_data=False):
        return self._call("get_children", path, lambda: self.client.get_children_async(
            path, watch=watch, include_data=include_data))

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False,
               makepath=False, include_data=False):
        return self._call("create", path, lambda: self.client.create_async(
            path, value, acl=acl, ephemeral=ephemeral, sequence=sequence,
            makepath=makepath, include_data=include_data))

    def set(self, path, value, version=-1):
        return self._call("set", path,
                          lambda: self.client.set_async(path, value, version=version))

    def delete(self, path, version=-1):
        return self._call("delete", path,
                          lambda: self.client.delete_async(path, version=version))

    def ensure_path(self, path, acl=None):
        return self._call("ensure_path", path,
                          lambda: self.client.ensure_path_async(path, acl))

    def transaction(self) -> GuardedTransaction:
        return GuardedTransaction(self)
