"""What every client's measurement shares: the per-record clock of a producer run, the
pacing of single writes, and the results of each phase.

Every time is ``time.perf_counter_ns`` (the clock ``node.perf.producer``'s samples are
shifted to the epoch from), taken in the benchmark's process.
"""
from __future__ import annotations

import dataclasses
import os
import time

from node.perf.common import percentile

RECORD_BYTES = 100
SINGLE_WRITE_RATE_PER_S = 1000      # as bench.perf.cluster and bench.perf.latency
SINGLE_WRITE_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 120.0
CONSUME_IDLE_TIMEOUT_S = 30.0      # a consumer that reads nothing this long has failed
POLL_TIMEOUT_S = 0.1


class ClientUnavailable(Exception):
    """The client cannot be measured here (not installed, no Kafka listener): the
    benchmark skips it with this message as one line."""


class MeasureError(Exception):
    """A phase failed (records lost, an error from the client): the run stops."""


class RecordClock:
    """Send and acknowledgement times of ``n`` records, one slot per record, filled by
    the send loop and by the client's delivery callback (any thread: each slot is
    written once, by item assignment)."""

    def __init__(self, n: int) -> None:
        assert n > 0, n
        self.n = n
        self.send_ns = [0] * n
        self.ack_ns = [0] * n
        self.partition = [-1] * n
        self.offset = [-1] * n
        self.error: list = [None] * n

    def acked(self, i: int, partition: int, offset: int) -> None:
        self.ack_ns[i] = time.perf_counter_ns()
        self.partition[i] = partition
        self.offset[i] = offset

    def failed(self, i: int, error) -> None:
        self.ack_ns[i] = time.perf_counter_ns()
        self.error[i] = str(error) or type(error).__name__

    def missing(self) -> int:
        """Records neither acknowledged nor failed."""
        return sum(1 for t in self.ack_ns if t == 0)

    def check(self, client: str) -> None:
        missing = self.missing()
        failed = sum(1 for e in self.error if e is not None)
        if missing or failed:
            first = next((e for e in self.error if e is not None), None)
            raise MeasureError(f"{client}: {missing} record(s) never acknowledged, {failed} "
                               f"failed" + (f" (first: {first})" if first else ""))


@dataclasses.dataclass
class ProduceResult:
    """A producer run: its units (``node.perf.producer._Units``, for the samples table),
    the producer-perf-test figures (``_Stats.summary``), and the settings it ran with
    (Kafka's keys)."""
    units: object
    summary: dict
    settings: dict


class ReadClock:
    """The clock of a consumer run: ``start`` once the client is connected (each client
    first makes its connections and looks its partitions' offsets up, untimed), then
    ``update`` after each poll, as to consumer-perf-test's ``Progress``, which it feeds.
    Records/s run from ``start`` to the last records read."""

    def __init__(self, progress) -> None:
        self.progress = progress
        self.started: float | None = None
        self.last = 0.0

    def start(self) -> None:
        self.started = time.perf_counter()

    def update(self, messages: int, total_bytes: int, rebalance_ms: float) -> None:
        self.last = time.perf_counter()
        self.progress.update(messages, total_bytes, rebalance_ms)


@dataclasses.dataclass
class ConsumeResult:
    """A consumer run over Fetch: the records and bytes read, and its clock."""
    records: int
    bytes: int
    clock: ReadClock
    cpu: dict = dataclasses.field(default_factory=dict)   # CPU seconds (run.json)

    @property
    def seconds(self) -> float:
        assert self.clock.started is not None, "the clock was never started"
        return max(0.0, self.clock.last - self.clock.started)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


class Reader:
    """A consumer loop's bookkeeping, whatever client hands the records over: ``took``
    after each poll; a consumer that reads nothing for ``CONSUME_IDLE_TIMEOUT_S`` has
    failed."""

    def __init__(self, name: str, records: int, clock: ReadClock) -> None:
        self.name = name
        self.records = records
        self.clock = clock
        self.messages = self.bytes = 0
        self.last_read = time.perf_counter()

    def more(self) -> bool:
        return self.messages < self.records

    def took(self, count: int, nbytes: int) -> None:
        now = time.perf_counter()
        if not count:
            if now - self.last_read > CONSUME_IDLE_TIMEOUT_S:
                raise MeasureError(f"{self.name}: read {self.messages} of {self.records} "
                                   f"records, then nothing for "
                                   f"{CONSUME_IDLE_TIMEOUT_S:.0f} s")
            return
        self.last_read = now
        self.messages += count
        self.bytes += nbytes
        self.clock.update(self.messages, self.bytes, 0.0)

    def result(self) -> ConsumeResult:
        return ConsumeResult(self.messages, self.bytes, self.clock)


