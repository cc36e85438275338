"""Cluster throughput and latency: one producer process against a live 3-broker cluster.

    python -m bench.perf.cluster [--seconds 5] [--batch-size 262144] [--warm-memory BYTES]

Starts zk_lite and 3 brokers under a temporary directory (the supervisor), creates the
topics, and prints one JSON line per workload (records of 100 bytes, 6 partitions):

- ``acks1_rf1``: acks=1, replication factor 1, records/s and MB/s;
- ``acksall_rf3``: acks=all, replication factor 3, min.insync.replicas=2;
- ``latency_acksall_rf3``: single-record sends with acks=all at 1,000 records/s,
  p50/p99/max of the time from send() to the acknowledgement, in ms.

The producer encodes records with ``Producer.send_many`` (per batch, not per record) and
keeps up to ``--in-flight-bytes`` of records unacknowledged (default 6 MiB, as Kafka's
producer bounds what it holds by bytes, ``buffer.memory``). Until 2026-11-27 the window
was 24 *batches*: 6 MiB with 256 KiB batches, but 384 KiB with the default 16 KiB
batch, so each call of 60,000 records (about 375 such batches) was waited out almost
whole before the next: the run measured a stop-and-wait loop, not the cluster. The
cluster is stopped and its shared memory removed at the end.

Every record the throughput workloads write lands in new page cache (three copies with
replication factor 3), and on a VM whose host takes back the memory the guest frees
(this project's: within about 10 seconds) and backs it again only when touched, new
page cache grows at the rate of ``bench.perf.limits``' ``page_cache_growth`` (~0.35-2
GB/s, it varies with the host) instead of ``page_cache``'s ~5 GB/s: that, not the
brokers, can be what a run measures. ``--warm-memory BYTES`` writes and removes a file
of that size under the cluster's directory right before each throughput workload, so
its logs grow into memory the host still backs, as on a machine whose memory is its
own; the line then carries ``warm_memory``: the bytes, the seconds it took and its
GB/s (a low rate says the memory was cold). Compare a run with and without it in one
sitting.

Each throughput line also says how fast the machine's page cache grew during the run
(``page_cache_grew_mb_per_s``: the change of ``Cached`` in ``/proc/meminfo`` over the
run's seconds; every replica's appends land there, so acks=all with replication factor
3 grows it by three times its own MB/s and more: 3.4 times with the batches' and indexes'
overhead, 2026-11-27). Set it beside ``bench.perf.limits``'
``page_cache_growth`` of the same sitting: when the two are close, the run measured
this machine's memory, not the brokers.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np
from bench.perf import overrides as override

RECORD_BYTES = 100
PARTITIONS = 6
WARM_MEMORY_BYTES_MAX = 16 * 1024 ** 3
# Records' bytes kept unacknowledged by the throughput workloads (24 batches of 256 KiB).
IN_FLIGHT_BYTES = 24 * 256 * 1024


MEMINFO = "/proc/meminfo"


def cached_bytes(meminfo: str = MEMINFO) -> int | None:
    """The page cache's size (``Cached:`` of /proc/meminfo), or None where there is none."""
    try:
        with open(meminfo) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name == "Cached":
                    return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _throughput(producer, topic: str, seconds: float, records_per_call: int,
                in_flight_bytes: int) -> dict:
    """Send ``records_per_call`` records per ``send_many`` for ``seconds``; while more
    than ``in_flight_bytes`` of records are unacknowledged, wait for the oldest batch."""
    values = np.frombuffer(os.urandom(RECORD_BYTES * records_per_call), dtype=np.uint8
                           ).reshape(records_per_call, RECORD_BYTES)
    pending: collections.deque = collections.deque()      # (future, its records' bytes)
    pending_bytes = sent = 0
    cached_before = cached_bytes()
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        futures = producer.send_many(topic, values)
        each = RECORD_BYTES * records_per_call // len(futures)
        pending.extend((f, each) for f in futures)
        pending_bytes += each * len(futures)
        sent += records_per_call
        while pending_bytes > in_flight_bytes:
            f, size = pending.popleft()
            f.get(timeout=60)
            pending_bytes -= size
    for f, _ in pending:
        f.get(timeout=60)
    elapsed = time.perf_counter() - started
    cached_after = cached_bytes()
    result = {"records": sent, "seconds": round(elapsed, 2),
              "records_per_s": round(sent / elapsed),
              "mb_per_s": round(sent * RECORD_BYTES / elapsed / 1e6, 1)}
    if cached_before is not None and cached_after is not None:
        result["page_cache_grew_mb_per_s"] = round(
            (cached_after - cached_before) / elapsed / 1e6, 1)
    return result


