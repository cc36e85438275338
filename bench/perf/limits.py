"""The floor of this machine: what its memory, its kernel and ZeroMQ can do at best,
between two Python processes, measured.

    python -m bench.perf.limits [--rounds 5] [--trips 2000] [--paced-trips 300]
                                [--rate 1000] [--message-bytes 100]
                                [--copy-bytes 67108864] [--growth-bytes 1073741824]
                                [--frame-bytes 262144] [--seconds 1] [--work-us 50]
                                [--only FIGURE,...]

Every figure a benchmark of minikafka reports has a limit below it that no code can
beat here; this module measures them, so a figure can be read as "x% of the floor":

    memcpy              one process copies --copy-bytes (larger than the caches) with
                        numpy (``np.copyto``, a memcpy): GB/s of 10^9 bytes, of the
                        round's median copy
    memcpy_frame        the same at --frame-bytes, one buffer reused (cache-resident)
    page_cache          --copy-bytes written with pwrite() in 1 MiB pieces into a new,
                        preallocated file (as a broker writes its active segment): GB/s
                        into the page cache, the file removed after. On a VM whose host
                        backs guest memory only once it is touched (and takes back what
                        the guest frees), a round that needs memory the guest has not
                        used lately pays the host's faults: the rounds' min shows it
    page_cache_growth   the same with --growth-bytes, into memory the guest has not used
                        lately: after each round the file is removed and as much anonymous
                        memory is touched and held until the last round, so the next
                        round cannot reuse what this one freed. A log that keeps growing
                        (every broker's, in a benchmark that writes GBs) is bound by this,
                        not by page_cache: on this project's VM the host takes back the
                        memory the guest frees within about 10 seconds, and memory it
                        must back again comes at ~0.35-0.5 GB/s against ~5 GB/s for
                        memory it still backs (``bench.perf.cluster --warm-memory``
                        measures a cluster both ways)
    semaphore           one round trip through two POSIX named semaphores (posix-ipc):
                        this process posts, the other, blocked in sem_wait, wakes and posts
                        back (µs)
    eventfd             the same through two eventfds (os.eventfd, blocking reads)
    unix                a --message-bytes message there and back over an abstract Unix
                        stream socket (as node.local_link), blocking reads
    ring                the same message there and back through shared memory: written
                        into a shared buffer, then one byte down a pipe as the doorbell
                        (a pipe is what the brokers' FIFO doorbells are; the only wake-up
                        a process polling sockets can also wait on), copied out on the
                        other side: what a client-side ring (issue 29, part 2) would
                        cost in place of the local link
    zmq_ipc, zmq_tcp    the same through ZeroMQ DEALER -> ROUTER, over ipc (abstract) and
                        tcp on 127.0.0.1 (as the brokers' channels)
    fanout              one process rings two sleeping ones at once, one byte down a pipe
                        each (as a leader rings its two followers' doorbells after an
                        append); each, woken, notes the time, works --work-us (as a
                        follower's copy) and answers with that time: µs from the ring to
                        the later one's wake-up. An acks=all write waits for both
                        followers, so this is the floor of the breakdown's "fetch answer
                        -> follower receive" hop; on 2 cores the two cannot both take a
                        core at once while the ringing process runs, unlike the one woken
                        process of a round trip
    unix_stream         MB/s (of 1024 * 1024 bytes) of --frame-bytes writes over one
                        abstract Unix socket, one way, until the reader has all of it
    zmq_push            raw ZeroMQ PUSH/PULL MB/s at --frame-bytes (``bench.perf.zmq_limits``,
                        so "acks=1 MB/s vs raw ZeroMQ" keeps its meaning)

The round-trip figures come twice: back to back (``--trips`` in a row: both processes
stay hot) and paced at ``--rate`` per second (``--paced-trips``; the echoing process
sleeps between trips, as a broker does at 1,000 writes/s, so each trip pays a real
wake-up). Each round starts a fresh child process; a round's figure is the median of
its trips (and its p99), and the figure printed is the median over ``--rounds`` rounds
with the rounds' min and max as its spread. The figures of one round are measured one
after the other, so a noisy neighbour hurts them alike.

Output: one JSON line per figure, then the same as a table, then the floors they set
(``floors``: an acks=all write makes four one-way hops, client -> leader -> follower ->
leader -> client, so at least two round trips)::

    {"figure": "semaphore", "mode": "paced", "unit": "us", "median": .., "min": ..,
     "max": .., "p99": .., "rounds": 5, "trips": 300, "rate": 1000}
    {"figure": "memcpy", "unit": "GB/s", "median": .., "min": .., "max": .., "rounds": 5,
     "bytes": 67108864}

Nothing is left behind: the semaphores are unlinked, the sockets are abstract (no file).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import multiprocessing
import os
import signal
import socket
import statistics
import sys
import time
import uuid

MB_BYTES = 1024 * 1024
GB = 1e9
ROUNDS_MAX = 100
TRIPS_MAX = 1_000_000
RATE_MAX = 100_000
MESSAGE_BYTES_MAX = 1024 * 1024
COPY_BYTES_MAX = 4 * 1024 * MB_BYTES
FRAME_BYTES_MAX = 256 * MB_BYTES
SECONDS_MAX = 600.0
WARMUP_TRIPS = 50            # round trips before timing, in every round
COPY_SECONDS_MIN = 0.2       # a memcpy round copies at least this long
PWRITE_BYTES = 1024 * 1024   # page_cache's pieces
GROWTH_BYTES_MIN = PWRITE_BYTES
ROUND_TIMEOUT_S = 120.0      # a round that takes longer has lost its child: an error
START_TIMEOUT_S = 30.0
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024   # as node.local_link's

TRIP_FIGURES = ("semaphore", "eventfd", "unix", "ring", "zmq_ipc", "zmq_tcp")
RATE_FIGURES = ("memcpy", "memcpy_frame", "page_cache", "page_cache_growth", "unix_stream",
                "zmq_push")
WAKE_FIGURES = ("fanout",)
FIGURES = RATE_FIGURES[:4] + TRIP_FIGURES + WAKE_FIGURES + RATE_FIGURES[4:]
WORK_US_MAX = 100_000
UNITS = {"memcpy": "GB/s", "memcpy_frame": "GB/s", "page_cache": "GB/s",
         "page_cache_growth": "GB/s",
         "unix_stream": "MB/s", "zmq_push": "MB/s"}
DESCRIPTIONS = {
    "memcpy": "memory copy, large buffers (numpy)",
    "memcpy_frame": "memory copy, one frame (cache)",
    "page_cache": "pwrite into a new file's page cache",
    "page_cache_growth": "page cache growth into memory not used lately",
    "semaphore": "POSIX semaphore round trip",
    "eventfd": "eventfd round trip",
    "unix": "abstract Unix socket round trip",
    "ring": "shared-memory message + pipe doorbell round trip",
    "zmq_ipc": "ZeroMQ DEALER/ROUTER round trip, ipc",
    "zmq_tcp": "ZeroMQ DEALER/ROUTER round trip, tcp",
    "fanout": "two sleepers rung at once (pipes): the later's wake-up",
    "unix_stream": "Unix socket stream, one way",
    "zmq_push": "ZeroMQ PUSH/PULL, one way",
}
HOPS_ACKS_ALL = 4            # client -> leader -> follower -> leader -> client


# ---------------------------------------------------------------- pure parts

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.limits", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trips", type=int, default=2000, help="back-to-back round trips")
    parser.add_argument("--paced-trips", type=int, default=300,
                        help="paced round trips per round (0: none)")
    parser.add_argument("--rate", type=int, default=1000, help="paced round trips per second")
    parser.add_argument("--message-bytes", type=int, default=100)
    parser.add_argument("--copy-bytes", type=int, default=64 * MB_BYTES)
    parser.add_argument("--growth-bytes", type=int, default=1024 * MB_BYTES,
                        help="bytes each round of page_cache_growth writes (and then holds)")
    parser.add_argument("--frame-bytes", type=int, default=256 * 1024)
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="seconds of each one-way throughput round")
    parser.add_argument("--work-us", type=int, default=50,
                        help="fanout: µs each woken process works before it answers")
    parser.add_argument("--only", default=",".join(FIGURES),
                        help=f"comma-separated figures, of {', '.join(FIGURES)}")
    parser.error = lambda message: parser.exit(2, f"{parser.prog}: error: {message}\n")
    args = parser.parse_args(argv)
    checks = (("--rounds", args.rounds, 1, ROUNDS_MAX), ("--trips", args.trips, 1, TRIPS_MAX),
              ("--paced-trips", args.paced_trips, 0, TRIPS_MAX),
              ("--rate", args.rate, 1, RATE_MAX),
              ("--message-bytes", args.message_bytes, 1, MESSAGE_BYTES_MAX),
              ("--copy-bytes", args.copy_bytes, 1, COPY_BYTES_MAX),
              ("--growth-bytes", args.growth_bytes, GROWTH_BYTES_MIN, COPY_BYTES_MAX),
              ("--frame-bytes", args.frame_bytes, 1, FRAME_BYTES_MAX),
              ("--seconds", args.seconds, 1e-3, SECONDS_MAX),
              ("--work-us", args.work_us, 0, WORK_US_MAX))
    for flag, value, low, high in checks:
        if not low <= value <= high:
            parser.error(f"{flag} must be in [{low}, {high}], got {value}")
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only) - set(FIGURES))
    if unknown or not only:
        parser.error(f"--only: unknown figure(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(FIGURES)}")
    args.only = [name for name in FIGURES if name in only]   # the canonical order
    return args


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in (0, 1]) of non-empty ``samples``."""
    assert samples and 0 < fraction <= 1
    ordered = sorted(samples)
    rank = math.ceil(round(fraction * len(ordered), 9))   # 1-based; round() drops float dust
    return ordered[max(rank, 1) - 1]


