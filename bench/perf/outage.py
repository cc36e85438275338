"""A coordinator outage under load, measured (issue 10, item 1).

    python -m bench.perf.outage [--fault KILL|STOP] [--outage-s 20] [--session-ms 18000]
                           [--dir DIR] [--after-s 10]

Starts a supervised cluster (zk_lite and 3 brokers), creates the topic ``load`` with 3
partitions (broker b leads partition b, replication factor 3, min.insync.replicas=2),
and runs one client per partition in a loop: Metadata, Produce with acks=1, Produce with
acks=all, and a Fetch from offset 0, each with a 3 s timeout, to the partition's leader
(a client follows a leader change named by the Metadata answer). Then zk_lite is
SIGKILLed (restarted after the outage) or SIGSTOPped (SIGCONT after it) for
``--outage-s`` seconds. Printed:

- per request kind, how many were answered without error before, during and after the
  outage, and the longest window without a successful one from one second before the
  outage to ``--after-s`` after the return;
- after the return: how long until a topic can be created (the admin path needs the
  coordinator), until every broker is registered again, and which controller (epoch)
  the cluster has.

Exit 0 when every request during the outage succeeded and the topic was created.
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from node.client import Admin
from node.cluster import Cluster
from node.cluster.supervisor import ClusterError
from node.net import Channel, ChannelError
from node.wire import protocol
from shm import batch

TOPIC = "load"
ASSIGNMENT = {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]}    # broker b leads partition b
REQUEST_TIMEOUT_MS = 3000
OPS = ("metadata", "acks=1", "acks=all", "fetch")
CREATE_DEADLINE_S = 60.0


@dataclass
class Outcomes:
    """(monotonic time, request kind, ok, detail) of every request the clients made."""
    rows: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, op: str, ok: bool, detail: str = "") -> None:
        with self.lock:
            self.rows.append((time.monotonic(), op, ok, detail))

    def between(self, start: float, end: float) -> list:
        with self.lock:
            return [r for r in self.rows if start <= r[0] <= end]

    def longest_gap(self, op: str, start: float, end: float) -> float:
        """The longest time in [start, end] without a successful ``op``."""
        times = [start] + [r[0] for r in self.between(start, end) if r[1] == op and r[2]] \
            + [end]
        return max(b - a for a, b in zip(times, times[1:]))

    def wait_ok(self, since: float, ops, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if set(ops) <= {r[1] for r in self.between(since, time.monotonic()) if r[2]}:
                return
            time.sleep(0.05)
        raise TimeoutError(f"no successful {sorted(ops)} within {timeout_s} s; last: "
                           f"{self.between(since, time.monotonic())[-4:]}")


def client_loop(addresses: dict[int, str], partition: int, stop: threading.Event,
                out: Outcomes) -> None:
    """The four requests in a loop against ``partition``'s leader."""
    leader = partition
    channel = Channel(f"tcp://{addresses[leader]}", client_id=f"outage-{partition}")
    n = 0
    try:
        while not stop.is_set():
            n += 1
            steps = (
                ("metadata", protocol.ApiKey.METADATA, {"topics": [TOPIC]}, ()),
                ("acks=1", protocol.ApiKey.PRODUCE,
                 {"acks": 1, "timeout_ms": 2000, "partitions": [[TOPIC, partition]]},
                 (batch.build_batch([b"one-%d" % n]),)),
                ("acks=all", protocol.ApiKey.PRODUCE,
                 {"acks": -1, "timeout_ms": 2000, "partitions": [[TOPIC, partition]]},
                 (batch.build_batch([b"all-%d" % n]),)),
                ("fetch", protocol.ApiKey.FETCH,
                 {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 16,
                  "partitions": [[TOPIC, partition, 0, -1, 1 << 16]]},
                 ()),
            )
            for op, api_key, body, frames in steps:
                try:
                    answer = channel.request(api_key, body, frames,
                                             timeout_ms=REQUEST_TIMEOUT_MS).body
                except ChannelError as e:
                    out.add(op, False, str(e))
                    channel.close()
                    channel = Channel(f"tcp://{addresses[leader]}",
                                      client_id=f"outage-{partition}")
                    continue
                if op == "metadata":
                    entries = [p for t in answer.get("topics", []) if t[0] == TOPIC
                               for p in t[2] if p[0] == partition]
                    now_leader = entries[0][2] if entries else -1
                    out.add(op, now_leader >= 0, "" if now_leader >= 0 else "no leader")
                    if now_leader >= 0 and now_leader != leader and now_leader in addresses:
                        leader = now_leader          # follow the leader, as a client does
                        channel.close()
                        channel = Channel(f"tcp://{addresses[leader]}",
                                          client_id=f"outage-{partition}")
                else:
                    error = answer["partitions"][0][2]
                    out.add(op, error == 0, "" if error == 0 else f"error {error}")
    finally:
        channel.close()


class Load:
    """One client thread per partition of ``TOPIC``."""

    def __init__(self, cluster) -> None:
        self.stop_event = threading.Event()
        self.out = Outcomes()
        addresses = {b: cluster.broker_address(b) for b in cluster.broker_ids}
        self.threads = [threading.Thread(target=client_loop, daemon=True,
                                         name=f"outage-load-{p}",
                                         args=(addresses, p, self.stop_event, self.out))
                        for p in sorted(ASSIGNMENT)]

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(REQUEST_TIMEOUT_MS / 1000 * 3)


