"""``minikafka`` command line: one entry point, one subcommand per tool."""
from __future__ import annotations

import argparse
import sys


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


def _cmd_analyze(args: argparse.Namespace) -> int:
    from bench.analyze import run

    return run(args)


def _cmd_bench_sweep(args: argparse.Namespace) -> int:
    from bench.sweep import run

    return run(args)


def _cmd_chaos(args: argparse.Namespace) -> int:
    from bench.chaos.run import run

    return run(args)


def _cmd_scenario(args: argparse.Namespace) -> int:
    from bench.teach.run import run

    return run(args)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from bench.teach.dashboard import run

    return run(args)


def _cmd_top(args: argparse.Namespace) -> int:
    from bench.teach.top import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka", description=__doc__)
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
    from bench.analyze import build_parser as analyze_parser

    analyze = sub.add_parser("analyze", help="PySpark analysis of a results store: tables, "
                                             "plots, an HTML report")
    analyze_parser(analyze)
    analyze.set_defaults(func=_cmd_analyze)
    from bench.sweep import build_parser as sweep_parser

    bench = sub.add_parser("bench", help="benchmark drivers: sweep")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    sweep = bench_sub.add_parser("sweep", help="run a workload file's matrix of producer "
                                               "runs into a results store")
    sweep_parser(sweep)
    sweep.set_defaults(func=_cmd_bench_sweep)
    from bench.chaos.run import build_parser as chaos_parser

    chaos = sub.add_parser("chaos", help="chaos runs: faults, a recorded history, a verdict")
    chaos_parser(chaos)
    chaos.set_defaults(func=_cmd_chaos)
    from bench.teach.run import add_arguments as scenario_arguments

    scenario = sub.add_parser("scenario", help="the seeds' replication stories on real "
                                               "processes: list, run NAME [--step]")
    scenario_arguments(scenario)
    scenario.set_defaults(func=_cmd_scenario)
    from bench.teach.dashboard import add_arguments as dashboard_arguments

    dashboard = sub.add_parser("dashboard", help="a live web page of a running cluster, "
                                                 "with controls (127.0.0.1)")
    dashboard_arguments(dashboard)
    dashboard.set_defaults(func=_cmd_dashboard)
    from bench.teach.top import add_arguments as top_arguments

    top = sub.add_parser("top", help="the dashboard's picture in a terminal, refreshed in place")
    top_arguments(top)
    top.set_defaults(func=_cmd_top)
    # Kafka's admin and console tools: topics, console-producer/consumer,
    # leader-election, reassign-partitions.
    from node.tools import add_subcommands as tool_subcommands

    tool_subcommands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
