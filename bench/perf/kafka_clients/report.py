"""The benchmark's outputs: its runs in the results store (``node.perf.results``), the
table with the issue's targets, and the brokers' profiles."""
from __future__ import annotations

import argparse
import pstats
import statistics
import sys
from pathlib import Path

from bench.perf.kafka_clients.measure import RECORD_BYTES
from node.perf import results
from node.perf.common import MB_BYTES

TOOL = "kafka-clients"
NATIVE = "minikafka"
LIBRDKAFKA = "confluent-kafka"
# The targets: librdkafka against node.client.
PRODUCE_RATIO_MIN = 0.5
CONSUME_RATIO_MIN = 0.5
WRITE_P50_EXTRA_MS_MAX = 0.2
PROFILE_LINES = 25


class Store:
    """Writes each phase of each client as one run of the results store, tagged with the
    client (what ``minikafka analyze`` keys its curves on), the phase and the round."""

    def __init__(self, root: str, bootstrap: dict, partitions: int) -> None:
        self.root = root
        self.bootstrap = bootstrap
        self.partitions = partitions

    def _start(self, client, phase: str, round_: int, arguments: argparse.Namespace):
        run = results.Run.start(self.root, TOOL, arguments, argv=list(sys.argv))
        run.tags = {**run.tags, "client": client.name, "wire": client.wire, "phase": phase,
                    "round": round_}
        return run

    def _describe(self, client, topic: str) -> tuple[dict, dict]:
        cluster, about = results.describe(self.bootstrap["native"], topic)
        cluster["kafka_bootstrap_servers"] = self.bootstrap["kafka"]
        cluster["client_bootstrap_servers"] = self.bootstrap[client.wire]
        return cluster, about

    def produce(self, client, phase: str, round_: int, topic: str, records: int,
                throughput: float, result) -> Path:
        from node.perf.producer import samples_table
        arguments = argparse.Namespace(num_records=records, record_size=RECORD_BYTES,
                                       throughput=throughput)
        run = self._start(client, phase, round_, arguments)
        run.add_samples("produce", samples_table(result.units, arguments))
        cluster, about = self._describe(client, topic)
        cluster["producer_props"] = dict(result.settings)
        return run.finish(summary=result.summary, cluster=cluster, topic=about)

    def consume(self, client, round_: int, topic: str, result) -> Path:
        from node.perf.consumer import seconds_table
        arguments = argparse.Namespace(topic=topic, messages=result.records)
        run = self._start(client, "consumer", round_, arguments)
        run.add_samples("consume", seconds_table(result.clock.progress))
        cluster, about = self._describe(client, topic)
        cluster["consumer_props"] = dict(getattr(client, "consumer_config", {}))
        return run.finish(summary={
            "records": result.records, "bytes": result.bytes, "mode": "fetch",
            # Once connected, to the last records read (bench.perf.kafka_clients.measure).
            "seconds": result.seconds,
            "records_per_s": result.records_per_s,
            "mb_per_s": result.bytes_per_s / MB_BYTES, **result.cpu},
            cluster=cluster, topic=about)


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(per_run: dict[str, dict[str, list[float]]], args, out=None) -> None:
    """The medians over the runs, each run's figures when there were several, and the
    ratios to node.client's."""
    out = out or sys.stdout
    medians = {name: {k: statistics.median(v) for k, v in each.items()}
               for name, each in per_run.items()}
    columns = (("producer rec/s", "produce_records_per_s", 0),
               ("producer MB/s", "produce_mb_per_s", 1),
               ("consumer rec/s", "consume_records_per_s", 0),
               ("write p50 ms", "write_p50_ms", 3), ("write p99 ms", "write_p99_ms", 3))
    print(f"\n{RECORD_BYTES}-byte records, acks=all, RF 3, min.insync.replicas=2, "
          f"{args.partitions} partitions; {args.records:,} records per producer and "
          f"consumer run, {args.writes:,} single writes (linger.ms=0); medians of "
          f"{args.runs} run(s)", file=out)
    if args.librdkafka_consumer:
        print(f"confluent-kafka's consumer with {' '.join(args.librdkafka_consumer)}",
              file=out)
    width = max(len(name) for name in medians) + 2
    print(f"{'client':<{width}}" + "".join(f"{title:>16}" for title, _, _ in columns),
          file=out)
    for name, figures in medians.items():
        print(f"{name:<{width}}" + "".join(f"{_fmt(figures.get(key), digits):>16}"
                                           for _, key, digits in columns), file=out)
    cpu = (("producer: client", "produce_client_cpu_us"),
           ("brokers", "produce_brokers_cpu_us"),
           ("consumer: client", "consume_client_cpu_us"),
           ("brokers", "consume_brokers_cpu_us"))
    print("\nCPU per record, µs (client: this process with its threads; brokers: the "
          "3 broker processes)", file=out)
    print(f"{'client':<{width}}" + "".join(f"{title:>18}" for title, _ in cpu), file=out)
    for name, each in medians.items():
        print(f"{name:<{width}}" + "".join(f"{_fmt(each.get(key), 2):>18}"
                                           for _, key in cpu), file=out)
    if args.runs > 1:
        print("each run:", file=out)
        for name, each in per_run.items():
            print(f"  {name}: " + "; ".join(
                f"{title} " + " / ".join(_fmt(v, digits) for v in each.get(key, []))
                for title, key, digits in columns if key != "produce_mb_per_s"), file=out)
    native = per_run.get(NATIVE)
    if native is None or len(per_run) < 2:
        return
    print("\nagainst node.client, run by run, the median (the issue's targets are "
          "librdkafka's):", file=out)
    for name, each in per_run.items():
        if name == NATIVE:
            continue
        for line in target_lines(name, each, native):
            print(f"  {line}", file=out)


