"""The chaos run's group observer (``chaos run --group``): a thread of the driver that
asks the brokers for the group's committed offsets (OffsetFetch through
``node.tools.groups_broker.BrokerGroups``, over the native listener, which no fault
cuts from the driver) every ``EVERY_S``, and once more after the workers stop.

Each sample whose offsets differ from the last one recorded becomes a ``committed`` op
(process ``observer``, ``offsets`` = ((partition, offset), ...) of the run's topic): the
checker's ``commit_backwards`` compares them, and ``group_lost`` takes them as offsets
the group committed. A sample that fails (brokers down, no coordinator, a paused
coordinator) is counted in ``errors``, the connection is dropped and the next sample
starts afresh: the observer outlives every fault.
"""
from __future__ import annotations

import threading
import time

from bench.chaos.checker import Op

EVERY_S = 0.25
SAMPLE_TIMEOUT_MS = 2000     # one OffsetFetch (and its FindCoordinator) at most this long
PROCESS = "observer"


class Observer:
    def __init__(self, bootstrap: str, group: str, topic: str, every_s: float = EVERY_S):
        assert every_s > 0, every_s
        self.bootstrap, self.group, self.topic, self.every_s = bootstrap, group, topic, every_s
        self.errors = 0
        self.samples = 0
        self.last_error: str | None = None
        self._ops: list[Op] = []
        self._last: tuple | None = None
        self._client = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="chaos-observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop sampling, take the last sample (the workers have stopped), close."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        try:
            self.sample()
        finally:
            self._close()

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))

    def sample(self) -> None:
        """One OffsetFetch; a ``committed`` op when the offsets changed."""
        from node.tools.groups_broker import BrokerGroups
        try:
            if self._client is None:
                self._client = BrokerGroups(self.bootstrap, timeout_ms=SAMPLE_TIMEOUT_MS)
            committed = self._client.committed(self.group)
        except Exception as e:  # noqa: BLE001 - any failure: count it, start afresh
            with self._lock:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"[:200]
            self._close()
            return
        offsets = tuple(sorted((p, o) for (t, p), o in committed.items() if t == self.topic))
        with self._lock:
            self.samples += 1
            if offsets and offsets != self._last:
                self._last = offsets
                self._ops.append(Op(PROCESS, "ok", "committed", time.monotonic_ns(),
                                    offsets=offsets))

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