def trip_round(samples_us: list[float]) -> dict:
    """One round of round trips: its median and p99 in µs."""
    return {"p50": statistics.median(samples_us), "p99": percentile(samples_us, 0.99)}


def summarize(figure: str, mode: str | None, rounds: list, params: dict) -> dict:
    """The JSON line of one figure: the median over the rounds, with their min and max.
    A round is a number (a rate) or a ``trip_round`` dict (its p50 is the figure)."""
    assert rounds, "a figure needs at least one round"
    values = [r["p50"] if isinstance(r, dict) else r for r in rounds]
    line = {"figure": figure}
    if mode is not None:
        line["mode"] = mode
    line.update({"unit": UNITS.get(figure, "us"), "median": round(statistics.median(values), 3),
                 "min": round(min(values), 3), "max": round(max(values), 3)})
    if isinstance(rounds[0], dict):
        line["p99"] = round(statistics.median(r["p99"] for r in rounds), 3)
    line["rounds"] = len(rounds)
    line.update(params)
    assert line["min"] <= line["median"] <= line["max"]
    return line


def floors(lines: list[dict]) -> list[dict]:
    """What the measured figures make the floor of an acks=all write (four one-way hops,
    so two round trips) through each wake-up mechanism, paced as the latency benches."""
    out = []
    for line in lines:
        if line.get("mode") == "paced" and line["figure"] in TRIP_FIGURES:
            trips = HOPS_ACKS_ALL // 2
            out.append({"floor": f"acks_all_write_{line['figure']}", "unit": "us",
                        "median": round(trips * line["median"], 3),
                        "p99": round(trips * line["p99"], 3), "hops": HOPS_ACKS_ALL})
    return out


