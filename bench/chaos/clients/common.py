"""What every Python adapter's loop shares: when to stop (the duration, stdin's EOF,
SIGTERM/SIGINT) and the send pacing."""
from __future__ import annotations

import logging
import signal
import sys
import threading
import time

POLL_S = 0.1               # a consumer's poll timeout / a producer's service wait


class Stop:
    """Set by SIGTERM/SIGINT, by stdin's EOF (``--duration 0``) or by the deadline."""

    def __init__(self, duration_s: float, install: bool = True) -> None:
        self.event = threading.Event()
        self.deadline = time.monotonic() + duration_s if duration_s > 0 else None
        if install:
            signal.signal(signal.SIGTERM, self._signalled)
            signal.signal(signal.SIGINT, self._signalled)
            if duration_s == 0:
                threading.Thread(target=self._watch_stdin, name="stdin-eof",
                                 daemon=True).start()

    def _signalled(self, *_) -> None:
        self.event.set()

    def _watch_stdin(self) -> None:
        try:
            while sys.stdin.buffer.read1(4096):
                pass
        except (OSError, ValueError):
            pass
        self.event.set()

    def set(self) -> None:
        self.event.set()

    def __bool__(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.event.set()
        return self.event.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (less when the deadline is nearer); True once stopped."""
        if self.deadline is not None:
            timeout_s = min(timeout_s, max(0.0, self.deadline - time.monotonic()))
        self.event.wait(timeout_s)
        return bool(self)


class Pacer:
    """The n-th send is due at start + n / rate (no catching up after a stall: a send
    late by more than one interval restarts the schedule)."""

    def __init__(self, rate: float) -> None:
        assert rate > 0
        self.interval = 1.0 / rate
        self.next = time.monotonic()

    def delay_s(self) -> float:
        return max(0.0, self.next - time.monotonic())

    def sent(self) -> None:
        now = time.monotonic()
        self.next = max(self.next + self.interval, now - self.interval)


def value_of(name: str, n: int) -> bytes:
    """The n-th value of producer ``name`` (unique per run)."""
    return f"{name}-{n}".encode()


ABANDONED: list[str] = []  # calls that did not return in time (the worker then os._exit s)


def bounded(fn, timeout_s: float, what: str, em=None) -> bool:
    """Run ``fn`` on a daemon thread, waiting up to ``timeout_s`` (a client's close can
    block for minutes while its brokers are away); False if it did not return (noted in
    ``ABANDONED`` and, with ``em``, as a client log event). Its exception is re-raised."""
    box: list = []

    def call() -> None:
        try:
            fn()
            box.append(None)
        except BaseException as e:   # handed to the caller
            box.append(e)

    thread = threading.Thread(target=call, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        ABANDONED.append(what)
        if em is not None:
            em.client("log", f"{what} did not return in {timeout_s:g} s")
        return False
    if box and box[0] is not None:
        raise box[0]
    return True


class ClientLog(logging.Handler):
    """A Python client's log records as ``client`` events: ``retry`` for the records
    ``is_retry`` picks (with our cumulative count of them: the retried requests the
    client logged), ``log`` for the other errors; ``on_record(record)`` sees every record
    first and returns True to consume it (e.g. aiokafka's commit lines)."""

    def __init__(self, em, is_retry, on_record=None) -> None:
        super().__init__(logging.DEBUG)
        self.em = em
        self.is_retry = is_retry
        self.on_record = on_record
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.on_record is not None and self.on_record(record):
                return
            if self.is_retry(record):
                self.retries += 1
                self.em.client("retry", record.getMessage(), count=self.retries)
            elif record.levelno >= logging.ERROR:
                self.em.client("log", f"{record.name}: {record.getMessage()}")
        except Exception:   # a logging handler never raises into the client
            self.handleError(record)

    def attach(self, *loggers: str) -> "ClientLog":
        for name in loggers:
            logging.getLogger(name).addHandler(self)
        return self
