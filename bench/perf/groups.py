"""Consumer groups measured (issue 12): rebalance times and group read throughput.
By default the Kafka paper's groups (registries in ZooKeeper, Algorithm 1): the members
are pinned to ``group_protocol="zookeeper"`` and ownership is read from the registries.
``--group-protocol consumer``: the same figures for the brokers' group coordinator
(KIP-848), the session timeout being the broker's ``group.consumer.session.timeout.ms``
(set to ``--session-ms``) and the heartbeat interval ``--heartbeat-ms``;
``--group-protocol classic``: the coordinator's classic protocol (the members' session
timeout ``--session-ms``, heartbeats every ``--heartbeat-ms``). For both,
ownership is what the members themselves hold (each writes its assignment after every
poll).

    python -m bench.perf.groups [--records 2000000] [--record-size 100] [--repeats 5]
                           [--session-ms 6000] [--dir DIR] [--heartbeat-ms 500]
                           [--group-protocol zookeeper|consumer|classic[,...]]
                           [--commit-seconds 3] [--async-commits 2000]

Several protocols (comma-separated) are measured one after the other on the same
cluster and topic, each with its own groups.

One broker, topic ``groups`` with 6 partitions filled with ``--records`` records (the
perf tool's bulk path). Then, each a median of ``--repeats`` tries where it says so:

- read throughput: 3 member processes of one new group read every record
  (``poll_batches``, the perf tool's read path), timed from the first record any of them
  read until the last (and from their start); against ``consumer-perf-test`` reading the
  same records alone in the same run (its fetch.nMsg.sec, and nMsg.sec);
- rebalance after a clean ``close()``: 3 members own the 6 partitions; one is sent
  SIGTERM (it closes: releases, ends its session); the time from the signal until the
  two others own every partition (polled in the coordinator every 5 ms);
- rebalance after SIGKILL: the same, the member SIGKILLed; its partitions come back
  once its session ends (``--session-ms``). Target: within the session timeout + 1 s.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPIC = "groups"
PARTITIONS = 6
POLL_S = 0.005


def member(args) -> int:
    """A member process: read until told to stop; write (records read, first/last read
    time) to --out after every poll with records."""
    from node.client import Consumer
    consumer = Consumer(args.bootstrap, group_id=args.group, zookeeper_connect=args.zookeeper,
                        group_protocol=args.group_protocol,
                        heartbeat_interval_ms=args.heartbeat_ms,
                        auto_offset_reset="earliest", session_timeout_ms=args.session_ms,
                        max_partition_fetch_bytes=4 << 20, fetch_max_bytes=16 << 20)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    read, first, now, owned = 0, None, None, None
    try:
        consumer.subscribe([TOPIC])
        named = False
        while not stop:
            if not named and consumer.member_id():      # a classic member's comes with
                Path(args.out + ".id.tmp").write_text(consumer.member_id())   # JoinGroup
                os.replace(args.out + ".id.tmp", args.out + ".id")
                named = True
            batches = consumer.poll_batches(100)
            assignment = sorted(tp.partition for tp in consumer.assignment())
            if batches or assignment != owned:
                owned = assignment
                if batches:
                    now = time.time()
                    first = first or now
                    read += sum(b.batch.header.record_count - b.skip for b in batches)
                tmp = args.out + ".tmp"
                Path(tmp).write_text(json.dumps({"read": read, "first": first, "last": now,
                                                 "assignment": assignment}))
                os.replace(tmp, args.out)
    finally:
        consumer.close()
    return 0


def _start_members(cluster, group: str, n: int, directory: Path, session_ms: int,
                   protocol: str, heartbeat_ms: int) -> list:
    procs = []
    for i in range(n):
        out = directory / f"{group}-{i}.json"
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "bench.perf.groups", "--member", "--bootstrap",
             cluster.bootstrap_servers, "--zookeeper", cluster.zookeeper, "--group", group,
             "--out", str(out), "--session-ms", str(session_ms),
             "--group-protocol", protocol, "--heartbeat-ms", str(heartbeat_ms)]), out))
    return procs


def _stop(procs) -> None:
    for p, _ in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, _ in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _owners(zk, group: str) -> dict:
    from node.client.group import read_group
    view = read_group(zk, group)
    return {} if view is None else {tp: m for tp, m in view.owners.items()
                                    if m in view.members}


def _held(procs, ids) -> dict:
    """{(topic, partition): member id} as the member processes say they hold them."""
    out = {}
    for (_, path), member_id in zip(procs, ids):
        try:
            state = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        for p in state.get("assignment", ()):
            out[(TOPIC, p)] = member_id
    return out


def _wait(predicate, timeout_s: float, what: str):
    from node.waiting import poll_until
    return poll_until(predicate, timeout_s, what, interval_s=POLL_S,
                      error=lambda message: SystemExit(f"bench.perf.groups: {message}"))


def throughput(cluster, directory: Path, records: int, session_ms: int, protocol: tuple
               ) -> tuple[float, float]:
    """(records/s from the members' start, records/s from the first record read)."""
    procs = _start_members(cluster, f"throughput-{protocol[0]}", 3, directory, session_ms,
                           *protocol)
    started = time.time()
    try:
        def done():
            states = []
            for _, out in procs:
                try:
                    states.append(json.loads(out.read_text()))
                except (OSError, ValueError):
                    states.append({"read": 0})
            return states if sum(s["read"] for s in states) >= records else None
        states = _wait(done, 600, "the group to read every record")
    finally:
        _stop(procs)
    last = max(s.get("last") or 0 for s in states)
    first = min(s["first"] for s in states if s.get("first"))
    return records / (last - started), records / max(last - first, 1e-3)


COMMIT_SECONDS = 3.0
ASYNC_COMMITS = 2_000


def commit_rate(cluster, protocol: tuple, session_ms: int,
                commit_seconds: float = COMMIT_SECONDS,
                async_commits: int = ASYNC_COMMITS) -> tuple[float, float]:
    """(synchronous commits/s of all 6 partitions, asynchronous commits/s of one) by one
    member that owns every partition: the synchronous ones timed for ``commit_seconds``,
    then ``async_commits`` asynchronous ones."""
    from node.client import Consumer, TopicPartition
    from node.waiting import poll_until
    name, heartbeat_ms = protocol
    consumer = Consumer(cluster.bootstrap_servers, group_id=f"commits-{name}",
                        zookeeper_connect=cluster.zookeeper, group_protocol=name,
                        session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms,
                        enable_auto_commit=False)
    try:
        consumer.subscribe([TOPIC])
        poll_until(lambda: consumer.poll(50) is not None and
                   len(consumer.assignment()) == PARTITIONS, 60, "one member owning all")
        n, started = 0, time.monotonic()
        while time.monotonic() - started < commit_seconds:
            n += 1
            consumer.commit({TopicPartition(TOPIC, p): n for p in range(PARTITIONS)})
        sync = n / (time.monotonic() - started)
        started = time.monotonic()
        futures = [consumer.commit_async({TopicPartition(TOPIC, 0): i})
                   for i in range(async_commits)]
        poll_until(lambda: consumer.poll(10) is not None and all(f.done() for f in futures),
                   120, "the asynchronous commits")
        failed = [f for f in futures if f.exception() is not None]
        if failed:
            raise SystemExit(f"{len(failed)} asynchronous commits failed: "
                             f"{failed[0].exception()}")
        return sync, async_commits / (time.monotonic() - started)
    finally:
        consumer.close()


def perf_tool(cluster, records: int) -> tuple[float, float]:
    """consumer-perf-test's (nMsg.sec, fetch.nMsg.sec): overall, and without the time
    before the first fetch."""
    result = subprocess.run(
        [sys.executable, "-m", "node.cli", "consumer-perf-test", "--bootstrap-server",
         cluster.bootstrap_servers, "--topic", TOPIC, "--messages", str(records)],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"consumer-perf-test failed: {result.stderr.strip()}")
    columns = result.stdout.strip().splitlines()[-1].split(",")
    return float(columns[5]), float(columns[9])


def rebalance(cluster, zk, directory: Path, how: str, k: int, session_ms: int,
              protocol: tuple) -> float:
    """``protocol``: (group protocol, heartbeat interval ms)."""
    group = f"{how.lower()}-{k}-{protocol[0]}"
    procs = _start_members(cluster, group, 3, directory, session_ms, *protocol)
    protocol = protocol[0]
    try:
        ids = [_wait(lambda out=out: Path(f"{out}.id").exists() and
                     Path(f"{out}.id").read_text(), 30, "a member id") for _, out in procs]

        def owners():
            return _owners(zk, group) if protocol == "zookeeper" else \
                _held(procs[1:], ids[1:]) if started is not None else _held(procs, ids)
        started = None
        _wait(lambda: len(owners()) == PARTITIONS and
              set(owners().values()) == set(ids), 60, "three owners")
        victim, _ = procs[0]
        survivors = set(ids[1:])
        started = time.monotonic()
        victim.send_signal(signal.SIGKILL if how == "KILL" else signal.SIGTERM)
        _wait(lambda: len(owners()) == PARTITIONS and
              set(owners().values()) == survivors, 60, "the survivors to own all")
        return (time.monotonic() - started) * 1000
    finally:
        _stop(procs)


PROTOCOLS = ("zookeeper", "consumer", "classic")


def _protocols(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in PROTOCOLS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(PROTOCOLS)} "
                                         f"(comma-separated), got {text!r}")
    return names