class CpuMeter:
    """CPU seconds of a phase: this process's (every thread, so a client's own I/O
    threads too) and the brokers' (``/proc/PID/stat``: user + system, in clock ticks).
    ``with meter: ...`` then ``client_s`` and ``brokers_s``."""

    TICKS_PER_S = os.sysconf("SC_CLK_TCK")

    def __init__(self, broker_pids: list[int]) -> None:
        self.broker_pids = broker_pids
        self.client_s = self.brokers_s = 0.0

    def brokers_s_total(self) -> float:
        total = 0
        for pid in self.broker_pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError as e:
                raise MeasureError(f"broker process {pid} is gone: {e}") from None
            total += int(fields[11]) + int(fields[12])   # utime, stime
        return total / self.TICKS_PER_S

    def __enter__(self) -> "CpuMeter":
        self._started = (time.process_time(), self.brokers_s_total())
        return self

    def __exit__(self, *exc) -> None:
        self.client_s = time.process_time() - self._started[0]
        self.brokers_s = self.brokers_s_total() - self._started[1]


SETTLE_WINDOW_S = 0.1
SETTLE_BUSY_MAX = 0.2        # the brokers together: at most a fifth of a core
SETTLE_TIMEOUT_S = 5.0


def settle(meter: CpuMeter) -> float:
    """Wait until the brokers are quiet (what the previous phase left them doing, such
    as flushing and checkpointing its records, is not charged to the next client):
    until they use at most SETTLE_BUSY_MAX of a core over SETTLE_WINDOW_S, for
    SETTLE_TIMEOUT_S at most. Returns the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < SETTLE_TIMEOUT_S:
        before = meter.brokers_s_total()
        time.sleep(SETTLE_WINDOW_S)
        if meter.brokers_s_total() - before <= SETTLE_BUSY_MAX * SETTLE_WINDOW_S:
            break
    return time.perf_counter() - started


class Pacer:
    """One write at a time at ``rate`` writes/s: a write starts at its slot, or at once
    when the previous answer came late (as ``bench.perf.latency``)."""

    def __init__(self, rate_per_s: float) -> None:
        assert rate_per_s > 0, rate_per_s
        self.interval_s = 1.0 / rate_per_s
        self.next_s = time.perf_counter()

    def delay_s(self) -> float:
        return max(0.0, self.next_s - time.perf_counter())

    def written(self) -> None:
        self.next_s = max(self.next_s + self.interval_s, time.perf_counter())


def timed_writes(clock: RecordClock, pacer: Pacer, write_once) -> None:
    """``clock.n`` single writes, paced: ``write_once()`` makes one and returns once it
    is acknowledged, with its record's metadata (``.partition``, ``.offset``)."""
    for i in range(clock.n):
        time.sleep(pacer.delay_s())
        clock.send_ns[i] = time.perf_counter_ns()
        metadata = write_once()
        clock.acked(i, metadata.partition, metadata.offset)
        pacer.written()


def future_single_writes(producer, topic: str, partition: int, clock: RecordClock,
                         warmup: int, value: bytes, pacer: Pacer) -> None:
    """``warmup`` then ``clock.n`` timed single writes through a producer whose ``send``
    returns a future with ``get(timeout=)`` (node.client's, kafka-python's); closes it."""
    def write_once():
        return producer.send(topic, value, partition=partition).get(
            timeout=SINGLE_WRITE_TIMEOUT_S)
    try:
        for _ in range(warmup):
            write_once()
        timed_writes(clock, pacer, write_once)
    finally:
        producer.close(timeout=5)


def latency_figures(samples_ms: list[float]) -> dict:
    ordered = sorted(samples_ms)
    return {"writes": len(ordered), "p50_ms": percentile(ordered, 0.5),
            "p99_ms": percentile(ordered, 0.99), "max_ms": ordered[-1] if ordered else 0.0}


def value_of(record_bytes: int) -> bytes:
    """The value every record carries: Kafka's payload letters (node.perf.producer)."""
    from node.perf.producer import payload
    return payload(record_bytes, 1)[0].tobytes()
