"""``read_fetched(spark, bootstrap, subscribe)``: a topic as a DataFrame read by the JVM
segment reader from batches fetched over the broker protocol (issue 29: Spark over
Fetch, with no Python worker between the bytes and Spark).

    from node.spark import jar, read_fetched, release_spools
    spark = jar.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    df = read_fetched(spark, bootstrap="127.0.0.1:9092", subscribe="t1,t2")
    ...
    release_spools()            # or at exit

Why: the Python source's Fetch mode hands every batch to Spark through a Python worker
(Arrow over a socket, then the JVM copies each row): that hand-over, not the transport,
bounds it (``bench.analysis.spark_source``'s ``ceiling``). ``read_segments`` removes it
for a cluster on this host by mapping the leaders' segment files; a cluster elsewhere
(another host, another network namespace) is read over Fetch.

How: the driver resolves the snapshot as the source does (Metadata and ListOffsets:
``[start, end)`` below the HW per partition), makes a spool file per range, and starts
fetching on threads of its own (``Fetch``): each range from its leader (native Fetch:
the log's bytes as they are, whole batches), appended unchanged to its file. Those files
have the segment files' format, so the JVM segment reader (``node/spark/java``) reads
them, and Spark need not wait for the fetch: each range is a *growing* piece, whose
file the reader maps as it grows and walks batch by batch, waiting for bytes, until the
range's end or the file's done mark (``F.done``; ``F.failed`` holds why a fetch
stopped, and fails the task with it). The fetch and the reading overlap. Fetching walks
the batch headers; no record is decoded in Python.

The spool: one directory per call (``spoolDir``: where; default the temporary directory),
holding about the bytes read. The DataFrame reads it whenever an action runs, so it
stays until ``release_spools()`` or the end of the Python process; a DataFrame used after
its spool was released fails with the reader's message (the file is gone: read again).

Options: ``read_segments``'s (``startingOffsets``, ``endingOffsets``, ``minPartitions``,
``maxPartitions``) and ``spoolDir``. Without the jar (no javac) a warning says why and the
Python source's Fetch mode reads instead.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time

from node.spark.source import REQUEST_TIMEOUT_MS, STALL_S, BatchReader, SourceError

OPTIONS = ("startingOffsets", "endingOffsets", "minPartitions", "maxPartitions", "spoolDir")
PARTITION_FETCH_BYTES = 4 * 1024 * 1024     # per partition per Fetch
FETCH_BYTES = 8 * 1024 * 1024               # per Fetch
FETCH_THREADS = 2                            # threads fetching (the ranges shared out)
FETCH_WAIT_MS = 100                          # an answer with nothing waits this long
RELEASE_WAIT_S = 5.0                         # release_spools waits this long per thread
RETRY_BACKOFF_S = 0.1
SPOOL_PREFIX = "minikafka-spool-"

_spools: list = []          # the Fetch of every read_fetched call not yet released
_spools_lock = threading.Lock()


def read_fetched(spark, bootstrap: str, subscribe: str, **options):
    """A DataFrame of the topics' records (the source's SCHEMA), fetched into a spool and
    read by the JVM segment reader."""
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise SourceError(f"read_fetched: unknown options {sorted(unknown)} (known: "
                          f"{', '.join(OPTIONS)})")
    spool_dir = options.pop("spoolDir", None)
    opts = {"bootstrap.servers": bootstrap, "subscribe": subscribe,
            **{k: str(v) for k, v in options.items()}}
    from node.spark import jar
    from node.spark.segments import load_plan
    try:
        jar.jar_path()
    except jar.JarUnavailable as e:
        return _fallback(spark, opts, str(e))
    reader = BatchReader(opts)
    if spool_dir is not None and not os.path.isdir(spool_dir):
        raise SourceError(f"option spoolDir: {spool_dir!r} is not a directory")
    fetch = Fetch(reader.partitions(), bootstrap, tempfile.mkdtemp(prefix=SPOOL_PREFIX,
                                                                   dir=spool_dir))
    with _spools_lock:
        _spools.append(fetch)
    fetch.start()
    try:
        return load_plan(spark, [pieces for pieces in fetch.plan if pieces])
    except jar.JarUnavailable as e:
        return _fallback(spark, opts, str(e))


def release_spools() -> int:
    """Stop the fetches ``read_fetched`` started in this process and remove their
    spools; returns how many."""
    with _spools_lock:
        fetches, _spools[:] = list(_spools), []
    for fetch in fetches:
        fetch.release()
    return len(fetches)


atexit.register(release_spools)


def _fallback(spark, opts: dict, why: str):
    from node.spark.segments import _fallback as fallback
    return fallback(spark, opts, why, "read_fetched", "Fetch mode", stacklevel=5)


# ------------------------------------------------------------------ fetching

class Fetch:
    """The fetch of one ``read_fetched`` call: a spool file per non-empty range under
    ``directory``, and the plan (per task, one growing piece per range: the JVM reader
    reads each file's batches as they arrive, until the range's end or the file's done
    mark). ``start`` runs the fetch on FETCH_THREADS daemon threads, so Spark reads
    while the rest arrives (a failure reaches the readers as failed marks); ``release``
    stops them and removes the spool.

    Marks beside a spool file ``F``: ``F.done`` once the range is whole (written after
    its last byte: a reader that sees it and then the file's size has all of it), or
    ``F.failed`` holding why the fetch stopped (the reader fails the task with it)."""

    def __init__(self, partitions, bootstrap: str, directory: str) -> None:
        self.bootstrap = bootstrap
        self.directory = directory
        tasks = [[r for r in getattr(task, "ranges", [task]) if r.end > r.start]
                 for task in partitions]
        self.spooled = [_Spooled(r, os.path.join(directory, f"{i:05d}-{r.topic}-"
                                                            f"{r.partition}.log"))
                        for i, r in enumerate(r for ranges in tasks for r in ranges)]
        by_range = {id(s.part): s for s in self.spooled}
        self.plan = [[by_range[id(r)].piece() for r in ranges] for ranges in tasks]
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self, threads: int | None = None) -> None:
        n = max(1, min(threads or FETCH_THREADS, len(self.spooled)))
        groups = [self.spooled[i::n] for i in range(n)]
        self.threads = [threading.Thread(target=self._run, args=(g,), daemon=True,
                                         name=f"read_fetched-{i}")
                        for i, g in enumerate(groups) if g]
        for t in self.threads:
            t.start()

    def _run(self, group: list) -> None:
        try:
            _fetch_group(group, self.bootstrap, self.stop)
        except BaseException as e:      # noqa: BLE001 - told to the readers (failed marks)
            self.failures.append(e)
            self.stop.set()
        finally:
            for s in group:
                if s.fd >= 0:           # not marked yet
                    s.finish(None if s.done else str(self.failures[0]) if self.failures
                             else "the fetch was stopped (release_spools)")

    def release(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(RELEASE_WAIT_S)
        shutil.rmtree(self.directory, ignore_errors=True)


class _Spooled:
    """One range being fetched: its spool file, next offset and pieces so far."""

    def __init__(self, part, path: str) -> None:
        self.part = part
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.inode = os.fstat(self.fd).st_ino
        self.offset = part.start
        self.progress_s = time.monotonic()
        self.empty = False          # the last answer had nothing for this range

    @property
    def done(self) -> bool:
        return self.offset >= self.part.end

    def piece(self) -> dict:
        """The JVM reader's piece of this file: read as it grows."""
        part = self.part
        return {"topic": part.topic, "partition": part.partition, "path": self.path,
                "ino": self.inode, "start": 0, "end": -1, "base": -1, "next": part.end,
                "from": part.start, "until": part.end, "growing": True}

    def finish(self, failure: str | None) -> None:
        """Close the file and leave its mark: done, or why the fetch failed."""
        self.close()
        mark = self.path + (".failed" if failure is not None else ".done")
        try:
            with open(mark + ".tmp", "w") as f:
                f.write(failure or "")
            os.rename(mark + ".tmp", mark)
        except OSError:
            pass            # the spool was removed meanwhile (released)

    def take(self, frame, high_watermark: int, first: bool) -> None:
        """Append the whole batches of a fetched region below the range's end. An empty
        region below the HW is a hole to the HW (compacted away) only for the answer's
        first partition: a later one may be empty because the answer's bytes ran out."""
        from node.client.consumer.fetcher import cut_short
        from shm.batch import CorruptRecordError, read_header
        view = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
        view = view.cast("B") if view.format != "B" else view
        part, position, base, next_offset = self.part, 0, -1, self.offset
        received = len(view)
        while position < len(view) and next_offset < part.end:
            try:
                header = read_header(view, position)
            except CorruptRecordError as e:
                if position and cut_short(view, position):
                    break           # the region's last batch, cut by the byte limit
                raise SourceError(f"{part.topic}-{part.partition}: the leader sent no "
                                  f"whole batch at offset {next_offset}: {e}") from None
            if header.next_offset <= next_offset:
                position += header.size_bytes   # wholly below: an older batch
                if base < 0:
                    view, position = view[position:], 0
                continue
            if base < 0:
                base = header.base_offset
            next_offset = header.next_offset
            position += header.size_bytes
        if base < 0:
            self.empty = True
            if received == 0 and high_watermark >= part.end and first:
                self.offset = part.end          # the rest was compacted away
            return
        self.empty = False
        self._write(view[:position])
        self.offset = next_offset
        self.progress_s = time.monotonic()

    def _write(self, data) -> None:
        written = 0
        while written < len(data):
            written += os.write(self.fd, data[written:])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _fetch_group(spooled: list, bootstrap: str, stop: threading.Event) -> None:
    """Fetch these ranges to their ends (or until ``stop`` is set): one Fetch per leader
    at a time for their unfinished ranges, each range's file marked done as it ends."""
    from node.client import Admin
    from node.wire import errors, protocol
    if not spooled:
        return
    topics = sorted({s.part.topic for s in spooled})
    admin = Admin(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        md = admin.meta.refresh(topics, merge=False)
        while not stop.is_set():
            for s in spooled:
                if s.done and s.fd >= 0:
                    s.finish(None)
            left = [s for s in spooled if not s.done]
            if not left:
                break
            by_leader: dict[str, list] = {}
            for s in sorted(left, key=lambda s: not s.empty):   # the empty ones first
                pm = md.partition(s.part.topic, s.part.partition)
                endpoint = md.endpoint(pm.leader) if pm is not None and pm.leader >= 0 \
                    else None
                if endpoint is None:
                    _stalled(s, "has no leader")
                    md = _refreshed(admin, md, topics)
                    continue
                by_leader.setdefault(endpoint, []).append((s, pm.leader_epoch))
            stale = False
            for endpoint, items in by_leader.items():
                body = {"replica_id": protocol.CONSUMER_REPLICA_ID,
                        "max_wait_ms": FETCH_WAIT_MS, "min_bytes": 1,
                        "max_bytes": FETCH_BYTES,
                        "partitions": [[s.part.topic, s.part.partition, s.offset, epoch,
                                        PARTITION_FETCH_BYTES] for s, epoch in items]}
                try:
                    response = admin.net.request(endpoint, protocol.ApiKey.FETCH, body)
                except errors.KafkaError as e:
                    for s, _ in items:
                        _stalled(s, f"cannot fetch from {endpoint}: {e}")
                    stale = True
                    continue
                stale |= _take_response(items, response)
            if stale:
                time.sleep(RETRY_BACKOFF_S)
                md = _refreshed(admin, md, topics)
    finally:
        admin.close()


def _take_response(items, response) -> bool:
    """Spool a Fetch answer's regions; True if a partition wants fresh metadata."""
    from node.client.types import METADATA_STALE_CODES
    from node.wire import errors
    entries = response.body.get("partitions") if isinstance(response.body, dict) else None
    if not isinstance(entries, list) or len(entries) != len(items):
        raise SourceError(f"a Fetch answer out of shape: {str(response.body)[:200]}")
    stale = False
    for i, ((s, _), entry) in enumerate(zip(items, entries)):
        topic, partition, code, high_watermark = entry[:4]
        if (topic, partition) != (s.part.topic, s.part.partition):
            raise SourceError(f"a Fetch answer for {topic}-{partition} where "
                              f"{s.part.topic}-{s.part.partition} was asked")
        if code in METADATA_STALE_CODES or (code and errors.error_for(code).retriable):
            _stalled(s, f"the leader answers {errors.name_of(code)}")
            stale = True
            continue
        if code:
            raise SourceError(f"{topic}-{partition}: fetching offset {s.offset}: "
                              f"{errors.name_of(code)}")
        frame = response.frames[i] if i < len(response.frames) else b""
        before = s.offset
        s.take(frame, high_watermark, first=i == 0)
        if s.offset == before and not s.done:
            _stalled(s, f"no records past offset {s.offset} (high watermark "
                        f"{high_watermark})")
    return stale


def _stalled(s: _Spooled, why: str) -> None:
    if time.monotonic() - s.progress_s > STALL_S:
        raise SourceError(f"{s.part.topic}-{s.part.partition}: {why} for {STALL_S:.0f} s "
                          f"(wanted offsets up to {s.part.end})")


def _refreshed(admin, md, topics: list[str]):
    try:
        return admin.meta.refresh(topics, merge=False)
    except Exception:       # noqa: BLE001 - the next round asks again; _stalled bounds it
        return md
