"""What every Python adapter's loop shares: when to stop (the duration, stdin's EOF,
SIGTERM/SIGINT) and the send pacing."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

POLL_S = 0.1               # a consumer's poll timeout / a producer's service wait


class Stop:
    """Set by SIGTERM/SIGINT, by stdin's EOF (``--duration 0``) or by the deadline."""

    def __init__(self, duration_s: float, install: bool = True) -> None:
        self.event = threading.Event()
        self.duration_s = duration_s
        self.deadline = time.monotonic() + duration_s if duration_s > 0 else None
        if install:
            signal.signal(signal.SIGTERM, self._signalled)
            signal.signal(signal.SIGINT, self._signalled)
            if duration_s == 0:
                threading.Thread(target=self._watch_stdin, name="stdin-eof",
                                 daemon=True).start()

    def begin(self) -> None:
        """The workload starts now (the client is constructed and connected): the
        duration counts from here."""
        if self.duration_s > 0:
            self.deadline = time.monotonic() + self.duration_s

    def _signalled(self, *_) -> None:
        self.event.set()

    def _watch_stdin(self) -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside the buffered reader
        # holds its lock, which the interpreter's shutdown then cannot take.
        try:
            fd = sys.stdin.fileno()
            while os.read(fd, 4096):
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
    late by more than one interval restarts the schedule one interval later).
    ``next_value(sends)`` makes the next value (``make_value(n)``), records its invoke
    and takes its slot: every client's send loop starts a send with it."""

    def __init__(self, rate: float, make_value=None) -> None:
        assert rate > 0
        self.interval = 1.0 / rate
        self.next = time.monotonic()
        self.make_value = make_value
        self.n = 0

    def next_value(self, sends) -> bytes:
        assert self.make_value is not None, "Pacer(rate, make_value) to make values"
        value = self.make_value(self.n)
        self.n += 1
        sends.invoke(value)
        self.sent()
        return value

    def delay_s(self) -> float:
        return max(0.0, self.next - time.monotonic())

    def sent(self) -> None:
        now = time.monotonic()
        self.next += self.interval
        if self.next <= now:           # more than one interval late: start afresh
            self.next = now + self.interval


def value_of(name: str, n: int) -> bytes:
    """The n-th value of producer ``name`` (unique per run)."""
    return f"{name}-{n}".encode()


ABANDONED: list[str] = []  # calls that did not return in time (the worker then os._exit s)


def bounded(fn, timeout_s: float, what: str, em=None) -> bool:
    """Run ``fn`` (a client's close) on a daemon thread, waiting up to ``timeout_s`` (it can
    block for minutes while the brokers are away); False if it raised (told with ``em`` as
    a client error event) or did not return (noted in ``ABANDONED``, told as a log event)."""
    box: list = []

    def call() -> None:
        try:
            fn()
            box.append(None)
        except Exception as e:   # the client's close failing: told, not fatal
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
        if em is not None:
            em.client("error", f"{what}: {type(box[0]).__name__}: {box[0]}")
        return False
    return True


class ClientLog(logging.Handler):
    """A Python client's log records as ``client`` events: ``retry`` for the records
    ``is_retry`` picks (with our cumulative count of them: the retried requests the
    client logged), ``log`` for the others from ``events_from`` up; ``on_record(record)`` sees every record
    first and returns True to consume it (e.g. aiokafka's commit lines)."""

    def __init__(self, em, is_retry, on_record=None, events_from=logging.ERROR) -> None:
        super().__init__(logging.DEBUG)
        self.em = em
        self.is_retry = is_retry
        self.on_record = on_record
        self.events_from = events_from   # the lowest level told as a client log event
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.on_record is not None and self.on_record(record):
                return
            if self.is_retry(record):
                self.retries += 1
                self.em.client("retry", record.getMessage(), count=self.retries)
            elif record.levelno >= self.events_from:
                self.em.client("log", f"{record.name}: {record.getMessage()}")
        except Exception:   # a logging handler never raises into the client
            self.handleError(record)

    def attach(self, *loggers: str) -> "ClientLog":
        for name in loggers:
            logging.getLogger(name).addHandler(self)
        return self
