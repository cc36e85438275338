"""What idempotence costs (issue 12): acks=all, replication factor 3 throughput with
``enable.idempotence`` true and false, measured alternately in one run.

    python -m bench.perf.idempotence [--records 1000000] [--record-size 100] [--rounds 3]
                                [--batch-size 262144] [--dir DIR]

Three brokers, a topic of 6 partitions (replication factor 3, min.insync.replicas 2);
each round runs ``producer-perf-test`` once with idempotence off and once on (order
alternating), unthrottled. Prints each run's Kafka line and the medians with their
ratio. Target: idempotence costs at most 5%.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TOPIC = "idempotence"


def run_once(bootstrap: str, records: int, size: int, batch: int, idempotent: bool
             ) -> tuple[float, str]:
    result = subprocess.run(
        [sys.executable, "-m", "node.cli", "producer-perf-test", "--topic", TOPIC,
         "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
         "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
         f"batch.size={batch}", f"enable.idempotence={str(idempotent).lower()}"],
        capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"producer-perf-test failed: {result.stderr.strip()[-500:]}")
    line = result.stdout.strip().splitlines()[-1]
    return float(line.split(" records/sec")[0].split(", ")[-1]), line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.idempotence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=262_144)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    from node.client import Admin
    from node.cluster import Cluster
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench-idempotence-"))
    cluster = Cluster.up(directory / "cluster", 3)
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(TOPIC, 6, 3, config={"min.insync.replicas": "2"})
        rates = {False: [], True: []}
        for round_ in range(args.rounds):
            for idempotent in ((False, True) if round_ % 2 == 0 else (True, False)):
                rate, line = run_once(cluster.bootstrap_servers, args.records,
                                      args.record_size, args.batch_size, idempotent)
                rates[idempotent].append(rate)
                print(f"idempotence {'on ' if idempotent else 'off'}: {line}", flush=True)
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"acks=all RF=3, {args.records:,} records of {args.record_size} B, median of "
              f"{args.rounds}: idempotence off {off:,.0f} records/s, on {on:,.0f} records/s "
              f"(on/off {on / off:.3f}: idempotence costs {100 * (1 - on / off):.1f}%)",
              flush=True)
    finally:
        cluster.down(grace_s=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
