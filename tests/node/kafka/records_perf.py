"""Records/s of node.kafka.records, both ways: ``python -m tests.node.kafka.records_perf``.

100-byte values (random letters, as Kafka's producer-perf-test), null keys, no headers;
batches of 1,000 records (and single records: a linger.ms=0 producer); uncompressed and
each codec. Records per CPU second (process time: other load on a shared machine
stretches wall time, much less CPU time), the best of several rounds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from node.kafka.records import kafka_to_log, log_to_kafka
from shm import batch

T0 = 1_700_000_000_000


def rate(fn, records: int, seconds: float, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        calls = 0
        start = time.process_time()
        while time.process_time() - start < seconds / rounds:
            fn()
            calls += 1
        best = min(best, (time.process_time() - start) / calls)
    return records / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 1],
                        help="records per batch (several: one table each)")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3.0, help="per figure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--codecs", default="none,lz4,snappy,zstd,gzip")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    for n in args.records:
        values = rng.integers(65, 91, size=(n, args.value_bytes), dtype=np.uint8)
        stamps = T0 + np.sort(rng.integers(0, 50, n))
        ours = bytes(batch.build_batch(values, None, stamps))
        for codec in args.codecs.split(","):
            kafka = b"".join(bytes(b) for b in log_to_kafka(ours, compression=codec))
            to_log = rate(lambda: kafka_to_log(kafka), n, args.seconds, args.rounds)
            to_kafka = rate(lambda: log_to_kafka(ours, compression=codec), n, args.seconds,
                            args.rounds)
            print(f"{n:>5} records x {args.value_bytes} B, {codec:>6}: kafka_to_log "
                  f"{to_log:>12,.0f} records/s   log_to_kafka {to_kafka:>12,.0f} records/s",
                  flush=True)


if __name__ == "__main__":
    main()
