"""``python -m bench.kafka_groups``: consumer groups through the brokers' coordinator,
measured with real clients, per client and group protocol.

    python -m bench.kafka_groups [--clients minikafka,confluent-classic,confluent-consumer,
        kafka-python] [--repeats 5] [--records 200000] [--commits 2000]
        [--session-ms 6000] [--heartbeat-ms 100] [--kip848-heartbeat-ms 100]
        [--phases rebalance,commits,throughput,failover] [--dir DIR] [--results DIR]

One cluster (zk_lite and 3 brokers) with the settings a group needs to be quick:
``group.initial.rebalance.delay.ms=0``; classic members' ``session.timeout.ms`` and
``heartbeat.interval.ms`` are ``--session-ms`` and ``--heartbeat-ms`` (client settings);
KIP-848's are the brokers' ``group.consumer.session.timeout.ms`` (``--session-ms``) and
``group.consumer.heartbeat.interval.ms`` (``--kip848-heartbeat-ms``): a KIP-848 member
learns of a new assignment at its next heartbeat, so that interval bounds how fast a
rebalance can be. Topics have 6 partitions, replication factor 3. For each client
variant (each member a process; ``bench.perf.kafka_groups.phases`` says how each figure
is taken):

- the rebalance time after a clean leave and after a SIGKILL (median of ``--repeats``);
- synchronous commits per second of one member (``--commits`` of them) and their p50/p99;
- a group of 3's read throughput against one member's (``--records`` 100-byte records);
- the coordinator fail-over: its broker SIGKILLed until every member commits (and reads)
  again (median of ``--repeats``).

Targets (issue 26): a rebalance after a clean leave under 200 ms with KIP-848 and under
1 s classic; a fail-over within the session timeout + 2 s. The table says met or MISSED.
Every (variant, phase) is one run in the results store (``--results``, else
``DIR/results``), tool ``kafka-groups``, tagged with the client, protocol and phase; its
times as ``request`` samples (scenario: the phase's measure), so ``minikafka analyze``
shows their percentiles. A client that is not installed is skipped with one line.
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import signal
import sys
import tempfile
import uuid
from pathlib import Path

from bench.perf.kafka_groups import phases
from bench.perf.kafka_groups.phases import PARTITIONS, Variant, summary
from node.paths import absolute_path
from node.perf.common import positive_int
from node.tools.common import ToolError

TOOL = "kafka-groups"
BROKERS = 3
RECORD_BYTES = 100
OFFSETS_PARTITIONS = 3
# client variant -> (member --client, group protocol, the listener it uses, needs module)
VARIANTS = {"minikafka": ("minikafka", "consumer", "native", None),
            "confluent-classic": ("confluent-kafka", "classic", "kafka", "confluent_kafka"),
            "confluent-consumer": ("confluent-kafka", "consumer", "kafka", "confluent_kafka"),
            "kafka-python": ("kafka-python", "classic", "kafka", "kafka"),
            "aiokafka": ("aiokafka", "classic", "kafka", "aiokafka")}
DEFAULT_VARIANTS = "minikafka,confluent-classic,confluent-consumer,kafka-python"
PHASES = ("rebalance", "commits", "throughput", "failover")
# The targets.
LEAVE_TARGET_MS = {"consumer": 200.0, "classic": 1000.0}
FAILOVER_SLACK_MS = 2000.0
# Failures fast, as the Kafka-client tests' clusters: ZooKeeper sessions, ISR lag.
FAST_FAILURE_CONFIG = {"zookeeper.session.timeout.ms": "3000",
                       "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "50",
                       "auto.leader.rebalance.enable": "false"}


def cluster_config(args) -> dict:
    return {**FAST_FAILURE_CONFIG,
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": str(min(500, args.session_ms)),
            "group.consumer.min.session.timeout.ms": str(min(500, args.session_ms)),
            "group.consumer.session.timeout.ms": str(args.session_ms),
            "group.consumer.min.heartbeat.interval.ms": str(min(50, args.kip848_heartbeat_ms)),
            "group.consumer.heartbeat.interval.ms": str(args.kip848_heartbeat_ms),
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "offsets.topic.replication.factor": "3"}


def usable(names: list[str], cluster) -> list[Variant]:
    out = []
    for name in names:
        client, protocol, wire, module = VARIANTS[name]
        why = None
        if module and importlib.util.find_spec(module) is None:
            why = f"{module} is not installed (pip install -e '.[kafka-clients]')"
        elif name == "minikafka":
            from bench.perf.kafka_groups.member import native_group_support
            why = native_group_support()
        elif not cluster.kafka_bootstrap_servers:
            why = "the brokers have no Kafka listener"
        if why:
            print(f"skipping {name}: {why}", flush=True)
            continue
        bootstrap = cluster.bootstrap_servers if wire == "native" else \
            cluster.kafka_bootstrap_servers
        out.append(Variant(name, client, protocol, bootstrap))
    return out


class Store:
    """One results-store run per (variant, phase), its times as ``request`` samples."""

    def __init__(self, root: str, args) -> None:
        self.root, self.args = root, args

    def record(self, variant: Variant, phase: str, samples: dict[str, list[float]],
               figures: dict) -> None:
        import pyarrow as pa

        from node.perf import results
        run = results.Run.start(self.root, TOOL, self.args, argv=list(sys.argv))
        run.tags = {**run.tags, "client": variant.name, "protocol": variant.protocol,
                    "phase": phase}
        # The client in the scenario too: minikafka analyze's table keys on run and scenario.
        rows = [(f"{variant.name} ({variant.protocol}): {scenario}", i, ms)
                for scenario, values in samples.items() for i, ms in enumerate(values)]
        if rows:
            run.add_samples("request", pa.table({
                "scenario": pa.array([r[0] for r in rows], type=pa.string()),
                "round": pa.array([r[1] for r in rows], type=pa.int32()),
                "latency_ms": pa.array([r[2] for r in rows], type=pa.float64())}))
        run.finish(summary=figures, cluster={"brokers": BROKERS,
                                             "config": cluster_config(self.args)},
                   topic={"partitions": PARTITIONS, "replication_factor": 3,
                          "record_bytes": RECORD_BYTES})


def _print(line: str) -> None:
    print(line, flush=True)


def _verdict(value: float, target: float) -> str:
    return f"target < {target:,.0f} ms: {'met' if value < target else 'MISSED'}"


def measure(phase: str, variant: Variant, cluster, admin, args, store: Store,
            figures: dict) -> None:
    """One phase of one variant: its figures into ``figures``, its run into the store."""
    me = figures.setdefault(variant.name, {"protocol": variant.protocol})
    if phase == "rebalance":
        for how, label in (("TERM", "leave"), ("KILL", "kill")):
            times = phases.rebalance(variant, "kgroups-rebalance", how, args)
            me[label] = summary(times)
            store.record(variant, f"rebalance-{label}", {f"rebalance after {label}": times},
                         me[label])
            extra = (f" ({_verdict(me[label]['median'], LEAVE_TARGET_MS[variant.protocol])})"
                     if label == "leave" else f" (session timeout {args.session_ms} ms)")
            what = "a clean leave" if label == "leave" else "a SIGKILL"
            _print(f"{variant.name}: rebalance after {what}: median "
                   f"{me[label]['median']:,.0f} ms, best {me[label]['best']:,.0f}, worst "
                   f"{me[label]['worst']:,.0f} ({len(times)} tries){extra}")
    if phase == "commits":
        took = phases.commits(variant, "kgroups-commit", args)
        ordered = sorted(took)
        me["commits"] = {"per_s": len(took) / (sum(took) / 1000),
                         "p50_ms": ordered[len(ordered) // 2],
                         "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]}
        store.record(variant, "commits", {"synchronous commit": took}, me["commits"])
        _print(f"{variant.name}: {me['commits']['per_s']:,.0f} synchronous commits/s, "
               f"p50 {me['commits']['p50_ms']:.2f} ms, p99 {me['commits']['p99_ms']:.2f} ms "
               f"({len(took):,} commits)")
    if phase == "throughput":
        group, alone = phases.throughput(variant, "kgroups-read", args.records, args)
        me["throughput"] = {"group_of_3_per_s": group, "one_per_s": alone,
                            "ratio": group / alone}
        store.record(variant, "throughput", {}, me["throughput"])
        _print(f"{variant.name}: a group of 3 reads {group:,.0f} records/s, one member "
               f"{alone:,.0f} records/s: ratio {group / alone:.2f}")
    if phase == "failover":
        commit_ms, read_ms, rebalanced = phases.failover(variant, cluster, admin,
                                                         OFFSETS_PARTITIONS, args)
        me["failover"] = summary(commit_ms)
        me["failover_read"] = summary(read_ms)
        store.record(variant, "failover", {"fail-over: every member commits again": commit_ms,
                                           "fail-over: every member reads again": read_ms},
                     {"commit": me["failover"], "read": me["failover_read"],
                      "members_rebalanced": rebalanced})
        target = args.session_ms + FAILOVER_SLACK_MS
        _print(f"{variant.name}: coordinator SIGKILLed until every member commits again: "
               f"median {me['failover']['median']:,.0f} ms, worst "
               f"{me['failover']['worst']:,.0f} ({_verdict(me['failover']['worst'], target)}); "
               f"reads again: median {me['failover_read']['median']:,.0f} ms; members "
               f"rebalanced per try: {rebalanced}")


def print_table(figures: dict, args, out=None) -> None:
    out = out or sys.stdout
    print(f"\n3 brokers; topics of {PARTITIONS} partitions, RF 3; session timeout "
          f"{args.session_ms} ms; classic heartbeat.interval.ms {args.heartbeat_ms}, "
          f"KIP-848 group.consumer.heartbeat.interval.ms {args.kip848_heartbeat_ms}; "
          f"medians of {args.repeats}", file=out)
    columns = (("leave ms", lambda f: f.get("leave", {}).get("median"), 0),
               ("kill ms", lambda f: f.get("kill", {}).get("median"), 0),
               ("commits/s", lambda f: f.get("commits", {}).get("per_s"), 0),
               ("commit p99 ms", lambda f: f.get("commits", {}).get("p99_ms"), 2),
               ("group of 3 rec/s", lambda f: f.get("throughput", {}).get("group_of_3_per_s"), 0),
               ("1 member rec/s", lambda f: f.get("throughput", {}).get("one_per_s"), 0),
               ("fail-over ms", lambda f: f.get("failover", {}).get("median"), 0))
    width = max([len(n) for n in figures] + [8]) + 2
    print(f"{'client':<{width}}{'protocol':>10}" + "".join(f"{t:>18}" for t, _, _ in columns),
          file=out)
    for name, f in figures.items():
        cells = []
        for _, get, digits in columns:
            value = get(f)
            cells.append("-" if value is None else f"{value:,.{digits}f}")
        print(f"{name:<{width}}{f['protocol']:>10}" + "".join(f"{c:>18}" for c in cells),
              file=out)


def run(args) -> int:
    names = [n.strip() for n in args.clients.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise ToolError(f"--clients: unknown {', '.join(unknown) or '(none given)'} "
                        f"(known: {', '.join(VARIANTS)})")
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not set(args.phases) <= set(PHASES):
        raise ToolError(f"--phases: one or more of {', '.join(PHASES)}")
    from node.client import Admin, Producer
    from node.cluster import Cluster
    base = Path(args.dir or tempfile.mkdtemp(prefix="mk-kafka-groups-"))
    args.results = args.results or str(base / "results")
    if (base / "cluster").exists():
        raise ToolError(f"{base / 'cluster'} is left from an earlier run: remove it or "
                        f"give another --dir")
    cluster = Cluster.up(base / "cluster", BROKERS, config=cluster_config(args),
                         cluster_id="kg" + uuid.uuid4().hex[:10])
    figures: dict = {}
    try:
        variants = usable(names, cluster)
        if not variants:
            raise ToolError("no client to measure")
        admin = Admin(cluster.bootstrap_servers)
        try:
            for topic in ("kgroups-rebalance", "kgroups-commit", "kgroups-read"):
                admin.create_topic(topic, PARTITIONS, 3, timeout_ms=60_000)
            if "throughput" in args.phases:
                with Producer(cluster.bootstrap_servers, acks=1, linger_ms=20,
                              batch_size=256 * 1024) as producer:
                    value = b"x" * RECORD_BYTES
                    for start in range(0, args.records, 10_000):
                        producer.send_many("kgroups-read",
                                           [value] * min(10_000, args.records - start))
                    producer.flush(300)
            _print(f"cluster: {BROKERS} brokers; clients {', '.join(v.name for v in variants)}")
            store = Store(args.results, args)
            # Phase by phase, the clients in turn: a load that comes and goes hurts all
            # alike, and the fail-overs (brokers killed, started again) come last.
            for phase in (p for p in PHASES if p in args.phases):
                for variant in variants:
                    measure(phase, variant, cluster, admin, args, store, figures)
        finally:
            admin.close()
    finally:
        cluster.down(grace_s=30)
    shutil.rmtree(base / "cluster", ignore_errors=True)
    print_table(figures, args)
    print(f"recorded in {args.results}; draw with: minikafka analyze {args.results}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_groups", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default=DEFAULT_VARIANTS,
                        help=f"a comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"a comma-separated subset of {', '.join(PHASES)}")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="tries per rebalance and fail-over figure (their median)")
    parser.add_argument("--records", type=positive_int, default=200_000,
                        help="records read by a group and by one member")
    parser.add_argument("--commits", type=positive_int, default=2000,
                        help="synchronous commits timed")
    parser.add_argument("--session-ms", type=positive_int, default=6000,
                        help="session timeout: classic members' session.timeout.ms and the "
                             "brokers' group.consumer.session.timeout.ms")
    parser.add_argument("--heartbeat-ms", type=positive_int, default=100,
                        help="classic members' heartbeat.interval.ms")
    parser.add_argument("--kip848-heartbeat-ms", type=positive_int, default=100,
                        help="the brokers' group.consumer.heartbeat.interval.ms")
    parser.add_argument("--dir", default=None, type=absolute_path,
                        help="where the cluster (and, without --results, the results store) "
                             "go (default: a new temporary directory)")
    parser.add_argument("--results", default=None, type=absolute_path, metavar="DIR",
                        help="the results store (node.perf.results; default DIR/results)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like an error: the members and the cluster are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run(args)
    except (ToolError, RuntimeError) as e:
        print(f"kafka_groups: error: {e}", file=sys.stderr, flush=True)
        return 1
