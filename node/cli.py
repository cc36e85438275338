"""``minikafka`` command line: one entry point, one subcommand per tool.

This module holds node's own subcommands (``python -m node.cli cluster|zk|topics|...``).
The packages above node bring theirs as functions that add subparsers
(``AddSubcommands``), and the ``minikafka`` console script, ``bench.cli:main``, passes
them to ``main``: node never imports what sits above it.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

AddSubcommands = Callable[["argparse._SubParsersAction"], None]


def _cmd_shm_cleanup(args: argparse.Namespace) -> int:
    from shm.names import cleanup_cluster, cluster_objects

    names = cluster_objects(args.cluster_id)
    removed = cleanup_cluster(args.cluster_id)
    for name in names:
        print(f"unlinked {name}")
    print(f"{removed} shared-memory object(s) of cluster {args.cluster_id} removed")
    return 0


def _cmd_zk(args: argparse.Namespace) -> int:
    from zk_lite.server import run

    return run(args)


def _cmd_cluster(args: argparse.Namespace) -> int:
    from node.cluster.cli import run

    return run(args)


def build_parser(extensions: Iterable[AddSubcommands] = ()) -> argparse.ArgumentParser:
    """The parser of node's subcommands; each of ``extensions`` adds more to it."""
    parser = argparse.ArgumentParser(prog="minikafka", description=__doc__.split("\n\n")[0])
    from node.tools.common import one_line_usage_errors

    one_line_usage_errors(parser, "minikafka")  # a wrong flag is one line, as every tool
    sub = parser.add_subparsers(dest="command", required=True)
    cleanup = sub.add_parser("shm-cleanup", help="unlink every /dev/shm object of a cluster")
    cleanup.add_argument("cluster_id")
    cleanup.set_defaults(func=_cmd_shm_cleanup)
    from zk_lite.server import build_parser as zk_parser

    zk = sub.add_parser("zk", help="run zk_lite, the ZooKeeper-compatible coordinator")
    zk_parser(zk)
    zk.set_defaults(func=_cmd_zk)
    from node.cluster.cli import add_arguments as cluster_arguments

    cluster = sub.add_parser("cluster", help="start, inspect, kill and stop a local cluster")
    cluster_arguments(cluster)
    cluster.set_defaults(func=_cmd_cluster)
    # The perf tools: producer-perf-test, consumer-perf-test, end-to-end-latency.
    from node.perf import register as register_perf_tools

    register_perf_tools(sub)
    # The subcommands of the packages above node (bench.cli adds chaos, scenario, ...).
    for add_subcommands in extensions:
        add_subcommands(sub)
    # Kafka's admin and console tools: topics, console-producer/consumer,
    # leader-election, reassign-partitions.
    from node.tools import add_subcommands as tool_subcommands

    tool_subcommands(sub)
    return parser


def main(argv: list[str] | None = None, extensions: Iterable[AddSubcommands] = ()) -> int:
    args = build_parser(extensions).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
