"""What transactions cost (issue 28): a transactional producer against an idempotent one,
and a read_committed consumer against a read_uncommitted one, measured in one run.

    python -m bench.perf.transactions [--sizes 1,10,100] [--seconds 10] [--rounds 3]
                                      [--record-size 100] [--read-records 200000] [--dir DIR]

Three brokers, a topic of 6 partitions (replication factor 3, min.insync.replicas 2),
the native client, acks=all. For each transaction size k (records per transaction), in
each round, for ``--seconds`` each, alternating which goes first:

- ``txn``: one transactional producer: begin, k sends (partitions in turn), commit;
  the figures are transactions/s, records/s and the commit's p50/p99 (commit_transaction
  waits for the batches, EndTxn and the markers' acks=all append on every partition);
- ``idem/unit``: one idempotent producer, the same k sends, then ``flush()``: the same
  unit of work made durable, without the transaction;
- ``idem/stream``: the idempotent producer sending without waiting (flush at the end):
  its throughput.

Then the consumers: ``--read-records`` records written in committed transactions of
1,000 (with one aborted transaction of 1,000 in every ten), read from the start by one
consumer at read_uncommitted and one at read_committed, alternating, records/s.

Prints a line per measurement, then the medians and the ratios. Target (issue 28):
transactional throughput at 100 records per transaction at least 70% of idempotent.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

TOPIC = "transactions"
READ_TOPIC = "transactions-read"
PARTITIONS = 6
READ_TXN_RECORDS = 1_000
ABORT_EVERY = 10              # one aborted transaction in every ten, in the read topic
READ_TIMEOUT_S = 300


def _producer(bootstrap: str, transactional: bool):
    from node.client import Producer
    if transactional:
        p = Producer(bootstrap, acks="all", linger_ms=0,
                     transactional_id=f"bench-txn-{uuid.uuid4().hex[:8]}")
        p.init_transactions(timeout_s=60)
        return p
    return Producer(bootstrap, acks="all", linger_ms=0, enable_idempotence=True)


def run_units(producer, k: int, seconds: float, value: bytes, transactional: bool) -> dict:
    """Units of k sends for ``seconds``: each a transaction (begin, sends, commit) or, for
    the idempotent producer, the sends then ``flush()``; the wait is timed."""
    waits, n, sent = [], 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if transactional:
            producer.begin_transaction()
        for i in range(k):
            producer.send(TOPIC, value, partition=(sent + i) % PARTITIONS)
        sent += k
        t0 = time.perf_counter()
        if transactional:
            producer.commit_transaction(timeout_s=60)
        else:
            producer.flush(timeout=60)
        waits.append((time.perf_counter() - t0) * 1000)
        n += 1
    elapsed = seconds + max(0.0, time.monotonic() - end)
    return {"units": n / elapsed, "records": n * k / elapsed,
            "p50": _pct(waits, 50), "p99": _pct(waits, 99)}


def run_idem_stream(producer, seconds: float, value: bytes) -> dict:
    n = 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        for i in range(1000):
            producer.send(TOPIC, value, partition=(n + i) % PARTITIONS)
        n += 1000
    producer.flush(timeout=120)
    return {"records": n / (time.monotonic() - start)}


def _pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def fill_read_topic(bootstrap: str, records: int, value: bytes) -> int:
    """Write ``records`` committed records in transactions of READ_TXN_RECORDS, with an
    aborted one of the same size after every ABORT_EVERY - 1; returns the committed count."""
    producer = _producer(bootstrap, True)
    committed = 0
    try:
        n = 0
        while committed < records:
            producer.begin_transaction()
            for i in range(READ_TXN_RECORDS):
                producer.send(READ_TOPIC, value, partition=i % PARTITIONS)
            n += 1
            if n % ABORT_EVERY == 0:
                producer.flush(timeout=60)     # written, then aborted (an abort drops
                producer.abort_transaction(timeout_s=60)   # what is not sent yet)
            else:
                producer.commit_transaction(timeout_s=60)
                committed += READ_TXN_RECORDS
    finally:
        producer.close()
    return committed


def read_all(bootstrap: str, isolation: str, expected: int) -> tuple[float, int]:
    from node.client import Consumer
    from node.client.types import TopicPartition
    consumer = Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest",
                        max_poll_records=100_000)
    try:
        consumer.assign([TopicPartition(READ_TOPIC, p) for p in range(PARTITIONS)])
        got = 0
        start = time.monotonic()
        deadline = start + READ_TIMEOUT_S
        while got < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"{isolation}: read {got:,} of {expected:,} records in "
                                 f"{READ_TIMEOUT_S} s")
            got += len(consumer.poll(500))
        return got / (time.monotonic() - start), got
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.transactions",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,100",
                        help="records per transaction, comma-separated (\"\": only the "
                        "consumers)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--read-records", type=int, default=200_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes takes comma-separated integers, got {args.sizes!r}")
    if (not sizes and not args.read_records) or min(sizes, default=1) < 1 \
            or args.seconds <= 0 or args.rounds < 1 \
            or args.record_size < 1 or args.read_records < 0:
        parser.error("--sizes, --seconds, --rounds, --record-size must be positive")
    from node.client import Admin
    from node.cluster import Cluster
    value = b"x" * args.record_size
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench-transactions-"))
    cluster = Cluster.up(directory / "cluster", 3)
    try:
        bootstrap = cluster.bootstrap_servers
        with Admin(bootstrap) as admin:
            for topic in (TOPIC, READ_TOPIC):
                admin.create_topic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
        if sizes:
            measure_producers(bootstrap, sizes, args, value)
        if args.read_records:
            measure_consumers(bootstrap, args, value)
    finally:
        cluster.down(grace_s=10)
    return 0


def measure_producers(bootstrap: str, sizes: list[int], args, value: bytes) -> None:
    txn, idem = _producer(bootstrap, True), _producer(bootstrap, False)
    figures: dict = {}
    try:
        for round_ in range(args.rounds):
            for k in sizes:
                order = ("txn", "idem") if round_ % 2 == 0 else ("idem", "txn")
                for kind in order:
                    r = run_units(txn if kind == "txn" else idem, k, args.seconds,
                                  value, kind == "txn")
                    figures.setdefault((kind, k), []).append(r)
                    print(f"round {round_ + 1} k={k:>4} {kind:>4}: {r['units']:,.1f} "
                          f"units/s, {r['records']:,.0f} records/s, wait p50 "
                          f"{r['p50']:.2f} ms p99 {r['p99']:.2f} ms", flush=True)
            r = run_idem_stream(idem, args.seconds, value)
            figures.setdefault(("stream", 0), []).append(r)
            print(f"round {round_ + 1} idempotent stream: {r['records']:,.0f} records/s",
                  flush=True)
    finally:
        txn.close()
        idem.close()
    stream = statistics.median(r["records"] for r in figures[("stream", 0)])
    print(f"== medians of {args.rounds} rounds, {args.record_size} B records, acks=all, "
          f"RF 3, one producer", flush=True)
    for k in sizes:
        t = {f: statistics.median(r[f] for r in figures[("txn", k)])
             for f in ("units", "records", "p50", "p99")}
        i = {f: statistics.median(r[f] for r in figures[("idem", k)])
             for f in ("units", "records", "p50", "p99")}
        print(f"{k} records/transaction: {t['units']:,.1f} transactions/s "
              f"({t['records']:,.0f} records/s, commit p50 {t['p50']:.2f} ms p99 "
              f"{t['p99']:.2f} ms); idempotent with a flush per {k}: "
              f"{i['records']:,.0f} records/s (flush p50 {i['p50']:.2f} ms); "
              f"transactional/idempotent-unit {t['records'] / i['records']:.2f}, "
              f"transactional/idempotent-stream {t['records'] / stream:.3f}", flush=True)
    print(f"idempotent stream (no waiting): {stream:,.0f} records/s", flush=True)


def measure_consumers(bootstrap: str, args, value: bytes) -> None:
    committed = fill_read_topic(bootstrap, args.read_records, value)
    rates: dict = {"read_uncommitted": [], "read_committed": []}
    total = committed + (committed // READ_TXN_RECORDS // (ABORT_EVERY - 1)) \
        * READ_TXN_RECORDS
    for round_ in range(args.rounds):
        order = ("read_uncommitted", "read_committed") if round_ % 2 == 0 \
            else ("read_committed", "read_uncommitted")
        for isolation in order:
            expected = committed if isolation == "read_committed" else total
            rate, got = read_all(bootstrap, isolation, expected)
            rates[isolation].append(rate)
            print(f"round {round_ + 1} {isolation}: {got:,} records, {rate:,.0f} "
                  f"records/s", flush=True)
    ru = statistics.median(rates["read_uncommitted"])
    rc = statistics.median(rates["read_committed"])
    print(f"consumer, {committed:,} committed records (+ aborted 1 in "
          f"{ABORT_EVERY}): read_uncommitted {ru:,.0f} records/s, read_committed "
          f"{rc:,.0f} records/s (committed/uncommitted {rc / ru:.2f})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
