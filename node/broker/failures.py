"""What the broker shell expects to fail, and what it does when anything else fails.

Expected failures are the world's: a disk that errors or fills, a coordinator that is slow
or gone, a peer that sends garbage, a socket that closes. The shell answers them with an
error code or a log line and keeps serving: each ``except`` in the shell names the ones it
expects there, taken from the tuples below.

Anything else is a bug, and the state it leaves behind cannot be trusted. A failed
assertion is a broken invariant of the storage or of the protocol; it, and any other
unexpected exception, reaches :func:`fatal`: one log line that names it and where it
happened, then the process exits with ``EXIT_BROKEN_INVARIANT`` (70, EX_SOFTWARE). The
broker does not flush or checkpoint what may be wrong; its coordinator session is closed
so the controller moves its leaderships to the other replicas at once (TigerBeetle and
etcd do the same: crash, and let replication recover from a replica that is right).
"""
from __future__ import annotations

import logging
import time
import traceback

import zmq
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from node.wire.errors import KafkaError
from node.wire.protocol import ProtocolError
from node.wire.zkdata import ZkDataError
from shm.batch import CorruptRecordError
from shm.checkpoint import CheckpointError
from shm.errors import StorageError
from shm.index import IndexCorruptError
from shm.names import SharedMemoryError

STORAGE_ERRORS: tuple[type[BaseException], ...] = (
    OSError, StorageError, CorruptRecordError, CheckpointError, IndexCorruptError,
    SharedMemoryError)
COORDINATOR_ERRORS: tuple[type[BaseException], ...] = (
    KazooException, KazooTimeoutError, ZkDataError)
# What one request or one loop event may fail with while the broker keeps serving.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    STORAGE_ERRORS + COORDINATOR_ERRORS + (ProtocolError, KafkaError, zmq.ZMQError))

EXIT_BROKEN_INVARIANT = 70  # sysexits.h EX_SOFTWARE

logger = logging.getLogger("node.broker")


def describe(e: BaseException) -> str:
    """One line: what broke and where (the innermost frame of the traceback)."""
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ else []
    where = ""
    if frames:
        last = frames[-1]
        where = f" at {last.filename.rsplit('/', 2)[-2:][-1]}:{last.lineno} in {last.name}"
    kind = "broken invariant" if isinstance(e, AssertionError) else \
        f"unexpected {type(e).__name__}"
    message = str(e).replace("\n", " ") or "(no message)"
    return f"{kind}: {message}{where}"


def fatal(e: BaseException) -> int:
    """Log ``e`` as one CRITICAL line and return the exit status for it."""
    logger.critical("%s; stopping the broker", describe(e))
    return EXIT_BROKEN_INVARIANT


class LogLimiter:
    """At most one log line per key per ``interval_s``: a flood must not flood the log."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last: dict = {}

    def allow(self, key) -> bool:
        now = time.monotonic()
        if now - self._last.get(key, -1e9) < self.interval_s:
            return False
        self._last[key] = now
        return True
