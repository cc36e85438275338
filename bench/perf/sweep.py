"""``minikafka bench sweep WORKLOAD.yaml --results DIR [--brokers 3] [--dry-run]``.

A workload file, in the spirit of OpenMessaging Benchmark's: the settings of one
producer workload and a ``matrix`` of the settings to vary. Every combination of the
matrix's values is one point; each point gets a fresh topic on one cluster started for
the sweep (zk_lite and ``--brokers`` brokers, stopped at the end), an untimed warm-up,
then ``producers`` concurrent ``producer-perf-test`` processes that record their runs in
the results store (``--results``), tagged with the workload's name and the point.

    name: acks-x-replication          # required
    description: ...                  # optional
    partitions: 6
    replication_factor: 3
    min_insync_replicas: 2
    acks: all                         # 0, 1, all
    record_size: 100                  # bytes
    batch_size: 16384                 # bytes (batch.size)
    linger_ms: 0
    producers: 1                      # concurrent producer processes per point
    rate: -1                          # records/s per producer; -1: as fast as it goes
    warmup_records: 10000             # per producer, untimed, before each point
    records: 200000                   # per producer, timed
    matrix:                           # optional: lists of values of any key above
      acks: [1, all]
      replication_factor: [1, 3]

A matrix value may also be a list of mappings (the keys of each change together), and
the matrix itself such a list (see bench/perf/workloads/record-size.yaml). The workloads of
``bench/perf/workloads/`` ship with minikafka: ``WORKLOAD`` may be one's name
(``minikafka bench sweep acks-x-replication --results R``).
Unknown keys and wrong types are one line and exit 2; ``--dry-run`` prints the points.
Then ``minikafka analyze DIR`` compares them.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node.paths import absolute_path
from node.perf.results import TAGS_ENV
from node.tools.common import ToolError

DEFAULTS = {"partitions": 6, "replication_factor": 3, "min_insync_replicas": 2,
            "acks": "all", "record_size": 100, "batch_size": 16384, "linger_ms": 0,
            "producers": 1, "rate": -1, "warmup_records": 10_000, "records": 200_000}
KINDS = {"partitions": int, "replication_factor": int, "min_insync_replicas": int,
         "acks": str, "record_size": int, "batch_size": int, "linger_ms": int,
         "producers": int, "rate": float, "warmup_records": int, "records": int}
POINTS_MAX = 1000


class WorkloadError(ToolError):
    """A mistake in the workload file: a usage error (exit 2), like a wrong flag."""
PRODUCERS_MAX = 16
TOOL_TIMEOUT_S = 3600
WORKLOADS = Path(__file__).with_name("workloads")  # package data: the shipped workloads


def shipped_workloads() -> list[str]:
    return sorted(p.stem for p in WORKLOADS.glob("*.yaml"))


def workload_path(text: str) -> str:
    """argparse ``type``: a workload file (absolute), or a shipped workload's name
    (``acks-x-replication``: ``bench/perf/workloads/acks-x-replication.yaml``, wherever
    minikafka is installed). A file of that name in the current directory wins."""
    path = absolute_path(text)
    if not os.path.exists(path) and text in shipped_workloads():
        return str(WORKLOADS / f"{text}.yaml")
    return path


def load(path: str) -> tuple[dict, list[dict]]:
    """(the workload, its points: one dict of settings per combination)."""
    import yaml
    try:
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
    except OSError as e:
        raise WorkloadError(f"{path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise WorkloadError(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(spec, dict):
        raise WorkloadError(f"{path}: a workload is a mapping of settings")
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        raise WorkloadError(f"{path}: 'name' is required")
    matrix = spec.get("matrix") or {}
    if isinstance(matrix, list) and matrix and all(isinstance(v, dict) for v in matrix):
        matrix = {"points": matrix}          # one axis whose values change keys together
    if not isinstance(matrix, dict):
        raise WorkloadError(f"{path}: 'matrix' maps settings to lists of values (or is "
                            f"a list of settings that change together)")
    base = dict(DEFAULTS)
    for key, value in spec.items():
        if key in ("name", "description", "matrix"):
            continue
        base[key] = _check(path, key, value)
    axes = []
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise WorkloadError(f"{path}: matrix.{key} must be a non-empty list")
        if all(isinstance(v, dict) for v in values):
            axes.append([{k: _check(path, k, v) for k, v in d.items()} for d in values])
        else:
            axes.append([{key: _check(path, key, v)} for v in values])
    points = []
    for combination in itertools.product(*axes) if axes else [()]:
        point = dict(base)
        for part in combination:
            point.update(part)
        points.append(point)
    if len(points) > POINTS_MAX:
        raise WorkloadError(f"{path}: {len(points)} points exceed {POINTS_MAX}")
    for point in points:
        _check_point(path, point)
    return spec, points


def _check(path: str, key: str, value):
    kind = KINDS.get(key)
    if kind is None:
        raise WorkloadError(f"{path}: unknown setting {key!r} (known: "
                        f"{', '.join(sorted(KINDS))})")
    if kind is str:
        value = str(value)
        if key == "acks" and value not in ("0", "1", "all", "-1"):
            raise WorkloadError(f"{path}: acks must be 0, 1 or all, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and value != int(value)):
        raise WorkloadError(f"{path}: {key} must be a number, got {value!r}")
    return kind(value)


def _check_point(path: str, point: dict) -> None:
    for key in ("partitions", "replication_factor", "record_size", "batch_size",
                "producers", "records", "min_insync_replicas"):
        if point[key] < 1:
            raise WorkloadError(f"{path}: {key} must be at least 1, got {point[key]}")
    if point["producers"] > PRODUCERS_MAX:
        raise WorkloadError(f"{path}: at most {PRODUCERS_MAX} producers")
    if point["rate"] == 0 or point["rate"] < -1:
        raise WorkloadError(f"{path}: rate must be -1 or positive")
    if point["warmup_records"] < 0 or point["linger_ms"] < 0:
        raise WorkloadError(f"{path}: warmup_records and linger_ms must be >= 0")


def describe(point: dict, varying: list[str]) -> str:
    return ", ".join(f"{k}={point[k]}" for k in varying) or "the only point"


def run_sweep(workload: str, results: str, brokers: int, dry_run: bool) -> int:
    spec, points = load(workload)
    varying = [k for k in KINDS if len({json.dumps(p[k]) for p in points}) > 1]
    print(f"sweep {spec['name']}: {len(points)} point(s)"
          + (f", varying {', '.join(varying)}" if varying else ""), flush=True)
    if dry_run:
        for i, point in enumerate(points):
            print(f"  point {i}: {json.dumps(point, sort_keys=True)}")
        return 0
    if max(p["replication_factor"] for p in points) > brokers:
        raise ToolError(f"replication factor {max(p['replication_factor'] for p in points)} "
                        f"needs at least as many brokers (--brokers {brokers})")
    from node.client import Admin
    from node.cluster import Cluster
    cluster_dir = Path(tempfile.mkdtemp(prefix="mk-sweep-"))
    cluster = Cluster.up(cluster_dir / "cluster", brokers)
    try:
        for i, point in enumerate(points):
            topic = f"sweep-{spec['name']}-{i}"[:200]
            admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
            try:
                admin.create_topic(topic, point["partitions"], point["replication_factor"],
                                   config={"min.insync.replicas":
                                            str(min(point["min_insync_replicas"],
                                                    point["replication_factor"]))})
            finally:
                admin.close()
            print(f"point {i}: {describe(point, varying)}", flush=True)
            tags = {"workload": spec["name"], "point": i, "settings": point,
                    "varying": varying}
            if point["warmup_records"]:
                _producers(cluster.bootstrap_servers, topic, point, None, tags, warmup=True)
            for line in _producers(cluster.bootstrap_servers, topic, point, results, tags):
                print(f"  {line}", flush=True)
    finally:
        cluster.down(grace_s=10)
    print(f"recorded in {results}; compare with: minikafka analyze {results}")
    return 0


def _producers(bootstrap: str, topic: str, point: dict, results: str | None, tags: dict,
               warmup: bool = False) -> list[str]:
    records = point["warmup_records"] if warmup else point["records"]
    argv = [sys.executable, "-m", "node.cli", "producer-perf-test", "--topic", topic,
            "--num-records", str(records), "--record-size", str(point["record_size"]),
            "--throughput", str(point["rate"]), "--producer-props",
            f"bootstrap.servers={bootstrap}", f"acks={point['acks']}",
            f"batch.size={point['batch_size']}", f"linger.ms={point['linger_ms']}"]
    if results:
        argv += ["--results", results]
    env = dict(os.environ, **{TAGS_ENV: json.dumps(tags)})
    processes = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env) for _ in range(point["producers"])]
    lines = []
    deadline = time.monotonic() + TOOL_TIMEOUT_S
    for process in processes:
        try:
            out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise ToolError(f"a producer of {topic} ran past {TOOL_TIMEOUT_S} s") from None
        if process.returncode != 0:
            raise ToolError(f"producer-perf-test on {topic} failed: "
                            f"{(err.strip().splitlines() or ['?'])[-1]}")
        lines.append(out.strip().splitlines()[-1] if out.strip() else "")
    return lines


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("workload", metavar="WORKLOAD.yaml", type=workload_path,
                        help="a workload file, or the name of one that ships with "
                             f"minikafka ({', '.join(shipped_workloads())})")
    parser.add_argument("--results", required=True, type=absolute_path, metavar="DIR",
                        help="the results store the runs go to")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--dry-run", action="store_true", help="print the points only")
    return parser


def run(args) -> int:
    try:
        if args.brokers < 1:
            raise WorkloadError("--brokers must be at least 1")
        return run_sweep(args.workload, args.results, args.brokers, args.dry_run)
    except ToolError as e:
        print(f"bench sweep: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, WorkloadError) else 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argparse.ArgumentParser(prog="minikafka bench sweep",
                                                  description=__doc__,
                                                  formatter_class=argparse.RawDescriptionHelpFormatter))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
