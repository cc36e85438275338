"""How fast Spark reads a topic through ``format("minikafka")``, against Parquet.

    python -m bench.analysis.spark_source [--records 10000000] [--partitions 6] [--master local[2]] [--values random|constant] [--rounds 5] [--max-partitions N]

Starts zk_lite and one broker (the supervisor), fills a topic of ``--partitions``
partitions with ``--records`` records of 100 bytes (the producer's bulk path, 256 KiB
batches), writes the same records once as Parquet (untimed), then times one full
aggregation, ``SELECT partition, sum(length(value)) GROUP BY partition``, several ways in
one Spark session: the source in local mode (``dir``: LocalReader, zero-copy), the
source over Fetch, and Parquet. Each way is read once untimed (Spark's Python workers
and JIT warm up), then ``--rounds`` rounds read the ways one after the other, so
a shared machine's load falls on all of them alike; the figures are each way's median,
and its ratio to Parquet is the median of the rounds' ratios. The source reads with
``maxPartitions`` = ``--max-partitions`` (default: the cores of ``local[N]``; 0: one
task per topic partition). Prints one line per way and one JSON line.

A fifth way, ``jvm``, is ``node.spark.read_segments``: the same local snapshot read by
the JVM segment reader (``node/spark/java``: columnar batches over the mapped segment
files, no Python worker); skipped with a note if its jar cannot be built (no javac).
A sixth, ``jvm-fetch``, is ``node.spark.read_fetched``: the driver fetches the snapshot
over Fetch into a spool (under the bench's directory) and the same JVM reader reads it;
its time includes the fetch (the DataFrame is made anew each round, its spool released
after).

A fourth way, ``ceiling``, is the most any Python data source can do here: a source
whose tasks (as many as the minikafka source's) yield one prepared Arrow batch of the
same columns and 100-byte values over and over, with no reading and no building, so its
time is Spark's alone (the Python worker's hand-over, Arrow to rows, the query).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

RECORD_BYTES = 100
BATCH_BYTES = 262_144


CEILING_ROWS = 65_536       # rows of the ceiling source's one prepared batch


def _ceiling_classes():
    """The ceiling source's classes (defined on first use: pyspark is imported late)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class CeilingReader(DataSourceReader):
        def __init__(self, options) -> None:
            self.records = int(options["records"])
            self.tasks = int(options["tasks"])

        def partitions(self):
            share = -(-self.records // self.tasks)
            return [InputPartition(min(share, self.records - i * share))
                    for i in range(self.tasks) if self.records > i * share]

        def read(self, partition):
            batch = ceiling_batch(CEILING_ROWS)
            left = partition.value
            while left > 0:
                n = min(left, CEILING_ROWS)
                yield batch.slice(0, n)
                left -= n

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "minikafka-bench-ceiling"

        def schema(self):
            from node.spark.source import SCHEMA
            return SCHEMA

        def reader(self, schema):
            return CeilingReader(self.options)

    return CeilingSource


def ceiling_batch(rows: int):
    """An Arrow batch of the source's columns: null keys, random 100-byte values."""
    import numpy as np
    import pyarrow as pa
    values = np.random.default_rng(0).integers(0, 256, rows * RECORD_BYTES, dtype=np.uint8)
    ends = np.arange(0, (rows + 1) * RECORD_BYTES, RECORD_BYTES, dtype=np.int32)
    return pa.RecordBatch.from_arrays([
        pa.nulls(rows, pa.binary()),
        pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(ends),
                                                  pa.py_buffer(values)]),
        pa.array(["bench"] * rows), pa.array([0] * rows, pa.int32()),
        pa.array(np.arange(rows, dtype=np.int64)),
        pa.array(np.arange(rows, dtype=np.int64), pa.timestamp("us", tz="UTC")),
        pa.array([0] * rows, pa.int32()),
    ], names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])


def fill(bootstrap: str, topic: str, records: int, partitions: int,
         values_kind: str = "random") -> None:
    import numpy as np
    from node.client import Producer
    shape = (min(records, 100_000), RECORD_BYTES)
    # Random bytes by default: constant values let Parquet dictionary-encode 1 GB of
    # values into a few bytes, which measures the encoding, not the read.
    values = np.full(shape, ord("x"), dtype=np.uint8) if values_kind == "constant" else \
        np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    producer = Producer(bootstrap_servers=bootstrap, acks=1, batch_size=BATCH_BYTES,
                        linger_ms=5)
    try:
        left, futures, p = records, [], 0
        while left:
            n = min(left, len(values))
            futures += producer.send_many(topic, values[:n], partition=p % partitions)
            p += 1
            left -= n
        producer.flush()
        for future in futures:
            future.get(timeout=60)
    finally:
        producer.close()


def timed(spark, df, repeat: int = 1, made: list | None = None) -> tuple[float, int, int]:
    """(best seconds of ``repeat`` runs of the query, records it counted, value bytes
    it summed). ``df`` may be a function that makes the DataFrame: its time counts, and
    is appended to ``made`` too."""
    from pyspark.sql import functions as F
    best, total, size = None, 0, 0
    for _ in range(repeat):
        started = time.perf_counter()
        if callable(df):
            frame = df()
            if made is not None:
                made.append(time.perf_counter() - started)
        else:
            frame = df
        rows = frame.groupBy("partition").agg(F.sum(F.length("value")).alias("bytes"),
                                              F.count(F.lit(1)).alias("records")).collect()
        elapsed = time.perf_counter() - started
        total = sum(r["records"] for r in rows)
        size = sum(r["bytes"] or 0 for r in rows)
        best = elapsed if best is None else min(best, elapsed)
    return best, total, size


