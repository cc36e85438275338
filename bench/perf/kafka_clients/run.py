"""``python -m bench.kafka_clients``: node.client and the Kafka clients side by side.

    python -m bench.kafka_clients [--records 200000] [--writes 1000] [--runs 1]
        [--clients minikafka,confluent-kafka,kafka-python,aiokafka] [--dir DIR]
        [--results DIR] [--profile] [--override KEY=VALUE ...]

One cluster (zk_lite and 3 brokers, under ``--dir``), one topic per client for its
producer runs and one to read (``--partitions`` partitions, replication factor 3,
``min.insync.replicas=2``), 100-byte records, acks=all. Per client and run:

1. producer: ``--records`` records as fast as the client goes (after an untimed
   warm-up), records/s and MB/s; node.client as producer-perf-test drives it,
   librdkafka's idempotent producer with default settings, the others' defaults;
2. single writes: ``--writes`` acks=all writes one at a time with linger.ms=0 to one
   partition (1,000 a second at most), p50 and p99 from send to acknowledgement;
3. consumer: the read topic (``--records`` records written once by node.client) from
   the beginning over Fetch, records/s from the moment the client, connected to every
   leader, is given the partitions, to its last record.

The phases interleave the clients (each round starting one client further, each
client's phase once the brokers are quiet), and ``--runs N`` repeats them (a noisy
neighbour hurts every client alike); the table shows each figure's median over the
runs, then the issue's targets as ratios to node.client's figures, run by run. Every
producer phase is a run in the results store (``--results``, else ``DIR/results``)
with the per-record samples (``produce``), every consumer phase one with its seconds
(``consume``), tagged with the client: ``minikafka analyze`` draws a
throughput-latency curve per client and setting.

``--override KEY=VALUE`` sets a broker property of the cluster (repeatable), e.g.
``replica.transport=shm`` to measure the clients over shared-memory replication.

``--profile`` runs each broker under cProfile (``MINIKAFKA_BROKER_PROFILE``) and prints
where the brokers' time went once they stopped.

A client that is not installed, or Kafka clients when the brokers have no Kafka
listener, are skipped with one line each. The cluster is stopped and its directory
removed at the end (the results store and the profiles stay).
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from bench.perf import overrides as override
from bench.perf.kafka_clients import native, report
from bench.perf.kafka_clients.librdkafka import NAME as LIBRDKAFKA
from bench.perf.kafka_clients.librdkafka import ConfluentKafka
from bench.perf.kafka_clients.measure import (RECORD_BYTES, SINGLE_WRITE_RATE_PER_S,
                                              ClientUnavailable, CpuMeter, MeasureError,
                                              Pacer, ProduceResult, ReadClock, RecordClock,
                                              latency_figures, settle, value_of)
from bench.perf.kafka_clients.pure_python import AioKafka, KafkaPython
from node.config import ConfigError, parse_key_values
from node.paths import absolute_path
from node.perf.common import positive_int
from node.tools.common import ToolError

CLIENTS = {c.name: c for c in (native.Native(), ConfluentKafka(), KafkaPython(), AioKafka())}
BROKERS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
WARMUP_RECORDS_MAX = 10_000
SINGLE_WRITE_WARMUP = 50
SINGLE_WRITE_PARTITION = 0
READY_TIMEOUT_S = 60.0
PROFILE_ENV = "MINIKAFKA_BROKER_PROFILE"     # node.broker.server


def usable_clients(names: list[str], kafka: str | None) -> list:
    clients = []
    for name in names:
        client = CLIENTS[name]
        try:
            client.check()
            if client.wire == "kafka" and kafka is None:
                raise ClientUnavailable("the brokers have no Kafka listener "
                                        "(KAFKA://HOST:PORT in listeners)")
        except ClientUnavailable as e:
            print(f"skipping {name}: {e}", flush=True)
            continue
        clients.append(client)
    return clients


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """The topic, every replica of every partition in sync before the clock starts."""
    from node.client.admin import Admin
    from node.waiting import poll_until
    admin = Admin(bootstrap_servers=bootstrap)
    try:
        admin.create_topic(name, partitions, REPLICATION_FACTOR,
                           config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})

        def in_sync() -> bool:
            described = admin.describe_topics([name]).get(name, [])
            return len(described) == partitions and all(
                p.leader >= 0 and len(p.isr) == REPLICATION_FACTOR for p in described)
        poll_until(in_sync, READY_TIMEOUT_S, f"topic {name} with every replica in sync")
    finally:
        admin.close()


def result_of(clock: RecordClock, settings: dict, client: str) -> ProduceResult:
    """The figures of a per-record run, computed as producer-perf-test's."""
    from node.perf import producer as perf
    clock.check(client)
    units = perf._Units.of_records(clock.send_ns, clock.ack_ns, clock.partition,
                                   clock.offset, clock.error)
    stats = perf._Stats(RECORD_BYTES, min(clock.send_ns), out=io.StringIO())
    stats.absorb(units)
    summary = stats.summary(max(clock.ack_ns), perf._record_latencies_ms(units))
    return ProduceResult(units, summary, settings)


