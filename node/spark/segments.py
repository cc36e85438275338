"""``read_segments(spark, dir=..., subscribe=...)``: a topic as a DataFrame read by the
JVM straight from the leader's segment files (issue 29): no Python worker and no Arrow
hand-over per task, which is what bounds the Python source's local mode.

    from node.spark import jar, read_segments
    spark = jar.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    df = read_segments(spark, dir=cluster_dir, subscribe="t1,t2",
                       startingOffsets="earliest", endingOffsets="latest")

The options and the schema are the source's local mode (``node.spark.source``: ``dir``,
``subscribe``, ``startingOffsets``, ``endingOffsets``, ``minPartitions``,
``maxPartitions``; SCHEMA). The driver resolves the snapshot exactly as the source does
(the offsets below the HW per partition) and walks each range's batches once with
``shm.local_reader.LocalReader``, turning them into pieces: (segment file, inode, byte
range of whole batches, first batch's base offset, next offset after the last, the
range's offsets). The JVM source (``node/spark/java``, built by ``node.spark.jar``)
reads those bytes as columnar batches and checks them (``SegmentSource``'s docs); a
log that changed since (retention, the cleaner, a truncation) fails the task with
one clear message: call ``read_segments`` again.

Control batches (transaction markers) give no rows; a compacted log's holes give none
either; rows are the records of the range, in offset order, as the Python source's.

A session created without the jar (``jar.configure(builder)`` puts it on the class
path) gets it with ``ADD JAR``. Without a jar (no javac), or if Spark still cannot load
the class, a warning says why and the Python source's local mode reads instead.
"""
from __future__ import annotations

import json
import warnings

from node.spark.source import BatchReader, SourceError, walk_local

WALK_BYTES = 64 * 1024 * 1024      # bytes of batches per LocalReader read while planning
OPTIONS = ("startingOffsets", "endingOffsets", "minPartitions", "maxPartitions")


def read_segments(spark, dir: str, subscribe: str, **options):
    """A DataFrame of the topics' records (SCHEMA), read by the JVM segment reader."""
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise SourceError(f"read_segments: unknown options {sorted(unknown)} (known: "
                          f"{', '.join(OPTIONS)})")
    opts = {"dir": str(dir), "subscribe": subscribe,
            **{k: str(v) for k, v in options.items()}}
    from node.spark import jar
    try:
        jar.jar_path()
    except jar.JarUnavailable as e:
        return _fallback(spark, opts, str(e))
    reader = BatchReader(opts)
    tasks = [pieces for pieces in (
        [piece for part in getattr(task, "ranges", [task]) for piece in plan_range(part)]
        for task in reader.partitions()) if pieces]
    try:
        return load_plan(spark, tasks)
    except jar.JarUnavailable as e:
        return _fallback(spark, opts, str(e))


def load_plan(spark, tasks: list[list[dict]]):
    """The JVM source's DataFrame over ``tasks`` (lists of pieces, ``plan_range``'s);
    the jar is added to a session made without it. JarUnavailable if Spark cannot load
    the source."""
    from node.spark import jar
    plan = json.dumps(tasks)
    for attempt in range(2):
        try:
            return spark.read.format(jar.SOURCE_CLASS).option("plan", plan).load()
        except Exception as e:      # noqa: BLE001 - py4j's error
            if "DATA_SOURCE_NOT_FOUND" not in str(e) and jar.SOURCE_CLASS not in str(e):
                raise
            if attempt:
                raise jar.JarUnavailable(f"Spark cannot load {jar.SOURCE_CLASS}: "
                                         f"{str(e)[:300]}") from None
        # A session created without jar.configure (or before it): add the jar now.
        spark.sql(f"ADD JAR '{jar.jar_path()}'")
    raise AssertionError("not reached")


def _fallback(spark, opts: dict, why: str, caller: str = "read_segments",
              mode: str = "local mode", stacklevel: int = 4):
    """The Python source's DataFrame with ``opts``, after a warning that says why."""
    warnings.warn(f"{caller}: the JVM segment reader is unavailable ({why}); "
                  f"reading with the Python source's {mode}", RuntimeWarning,
                  stacklevel=stacklevel)     # the caller of node.spark.read_segments
    from node.spark.source import MinikafkaDataSource
    spark.dataSource.register(MinikafkaDataSource)
    return spark.read.format("minikafka").options(**opts).load()


def plan_range(part) -> list[dict]:
    """The pieces of one input range (``source.Range`` with ``cluster_dir``): runs of
    whole batches that lie back to back in one segment file, walked as the Python
    source's local mode walks them."""
    if part.end <= part.start:
        return []
    pieces: list[dict] = []
    for _view, (path, at, size, inode), header in walk_local(part, WALK_BYTES):
        _add(pieces, part, path, inode, at, size, header.base_offset, header.next_offset)
    return pieces


def _add(pieces: list, part, path: str, inode: int, at: int, size: int, base: int,
         next_offset: int) -> None:
    last = pieces[-1] if pieces else None
    if last and last["path"] == path and last["ino"] == inode and last["end"] == at:
        last["end"] = at + size
        last["next"] = next_offset
        return
    pieces.append({"topic": part.topic, "partition": part.partition, "path": path,
                   "ino": inode, "start": at, "end": at + size, "base": base,
                   "next": next_offset, "from": part.start, "until": part.end})
