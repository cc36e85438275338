"""What log compaction costs and how fast it goes (issue 26): MB/s cleaned, and the
produce p99 of another topic with the cleaner running against idle, in one run.

    python -m bench.compaction [--records 300000] [--record-size 100] [--keys 1000]
                               [--segment-bytes 1048576] [--probe-rate 200] [--probe-seconds 30]
                               [--io-max-bytes-per-second BYTES] [--results DIR] [--dir DIR]

Three brokers (log.cleaner.backoff.ms 500). The table topic (1 partition, replication
factor 3, ``--segment-bytes`` segments) is filled with ``--records`` updates of
``--keys`` keys while its cleanup.policy is still "delete", so the cleaner has nothing
to do. Then:

1. idle: a probe producer sends one record at a time (acks=all, ``--probe-rate`` a
   second) to a probe topic for ``--probe-seconds``;
2. cleaning: the table topic's cleanup.policy becomes "compact" (IncrementalAlterConfigs,
   live): every replica's cleaner cleans its copy while the same probe runs, until each
   broker reports its clean (``cleaner-stats.json`` in its log dir).

Prints each phase's probe latency (p50, p99, max) and the cleaning throughput, Kafka's
figure: MB of log the cleaner read / seconds spent cleaning, per broker and in all
(MB = 10^6 bytes), with the segments' size before and after.
With ``--results DIR`` each phase is one run of tool ``compaction`` in the results store
(``produce`` samples of the probe; tags ``phase`` = idle | cleaning), its summary the
figures, so ``minikafka analyze`` reads them.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TABLE = "compaction-table"
PROBE = "compaction-probe"
BROKERS = 3
CLEANER_BACKOFF_MS = 500
MB = 1_000_000
NS_PER_MS = 1_000_000
CLEAN_TIMEOUT_S = 1800       # a bound on phase 2 whatever the machine


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="python -m bench.compaction", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000,
                        help="updates written to the table topic (default 300000)")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes")
    parser.add_argument("--keys", type=int, default=1000, help="distinct keys")
    parser.add_argument("--segment-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--probe-rate", type=float, default=200.0,
                        help="probe records a second (one at a time, acks=all)")
    parser.add_argument("--probe-seconds", type=float, default=30.0,
                        help="how long the idle phase probes (default 30)")
    parser.add_argument("--io-max-bytes-per-second", type=float, default=None,
                        help="log.cleaner.io.max.bytes.per.second (default unbounded)")
    parser.add_argument("--results", default=None, help="a results store to add the runs to")
    parser.add_argument("--dir", default=None, help="where the cluster lives (default a "
                                                    "temporary directory)")
    return parser


def fill(bootstrap: str, records: int, size: int, keys: int) -> None:
    from node.client import Producer
    rng = np.random.default_rng(26)
    chunk = 10_000
    with Producer(bootstrap, acks="all", linger_ms=5, batch_size=256 * 1024) as producer:
        for start in range(0, records, chunk):
            n = min(chunk, records - start)
            values = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
            names = [b"key-%06d" % k for k in rng.integers(0, keys, size=n)]
            producer.send_many(TABLE, values, keys=names, partition=0)
        producer.flush(600)


class Probe:
    """One record at a time to the probe topic; each send's latency."""

    def __init__(self, bootstrap: str, rate: float) -> None:
        from node.client import Producer
        self.producer = Producer(bootstrap, acks="all", linger_ms=0)
        self.interval_ns = int(1e9 / rate)
        self.send_ns: list[int] = []
        self.ack_ns: list[int] = []
        self.offsets: list[int] = []

    def run(self, until, size: int) -> None:
        value = b"p" * size
        next_ns = time.perf_counter_ns()
        while not until():
            now = time.perf_counter_ns()
            if now < next_ns:
                time.sleep((next_ns - now) / 1e9)
            next_ns += self.interval_ns
            sent = time.perf_counter_ns()
            offset = self.producer.send(PROBE, value, partition=0).get(30).offset
            self.ack_ns.append(time.perf_counter_ns())
            self.send_ns.append(sent)
            self.offsets.append(offset)

    def reset(self) -> None:
        self.send_ns, self.ack_ns, self.offsets = [], [], []

    def latencies_ms(self) -> np.ndarray:
        return (np.asarray(self.ack_ns) - np.asarray(self.send_ns)) / NS_PER_MS

    def table(self, size: int):
        import pyarrow as pa
        shift = time.time_ns() - time.perf_counter_ns()
        send, ack = np.asarray(self.send_ns, np.int64), np.asarray(self.ack_ns, np.int64)
        n = len(send)
        return pa.table({
            "record": pa.array(np.arange(n, dtype=np.int64)),
            "send_time": pa.array((send + shift) // 1000, type=pa.timestamp("us", tz="UTC")),
            "ack_time": pa.array((ack + shift) // 1000, type=pa.timestamp("us", tz="UTC")),
            "partition": pa.array(np.zeros(n, np.int32)),
            "offset": pa.array(np.asarray(self.offsets, np.int64)),
            "latency_ms": pa.array((ack - send) / NS_PER_MS),
            "bytes": pa.array(np.full(n, size, np.int32)),
            "error": pa.array([None] * n, type=pa.string()),
        })

    def close(self) -> None:
        self.producer.close()


def cleaner_stats(cluster, broker: int) -> dict:
    path = cluster.broker_dir(broker) / "logs" / "cleaner-stats.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def percentiles(latencies: np.ndarray) -> dict:
    if len(latencies) == 0:
        return {"count": 0}
    return {"count": int(len(latencies)), "p50_ms": float(np.percentile(latencies, 50)),
            "p99_ms": float(np.percentile(latencies, 99)), "max_ms": float(latencies.max())}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from node.client import Admin
    from node.cluster import Cluster
    run_store = None
    if args.results:
        from node.perf import results
        run_store = results
        results.Run.start(args.results, "compaction", args).abandon()   # writable, early
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench-compaction-"))
    config = {"log.cleaner.backoff.ms": str(CLEANER_BACKOFF_MS)}
    if args.io_max_bytes_per_second:
        config["log.cleaner.io.max.bytes.per.second"] = str(args.io_max_bytes_per_second)
    cluster = Cluster.up(directory / "cluster", BROKERS, config=config)
    probe = None
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(TABLE, 1, BROKERS, config={
                "segment.bytes": str(args.segment_bytes), "cleanup.policy": "delete",
                "retention.ms": "-1"})
            admin.create_topic(PROBE, 1, BROKERS, config={"min.insync.replicas": "2"})
        started = time.monotonic()
        fill(cluster.bootstrap_servers, args.records, args.record_size, args.keys)
        filled_s = time.monotonic() - started
        print(f"filled {TABLE}: {args.records:,} records of {args.record_size} B over "
              f"{args.keys:,} keys in {filled_s:.1f} s", flush=True)
        probe = Probe(cluster.bootstrap_servers, args.probe_rate)
        probe.run(lambda: len(probe.send_ns) >= 50, 100)      # warm up, not counted
        probe.reset()
        # 1. idle
        idle_end = time.monotonic() + args.probe_seconds
        probe.run(lambda: time.monotonic() >= idle_end, args.record_size)
        idle = probe.latencies_ms()
        idle_table = probe.table(args.record_size)
        probe.reset()
        # 2. cleaning
        before = {b: cleaner_stats(cluster, b) for b in range(BROKERS)}
        with Admin(cluster.bootstrap_servers) as admin:
            admin.alter_configs(TABLE, set={"cleanup.policy": "compact"})
        clean_started = time.monotonic()

        def all_cleaned() -> bool:
            if time.monotonic() - clean_started > CLEAN_TIMEOUT_S:
                raise SystemExit(f"the brokers did not clean {TABLE} in {CLEAN_TIMEOUT_S} s")
            return all(cleaner_stats(cluster, b).get("cleans", 0) >
                       before[b].get("cleans", 0) and not cleaner_stats(cluster, b).get(
                           "cleaning") for b in range(BROKERS))
        probe.run(all_cleaned, args.record_size)
        cleaning_s = time.monotonic() - clean_started
        cleaning = probe.latencies_ms()
        cleaning_table = probe.table(args.record_size)
        per_broker = {}
        for b in range(BROKERS):
            after = cleaner_stats(cluster, b)
            done = {k: after.get(k, 0) - before[b].get(k, 0)
                    for k in ("bytes_read", "bytes_before", "bytes_after", "clean_time_ms",
                              "cleans", "bytes_read_written")}
            # Kafka's figure: MB of log read by the cleaner per second of cleaning
            done["mb_per_s"] = done["bytes_read"] / MB / max(done["clean_time_ms"] / 1000,
                                                            1e-9)
            per_broker[b] = done
        total_bytes = sum(d["bytes_read"] for d in per_broker.values())
        total_s = sum(d["clean_time_ms"] for d in per_broker.values()) / 1000
        summary = {
            "records": args.records, "record_size": args.record_size, "keys": args.keys,
            "segment_bytes": args.segment_bytes,
            "io_max_bytes_per_second": args.io_max_bytes_per_second,
            "cleaned_mb_per_s": total_bytes / MB / max(total_s, 1e-9),
            "cleaned_bytes_read": total_bytes,
            "cleaned_bytes_before": sum(d["bytes_before"] for d in per_broker.values()),
            "cleaned_bytes_after": sum(d["bytes_after"] for d in per_broker.values()),
            "cleaning_wall_s": cleaning_s, "per_broker": per_broker,
            "probe_idle": percentiles(idle), "probe_cleaning": percentiles(cleaning)}
        for b in range(BROKERS):
            per_broker[b]["max_swap_ms"] = cleaner_stats(cluster, b).get("max_swap_ms", 0.0)
        summary["max_swap_ms"] = max(d["max_swap_ms"] for d in per_broker.values())
        for b, d in per_broker.items():
            print(f"broker {b}: cleaned {d['bytes_before'] / MB:.1f} MB -> "
                  f"{d['bytes_after'] / MB:.2f} MB in {d['clean_time_ms'] / 1000:.2f} s "
                  f"({d['bytes_read'] / MB:.1f} MB of log read: {d['mb_per_s']:.1f} MB/s, "
                  f"{d['cleans']} clean(s), longest swap on the loop {d['max_swap_ms']:.0f} ms)",
                  flush=True)
        print(f"cleaning: {summary['cleaned_mb_per_s']:.1f} MB/s of log read per cleaner "
              f"thread ({total_bytes / MB:.1f} MB over {BROKERS} replicas, {cleaning_s:.1f} s "
              f"wall)",
              flush=True)
        for name, stats in (("idle", summary["probe_idle"]),
                            ("cleaning", summary["probe_cleaning"])):
            if stats["count"]:
                print(f"probe produce (acks=all, one at a time) with the cleaner {name:8}: "
                      f"{stats['count']:6d} sends, p50 {stats['p50_ms']:.2f} ms, p99 "
                      f"{stats['p99_ms']:.2f} ms, max {stats['max_ms']:.2f} ms", flush=True)
        if summary["probe_idle"]["count"] and summary["probe_cleaning"]["count"]:
            print(f"produce p99 cleaning / idle: {summary['probe_cleaning']['p99_ms'] / summary['probe_idle']['p99_ms']:.2f}",
                  flush=True)
        if run_store is not None:
            for phase, table in (("idle", idle_table), ("cleaning", cleaning_table)):
                run = run_store.Run.start(args.results, "compaction", args)
                run.tags = {**run.tags, "phase": phase}
                run.add_samples("produce", table)
                path = run.finish(summary=summary, cluster={
                    "bootstrap": cluster.bootstrap_servers, "brokers": BROKERS},
                    topic={"name": PROBE, "partitions": 1, "replication_factor": BROKERS})
                print(f"results: {path}", flush=True)
    finally:
        if probe is not None:
            probe.close()
        cluster.down(grace_s=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
