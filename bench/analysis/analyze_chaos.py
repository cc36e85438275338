"""``minikafka analyze`` over chaos runs (``minikafka chaos run --dir RUN``).

Given one run folder, or a folder of them, a PySpark job reads every run's recorded
history (``history/*.parquet``, schema in ``bench.chaos.worker``) and computes, per run
and per second since the run started, the acknowledged sends and the failed or unknown
ones (``groupBy`` over the history, no Python loop over operations). With the runs'
``faults.json`` and ``verdict.json`` it writes:

- a timeline per run: acknowledgements per second, with each fault's window shaded in
  its fault type's colour, and the failed/unknown sends;
- the time to recover (fault start to the next acknowledgement) per fault type over all
  runs: count, median, worst;
- the anomalies per run (the checker's verdict: lost, duplicate, inconsistent,
  nonmonotonic, skip, unexpected, longest window without an acknowledgement);

as ``report.html`` (plots embedded), tables (Parquet and CSV) and a text summary
(``bench.analysis.analyze.analyze_chaos_runs`` puts these parts together).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from node.tools.common import ToolError

PLOTTED_RUNS_MAX = 12
ANOMALIES = ("lost", "duplicate", "inconsistent", "nonmonotonic", "skip", "unexpected")


def is_chaos_run(path: Path) -> bool:
    return (path / "run.json").is_file() and (path / "history").is_dir()


def find_runs(root: Path) -> list[Path]:
    """``root`` itself if it is a chaos run, else the chaos runs directly inside it."""
    if is_chaos_run(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and is_chaos_run(p)) \
        if root.is_dir() else []


def load_json(path: Path, default):
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ToolError(f"{path}: not readable JSON: {e}") from None


def per_second(spark, F, runs: list[Path]) -> tuple[list[dict], dict[str, int]]:
    """Rows {run, second, acknowledged, failed} (seconds with nothing are absent) and
    each run's start (the first operation's time_ns)."""
    frames = []
    for path in runs:
        files = sorted((path / "history").glob("*.parquet"))
        if not files:
            raise ToolError(f"{path}/history: no history files")
        frames.append(spark.read.parquet(*[str(f) for f in files])
                      .select("type", "f", "time_ns").withColumn("run", F.lit(path.name)))
    history = frames[0]
    for frame in frames[1:]:
        history = history.unionByName(frame)
    starts = history.groupBy("run").agg(F.min("time_ns").alias("start_ns"))
    sends = history.filter(F.col("f") == "send").join(starts, "run").withColumn(
        "second", F.floor((F.col("time_ns") - F.col("start_ns")) / 1_000_000_000)
        .cast("long"))
    rows = (sends.groupBy("run", "second")
            .agg(F.sum(F.when(F.col("type") == "ok", 1).otherwise(0)).alias("acknowledged"),
                 F.sum(F.when(F.col("type").isin("fail", "info"), 1).otherwise(0))
                 .alias("failed"))
            .orderBy("run", "second").collect())
    return ([{"run": r["run"], "second": int(r["second"]), "acknowledged": int(r["acknowledged"]),
              "failed": int(r["failed"])} for r in rows],
            {r["run"]: int(r["start_ns"]) for r in starts.collect()})


def recovery_table(verdicts: dict[str, dict]) -> list[dict]:
    by_kind: dict[str, list[float]] = {}
    never: dict[str, int] = {}
    for verdict in verdicts.values():
        for kind, _target, ms in verdict.get("recovery_ms", []):
            if ms is None:
                never[kind] = never.get(kind, 0) + 1
            else:
                by_kind.setdefault(kind, []).append(float(ms))
    out = []
    for kind in sorted(set(by_kind) | set(never)):
        values = by_kind.get(kind, [])
        out.append({"fault": kind, "faults": len(values) + never.get(kind, 0),
                    "median_ms": statistics.median(values) if values else None,
                    "worst_ms": max(values) if values else None,
                    "never_recovered": never.get(kind, 0)})
    return out


def anomaly_table(specs: dict[str, dict], verdicts: dict[str, dict]) -> list[dict]:
    rows = []
    for name in sorted(verdicts):
        verdict, spec = verdicts[name], specs.get(name, {})
        row = {"run": name, "profile": spec.get("profile"), "seed": spec.get("seed"),
               "acknowledged": verdict.get("acknowledged")}
        row.update({k: verdict.get(k) for k in ANOMALIES})
        row["longest_gap_ms"] = verdict.get("longest_gap_ms")
        row["valid"] = verdict.get("valid")
        rows.append(row)
    return rows


def timeline_plots(out: Path, seconds: list[dict], starts: dict[str, int],
                   faults: dict[str, list], specs: dict[str, dict]) -> list[tuple[str, Path]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    folder = out / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    kinds = sorted({f["fault"] for run in faults.values() for f in run})
    palette = plt.get_cmap("tab10")
    colour = {k: palette(i % 10) for i, k in enumerate(kinds)}
    made = []
    names = sorted(starts)[:PLOTTED_RUNS_MAX]
    for name in names:
        rows = [r for r in seconds if r["run"] == name]
        last = max((r["second"] for r in rows), default=0)
        acks = {r["second"]: r["acknowledged"] for r in rows}
        failed = {r["second"]: r["failed"] for r in rows}
        xs = list(range(last + 1))
        fig, ax = plt.subplots(figsize=(9, 4.0))
        for fault in faults.get(name, []):
            begin = (fault["start_ns"] - starts[name]) / 1e9
            end = ((fault.get("end_ns") or fault["start_ns"]) - starts[name]) / 1e9
            ax.axvspan(begin, max(end, begin + 0.1), color=colour[fault["fault"]], alpha=0.25)
        ax.plot([x + 0.5 for x in xs], [acks.get(x, 0) for x in xs], color="black",
                marker=".", label="acknowledged")
        if any(failed.values()):
            ax.plot([x + 0.5 for x in xs], [failed.get(x, 0) for x in xs], color="red",
                    marker="x", linestyle="--", label="failed or unknown")
        spec = specs.get(name, {})
        ax.set_title(f"Acknowledged sends per second: {name} "
                     f"(profile {spec.get('profile')}, seed {spec.get('seed')})")
        ax.set_xlabel("seconds since the run started")
        ax.set_ylabel("sends / s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        handles += [Patch(color=colour[k], alpha=0.25, label=k)
                    for k in kinds if any(f["fault"] == k for f in faults.get(name, []))]
        ax.legend(handles=handles, fontsize="small", loc="upper center",
                  bbox_to_anchor=(0.5, -0.2), ncol=6, frameon=False)
        fig.tight_layout()
        path = folder / f"timeline_{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((f"Timeline of {name}", path))
    return made


def recovery_plot(out: Path, recovery: list[dict]) -> list[tuple[str, Path]]:
    rows = [r for r in recovery if r["median_ms"] is not None]
    if not rows:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.6))
    names = [f"{r['fault']} (n={r['faults']})" for r in rows][::-1]
    # A log scale needs positive widths: under 0.1 ms is drawn as 0.1 ms.
    ax.barh(names, [max(r["worst_ms"], 0.1) for r in rows][::-1], color="#f4a582",
            label="worst")
    ax.barh(names, [max(r["median_ms"], 0.1) for r in rows][::-1], color="#2166ac",
            label="median")
    ax.set_xscale("log")
    ax.set_title("Time to the next acknowledgement after a fault starts")
    ax.set_xlabel("milliseconds (log scale)")
    ax.grid(alpha=0.3, axis="x", which="both")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = out / "plots" / "recovery.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [("Recovery per fault type", path)]
