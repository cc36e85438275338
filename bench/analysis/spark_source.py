"""How fast Spark reads a topic through ``format("minikafka")``, against Parquet.

    python -m bench.analysis.spark_source [--records 10000000] [--partitions 6] [--master local[2]] [--values random|constant]

Starts zk_lite and one broker (the supervisor), fills a topic of ``--partitions``
partitions with ``--records`` records of 100 bytes (the producer's bulk path, 256 KiB
batches), writes the same records once as Parquet (untimed), then times one full
aggregation, ``SELECT partition, sum(length(value)) GROUP BY partition``, three ways in
one Spark session: the source in local mode (``dir``: LocalReader, zero-copy), the
source over Fetch, and Parquet. Each is run ``--repeat`` times and the best is kept (the
first read also warms Spark's Python workers). Prints one line per way and one JSON
line with records/s and the ratios to Parquet.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

RECORD_BYTES = 100
BATCH_BYTES = 262_144


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


def timed(spark, df, repeat: int) -> tuple[float, int]:
    from pyspark.sql import functions as F
    best, total = None, 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = df.groupBy("partition").agg(F.sum(F.length("value")).alias("bytes"),
                                           F.count(F.lit(1)).alias("records")).collect()
        elapsed = time.perf_counter() - started
        total = sum(r["records"] for r in rows)
        best = elapsed if best is None else min(best, elapsed)
    return best, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.analysis.spark_source", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--values", choices=("random", "constant"), default="random",
                        help="record values: random bytes (default) or 100 x 'x'")
    args = parser.parse_args(argv)
    if min(args.records, args.partitions, args.repeat) < 1:
        parser.error("--records, --partitions and --repeat must be positive")
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
        spark = (SparkSession.builder.master(args.master).appName("bench-spark-source")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.memory", "4g")
                 .config("spark.sql.shuffle.partitions", "4").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        local = (spark.read.format("minikafka").option("dir", str(cluster.dir))
                 .option("subscribe", "bench").load())
        fetch = (spark.read.format("minikafka")
                 .option("bootstrap.servers", cluster.bootstrap_servers)
                 .option("subscribe", "bench").load())
        parquet_dir = str(work / "parquet")
        local.write.parquet(parquet_dir)
        parquet = spark.read.parquet(parquet_dir)
        figures = {}
        for name, df in (("local", local), ("fetch", fetch), ("parquet", parquet)):
            seconds, records = timed(spark, df, args.repeat)
            if records != args.records:
                raise RuntimeError(f"{name}: read {records} records, wrote {args.records}")
            figures[name] = {"seconds": round(seconds, 3),
                             "records_per_s": round(records / seconds)}
            print(f"{name:>8}: {records:,} records in {seconds:.2f} s = "
                  f"{records / seconds:,.0f} records/s", flush=True)
        for name in ("local", "fetch"):
            figures[name]["of_parquet"] = round(
                figures[name]["records_per_s"] / figures["parquet"]["records_per_s"], 3)
        print(json.dumps({"records": args.records, "partitions": args.partitions,
                          "master": args.master, "values": args.values, **figures}), flush=True)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        cluster.down(grace_s=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
