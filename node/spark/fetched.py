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
``[start, end)`` below the HW per partition), then fetches each range from its leader
(native Fetch: the log's bytes as they are, whole batches) and appends the batches of
the range, unchanged, to a spool file of its own. Those files have the segment files'
format, so the plan is ``read_segments``'s (pieces: file, inode, byte range of whole
batches, first base offset, next offset, the range's offsets) and the same JVM reader
(``node/spark/java``) reads them: columnar batches over the mapped bytes, only the
columns the query names. Fetching walks the batch headers (no record is decoded).

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
import warnings

from node.spark.source import REQUEST_TIMEOUT_MS, STALL_S, BatchReader, SourceError

OPTIONS = ("startingOffsets", "endingOffsets", "minPartitions", "maxPartitions", "spoolDir")
PARTITION_FETCH_BYTES = 4 * 1024 * 1024     # per partition per Fetch
FETCH_BYTES = 8 * 1024 * 1024               # per Fetch
FETCH_THREADS = 2                            # threads fetching (the ranges shared out)
FETCH_WAIT_MS = 100                          # an answer with nothing waits this long
PIECE_BYTES_MAX = 1024 * 1024 * 1024         # the JVM reader maps a piece as one buffer
RETRY_BACKOFF_S = 0.1
SPOOL_PREFIX = "minikafka-spool-"

_spools: list[str] = []
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
    directory = _new_spool(spool_dir)
    tasks = fetch_plan(reader.partitions(), bootstrap, directory)
    try:
        return load_plan(spark, [pieces for pieces in tasks if pieces])
    except jar.JarUnavailable as e:
        return _fallback(spark, opts, str(e))


def release_spools() -> int:
    """Remove every spool ``read_fetched`` made in this process; returns how many."""
    with _spools_lock:
        spools, _spools[:] = list(_spools), []
    for directory in spools:
        shutil.rmtree(directory, ignore_errors=True)
    return len(spools)


atexit.register(release_spools)


def _new_spool(parent: str | None) -> str:
    if parent is not None and not os.path.isdir(parent):
        raise SourceError(f"option spoolDir: {parent!r} is not a directory")
    directory = tempfile.mkdtemp(prefix=SPOOL_PREFIX, dir=parent)
    with _spools_lock:
        _spools.append(directory)
    return directory


def _fallback(spark, opts: dict, why: str):
    warnings.warn(f"read_fetched: the JVM segment reader is unavailable ({why}); "
                  f"reading with the Python source's Fetch mode", RuntimeWarning,
                  stacklevel=3)
    from node.spark.source import MinikafkaDataSource
    spark.dataSource.register(MinikafkaDataSource)
    return spark.read.format("minikafka").options(**opts).load()


# ------------------------------------------------------------------ fetching

def fetch_plan(partitions, bootstrap: str, directory: str) -> list[list[dict]]:
    """The pieces of every task (``BatchReader.partitions()``: ranges, or groups of
    ranges), fetching each range into a spool file under ``directory``."""
    ranges = [part for task in partitions for part in getattr(task, "ranges", [task])]
    fetched = fetch_ranges([r for r in ranges if r.end > r.start], bootstrap, directory)
    return [[piece for part in getattr(task, "ranges", [task])
             for piece in fetched.get(id(part), [])] for task in partitions]


class _Spooled:
    """One range being fetched: its spool file, next offset and pieces so far."""

    def __init__(self, part, path: str) -> None:
        self.part = part
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.inode = os.fstat(self.fd).st_ino
        self.size = 0
        self.offset = part.start
        self.pieces: list[dict] = []
        self.progress_s = time.monotonic()
        self.empty = False          # the last answer had nothing for this range

    @property
    def done(self) -> bool:
        return self.offset >= self.part.end

    def take(self, frame, high_watermark: int, first: bool) -> None:
        """Append the whole batches of a fetched region below the range's end. An empty
        region below the HW is a hole to the HW (compacted away) only for the answer's
        first partition: a later one may be empty because the answer's bytes ran out."""
        from shm.batch import CorruptRecordError, read_header
        view = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
        view = view.cast("B") if view.format != "B" else view
        part, position, base, next_offset = self.part, 0, -1, self.offset
        received = len(view)
        while position < len(view) and next_offset < part.end:
            try:
                header = read_header(view, position)
            except CorruptRecordError as e:
                if position and _cut_short(view, position):
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
        self._write(view[:position], base, next_offset)
        self.offset = next_offset
        self.progress_s = time.monotonic()

    def _write(self, data, base: int, next_offset: int) -> None:
        written = 0
        while written < len(data):
            written += os.write(self.fd, data[written:])
        part, start = self.part, self.size
        self.size += len(data)
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last["end"] == start and \
                self.size - last["start"] <= PIECE_BYTES_MAX:
            last["end"], last["next"] = self.size, next_offset
            return
        self.pieces.append({"topic": part.topic, "partition": part.partition,
                            "path": self.path, "ino": self.inode, "start": start,
                            "end": self.size, "base": base, "next": next_offset,
                            "from": part.start, "until": part.end})

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _cut_short(view, position: int) -> bool:
    """True if the bytes from ``position`` are the start of a batch cut by the end."""
    from shm import batch
    available = len(view) - position
    if available < batch.PREFIX.size:
        return True
    size = batch.PREFIX.unpack_from(view, position)[1] + batch.LENGTH_OVERHEAD_BYTES
    return size > available


def fetch_ranges(ranges, bootstrap: str, directory: str,
                 threads: int | None = None) -> dict[int, list[dict]]:
    """{id(range): its pieces}: every range fetched from its leader into a spool file.
    The ranges are shared among ``threads`` (default FETCH_THREADS) threads, each with
    its own connections: one Fetch per leader at a time for its unfinished ranges (the
    receiving and the writing release the GIL, so two threads keep two cores busy)."""
    spooled = [_Spooled(r, os.path.join(directory, f"{i:05d}-{r.topic}-{r.partition}.log"))
               for i, r in enumerate(ranges)]
    try:
        n = max(1, min(threads or FETCH_THREADS, len(spooled)))
        groups = [spooled[i::n] for i in range(n)]
        failures: list[BaseException] = []
        workers = [threading.Thread(target=_fetch_group, args=(g, bootstrap, failures),
                                    name=f"read_fetched-{i}", daemon=True)
                   for i, g in enumerate(groups[1:], 1)]
        for w in workers:
            w.start()
        _fetch_group(groups[0] if groups else [], bootstrap, failures)
        for w in workers:
            w.join()
        if failures:
            raise failures[0]
    finally:
        for s in spooled:
            s.close()
    return {id(s.part): s.pieces for s in spooled}


def _fetch_group(spooled: list, bootstrap: str, failures: list) -> None:
    """Fetch these ranges to their ends; a failure is appended to ``failures`` (the
    other threads stop at their next round)."""
    from node.client import Admin
    from node.wire import errors, protocol
    if not spooled:
        return
    topics = sorted({s.part.topic for s in spooled})
    admin = Admin(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        md = admin.meta.refresh(topics, merge=False)
        while not failures:
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
    except BaseException as e:      # noqa: BLE001 - raised by fetch_ranges
        failures.append(e)
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