def target_lines(name: str, each: dict[str, list[float]],
                 native: dict[str, list[float]]) -> list[str]:
    """The figures against node.client's, run by run (the clients of a run measured
    minutes apart at most, so a load that comes and goes hurts both) and the median of
    those; for librdkafka, each with its target."""
    targeted = name == LIBRDKAFKA
    lines = []
    for what, key, minimum in (("producer records/s", "produce_records_per_s",
                                PRODUCE_RATIO_MIN),
                               ("consumer records/s", "consume_records_per_s",
                                CONSUME_RATIO_MIN)):
        pairs = [(v, n) for v, n in zip(each.get(key, []), native.get(key, [])) if n]
        if not pairs:
            continue
        ratio = statistics.median(v / n for v, n in pairs)
        verdict = f" (target >= {minimum:.0%}: {'met' if ratio >= minimum else 'MISSED'})" \
            if targeted else ""
        lines.append(f"{name} {what}: {ratio:.0%} of node.client's{verdict}")
    pairs = list(zip(each.get("write_p50_ms", []), native.get("write_p50_ms", [])))
    if pairs:
        extra = statistics.median(v - n for v, n in pairs)
        verdict = (f" (target <= +{WRITE_P50_EXTRA_MS_MAX} ms: "
                   f"{'met' if extra <= WRITE_P50_EXTRA_MS_MAX else 'MISSED'})"
                   if targeted else "")
        lines.append(f"{name} single-write p50: {extra:+.3f} ms against node.client's"
                     f"{verdict}")
    return lines


def print_profiles(folder: Path, out=None) -> None:
    """The brokers' profiles (``MINIKAFKA_BROKER_PROFILE``) added together: the
    functions by own time, then those of the Kafka listener (``node/kafka``) by
    cumulative time."""
    out = out or sys.stdout
    paths = sorted(str(p) for p in folder.glob("broker.*"))
    if not paths:
        print(f"no broker profile in {folder} (did the brokers stop cleanly?)", file=out)
        return
    stats = pstats.Stats(*paths, stream=out)
    print(f"\n--- the brokers' profiles ({', '.join(paths)}), by own time", file=out)
    stats.sort_stats("tottime").print_stats(PROFILE_LINES)
    print("--- the Kafka listener's functions, by cumulative time", file=out)
    stats.sort_stats("cumulative").print_stats("node/kafka", PROFILE_LINES)
