"""What idempotence costs (issue 12, target of issue 29): acks=all, replication factor 3
throughput with ``enable.idempotence`` true and false, measured alternately in one run.

    python -m bench.perf.idempotence [--records 2000000] [--record-size 100] [--rounds 11]
                                [--warmup-rounds 1] [--batch-size 262144] [--dir DIR]
                                [--warm-memory BYTES]

Three brokers, a topic of 6 partitions (replication factor 3, min.insync.replicas 2);
each round runs ``producer-perf-test`` once with idempotence off and once on (order
alternating), unthrottled, after ``--warmup-rounds`` pairs that are not counted (the
first writes into a fresh cluster map new segments). Prints each run's Kafka line, then the summary.

The runs on a shared machine vary by more than the cost being measured, so the claim
rests on the rounds' *paired* ratios (on/off of the two runs of one round, taken
seconds apart): their median, their spread (min-max and the interquartile range) and a
distribution-free confidence interval of the median (order statistics of the sorted
ratios, from the binomial distribution; it needs at least ``ROUNDS_FOR_CI_MIN`` rounds
for 95%). The verdict on "idempotence costs at most ``TARGET_COST``":

    met        the whole interval is within the target (cost <= 5% at the interval's worst)
    not met    the whole interval is beyond it
    not shown  the interval straddles it (more rounds, or a quieter machine)

On a machine shared with other work the wall-clock rates swing with the neighbours'
load (a round's two runs differ by up to 2x), so each run is also measured by the CPU
it costs: the seconds of user and system time the producer process and every process of
the cluster (ZooKeeper and the brokers, from ``/proc/PID/stat``) spent on it, less what a
one-record run costs (the producer's start; median of ``CALIBRATION_RUNS``), per record.
Run CPU-bound, throughput is cores / CPU per record, so the same paired statistics over
records per CPU-second (``cpu``) estimate the same cost without the time spent waiting
for a core (the neighbours still disturb caches and clocks: on the shared VM this
narrowed the IQR of the ratios from 0.63-1.14 to 0.78-1.04, not to nothing).

``--warm-memory BYTES`` writes and removes a file of that size in the cluster's directory
before every run (``bench.perf.cluster``'s docstring says why: on a VM whose host takes
back freed memory, a run whose logs grow into memory the guest has not used lately is
bound by the host's faults, ~0.35-2 GB/s, not by the brokers); each run's line then
ends with the warm-up's GB/s.

The last line is the summary as JSON (``cpu``: the same keys over records per CPU-second)::

    {"rounds": 11, "records": ..., "off_median": ..., "on_median": ..., "ratio_median": ...,
     "ratio_min": ..., "ratio_max": ..., "ratio_q1": ..., "ratio_q3": ...,
     "ratio_ci": [lo, hi], "ci_confidence": 0.96, "cost_median_percent": ...,
     "verdict": "met"|"not met"|"not shown", "cpu": {...}}
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TOPIC = "idempotence"
TARGET_COST = 0.05          # idempotence may cost at most 5% of the throughput
CONFIDENCE = 0.95
ROUNDS_FOR_CI_MIN = 6       # the fewest paired ratios with a 95% interval for their median
ROUNDS_MAX = 1000
RUN_TIMEOUT_S = 900
CALIBRATION_RUNS = 3        # one-record runs per mode: the CPU a run costs besides its records
# Bound the disk a long run fills (rounds x 2 x records x 3 replicas): segments of
# SEGMENT_BYTES, at most RETENTION_BYTES kept per partition, checked every second. Small
# enough that every run rolls each log several times and retention deletes alike (a run
# of 2 M records writes ~35 MB per partition): with 64 MiB segments every other run
# rolled and the two runs of a round were not alike (paired ratios' IQR 0.65-1.47 at 13
# rounds, against 0.88-1.06 with 8 MiB, 2026-11-27).
SEGMENT_BYTES = 8 * 1024 * 1024
RETENTION_BYTES = 32 * 1024 * 1024
RETENTION_CHECK_MS = 1000


def median_interval(values: list[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float] | None:
    """A distribution-free interval for the median of ``values``: (low, high, its actual
    confidence), the k-th smallest and k-th largest with the largest k such that
    P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2; None when n is too small."""
    assert 0 < confidence < 1
    n = len(values)
    ordered = sorted(values)
    tail = (1 - confidence) / 2
    best = None
    cumulative = 0.0
    for k in range(1, n // 2 + 1):     # P(B <= k - 1) is the chance the median is below x_(k)
        cumulative += math.comb(n, k - 1) / 2 ** n
        if cumulative > tail:
            break
        best = (ordered[k - 1], ordered[n - k], 1 - 2 * cumulative)
    if best is not None:
        assert best[0] <= statistics.median(ordered) <= best[1]
    return best


def verdict(cost_interval: tuple[float, float] | None, target: float = TARGET_COST) -> str:
    """"met" when the cost's whole interval is within ``target``, "not met" when it is
    all beyond it, "not shown" otherwise (or without an interval)."""
    if cost_interval is None:
        return "not shown"
    low, high = cost_interval
    assert low <= high
    if high <= target:
        return "met"
    if low > target:
        return "not met"
    return "not shown"


def summarize(off: list[float], on: list[float], records: int) -> dict:
    """The figures of paired runs: ``off[i]`` and ``on[i]`` are round i's two rates."""
    assert len(off) == len(on) >= 1, "every round measures both"
    assert all(rate > 0 for rate in off + on)
    ratios = [b / a for a, b in zip(off, on)]
    ordered = sorted(ratios)
    if len(ratios) >= 2:
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    else:
        q1 = q3 = ratios[0]
    interval = median_interval(ratios)
    ratio_median = statistics.median(ratios)
    cost_interval = None if interval is None else (1 - interval[1], 1 - interval[0])
    return {
        "rounds": len(ratios), "records": records,
        "off_median": round(statistics.median(off), 1),
        "on_median": round(statistics.median(on), 1),
        "ratio_median": round(ratio_median, 4),
        "ratio_min": round(ordered[0], 4), "ratio_max": round(ordered[-1], 4),
        "ratio_q1": round(q1, 4), "ratio_q3": round(q3, 4),
        "ratio_ci": None if interval is None else [round(interval[0], 4), round(interval[1], 4)],
        "ci_confidence": None if interval is None else round(interval[2], 3),
        "cost_median_percent": round(100 * (1 - ratio_median), 2),
        "verdict": verdict(cost_interval),
    }