def create_topic_after(admin, name: str, since: float) -> float:
    """Seconds from ``since`` until ``name`` is created (retried while it fails)."""
    while True:
        try:
            admin.create_topic(name, 1, 3, timeout_ms=10_000)
            return time.monotonic() - since
        except Exception as e:  # noqa: BLE001 - any failure is retried until the deadline
            if time.monotonic() - since > CREATE_DEADLINE_S:
                raise TimeoutError(f"creating {name} still fails {CREATE_DEADLINE_S:.0f} s "
                                   f"after the coordinator returned: {e}") from None
            time.sleep(0.05)


def run(directory: Path, *, fault: str = "KILL", outage_s: float = 20.0,
        session_ms: int = 18_000, after_s: float = 10.0, cluster_id: str | None = None,
        say=print) -> dict:
    """One outage; returns the figures (and prints them with ``say``)."""
    if fault not in ("KILL", "STOP"):
        raise ValueError(f"fault must be KILL or STOP, not {fault!r}")
    config = {"zookeeper.session.timeout.ms": str(session_ms),
              "auto.leader.rebalance.enable": "false"}
    cluster = Cluster.up(directory, 3, config=config, cluster_id=cluster_id)
    load = None
    try:
        admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
        admin.create_topic(TOPIC, replica_assignment=ASSIGNMENT,
                           config={"min.insync.replicas": "2"})
        load = Load(cluster).start()
        load.out.wait_ok(time.monotonic(), OPS, 30)
        time.sleep(1.0)                       # a second of normal service to compare
        cluster.kill("zk", fault)
        began = time.monotonic()
        time.sleep(outage_s)                  # the outage
        ended = time.monotonic()
        if fault == "KILL":
            cluster.start("zk")
        else:
            cluster.kill("zk", "CONT")
        returned = time.monotonic()
        created_s = create_topic_after(admin, "after-outage", returned)
        cluster.wait_for(lambda: cluster.registered_brokers() == sorted(cluster.broker_ids),
                         60, "every broker registered again")
        registered_s = time.monotonic() - returned
        cluster.wait_for(lambda: cluster.controller_id() is not None, 60, "a controller")
        remaining = returned + after_s - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)             # service after the return, to measure
        load.stop()
        out = load.out
        figures = {"fault": fault, "outage_s": outage_s, "session_ms": session_ms,
                   "create_topic_after_s": created_s, "registered_after_s": registered_s,
                   "controller": cluster.controller_id(), "ops": {}}
        say(f"coordinator {fault} for {outage_s:g} s (session timeout {session_ms} ms), "
            f"3 brokers, 3 partitions, one client per leader")
        for op in OPS:
            during = [r for r in out.between(began, ended) if r[1] == op]
            after = [r for r in out.between(returned, returned + after_s) if r[1] == op]
            before = [r for r in out.between(began - 1.0, began) if r[1] == op]
            gap = out.longest_gap(op, began - 1.0, returned + after_s)
            row = {"before": (sum(r[2] for r in before), len(before)),
                   "during": (sum(r[2] for r in during), len(during)),
                   "after": (sum(r[2] for r in after), len(after)),
                   "longest_gap_s": gap}
            figures["ops"][op] = row
            say(f"{op:>9}: ok {row['before'][0]}/{row['before'][1]} in the second before, "
                f"{row['during'][0]}/{row['during'][1]} during, "
                f"{row['after'][0]}/{row['after'][1]} in {after_s:g} s after; "
                f"longest window without success {gap:.2f} s")
        say(f"after the return: topic created in {created_s:.2f} s, every broker "
            f"registered in {registered_s:.2f} s, controller {figures['controller']}")
        admin.close()
        return figures
    finally:
        if load is not None:
            load.stop()
        try:
            cluster.kill("zk", "CONT")
        except Exception:  # noqa: BLE001 - not stopped, or already gone
            pass
        cluster.down(grace_s=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.outage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", choices=("KILL", "STOP"), default="KILL")
    parser.add_argument("--outage-s", type=float, default=20.0)
    parser.add_argument("--session-ms", type=int, default=18_000)
    parser.add_argument("--after-s", type=float, default=10.0)
    parser.add_argument("--dir", type=Path, default=None,
                        help="cluster directory (default: a temporary one)")
    args = parser.parse_args(argv)
    # SIGTERM ends the run through its finally: the cluster is taken down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.outage_s <= 0 or args.after_s < 0 or args.session_ms < 1000:
        parser.error("--outage-s must be > 0, --after-s >= 0, --session-ms >= 1000")
    with tempfile.TemporaryDirectory(prefix="mk-outage-") as tmp:
        directory = args.dir or Path(tmp) / "cluster"
        try:
            figures = run(directory, fault=args.fault, outage_s=args.outage_s,
                          session_ms=args.session_ms, after_s=args.after_s)
        except (TimeoutError, RuntimeError, ClusterError) as e:
            print(f"outage run failed: {e}", file=sys.stderr)
            return 1
    failed = sum(row["during"][1] - row["during"][0] for row in figures["ops"].values())
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