def _cluster_config(protocols: tuple[str, ...], session_ms: int, heartbeat_ms: int) -> dict:
    """The broker's settings for the group protocols measured (a protocol's settings do
    not touch the others')."""
    config = {"num.partitions": "6"}
    if set(protocols) - {"zookeeper"}:
        config["offsets.topic.replication.factor"] = "1"
        config["group.initial.rebalance.delay.ms"] = "0"
        config["group.min.session.timeout.ms"] = str(min(session_ms, 6000))
    if "consumer" in protocols:
        config.update({"group.consumer.session.timeout.ms": str(session_ms),
                       "group.consumer.min.session.timeout.ms": str(session_ms),
                       "group.consumer.heartbeat.interval.ms": str(heartbeat_ms),
                       "group.consumer.min.heartbeat.interval.ms": str(heartbeat_ms)})
    return config


def measure(cluster, zk, directory: Path, args, protocol: str) -> None:
    """Every figure of one group protocol, printed (the topic is filled already)."""
    print(f"{args.records:,} records of {args.record_size} B in {PARTITIONS} "
          f"partitions; group protocol {protocol}; session timeout "
          f"{args.session_ms} ms" + (f", heartbeat interval {args.heartbeat_ms} ms"
                                     if protocol != "zookeeper" else ""),
          flush=True)
    directory = directory / protocol         # its members' files; its own group names
    directory.mkdir(parents=True, exist_ok=True)
    protocol_args = (protocol, args.heartbeat_ms)
    group_all, group_reading = throughput(cluster, directory, args.records, args.session_ms,
                                          protocol_args)
    alone_all, alone_reading = perf_tool(cluster, args.records)
    print(f"read by a group of 3 member processes: {group_reading:,.0f} records/s "
          f"from the first record read ({group_all:,.0f} from their start); "
          f"consumer-perf-test alone: {alone_reading:,.0f} records/s fetching "
          f"({alone_all:,.0f} overall); ratio {group_reading / alone_reading:.2f}",
          flush=True)
    sync, async_ = commit_rate(cluster, protocol_args, args.session_ms, args.commit_seconds,
                               args.async_commits)
    print(f"commits by one member: {sync:,.0f}/s synchronous (6 partitions each), "
          f"{async_:,.0f}/s asynchronous (one partition)", flush=True)
    for how in ("CLOSE", "KILL"):
        times = [rebalance(cluster, zk, directory, how, k, args.session_ms, protocol_args)
                 for k in range(args.repeats)]
        print(f"rebalance after {'a clean close()' if how == 'CLOSE' else 'SIGKILL'}: "
              f"median {statistics.median(times):,.0f} ms, best {min(times):,.0f}, "
              f"worst {max(times):,.0f} ({len(times)} tries)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.groups", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--group-protocol", type=_protocols, default=("zookeeper",),
                        help="zookeeper, consumer or classic; several, comma-separated, are "
                        "measured one after the other on the same cluster and topic")
    parser.add_argument("--heartbeat-ms", type=int, default=500,
                        help="the heartbeat interval: group.consumer.heartbeat.interval.ms "
                        "(consumer protocol), the members' heartbeat_interval_ms (classic)")
    parser.add_argument("--commit-seconds", type=float, default=COMMIT_SECONDS,
                        help="how long the synchronous commits are timed")
    parser.add_argument("--async-commits", type=int, default=ASYNC_COMMITS,
                        help="how many asynchronous commits are timed")
    # The member role (started by the bench itself).
    parser.add_argument("--member", action="store_true", help=argparse.SUPPRESS)
    for flag in ("--bootstrap", "--zookeeper", "--group", "--out"):
        parser.add_argument(flag, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.member:
        args.group_protocol = args.group_protocol[0]
        return member(args)

    from kazoo.client import KazooClient

    from node.client import Admin
    from node.cluster import Cluster
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench-groups-"))
    cluster = Cluster.up(directory / "cluster", 1, config=_cluster_config(
        args.group_protocol, args.session_ms, args.heartbeat_ms))
    zk = KazooClient(hosts=cluster.zookeeper, timeout=10)
    zk.start(timeout=10)
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(TOPIC, PARTITIONS, 1)
        fill = subprocess.run(
            [sys.executable, "-m", "node.cli", "producer-perf-test", "--topic", TOPIC,
             "--num-records", str(args.records), "--record-size", str(args.record_size),
             "--throughput", "-1", "--producer-props",
             f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1",
             "batch.size=262144"], capture_output=True, text=True, timeout=600)
        if fill.returncode != 0:
            raise SystemExit(f"filling the topic failed: {fill.stderr.strip()}")
        for protocol in args.group_protocol:
            measure(cluster, zk, directory, args, protocol)
    finally:
        zk.stop()
        zk.close()
        cluster.down(grace_s=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
