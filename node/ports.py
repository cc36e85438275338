"""Loopback ports for the servers a cluster, a test or a bench starts.

A port is picked free here and bound later by the process started, and bound again
when that process is restarted (same config, same port: clients and peers know it).
A port in the kernel's ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999
by default) can meanwhile become the local end of any outgoing connection on the
machine, and the restarted server then cannot bind it: CI saw a broker restarted after
a SIGKILL exit with EADDRINUSE on its Kafka listener's port, taken while it was down.
So the ports are picked outside that range, where the kernel never hands one out by
itself: at random, and checked free by binding it (without SO_REUSEADDR, so a port
with connections in TIME_WAIT is passed over too).

A port is never handed out twice by one process (the ports of one cluster must differ
though none is bound yet). Other processes (parallel tests) pick from the same range,
so two may still meet in the moment between a pick and its bind; the supervisor starts
a server whose port was taken on another (``Cluster._wait_ready_rebinding``).
"""
from __future__ import annotations

import random
import socket

HOST = "127.0.0.1"
RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10_000                 # below: the well-known and registered ports of services
HIGHEST = 65_535
ATTEMPTS_MAX = 200
HANDED_OUT_MAX = 4096

_handed_out: set[int] = set()
_random = random.Random()       # seeded from os.urandom: processes pick differently


def ephemeral_range(path: str = RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range, both ends included (Linux's default when the
    file cannot be read)."""
    try:
        with open(path) as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def candidates(ephemeral: tuple[int, int]) -> list[range]:
    """The port ranges outside ``ephemeral``, from ``LOWEST`` up."""
    low, high = ephemeral
    out = [range(LOWEST, min(low, HIGHEST + 1)), range(max(high + 1, LOWEST), HIGHEST + 1)]
    return [r for r in out if len(r)]


def is_free(port: int, host: str = HOST) -> bool:
    """Whether ``port`` can be bound on ``host`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    """A port free now, outside the ephemeral range, not handed out before by this
    process. Falls back to one the kernel picks (bind to 0) when no other range is left
    (a machine whose ephemeral range covers nearly everything)."""
    ranges = candidates(ephemeral_range())
    total = sum(len(r) for r in ranges)
    port = None
    if total >= 1024:
        for _ in range(ATTEMPTS_MAX):
            i = _random.randrange(total)
            for r in ranges:
                if i < len(r):
                    candidate = r[i]
                    break
                i -= len(r)
            if candidate not in _handed_out and is_free(candidate, host):
                port = candidate
                break
    if port is None:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
            if port not in _handed_out:
                break
    if len(_handed_out) >= HANDED_OUT_MAX:
        _handed_out.clear()
    _handed_out.add(port)
    return port
