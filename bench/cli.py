"""``minikafka``, the console script: node's command line (``node.cli``) with bench's
subcommands added: ``analyze``, ``bench sweep``, ``chaos``, ``scenario``, ``dashboard``
and ``top``.

    python -m bench.cli COMMAND ...     # the same as ``minikafka COMMAND ...``

The entry point lives here, above both, so that the arrow runs one way: bench imports
node, node never imports bench. ``python -m node.cli`` still answers node's own
subcommands (cluster, zk, the perf and admin tools).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from node import cli as node_cli


def _run_of(module: str):
    """The subcommand's ``run(args)`` in ``module``, imported only when it runs (the
    Spark, aiohttp and chaos modules stay out of every other command's start-up)."""
    def run(args: argparse.Namespace) -> int:
        return importlib.import_module(module).run(args)
    return run


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Mounts bench's subcommands on the ``minikafka`` parser (``node.cli.build_parser``)."""
    from bench.analysis.analyze import build_parser as analyze_parser

    analyze = sub.add_parser("analyze", help="PySpark analysis of a results store: tables, "
                                             "plots, an HTML report")
    analyze_parser(analyze)
    analyze.set_defaults(func=_run_of("bench.analysis.analyze"))
    from bench.perf.sweep import build_parser as sweep_parser

    bench = sub.add_parser("bench", help="benchmark drivers: sweep")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    sweep = bench_sub.add_parser("sweep", help="run a workload file's matrix of producer "
                                               "runs into a results store")
    sweep_parser(sweep)
    sweep.set_defaults(func=_run_of("bench.perf.sweep"))
    from bench.chaos.run import build_parser as chaos_parser

    chaos = sub.add_parser("chaos", help="chaos runs: faults, a recorded history, a verdict")
    chaos_parser(chaos)
    chaos.set_defaults(func=_run_of("bench.chaos.run"))
    from bench.teach.run import add_arguments as scenario_arguments

    scenario = sub.add_parser("scenario", help="the seeds' replication stories on real "
                                               "processes: list, run NAME [--step]")
    scenario_arguments(scenario)
    scenario.set_defaults(func=_run_of("bench.teach.run"))
    from bench.teach.dashboard import add_arguments as dashboard_arguments

    dashboard = sub.add_parser("dashboard", help="a live web page of a running cluster, "
                                                 "with controls (127.0.0.1)")
    dashboard_arguments(dashboard)
    dashboard.set_defaults(func=_run_of("bench.teach.dashboard"))
    from bench.teach.top import add_arguments as top_arguments

    top = sub.add_parser("top", help="the dashboard's picture in a terminal, refreshed in place")
    top_arguments(top)
    top.set_defaults(func=_run_of("bench.teach.top"))


def build_parser() -> argparse.ArgumentParser:
    """The whole ``minikafka`` parser: node's subcommands and bench's."""
    return node_cli.build_parser([add_subcommands])


def main(argv: list[str] | None = None) -> int:
    return node_cli.main(argv, [add_subcommands])


if __name__ == "__main__":
    sys.exit(main())
