"""``minikafka cluster ...``: the supervisor's command line (up, status, kill, start, down,
add-broker, remove-broker)."""
from __future__ import annotations

import argparse
import logging
import sys

from node.cluster.scale import add_arguments as scale_arguments
from node.cluster.scale import run as run_scale
from node.paths import absolute_path
from node.cluster.supervisor import (READY_TIMEOUT_S, STOP_GRACE_S, Cluster, ClusterError,
                                     parse_config_pairs)


def add_arguments(parser) -> None:
    """The ``cluster`` subcommands (``node.cli`` mounts them under ``minikafka cluster``)."""
    sub = parser.add_subparsers(dest="cluster_command", required=True)
    up = sub.add_parser("up", help="start zk_lite and N brokers, wait until ready")
    up.add_argument("--dir", required=True, type=absolute_path, help="cluster directory")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--zookeeper", default=None,
                    help="HOST:PORT[,HOST:PORT...][/chroot] of an external ZooKeeper")
    up.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config override (Kafka key), repeatable")
    up.add_argument("--cluster-id", default=None, help="[A-Za-z0-9_], fresh by default")
    up.add_argument("--timeout", type=float, default=READY_TIMEOUT_S,
                    help="seconds to wait for readiness")
    up.add_argument("--netns", action="store_true",
                    help="each process in its own network namespace, fully meshed by veth "
                         "links that 'cluster partition' can cut (root only)")
    status = sub.add_parser("status", help="each process: pid, state, role")
    status.add_argument("--dir", required=True, type=absolute_path)
    kill = sub.add_parser("kill", help="signal a process (broker id, controller, zk)")
    kill.add_argument("--dir", required=True, type=absolute_path)
    kill.add_argument("id")
    kill.add_argument("--signal", default="KILL", help="KILL (default), TERM, STOP, CONT")
    start = sub.add_parser("start", help="restart a dead process with its config and data")
    start.add_argument("--dir", required=True, type=absolute_path)
    start.add_argument("id")
    start.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
    down = sub.add_parser("down", help="stop everything and remove shared memory")
    down.add_argument("--dir", required=True, type=absolute_path)
    down.add_argument("--grace", type=float, default=STOP_GRACE_S,
                      help="seconds between TERM and KILL")
    cut = sub.add_parser("partition", help="--netns: cut the link between two processes "
                                           "(or isolate one from all)")
    cut.add_argument("--dir", required=True, type=absolute_path)
    cut.add_argument("a", help="zk, a broker id, controller, or a client node (p0)")
    cut.add_argument("b", nargs="?", default=None, help="the other end; omit to isolate a")
    heal = sub.add_parser("heal", help="--netns: bring a cut link back (all of them by default)")
    heal.add_argument("--dir", required=True, type=absolute_path)
    heal.add_argument("a", nargs="?", default=None)
    heal.add_argument("b", nargs="?", default=None)
    scale_arguments(sub)


def run(args) -> int:
    """Entry point of ``minikafka cluster``; ClusterError -> one line on stderr, exit 1."""
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # connection noise is ours to report
    try:
        return _COMMANDS[args.cluster_command](args)
    except (ClusterError, TimeoutError) as e:
        print(f"minikafka cluster {args.cluster_command}: error: {e}", file=sys.stderr)
        return 1


def _cmd_up(args) -> int:
    cluster = Cluster.up(args.dir, args.brokers, config=parse_config_pairs(args.config),
                         cluster_id=args.cluster_id, zookeeper=args.zookeeper,
                         ready_timeout_s=args.timeout, netns=args.netns)
    try:
        print(f"cluster {cluster.cluster_id} up in {cluster.dir}")
        print(f"zookeeper: {cluster.zookeeper}")
        print(f"bootstrap servers: {cluster.bootstrap_servers}")
        print(f"kafka bootstrap servers: {cluster.kafka_bootstrap_servers}", flush=True)
    finally:
        cluster.close()
    return 0


def _cmd_status(args) -> int:
    cluster = Cluster.open(args.dir)
    try:
        rows = cluster.status()
        zk_alive = cluster.zk_process_alive()
    finally:
        cluster.close()
    print(f"cluster {cluster.cluster_id} in {cluster.dir}")
    for row in rows:
        pid = str(row.pid) if row.pid is not None else "-"
        kafka = f"kafka {row.kafka_address}" if row.kafka_address else ""
        print(f"{row.name:<10} pid {pid:<8} {row.state:<8} {row.address:<22} {kafka:<28} "
              f"{row.role}".rstrip())
    if not zk_alive:
        print("controller: unknown (ZooKeeper is not running)")
    return 0


def _cmd_kill(args) -> int:
    cluster = Cluster.open(args.dir)
    try:
        process = cluster.process(args.id)
        pid = cluster.kill(args.id, args.signal)
    finally:
        cluster.close()
    print(f"sent SIG{str(args.signal).upper().removeprefix('SIG')} to {process.name} (pid {pid})")
    return 0


def _cmd_start(args) -> int:
    cluster = Cluster.open(args.dir)
    try:
        pid = cluster.start(args.id, ready_timeout_s=args.timeout)
        name = cluster.process(args.id).name
    finally:
        cluster.close()
    print(f"started {name} (pid {pid})")
    return 0


def _cmd_down(args) -> int:
    cluster = Cluster.open(args.dir)
    removed = cluster.down(args.grace)
    print(f"cluster {cluster.cluster_id} down; {removed} shared-memory object(s) removed")
    return 0


def _cmd_partition(args) -> int:
    cluster = Cluster.open(args.dir)
    try:
        pairs = [cluster.cut(args.a, args.b)] if args.b is not None else cluster.isolate(args.a)
    finally:
        cluster.close()
    print("cut: " + ", ".join(f"{a} | {b}" for a, b in pairs))
    return 0


def _cmd_heal(args) -> int:
    if (args.a is None) != (args.b is None):
        raise ClusterError("heal takes two processes, or none to heal every link")
    cluster = Cluster.open(args.dir)
    try:
        pairs = cluster.heal(args.a, args.b)
    finally:
        cluster.close()
    print("healed: " + (", ".join(f"{a} - {b}" for a, b in pairs) or "nothing was cut"))
    return 0


_COMMANDS = {"partition": _cmd_partition, "heal": _cmd_heal, "up": _cmd_up, "status": _cmd_status, "kill": _cmd_kill, "start": _cmd_start,
             "down": _cmd_down, "add-broker": run_scale, "remove-broker": run_scale}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minikafka cluster",
                                     description="a supervised cluster on this machine")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
