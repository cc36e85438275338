"""The results store: every measuring tool's run as one folder, readable by Spark at once.

    RESULTS/
      runs/run_id=<ID>/run.json                   what ran, where, when, and its figures
      samples/<kind>/run_id=<ID>/part-0.parquet   the run's samples, one schema per kind

``<ID>`` is ``<UTC start, YYYYmmddTHHMMSSZ>-<tool>-<8 hex>``. The ``run_id=`` folders
are Hive-style partitions: ``spark.read.parquet("RESULTS/samples/produce")`` reads every
run's per-record samples with a ``run_id`` column, and ``spark.read.json(
"RESULTS/runs")`` every run's description.

Sample kinds (columns; times are UTC timestamps in µs (Spark reads no nanosecond
timestamps) taken from CLOCK_MONOTONIC shifted to the epoch once per run, so
differences are exact to the µs; ``latency_ms`` keeps the nanoseconds):

- ``produce`` (producer-perf-test, one row per record): ``record`` int64 (number in send
  order), ``send_time``, ``ack_time`` timestamp[us, UTC], ``latency_ms`` float64,
  ``partition`` int32, ``offset`` int64 (-1 when it failed), ``bytes`` int32 (the
  value's size), ``error`` string (null when acknowledged);
- ``consume`` (consumer-perf-test, one row per second of the run): ``second``
  timestamp[us, UTC] (its start), ``records`` int64, ``bytes`` int64;
- ``latency`` (end-to-end-latency, one row per message): ``message`` int64,
  ``send_time``, ``receive_time`` timestamp[us, UTC], ``latency_ms`` float64;
- ``request`` (bench.perf.latency, one row per timed request): ``scenario`` string,
  ``round`` int32, ``latency_ms`` float64;
- ``breakdown`` (bench.perf.latency --breakdown, one row per traced write): ``write`` int64,
  then one int64 column per stamp, in ns: ``send``, ``receive``, ``append``,
  ``f_answered``, ``f_received``, ``f_appended``, ``f_sent``, ``f_leader``,
  ``high_watermark``, ``answer``, ``client_receive``.

``run.json``: ``run_id``, ``tool``, ``argv``, ``arguments`` (the parsed flags),
``cluster`` (bootstrap servers; brokers and controller from Metadata when reachable),
``topic`` (partitions, replication factor, configs when known), ``git_commit``,
``machine`` (cores, memory bytes, Python, platform, host name), ``start_time`` and
``end_time`` (ISO 8601 UTC), ``summary`` (the figures the tool printed),
``samples`` (kind -> path of its Parquet file, relative to RESULTS) and ``tags`` (what
a driver such as ``minikafka bench sweep`` said about the run: workload, point).

A run is written to ``<ID>.tmp`` folders and renamed into place at the end, so a reader
never sees half a run; a failed run leaves nothing.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from node.paths import CODE_ROOT
from node.tools.common import ToolError

SAMPLE_KINDS = ("produce", "consume", "latency", "request", "breakdown")
# The hops of a traced acks=all write (the ``breakdown`` kind): (name, start stamp, end
# stamp) in the order the write takes them, along the follower whose fetch advanced the
# high watermark. The one table: bench.perf.latency prints it, bench.analysis reports it.
HOPS = (
    ("client send -> leader receive", "send", "receive"),
    ("leader receive -> appended", "receive", "append"),
    ("appended -> follower fetch answered", "append", "f_answered"),
    ("fetch answer -> follower receive", "f_answered", "f_received"),
    ("follower receive -> appended", "f_received", "f_appended"),
    ("follower appended -> next fetch sent", "f_appended", "f_sent"),
    ("next fetch sent -> leader receive", "f_sent", "f_leader"),
    ("leader receive -> HW advanced", "f_leader", "high_watermark"),
    ("HW advanced -> answer sent", "high_watermark", "answer"),
    ("answer sent -> client receive", "answer", "client_receive"),
)
TOTAL_HOP = ("total", "send", "client_receive")  # the whole write


def git_commit() -> str | None:
    """The checkout's commit; None when installed (site-packages is no checkout)."""
    if not (CODE_ROOT / ".git").exists():  # a directory, or a file in a git worktree
        return None
    try:
        out = subprocess.run(["git", "-C", str(CODE_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def machine() -> dict:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = None
    return {"cores": os.cpu_count(), "memory_bytes": memory,
            "python": platform.python_version(), "platform": platform.platform(),
            "host": socket.gethostname()}


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds")


def epoch_offset_ns() -> int:
    """Add to a ``time.monotonic_ns()`` stamp to get ns since the epoch (UTC)."""
    return time.time_ns() - time.monotonic_ns()


class Run:
    """One run being recorded: ``add_samples`` as the tool goes, ``finish`` at the end.

        run = Run.start(results_dir, "producer-perf-test", args)   # ToolError if unusable
        ...
        run.add_samples("produce", table)          # a pyarrow.Table of that kind
        run.finish(summary={...}, cluster={...}, topic={...})
    """

    def __init__(self, root: Path, tool: str, arguments: dict, argv: list[str]) -> None:
        self.root = root
        self.tool = tool
        self.arguments = arguments
        self.argv = argv
        self.started = time.time()
        stamp = dt.datetime.fromtimestamp(self.started, dt.timezone.utc)
        self.run_id = f"{stamp:%Y%m%dT%H%M%SZ}-{tool}-{uuid.uuid4().hex[:8]}"
        self.samples: dict[str, str] = {}
        self.tags: dict = {}
        self._pending: list[tuple[Path, Path]] = []   # (tmp dir, final dir)

    @classmethod
    def start(cls, results_dir: str, tool: str, args=None,
              argv: list[str] | None = None) -> "Run":
        root = Path(results_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise ToolError(f"--results {results_dir}: cannot write there: "
                            f"{e.strerror or e}") from None
        arguments = {k: v for k, v in vars(args).items() if _jsonable(v)} if args else {}
        run = cls(root, tool, arguments, list(sys.argv if argv is None else argv))
        run.tags = _tags_from_environment()
        return run

    def _dir(self, *parts: str) -> Path:
        final = self.root.joinpath(*parts, f"run_id={self.run_id}")
        tmp = final.with_name(final.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        self._pending.append((tmp, final))
        return tmp

    def add_samples(self, kind: str, table) -> None:
        import pyarrow.parquet as pq
        assert kind in SAMPLE_KINDS, kind
        assert kind not in self.samples, f"{kind} samples written twice"
        folder = self._dir("samples", kind)
        try:
            pq.write_table(table, folder / "part-0.parquet")
        except OSError as e:
            self.abandon()
            raise ToolError(f"cannot write the {kind} samples: {e}") from None
        self.samples[kind] = f"samples/{kind}/run_id={self.run_id}/part-0.parquet"

    def finish(self, *, summary: dict, cluster: dict | None = None,
               topic: dict | None = None) -> Path:
        """Write run.json and move the run into place; returns its runs/ folder."""
        folder = self._dir("runs")
        record = {"run_id": self.run_id, "tool": self.tool, "argv": self.argv,
                  "arguments": self.arguments, "cluster": cluster or {},
                  "topic": topic or {}, "git_commit": git_commit(), "machine": machine(),
                  "start_time": _iso(self.started), "end_time": _iso(time.time()),
                  "summary": summary, "samples": self.samples, "tags": self.tags}
        try:
            (folder / "run.json").write_text(json.dumps(record, indent=1, default=str))
            for tmp, final in self._pending:
                os.replace(tmp, final)
        except OSError as e:
            self.abandon()
            raise ToolError(f"cannot write the run to {self.root}: {e}") from None
        self._pending.clear()
        return self.root / "runs" / f"run_id={self.run_id}"

    def abandon(self) -> None:
        for tmp, _ in self._pending:
            shutil.rmtree(tmp, ignore_errors=True)
        self._pending.clear()


TAGS_ENV = "MINIKAFKA_RESULTS_TAGS"


def _tags_from_environment() -> dict:
    """Tags a driver (``minikafka bench sweep``) gives the runs of the tools it starts:
    a JSON object in MINIKAFKA_RESULTS_TAGS, stored as run.json's ``tags``."""
    text = os.environ.get(TAGS_ENV)
    if not text:
        return {}
    try:
        tags = json.loads(text)
    except ValueError:
        raise ToolError(f"{TAGS_ENV} is not JSON: {text[:80]!r}") from None
    if not isinstance(tags, dict):
        raise ToolError(f"{TAGS_ENV} must be a JSON object")
    return tags


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def describe(bootstrap: str, topic: str | None) -> tuple[dict, dict]:
    """(cluster, topic) descriptions for run.json, as far as the cluster answers."""
    cluster: dict = {"bootstrap_servers": bootstrap}
    about: dict = {}
    try:
        from node.client import Admin
        admin = Admin(bootstrap_servers=bootstrap, request_timeout_ms=5_000)
    except Exception as e:   # a description is optional; the run is what matters
        cluster["error"] = str(e)
        return cluster, about
    try:
        described = admin.describe_cluster()
        cluster["brokers"] = len(described.brokers)
        cluster["controller"] = described.controller_id
        if topic:
            partitions = admin.describe_topics([topic]).get(topic, [])
            about["name"] = topic
            about["partitions"] = len(partitions)
            if partitions:
                about["replication_factor"] = len(partitions[0].replicas)
            about["configs"] = admin.describe_configs([topic]).get(topic, {})
    except Exception as e:
        cluster["error"] = str(e)
    finally:
        admin.close()
    return cluster, about
