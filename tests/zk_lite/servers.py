"""Server fixtures' process control: a thin re-export of ``bench.perf.zkservers``.

The benchmark and the tests start servers with the same code; this module adds the
per-process pool the fixtures share (one server per xdist worker, kind and tick time).
"""
from __future__ import annotations

from bench.perf.zkservers import (  # noqa: F401  (re-exported for the tests)
    KINDS,
    ServerHandle,
    four_letter,
    free_port,
    missing_reason,
    start,
)


class ServerPool:
    """Lazily started servers keyed by (kind, tick_time_ms); replaced if one has died."""

    def __init__(self):
        self._servers: dict[tuple[str, int], ServerHandle] = {}
        self.deaths: list[str] = []

    def get(self, kind: str, tick_time_ms: int) -> ServerHandle:
        key = (kind, tick_time_ms)
        handle = self._servers.get(key)
        if handle is not None and not handle.alive():
            # A server that died under an earlier test is replaced so later tests
            # report their own results; the death itself is failed by that test's check.
            self.deaths.append(f"{handle!r} exited with {handle.proc.returncode}:\n{handle.log_tail()}")
            handle.close()
            handle = None
        if handle is None:
            handle = self._servers[key] = start(kind, tick_time_ms)
        return handle

    def close_all(self) -> None:
        while self._servers:
            _, handle = self._servers.popitem()
            handle.close()
