"""Kafka's LogCleaner on the broker: compacts the logs whose cleanup.policy has "compact".

Each replica cleans its own log, leaders and followers alike, as in Kafka: nothing about
cleaning is replicated, so two replicas of a partition may hold different (equally valid)
cleaned prefixes.

Theory of operation (the storage half is ``shm.log``'s ``Log.cleanable`` / ``CleanPlan``
/ ``Log.swap_cleaned``, built on branch cstore):

- Every ``log.cleaner.backoff.ms`` (and at once after a clean finished) the loop asks each
  compacted, online log that is not being cleaned for a plan (``Log.cleanable(now_ms)``:
  the dirty ratio and the compaction lags decide; only sealed segments below the HW). The
  plans are taken dirtiest first (Kafka's LogCleanerManager.grabFilthiestCompactedLog),
  as many as there are idle cleaner threads (``log.cleaner.threads``).
- A cleaner thread builds the cleaned segments (``plan.build(throttle, now_ms)``): it reads
  sealed segments only and writes ``.cleaned`` files beside them, so appends and fetches on
  the loop go on meanwhile. ``throttle(n)`` is called for every n bytes read or written and
  sleeps to keep all threads together under ``log.cleaner.io.max.bytes.per.second``
  (one ``Throttler`` shared by the threads, as Kafka's).
- The loop swaps the result in (``Log.swap_cleaned``): False when the log changed under
  the plan (truncated, deleted, closed); the cleaned files are then removed.
- A log that is about to be truncated, deleted or closed has its clean aborted first
  (``abort(key)``, Kafka's abortAndPauseCleaning): the next ``throttle`` call in the
  cleaner thread raises ``CleaningAborted`` and the loop waits for that (at most one
  throttle step, bounded by ``ABORT_WAIT_S``) so no thread reads a segment while the
  loop cuts it.

Metrics (``stats()``, what Kafka's LogCleaner reports as max-dirty-percent,
cleaner-recopy-percent, max-clean-time-secs ...): bytes read and written, cleans done and
aborted, the last clean's time and duration, and the dirtiest ratio seen at the last
schedule.

Rules: only the loop thread touches logs' owner-thread methods (``cleanable``,
``swap_cleaned``); a cleaner thread touches only its plan and the throttler.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

from node.broker.failures import STORAGE_ERRORS
from node.config import CLEANER_IO_UNBOUNDED

logger = logging.getLogger("node.broker.log_cleaner")

# Kafka's Throttler checks the rate at most this often (kafka.utils.Throttler's
# checkIntervalMs default as the cleaner uses it).
THROTTLE_CHECK_INTERVAL_MS = 300
# How long the loop waits for a cleaner thread to notice an abort (one throttle step).
ABORT_WAIT_S = 10.0
# A log whose build failed is left alone this long (a broken segment must not be read
# again every backoff; the scrubber reports it).
FAILED_BACKOFF_MS = 60_000
# While a cleaner thread runs, the interpreter switches threads this often instead of
# every 5 ms, so the loop thread, which gives the GIL up at every poll, does not wait up
# to a whole interval to get it back each time. Measured (a thread waking every 1 ms
# beside a build of a 120 MB log, 100k keys, quiet machine): its p99 delay 7.2-7.6 ms at
# 5 ms, 1.9-2.1 ms at 1 ms (max 18-31 -> 3.7-4.2 ms), the build no slower; a build in
# another process: 0.13 ms, so the rest is the GIL. time.sleep(0) between batches
# only halved the p99 (3.7-3.9 ms, max 12-17 ms).
CLEANING_SWITCH_INTERVAL_S = 0.001
# The metrics, rewritten after each clean in the broker's first log dir (tools, bench).
CLEANER_STATS_FILE = "cleaner-stats.json"


class CleaningAborted(Exception):
    """Raised inside a cleaner thread when its log is being truncated, deleted or closed."""


class Throttler:
    """Kafka's kafka.utils.Throttler: ``maybe_throttle(observed)`` adds to what was done
    since the last check; at most every ``check_interval_ms`` it compares the rate with
    ``desired_per_s`` and sleeps the excess away. Thread-safe: one throttler bounds all
    cleaner threads together."""

    def __init__(self, desired_per_s: float, *, check_interval_ms: int = THROTTLE_CHECK_INTERVAL_MS,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        assert desired_per_s > 0, "a rate of 0 would never finish"
        self.desired_per_s = desired_per_s
        self.check_interval_s = check_interval_ms / 1000
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.slept_s = 0.0          # total, for the metrics and the tests

    @property
    def unbounded(self) -> bool:
        return self.desired_per_s >= CLEANER_IO_UNBOUNDED

    def maybe_throttle(self, observed: float) -> None:
        if self.unbounded:
            return
        with self._lock:
            self._observed += observed
            now = self.clock()
            elapsed = now - self._period_start
            if elapsed < self.check_interval_s:
                return
            rate = self._observed / elapsed
            sleep_s = 0.0
            if rate > self.desired_per_s:
                # sleep until the period's amount is at the desired rate
                sleep_s = self._observed / self.desired_per_s - elapsed
            self._period_start = now + sleep_s
            self._observed = 0.0
        if sleep_s > 0:      # outside the lock: other threads count meanwhile
            self.sleep(sleep_s)
            with self._lock:
                self.slept_s += sleep_s


@dataclasses.dataclass
class CleanerStats:
    """What the cleaner has done since the broker started (Kafka's LogCleaner metrics)."""
    bytes_read_written: int = 0   # through the throttle: bytes read plus bytes written
    bytes_read: int = 0           # of log, by the swapped cleans (Kafka's "MB of log processed")
    bytes_before: int = 0         # size of the segments the swapped cleans replaced
    bytes_after: int = 0          # size of what they wrote instead
    cleans: int = 0               # swapped in
    cleans_discarded: int = 0     # built, but the log changed under the plan
    cleans_aborted: int = 0       # stopped for a truncation, deletion or close
    cleans_failed: int = 0        # the build raised
    last_clean_wall_ms: int = -1  # when the last swap happened (wall clock)
    last_clean_duration_ms: int = -1
    clean_time_ms: int = 0        # summed over the swapped cleans (build and swap)
    last_swap_ms: float = -1.0    # the loop's share of the last clean (its swap)
    max_swap_ms: float = 0.0
    max_dirty_ratio: float = 0.0  # Kafka's max-dirty-percent / 100, at the last schedule
    throttled_s: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Job:
    """A clean under way: its plan, the thread's future, the abort flag."""

    def __init__(self, part, plan) -> None:
        self.part = part
        self.plan = plan
        self.aborted = threading.Event()
        self.started = time.monotonic()
        self.future: Future | None = None
        self.bytes = 0            # counted by the throttle callback (cleaner thread)
        self.settled = False      # its outcome counted (by _finished or abort)


def plan_ratio(plan) -> float:
    """The dirty ratio of a plan's range (dirty bytes / (clean + dirty bytes))."""
    return float(plan.range.dirty_ratio)


def clean_sizes(cleaned) -> tuple[int, int, int]:
    """(bytes of log read, bytes of the segments replaced, bytes written) of a clean."""
    stats = cleaned.stats
    return (int(stats.bytes_read), sum(int(s.size) for s in cleaned.plan.sources),
            int(stats.bytes_written))


def is_compacted(log_config) -> bool:
    return "compact" in getattr(log_config, "cleanup_policy", ())


class LogCleaner:
    """The broker's cleaner. ``replicas`` is the ReplicaManager (its ``partitions``,
    ``is_offline``, ``mark_dirty``); ``loop`` the broker's event loop."""

    def __init__(self, replicas, loop, *, threads: int, io_max_bytes_per_second: float,
                 backoff_ms: int, stats_path: str | None = None,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 throttle_check_interval_ms: int = THROTTLE_CHECK_INTERVAL_MS) -> None:
        assert threads >= 0 and backoff_ms >= 0
        self.replicas = replicas
        self.loop = loop
        self.threads = threads
        self.backoff_ms = backoff_ms
        self.wall_ms = wall_ms
        self.stats_path = stats_path
        self.throttler = Throttler(io_max_bytes_per_second,
                                   check_interval_ms=throttle_check_interval_ms)
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="log-cleaner") \
            if threads > 0 else None
        self.jobs: dict[tuple[str, int], _Job] = {}
        self.failed_until_ms: dict[tuple[str, int], int] = {}
        self.stats = CleanerStats()
        self.closed = False
        self._soon: int | None = None
        self._switch_interval_s = sys.getswitchinterval()   # restored when idle

    # ---- the loop's side ----------------------------------------------------------

    def start(self) -> None:
        if self.pool is None:
            logger.info("log cleaner off (log.cleaner.threads=0)")
            return
        self.loop.every(max(1, self.backoff_ms), self.schedule)

    def schedule(self) -> None:
        """On the loop: find the dirtiest cleanable logs and hand them to idle threads."""
        self._soon = None
        if self.closed or self.pool is None:
            return
        now = self.wall_ms()
        candidates = []
        for key, part in list(self.replicas.partitions.items()):
            if key in self.jobs or not is_compacted(part.log.config) or \
                    self.replicas.is_offline(part) or self.failed_until_ms.get(key, 0) > now:
                continue
            try:
                plan = part.log.cleanable(now)
            except STORAGE_ERRORS as e:
                logger.error("%s-%d: cannot plan a clean: %s", part.topic, part.partition, e)
                continue
            if plan is not None:
                candidates.append((plan_ratio(plan), key, part, plan))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        self.stats.max_dirty_ratio = candidates[0][0] if candidates else 0.0
        idle = self.threads - len(self.jobs)
        for ratio, key, part, plan in candidates:
            if idle <= 0:
                plan.abort()    # closes the descriptors it holds; asked again next time
                continue
            idle -= 1
            self._submit(key, part, plan, ratio)

    def _submit(self, key, part, plan, ratio: float) -> None:
        job = _Job(part, plan)
        if not self.jobs:
            self._switch_interval_s = sys.getswitchinterval()
            sys.setswitchinterval(min(CLEANING_SWITCH_INTERVAL_S, self._switch_interval_s))
        self.jobs[key] = job
        logger.info("%s-%d: cleaning (dirty ratio %.2f)", part.topic, part.partition, ratio)
        build_now = self.wall_ms()

        def throttle(n: int) -> None:       # cleaner thread
            if job.aborted.is_set():
                raise CleaningAborted(f"{part.topic}-{part.partition}")
            job.bytes += n
            self.throttler.maybe_throttle(n)

        job.future = self.pool.submit(plan.build, throttle, build_now)
        job.future.add_done_callback(
            lambda future: self.loop.post(lambda: self._finished(key, job)))

    def _finished(self, key, job: _Job) -> None:
        """On the loop: a build ended; swap it in if the log is still the one planned."""
        if self.jobs.get(key) is job:
            del self.jobs[key]
        self._idle_check()
        if job.settled:
            return
        job.settled = True
        self.stats.bytes_read_written += job.bytes
        self.stats.throttled_s = self.throttler.slept_s
        part = job.part
        error = job.future.exception()
        if isinstance(error, CleaningAborted) or (job.aborted.is_set() and error is None):
            self.stats.cleans_aborted += 1
            if error is None:
                job.future.result().abort()
            return
        if error is not None:
            self.stats.cleans_failed += 1
            self.failed_until_ms[key] = self.wall_ms() + FAILED_BACKOFF_MS
            logger.error("%s-%d: cleaning failed: %s", part.topic, part.partition, error,
                         exc_info=error)
            return
        cleaned = job.future.result()
        if self.closed or self.replicas.partitions.get(key) is not part or \
                self.replicas.is_offline(part):
            cleaned.abort()
            self.stats.cleans_discarded += 1
            return
        swap_started = time.perf_counter()
        try:
            swapped = part.log.swap_cleaned(cleaned)
        except STORAGE_ERRORS as e:
            logger.error("%s-%d: swapping the cleaned segments failed: %s", part.topic,
                         part.partition, e)
            if isinstance(e, OSError):
                self.replicas.storage_failed(part, e)
            return
        self.stats.last_swap_ms = (time.perf_counter() - swap_started) * 1000
        self.stats.max_swap_ms = max(self.stats.max_swap_ms, self.stats.last_swap_ms)
        if not swapped:
            self.stats.cleans_discarded += 1
            logger.info("%s-%d: the log changed while it was cleaned; cleaned files "
                        "dropped", part.topic, part.partition)
            return
        self.stats.cleans += 1
        read, before, after = clean_sizes(cleaned)
        self.stats.bytes_read += read
        self.stats.bytes_before += before
        self.stats.bytes_after += after
        self.stats.last_clean_wall_ms = self.wall_ms()
        self.stats.last_clean_duration_ms = int((time.monotonic() - job.started) * 1000)
        self.stats.clean_time_ms += self.stats.last_clean_duration_ms
        self.replicas.mark_dirty(part)
        self._write_stats()
        logger.info("%s-%d: cleaned in %d ms (the swap on the loop %.1f ms): %d bytes of "
                    "segments -> %d (%d bytes of log read)", part.topic, part.partition,
                    self.stats.last_clean_duration_ms, self.stats.last_swap_ms, before, after,
                    read)
        # Kafka's cleaner thread takes the next log at once after a clean.
        if self._soon is None and not self.closed:
            self._soon = self.loop.call_later(0, self.schedule)

    def abort(self, key: tuple[str, int]) -> None:
        """On the loop, before ``key``'s log is truncated, deleted or closed: stop its
        clean and wait (one throttle step) until the thread has let go of the log."""
        job = self.jobs.pop(key, None)
        if job is None:
            return
        self._idle_check()
        job.aborted.set()
        done, _ = wait([job.future], timeout=ABORT_WAIT_S)
        if not done:    # a build that does not call throttle: a storage bug
            logger.error("%s-%d: the cleaner did not stop within %g s", *key, ABORT_WAIT_S)
            return
        job.settled = True    # the posted _finished then counts nothing more
        self.stats.cleans_aborted += 1
        self.stats.bytes_read_written += job.bytes
        if job.future.exception() is None:
            job.future.result().abort()

    def close(self) -> None:
        """On the loop at shutdown, before the logs close: abort every clean."""
        self.closed = True
        for key in list(self.jobs):
            self.abort(key)
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _idle_check(self) -> None:
        if not self.jobs:
            sys.setswitchinterval(self._switch_interval_s)

    def _write_stats(self) -> None:
        """The metrics as JSON (tmp file, then rename: a reader sees a whole one)."""
        if self.stats_path is None:
            return
        tmp = self.stats_path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.snapshot(), f)
            os.replace(tmp, self.stats_path)
        except OSError as e:      # metrics only: never a reason to fail a log dir
            logger.warning("cannot write %s: %s", self.stats_path, e)

    def snapshot(self) -> dict:
        """The metrics, and the logs being cleaned (for the board, tools, tests)."""
        out = self.stats.as_dict()
        out["cleaning"] = sorted(f"{t}-{p}" for t, p in self.jobs)
        return out