def summary_line(summary: dict, record_size: int) -> str:
    interval = summary["ratio_ci"]
    shown = ("no interval: fewer than "
             f"{ROUNDS_FOR_CI_MIN} rounds" if interval is None else
             f"{100 * summary['ci_confidence']:.0f}% interval of the median "
             f"{interval[0]:.3f}-{interval[1]:.3f}")
    return (f"acks=all RF=3, {summary['records']:,} records of {record_size} B, "
            f"{summary['rounds']} paired rounds: idempotence off {summary['off_median']:,.0f} "
            f"records/s, on {summary['on_median']:,.0f} (medians); on/off per round: median "
            f"{summary['ratio_median']:.3f} (cost {summary['cost_median_percent']:.1f}%), "
            f"IQR {summary['ratio_q1']:.3f}-{summary['ratio_q3']:.3f}, min-max "
            f"{summary['ratio_min']:.3f}-{summary['ratio_max']:.3f}, {shown}; "
            f"cost <= {100 * TARGET_COST:.0f}%: {summary['verdict']}")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime, stime


def cluster_cpu_s(cluster) -> float:
    return sum(process_cpu_s(pid) for pid in (p.pid() for p in cluster.processes.values())
               if pid is not None)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(bootstrap: str, records: int, size: int, batch: int, idempotent: bool
             ) -> tuple[float, str]:
    result = subprocess.run(
        [sys.executable, "-m", "node.cli", "producer-perf-test", "--topic", TOPIC,
         "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
         "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
         f"batch.size={batch}", f"enable.idempotence={str(idempotent).lower()}"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if result.returncode != 0:
        raise SystemExit(f"producer-perf-test failed: {result.stderr.strip()[-500:]}")
    line = result.stdout.strip().splitlines()[-1]
    return float(line.split(" records/sec")[0].split(", ")[-1]), line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.idempotence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--warmup-rounds", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=262_144)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--warm-memory", type=int, default=0, metavar="BYTES",
                        help="write and remove a file of BYTES before every run (0: not)")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= ROUNDS_MAX:
        parser.error(f"--rounds must be 1..{ROUNDS_MAX}, got {args.rounds}")
    if not 0 <= args.warmup_rounds <= ROUNDS_MAX:
        parser.error(f"--warmup-rounds must be 0..{ROUNDS_MAX}, got {args.warmup_rounds}")
    if args.records < 1 or args.record_size < 1 or args.batch_size < 1:
        parser.error("--records, --record-size and --batch-size must be positive")
    from bench.perf.cluster import WARM_MEMORY_BYTES_MAX
    if not 0 <= args.warm_memory <= WARM_MEMORY_BYTES_MAX:
        parser.error(f"--warm-memory must be in [0, {WARM_MEMORY_BYTES_MAX}], "
                     f"got {args.warm_memory}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from node.client import Admin
    from node.cluster import Cluster
    from bench.perf.cluster import warm_memory
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench-idempotence-"))
    cluster = Cluster.up(directory / "cluster", 3,
                         config={"log.retention.check.interval.ms": str(RETENTION_CHECK_MS)})
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(TOPIC, 6, 3, config={
                "min.insync.replicas": "2", "segment.bytes": str(SEGMENT_BYTES),
                "retention.bytes": str(RETENTION_BYTES)})
        def measured(records: int, idempotent: bool) -> tuple[float, str, float]:
            cpu_before = cluster_cpu_s(cluster) + children_cpu_s()
            rate, line = run_once(cluster.bootstrap_servers, records, args.record_size,
                                  args.batch_size, idempotent)
            return rate, line, cluster_cpu_s(cluster) + children_cpu_s() - cpu_before

        # What a run costs besides its records (the producer's start, connecting): the
        # median of CALIBRATION_RUNS one-record runs, taken off every run's CPU.
        fixed_cpu_s = {idempotent: statistics.median(measured(1, idempotent)[2]
                                                     for _ in range(CALIBRATION_RUNS))
                       for idempotent in (False, True)}
        print(f"fixed CPU of a run (median of {CALIBRATION_RUNS} one-record runs): off "
              f"{fixed_cpu_s[False]:.2f} s, on {fixed_cpu_s[True]:.2f} s", flush=True)
        rates = {False: [], True: []}
        per_cpu_s = {False: [], True: []}       # records per CPU-second, every process
        for round_ in range(-args.warmup_rounds, args.rounds):
            for idempotent in ((False, True) if round_ % 2 == 0 else (True, False)):
                warmed = warm_memory(str(directory), args.warm_memory)
                rate, line, cpu_s = measured(args.records, idempotent)
                cpu_s = max(cpu_s - fixed_cpu_s[idempotent], 1e-3)
                if round_ >= 0:
                    rates[idempotent].append(rate)
                    per_cpu_s[idempotent].append(args.records / cpu_s)
                name = f"round {round_ + 1}" if round_ >= 0 else "warm-up"
                warm_note = (f" [warm-up {warmed['warm_memory']['gb_per_s']} GB/s]"
                             if warmed else "")
                print(f"{name} idempotence {'on ' if idempotent else 'off'}: {line} "
                      f"[{1e6 * cpu_s / args.records:.2f} CPU us/record]{warm_note}",
                      flush=True)
        summary = summarize(rates[False], rates[True], args.records)
        summary["cpu"] = summarize(per_cpu_s[False], per_cpu_s[True], args.records)
        print(summary_line(summary, args.record_size), flush=True)
        print("by CPU per record (records per CPU-second): "
              + summary_line(summary["cpu"], args.record_size).replace(" records/s", ""),
              flush=True)
        print(json.dumps(summary), flush=True)
    finally:
        cluster.down(grace_s=10)
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