def warm_memory(directory: str, size_bytes: int) -> dict:
    """Write and remove a file of ``size_bytes`` under ``directory`` (see the module's
    docstring): ``{"warm_memory": {bytes, seconds, gb_per_s}}``, or {} for 0 bytes."""
    if size_bytes <= 0:
        return {}
    from bench.perf.limits import page_cache_rate
    started = time.perf_counter()
    rate = page_cache_rate(size_bytes, directory=directory)
    return {"warm_memory": {"bytes": size_bytes,
                            "seconds": round(time.perf_counter() - started, 2),
                            "gb_per_s": round(rate, 2)}}


def _latency(producer, topic: str, count: int, rate_per_s: int) -> dict:
    value = os.urandom(RECORD_BYTES)
    samples = []
    interval = 1.0 / rate_per_s
    next_send = time.perf_counter()
    for i in range(count):
        now = time.perf_counter()
        if now < next_send:
            time.sleep(next_send - now)
        sent_at = time.perf_counter()
        producer.send(topic, value, partition=i % PARTITIONS).get(timeout=30)
        samples.append((time.perf_counter() - sent_at) * 1000)
        next_send += interval
    samples.sort()
    return {"records": count, "p50_ms": round(samples[len(samples) // 2], 3),
            "p99_ms": round(samples[int(len(samples) * 0.99)], 3),
            "max_ms": round(samples[-1], 3), "mean_ms": round(statistics.fmean(samples), 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=256 * 1024)
    parser.add_argument("--records-per-call", type=int, default=60_000)
    parser.add_argument("--in-flight-bytes", type=int, default=IN_FLIGHT_BYTES,
                        help="records' bytes kept unacknowledged (default %(default)s)")
    parser.add_argument("--latency-records", type=int, default=3000)
    parser.add_argument("--warm-memory", type=int, default=0, metavar="BYTES",
                        help="write and remove a file of BYTES before each throughput "
                             "workload (see above; 0: not)")
    override.add_argument(parser)
    args = parser.parse_args(argv)
    if not 0 <= args.warm_memory <= WARM_MEMORY_BYTES_MAX:
        parser.error(f"--warm-memory must be in [0, {WARM_MEMORY_BYTES_MAX}], "
                     f"got {args.warm_memory}")
    if args.in_flight_bytes < 1:
        parser.error(f"--in-flight-bytes must be at least 1, got {args.in_flight_bytes}")
    overrides = override.parse(parser, args.override)

    from node.client.admin import Admin
    from node.cluster import Cluster
    from node.client.producer import Producer

    cluster_id = "bench" + uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="mk-bench-") as tmp:
        cluster = Cluster.up(os.path.join(tmp, "cluster"), 3, cluster_id=cluster_id,
                             config=overrides)
        try:
            admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
            admin.create_topic("rf1", PARTITIONS, 1)
            admin.create_topic("rf3", PARTITIONS, 3, config={"min.insync.replicas": "2"})
            admin.close()
            for name, topic, acks in (("acks1_rf1", "rf1", 1), ("acksall_rf3", "rf3", "all")):
                producer = Producer(bootstrap_servers=cluster.bootstrap_servers, acks=acks,
                                    batch_size=args.batch_size, linger_ms=0)
                _throughput(producer, topic, 1.0, args.records_per_call,       # warm
                            args.in_flight_bytes)
                warmed = warm_memory(tmp, args.warm_memory)
                result = _throughput(producer, topic, args.seconds, args.records_per_call,
                                     args.in_flight_bytes)
                producer.close()
                print(json.dumps({"workload": name, **result, **warmed}), flush=True)
            producer = Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
            _latency(producer, "rf3", 200, 1000)  # warm
            result = _latency(producer, "rf3", args.latency_records, 1000)
            producer.close()
            print(json.dumps({"workload": "latency_acksall_rf3", "rate_per_s": 1000, **result}),
                  flush=True)
        finally:
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