def summary(seconds: dict[str, list[float]], records: int) -> dict:
    """Each way's median seconds and records/s; beside Parquet, the median of the
    rounds' ratios (Parquet's seconds / the way's, round by round). Pure."""
    out = {}
    for name, times in seconds.items():
        median = statistics.median(times)
        out[name] = {"seconds": round(median, 3), "records_per_s": round(records / median),
                     "rounds": [round(t, 3) for t in times]}
    for name, times in seconds.items():
        if name != "parquet":
            out[name]["of_parquet"] = round(statistics.median(
                p / t for p, t in zip(seconds["parquet"], times)), 3)
    return out


def local_cores(master: str) -> int:
    """N of ``local[N]`` (``local``: 1, ``local[*]``: this host's cores); 0 otherwise."""
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\d+|\*)\]", master)
    if not found:
        return 0
    if found.group(1) == "*":
        return os.cpu_count() or 1
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.analysis.spark_source", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=5,
                        help="timed rounds of the ways (default 5)")
    parser.add_argument("--max-partitions", type=int, default=None,
                        help="the source's maxPartitions (default: the cores of local[N]; "
                             "0: one task per topic partition)")
    parser.add_argument("--values", choices=("random", "constant"), default="random",
                        help="record values: random bytes (default) or 100 x 'x'")
    parser.add_argument("--spool-dir", default=None,
                        help="where jvm-fetch's spools go (default: the bench's own "
                             "temporary directory)")
    args = parser.parse_args(argv)
    if min(args.records, args.partitions, args.rounds) < 1:
        parser.error("--records, --partitions and --rounds must be positive")
    max_partitions = local_cores(args.master) if args.max_partitions is None \
        else args.max_partitions
    if max_partitions < 0:
        parser.error("--max-partitions must be 0 or more")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from node.client import Admin
    from node.cluster import Cluster
    from node.spark import register
    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="mk-spark-source-"))
    cluster = Cluster.up(work / "cluster", 1)
    spark = None
    try:
        admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
        admin.create_topic("bench", args.partitions, 1)
        admin.close()
        started = time.perf_counter()
        fill(cluster.bootstrap_servers, "bench", args.records, args.partitions, args.values)
        print(f"filled: {args.records:,} records in {time.perf_counter() - started:.1f} s",
              file=sys.stderr)
        builder = (SparkSession.builder.master(args.master).appName("bench-spark-source")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.memory", "4g")
                   .config("spark.sql.shuffle.partitions", "4"))
        from node.spark import jar
        try:
            builder = jar.configure(builder)
            with_jvm = True
        except jar.JarUnavailable as e:
            print(f"jvm: skipped ({e})", file=sys.stderr)
            with_jvm = False
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        grouping = {"maxPartitions": str(max_partitions)} if max_partitions else {}
        local = (spark.read.format("minikafka").option("dir", str(cluster.dir))
                 .option("subscribe", "bench").options(**grouping).load())
        fetch = (spark.read.format("minikafka")
                 .option("bootstrap.servers", cluster.bootstrap_servers)
                 .option("subscribe", "bench").options(**grouping).load())
        parquet_dir = str(work / "parquet")
        local.write.parquet(parquet_dir)
        parquet = spark.read.parquet(parquet_dir)
        spark.dataSource.register(_ceiling_classes())
        ceiling = (spark.read.format("minikafka-bench-ceiling")
                   .option("records", str(args.records))
                   .option("tasks", str(max_partitions or args.partitions)).load())
        ways = (("local", local), ("fetch", fetch), ("ceiling", ceiling),
                ("parquet", parquet))
        if with_jvm:
            from node.spark import read_fetched, read_segments
            ways = (("jvm", read_segments(spark, dir=str(cluster.dir), subscribe="bench",
                                          **grouping)),
                    ("jvm-fetch", lambda: read_fetched(
                        spark, bootstrap=cluster.bootstrap_servers, subscribe="bench",
                        spoolDir=args.spool_dir or str(work), **grouping))) + ways
        seconds: dict[str, list[float]] = {name: [] for name, _ in ways}
        made: dict[str, list[float]] = {name: [] for name, df in ways if callable(df)}
        for round_ in range(args.rounds + 1):
            for name, df in ways:
                elapsed, records, size = timed(spark, df, made=made.get(name))
                if callable(df):
                    from node.spark import release_spools
                    release_spools()
                if records != args.records or size != args.records * RECORD_BYTES:
                    raise RuntimeError(f"{name}: read {records} records of {size} bytes, "
                                       f"wrote {args.records} of {RECORD_BYTES} bytes")
                if round_:          # round 0 warms up
                    seconds[name].append(elapsed)
        figures = summary(seconds, args.records)
        for name, times in made.items():        # the fetch, without round 0's
            figures[name]["made_seconds"] = round(statistics.median(times[1:]), 3)
        for name, _ in ways:
            f = figures[name]
            ratio = f" ({f['of_parquet']:.0%} of Parquet)" if "of_parquet" in f else ""
            if "made_seconds" in f:
                ratio += f", {f['made_seconds']:.2f} s of it making the DataFrame"
            print(f"{name:>8}: {args.records:,} records in {f['seconds']:.2f} s = "
                  f"{f['records_per_s']:,} records/s{ratio}", flush=True)
        print(json.dumps({"records": args.records, "partitions": args.partitions,
                          "master": args.master, "values": args.values,
                          "max_partitions": max_partitions, "rounds": args.rounds,
                          **figures}), flush=True)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        cluster.down(grace_s=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