class Bench:
    """One cluster, the topics, and the phases of every client."""

    def __init__(self, args, cluster, clients: list, kafka: str | None) -> None:
        self.args = args
        self.cluster = cluster
        self.clients = clients
        self.bootstrap = {"native": cluster.bootstrap_servers, "kafka": kafka}
        self.value = value_of(RECORD_BYTES)
        self.store = report.Store(args.results, self.bootstrap, args.partitions)
        self.figures: dict[str, dict[str, list[float]]] = {c.name: {} for c in clients}
        self.broker_pids = [cluster.processes[str(b)].pid() for b in cluster.broker_ids]

    def _cpu(self, client, phase: str, meter: CpuMeter, records: int) -> dict:
        """CPU per record of a phase, into the figures; returned for the run's summary."""
        self._add(client, f"{phase}_client_cpu_us", meter.client_s / records * 1e6)
        self._add(client, f"{phase}_brokers_cpu_us", meter.brokers_s / records * 1e6)
        return {"client_cpu_s": meter.client_s, "brokers_cpu_s": meter.brokers_s}

    def topics(self) -> None:
        for client in self.clients:
            create_topic(self.bootstrap["native"], self.produce_topic(client), self.args.partitions)
        create_topic(self.bootstrap["native"], "kbench-single", 1)
        create_topic(self.bootstrap["native"], "kbench-read", self.args.partitions)
        filled = CLIENTS[native.NAME].produce(self.bootstrap, "kbench-read", self.args.records,
                                              0, RECORD_BYTES)
        assert filled.summary["records"] == self.args.records, filled.summary

    @staticmethod
    def produce_topic(client) -> str:
        return f"kbench-produce-{client.name}"

    def in_turn(self, round_: int) -> list:
        """The clients, starting one further each round: none always follows the same
        neighbour, nor always goes first."""
        k = round_ % len(self.clients)
        return self.clients[k:] + self.clients[:k]

    def _add(self, client, key: str, value: float) -> None:
        self.figures[client.name].setdefault(key, []).append(value)

    def producer_phase(self, round_: int) -> None:
        warmup = min(WARMUP_RECORDS_MAX, self.args.records // 10)
        for client in self.in_turn(round_):
            topic = self.produce_topic(client)
            settle(CpuMeter(self.broker_pids))
            print(f"run {round_ + 1}: {client.name} producer", file=sys.stderr, flush=True)
            with CpuMeter(self.broker_pids) as meter:
                if isinstance(client, native.Native):
                    result = client.produce(self.bootstrap, topic, self.args.records,
                                            warmup, RECORD_BYTES)
                else:
                    clock = RecordClock(self.args.records)
                    settings = client.produce_records(self.bootstrap, topic, clock, warmup,
                                                      self.value)
                    result = result_of(clock, settings, client.name)
            # (The warm-up's CPU is counted too: a tenth of the records at most.)
            result.summary.update(self._cpu(client, "produce", meter,
                                            self.args.records + warmup))
            self._add(client, "produce_records_per_s", result.summary["records_per_s"])
            self._add(client, "produce_mb_per_s",
                      result.summary["records_per_s"] * RECORD_BYTES / 1e6)
            self.store.produce(client, "producer", round_, topic, self.args.records, -1,
                               result)

    def single_write_phase(self, round_: int) -> None:
        for client in self.in_turn(round_):
            settle(CpuMeter(self.broker_pids))
            print(f"run {round_ + 1}: {client.name} single writes", file=sys.stderr,
                  flush=True)
            clock = RecordClock(self.args.writes)
            settings = client.single_writes(self.bootstrap, "kbench-single",
                                            SINGLE_WRITE_PARTITION, clock,
                                            SINGLE_WRITE_WARMUP, self.value,
                                            Pacer(SINGLE_WRITE_RATE_PER_S))
            result = result_of(clock, settings, client.name)
            figures = latency_figures((result.units.ack_ns[i] - result.units.send_ns[i]) / 1e6
                                      for i in range(clock.n))
            self._add(client, "write_p50_ms", figures["p50_ms"])
            self._add(client, "write_p99_ms", figures["p99_ms"])
            self.store.produce(client, "single writes", round_, "kbench-single",
                               self.args.writes, SINGLE_WRITE_RATE_PER_S, result)

    def consumer_phase(self, round_: int) -> None:
        from node.perf.consumer import Progress
        for client in self.in_turn(round_):
            settle(CpuMeter(self.broker_pids))
            print(f"run {round_ + 1}: {client.name} consumer", file=sys.stderr, flush=True)
            clock = ReadClock(Progress(1000, False, per_second=True))
            with CpuMeter(self.broker_pids) as meter:
                result = client.consume(self.bootstrap, "kbench-read",
                                        list(range(self.args.partitions)),
                                        self.args.records, clock)
            if result.records != self.args.records:
                raise MeasureError(f"{client.name}: read {result.records} records of "
                                   f"{self.args.records}")
            result.cpu = self._cpu(client, "consume", meter, result.records)
            self._add(client, "consume_records_per_s", result.records_per_s)
            self.store.consume(client, round_, "kbench-read", result)


def run(args) -> int:
    names = [n.strip() for n in args.clients.split(",") if n.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown or not names:
        raise ToolError(f"--clients: unknown {', '.join(unknown) or '(none given)'} "
                        f"(known: {', '.join(CLIENTS)})")
    try:
        CLIENTS[LIBRDKAFKA].consumer_config = parse_key_values(args.librdkafka_consumer,
                                                               "--librdkafka-consumer")
    except ConfigError as e:
        raise ToolError(str(e)) from None
    from node.cluster import Cluster
    base = Path(args.dir or tempfile.mkdtemp(prefix="mk-kafka-clients-"))
    args.results = args.results or str(base / "results")
    if args.profile:
        os.environ[PROFILE_ENV] = str(base / "profile" / "broker")
        (base / "profile").mkdir(parents=True, exist_ok=True)
    if (base / "cluster").exists():
        raise ToolError(f"{base / 'cluster'} is left from an earlier run that failed (its "
                        f"logs are there): remove it (after minikafka cluster down --dir "
                        f"{base / 'cluster'} if it still runs), or give another --dir")
    cluster = Cluster.up(base / "cluster", BROKERS,
                         cluster_id=args.cluster_id or "kb" + uuid.uuid4().hex[:10],
                         config=args.overrides)
    try:
        kafka = cluster.kafka_bootstrap_servers or None
        settings = "".join(f", {k}={v}" for k, v in sorted(args.overrides.items()))
        print(f"cluster: {BROKERS} brokers, native {cluster.bootstrap_servers}, kafka "
              f"{kafka or '(no Kafka listener)'}{settings}", flush=True)
        clients = usable_clients(names, kafka)
        if not clients:
            raise ToolError("no client to measure")
        bench = Bench(args, cluster, clients, kafka)
        bench.topics()
        for round_ in range(args.runs):
            bench.producer_phase(round_)
            bench.single_write_phase(round_)
            bench.consumer_phase(round_)
    finally:
        cluster.down(grace_s=30)
        os.environ.pop(PROFILE_ENV, None)
    shutil.rmtree(base / "cluster", ignore_errors=True)   # the results are what is kept
    report.print_table(bench.figures, args)
    print(f"recorded in {args.results}; draw with: minikafka analyze {args.results}")
    if args.profile:
        report.print_profiles(base / "profile")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_clients", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=positive_int, default=200_000,
                        help="records per producer run, and records read per consumer run")
    parser.add_argument("--writes", type=positive_int, default=1000,
                        help="timed single writes per client and run")
    parser.add_argument("--runs", type=positive_int, default=1,
                        help="repeat every phase; the table shows the medians")
    parser.add_argument("--partitions", type=positive_int, default=6)
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"a comma-separated subset of {', '.join(CLIENTS)}")
    parser.add_argument("--dir", default=None, type=absolute_path,
                        help="where the cluster (and, without --results, the results "
                             "store) go (default: a new temporary directory)")
    parser.add_argument("--results", default=None, type=absolute_path, metavar="DIR",
                        help="the results store (node.perf.results; default DIR/results)")
    parser.add_argument("--librdkafka-consumer", action="append", default=[],
                        metavar="KEY=VALUE", help="a property of confluent-kafka's consumer "
                        "over librdkafka's defaults (repeatable), e.g. "
                        "fetch.queue.backoff.ms=10")
    parser.add_argument("--cluster-id", default=None, help="the cluster's id (default: new)")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile every broker; print where their time went")
    override.add_argument(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.overrides = override.parse(parser, args.override)
    try:
        return run(args)
    except (ToolError, MeasureError) as e:
        print(f"kafka_clients: error: {e}", file=sys.stderr, flush=True)
        return 1