def table(lines: list[dict]) -> str:
    """The figures as an aligned text table (one row per figure)."""
    rows = [("figure", "mode", "median", "min-max", "p99", "unit", "what")]
    for line in lines:
        if "floor" in line:
            rows.append((line["floor"], "floor", f"{line['median']:,.1f}", "",
                         f"{line['p99']:,.1f}", line["unit"],
                         f"{line['hops']} one-way hops = {line['hops'] // 2} paced round trips"))
            continue
        figure = line["figure"]
        mode = line.get("mode", "")
        if mode == "paced":
            mode = f"{line['rate']}/s"
        rows.append((figure, mode, f"{line['median']:,.1f}",
                     f"{line['min']:,.1f}-{line['max']:,.1f}",
                     f"{line['p99']:,.1f}" if "p99" in line else "", line["unit"],
                     DESCRIPTIONS[figure]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    text = []
    for index, row in enumerate(rows):
        text.append("  ".join(cell.ljust(widths[i]) if i in (0, 1, 5, 6) else
                              cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            text.append("  ".join("-" * width for width in widths))
    return "\n".join(text)


# ---------------------------------------------------------------- measuring

@contextlib.contextmanager
def deadline(seconds: float):
    """Raise TimeoutError in this (main) thread when ``seconds`` pass: a blocking read
    whose peer died must not hang the benchmark (no timeout on the timed calls)."""
    def expire(signum, frame):
        raise TimeoutError(f"a round took over {seconds:.0f} s: its child process is gone")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def time_trips(trip, trips: int, rate: int | None) -> list[float]:
    """µs of each of ``trips`` calls of ``trip`` after WARMUP_TRIPS untimed ones;
    with ``rate``, one call per 1/rate s slot (later when the previous was late)."""
    for _ in range(WARMUP_TRIPS):
        trip()
    samples = []
    interval_ns = 0 if rate is None else int(1e9 / rate)
    next_ns = time.perf_counter_ns()
    for _ in range(trips):
        if interval_ns:
            next_ns += interval_ns
            wait_ns = next_ns - time.perf_counter_ns()
            if wait_ns > 0:
                time.sleep(wait_ns / 1e9)
        start = time.perf_counter_ns()
        trip()
        done = time.perf_counter_ns()
        samples.append((done - start) / 1000)
        next_ns = max(next_ns, done)   # a late trip delays the next slot: no catch-up burst
    return samples


def copy_rate(size_bytes: int) -> float:
    """GB/s of one ``np.copyto`` between two ``size_bytes`` buffers (pages touched
    first): copies for COPY_SECONDS_MIN, each timed; the rate of the median copy, so a
    copy that lost its core to a neighbour does not count as the machine's speed."""
    import numpy as np
    source = np.ones(size_bytes, dtype=np.uint8)
    target = np.zeros(size_bytes, dtype=np.uint8)
    np.copyto(target, source)
    copies_ns = []
    end_ns = time.perf_counter_ns() + int(COPY_SECONDS_MIN * 1e9)
    while True:
        start_ns = time.perf_counter_ns()
        np.copyto(target, source)
        done_ns = time.perf_counter_ns()
        copies_ns.append(max(done_ns - start_ns, 1))
        if done_ns >= end_ns:
            break
    assert target[-1] == 1
    return size_bytes / (statistics.median(copies_ns) / 1e9) / GB


def page_cache_rate(size_bytes: int, held: list | None = None, *,
                    directory: str | None = None) -> float:
    """GB/s of writing ``size_bytes`` with pwrite() in PWRITE_BYTES pieces into a new
    file preallocated with ftruncate (a segment's way), under ``directory`` (default: the
    temporary directory), removed after.
    With ``held`` (page_cache_growth), the memory the removed file freed is taken again
    at once (``size_bytes`` of anonymous memory, touched) and appended to ``held``, so a
    later round cannot grow into it: the caller drops them after its last round."""
    import tempfile
    piece = os.urandom(min(size_bytes, PWRITE_BYTES))
    with tempfile.TemporaryDirectory(prefix="minikafka-limits-", dir=directory) as scratch:
        fd = os.open(os.path.join(scratch, "segment"), os.O_RDWR | os.O_CREAT | os.O_EXCL,
                     0o600)
        try:
            os.ftruncate(fd, size_bytes)
            start_ns = time.perf_counter_ns()
            for position in range(0, size_bytes, len(piece)):
                os.pwrite(fd, piece[:size_bytes - position], position)
            elapsed_ns = max(time.perf_counter_ns() - start_ns, 1)
        finally:
            os.close(fd)
    if held is not None:
        import numpy as np
        held.append(np.ones(size_bytes, np.uint8))    # touched: backed, and ours
    return size_bytes / (elapsed_ns / 1e9) / GB


def _fork():
    return multiprocessing.get_context("fork")


def _semaphore_echo(ping_name: str, pong_name: str, count: int) -> None:
    import posix_ipc
    ping, pong = posix_ipc.Semaphore(ping_name), posix_ipc.Semaphore(pong_name)
    for _ in range(count):
        ping.acquire()
        pong.release()


def _eventfd_echo(ping: int, pong: int, count: int) -> None:
    for _ in range(count):
        os.eventfd_read(ping)
        os.eventfd_write(pong, 1)


def _ring_echo(ring: mmap.mmap, size: int, ping: int, pong: int, count: int) -> None:
    for _ in range(count):
        os.read(ping, 1)
        answer = ring[:size]                  # the request, copied out of the ring
        ring[size:2 * size] = answer          # the answer, into the other half
        os.write(pong, b"\1")


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    filled = 0
    while filled < len(view):
        got = sock.recv_into(view[filled:])
        if not got:
            raise ConnectionError("the peer closed the socket")
        filled += got


def _unix_echo(name: str, size: int, count: int) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(name)
        view = memoryview(bytearray(size))
        for _ in range(count):
            _recv_exactly(sock, view)
            sock.sendall(view)


def _unix_sink(name: str) -> None:
    """Read everything until the writer shuts down, then answer one byte."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        sock.connect(name)
        view = memoryview(bytearray(SOCKET_BUFFER_BYTES))
        while sock.recv_into(view):
            pass
        sock.sendall(b"!")


def _zmq_echo(endpoint: str, count: int, port_queue) -> None:
    import zmq
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    try:
        if endpoint.startswith("tcp://"):
            port_queue.put(router.bind_to_random_port(endpoint))
        else:
            router.bind(endpoint)
            port_queue.put(0)
        for _ in range(count):
            router.send_multipart(router.recv_multipart(copy=False), copy=False)
    finally:
        router.close(linger=1000)
        context.term()


def _fanout_echo(bell: int, answer: int, work_ns: int, count: int) -> None:
    for _ in range(count):
        if not os.read(bell, 1):
            return                             # the ringer is gone
        woke = time.monotonic_ns()             # CLOCK_MONOTONIC: one clock for the host
        busy_until = time.perf_counter_ns() + work_ns
        while time.perf_counter_ns() < busy_until:
            pass
        os.write(answer, woke.to_bytes(8, "little"))


@contextlib.contextmanager
def _child(context, target, args):
    child = context.Process(target=target, args=args, daemon=True)
    child.start()
    try:
        yield child
    finally:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join(timeout=5)


def _unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def semaphore_round(trips: int, rate: int | None) -> list[float]:
    import posix_ipc
    base = "/" + _unique("minikafka-limits")
    ping = posix_ipc.Semaphore(base + "-ping", posix_ipc.O_CREX, initial_value=0)
    try:
        pong = posix_ipc.Semaphore(base + "-pong", posix_ipc.O_CREX, initial_value=0)
    except BaseException:
        ping.unlink()
        raise
    try:
        with _child(_fork(), _semaphore_echo, (ping.name, pong.name, WARMUP_TRIPS + trips)):
            def trip():
                ping.release()
                pong.acquire()
            return time_trips(trip, trips, rate)
    finally:
        for semaphore in (ping, pong):
            semaphore.unlink()
            semaphore.close()


def eventfd_round(trips: int, rate: int | None) -> list[float]:
    ping, pong = os.eventfd(0), os.eventfd(0)
    try:
        with _child(_fork(), _eventfd_echo, (ping, pong, WARMUP_TRIPS + trips)):
            def trip():
                os.eventfd_write(ping, 1)
                os.eventfd_read(pong)
            return time_trips(trip, trips, rate)
    finally:
        os.close(ping)
        os.close(pong)


def ring_round(trips: int, rate: int | None, size: int) -> list[float]:
    """A shared anonymous mapping (the two halves: request and answer) and two pipes as
    doorbells, both made before the fork; blocking reads, as ``unix_round``'s."""
    ring = mmap.mmap(-1, 2 * size)            # MAP_SHARED: the child writes back into it
    ping_r, ping_w = os.pipe()
    pong_r, pong_w = os.pipe()
    try:
        with _child(_fork(), _ring_echo, (ring, size, ping_r, pong_w, WARMUP_TRIPS + trips)):
            message = bytes(i % 251 + 1 for i in range(size))   # no zero: see below

            def trip():
                ring[:size] = message
                os.write(ping_w, b"\1")
                os.read(pong_r, 1)
                return ring[size:2 * size]
            samples = time_trips(trip, trips, rate)
            # the answer half starts zeroed and only the echo writes it
            assert ring[size:2 * size] == message, "the echo did not copy the message"
            return samples
    finally:
        for fd in (ping_r, ping_w, pong_r, pong_w):
            os.close(fd)
        ring.close()


def fanout_round(trips: int, rate: int | None, work_us: int) -> list[float]:
    """µs from ringing two sleeping children (a byte down each one's pipe, back to back)
    to the later one's wake-up, as each reports it (``time.monotonic_ns``)."""
    pipes = [os.pipe() for _ in range(4)]      # two bells, two answer pipes
    (bell_a_r, bell_a_w), (bell_b_r, bell_b_w), (answer_a_r, answer_a_w), \
        (answer_b_r, answer_b_w) = pipes
    fork = _fork()
    count = WARMUP_TRIPS + trips
    wakes: list[float] = []
    try:
        with _child(fork, _fanout_echo, (bell_a_r, answer_a_w, work_us * 1000, count)), \
                _child(fork, _fanout_echo, (bell_b_r, answer_b_w, work_us * 1000, count)):
            def trip():
                rung = time.monotonic_ns()
                os.write(bell_a_w, b"\1")
                os.write(bell_b_w, b"\1")
                later = 0
                for answer in (answer_a_r, answer_b_r):
                    data = os.read(answer, 8)     # 8 bytes written at once: read whole
                    if len(data) != 8:
                        raise ConnectionError("a woken process is gone")
                    later = max(later, int.from_bytes(data, "little"))
                wakes.append((later - rung) / 1000)
            time_trips(trip, trips, rate)
    finally:
        for pair in pipes:
            for fd in pair:
                os.close(fd)
    return wakes[WARMUP_TRIPS:]


@contextlib.contextmanager
def _unix_peer(target, args_after_name):
    """A listening abstract socket, a forked child connecting to it, the accepted peer."""
    name = "\0" + _unique("minikafka-limits")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(name)
        listener.listen(1)
        with _child(_fork(), target, (name, *args_after_name)):
            listener.settimeout(START_TIMEOUT_S)
            peer, _ = listener.accept()
            peer.settimeout(None)   # blocking reads, as the echo's
            with peer:
                yield peer


def unix_round(trips: int, rate: int | None, size: int) -> list[float]:
    with _unix_peer(_unix_echo, (size, WARMUP_TRIPS + trips)) as peer:
        message = bytes(size)
        view = memoryview(bytearray(size))

        def trip():
            peer.sendall(message)
            _recv_exactly(peer, view)
        return time_trips(trip, trips, rate)


def unix_stream_round(frame_bytes: int, seconds: float) -> float:
    """MB/s of one-way frames: from the first write until the reader has the last byte."""
    with _unix_peer(_unix_sink, ()) as peer:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        frame = memoryview(bytes(frame_bytes))
        sent = 0
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            for _ in range(8):
                peer.sendall(frame)
            sent += 8 * frame_bytes
        peer.shutdown(socket.SHUT_WR)
        if peer.recv(1) != b"!":
            raise ConnectionError("the reader did not confirm the stream's end")
        return sent / (time.perf_counter() - start) / MB_BYTES


def zmq_round(transport: str, trips: int, rate: int | None, size: int) -> list[float]:
    import zmq
    fork = _fork()   # no ZeroMQ context lives in this process between rounds
    endpoint = ("tcp://127.0.0.1" if transport == "tcp" else
                f"ipc://@{_unique('minikafka-limits')}")
    port_queue = fork.SimpleQueue()
    with _child(fork, _zmq_echo, (endpoint, WARMUP_TRIPS + trips, port_queue)):
        port = port_queue.get()   # under the round's deadline
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        try:
            dealer.connect(f"{endpoint}:{port}" if transport == "tcp" else endpoint)
            message = bytes(size)

            def trip():
                dealer.send(message, copy=True)
                dealer.recv(copy=False)
            return time_trips(trip, trips, rate)
        finally:
            dealer.close(linger=0)
            context.term()


def measure_round(figure: str, args, rate: int | None, held: list | None = None):
    """One round of ``figure``: a rate (GB/s or MB/s) or a list of trip times (µs).
    ``held``: the memory page_cache_growth keeps until the last round."""
    if figure == "memcpy":
        return copy_rate(args.copy_bytes)
    if figure == "memcpy_frame":
        return copy_rate(args.frame_bytes)
    if figure == "page_cache":
        return page_cache_rate(args.copy_bytes)
    if figure == "page_cache_growth":
        return page_cache_rate(args.growth_bytes, held)
    if figure == "unix_stream":
        return unix_stream_round(args.frame_bytes, args.seconds)
    if figure == "zmq_push":
        from bench.perf import zmq_limits
        return zmq_limits.measure(args.frame_bytes, args.seconds)["mb_per_s"]
    trips = args.trips if rate is None else args.paced_trips
    if figure == "semaphore":
        return semaphore_round(trips, rate)
    if figure == "eventfd":
        return eventfd_round(trips, rate)
    if figure == "unix":
        return unix_round(trips, rate, args.message_bytes)
    if figure == "ring":
        return ring_round(trips, rate, args.message_bytes)
    if figure == "fanout":
        return fanout_round(trips, rate, args.work_us)
    assert figure in ("zmq_ipc", "zmq_tcp"), figure
    return zmq_round(figure[len("zmq_"):], trips, rate, args.message_bytes)


def plan(args) -> list[tuple[str, str | None]]:
    """(figure, mode) in the order of one round; mode None for the rates."""
    out = []
    for figure in args.only:
        if figure in RATE_FIGURES:
            out.append((figure, None))
        else:
            out.append((figure, "back-to-back"))
            if args.paced_trips:
                out.append((figure, "paced"))
    return out


def params(figure: str, mode: str | None, args) -> dict:
    if figure in ("memcpy", "page_cache"):
        return {"bytes": args.copy_bytes}
    if figure == "page_cache_growth":
        return {"bytes": args.growth_bytes}
    if figure in RATE_FIGURES:
        return {"frame_bytes": args.frame_bytes}
    if mode == "paced":
        extra = {"trips": args.paced_trips, "rate": args.rate}
    else:
        extra = {"trips": args.trips}
    if figure in ("unix", "ring", "zmq_ipc", "zmq_tcp"):
        extra["message_bytes"] = args.message_bytes
    if figure == "fanout":
        extra["work_us"] = args.work_us
    return extra


def run(args) -> list[dict]:
    steps = plan(args)
    rounds: dict[tuple, list] = {step: [] for step in steps}
    held: list = []     # page_cache_growth's memory, dropped after the last round
    try:
        for _ in range(args.rounds):
            for figure, mode in steps:
                with deadline(ROUND_TIMEOUT_S + args.seconds):
                    result = measure_round(figure, args, args.rate if mode == "paced" else None,
                                           held)
                rounds[(figure, mode)].append(trip_round(result) if isinstance(result, list)
                                              else result)
    finally:
        held.clear()
    return [summarize(figure, mode, rounds[(figure, mode)], params(figure, mode, args))
            for figure, mode in steps]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lines = run(args)
    lines += floors(lines)
    for line in lines:
        print(json.dumps(line), flush=True)
    print(flush=True)
    print(table(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
