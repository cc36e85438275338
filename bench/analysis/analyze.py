"""``minikafka analyze RESULTS [--out DIR] [--master URL] [--baseline RUN_ID]``.
(Over 600 lines: one job whose tables, plots and report share one Spark session and the
same column helpers; the chaos runs' part is apart, in ``analyze_chaos``.)

A PySpark job over a results store (``node.perf.results``): it reads every run's
samples as DataFrames (one per sample kind, the runs told apart by their ``run_id``
partition column) and computes, with Spark's aggregations (``percentile_approx``,
one-second ``window``s):

- per run: records, errors, records/s and MB/s, latency p50, p95, p99, p99.9 and max
  (producer runs; end-to-end runs; ``bench.perf.latency`` requests per scenario), and the
  same per second (``per_second``);
- consumer runs: records/s and MB/s overall and per second;
- ``bench.perf.latency --breakdown`` runs: p50 and p99 of every hop, in µs;
- across producer runs: one comparison table keyed by the settings that differ
  between them (flags, producer properties, topic), with each run's throughput and
  p99 as a ratio to the baseline run (``--baseline``, else the earliest), and the
  throughput-latency curves (achieved records/s against p50 and p99): one per client
  (a run's ``client`` tag; node.client's without one) and per setting (acks and every
  other setting that differs, except the target rate and the run's length);
- given chaos runs instead (a ``minikafka chaos run`` folder or a folder of them):
  acknowledged and failed sends per second with the faults' windows shaded, recovery
  per fault type and the anomalies per run (``bench.analysis.analyze_chaos``);
- with ``--audit BOOTSTRAP``, the Kafka paper's audit, exact: every acknowledged record
  of each producer run is looked up in its topic (``format("minikafka")``) by partition
  and offset; per 10 s window of send time: produced against found, mismatched windows
  listed (an acknowledged record that is gone is a loss).

It writes ``DIR/report.html`` (self-contained: tables and matplotlib plots embedded as
PNG), every table as Parquet and CSV under ``DIR/tables/``, the plots under
``DIR/plots/``, and prints a short text summary; progress goes to stderr.

Errors are one line and exit 1: a missing or empty store, a sample file Spark cannot
read, Java missing (Spark runs on a JVM).
"""
from __future__ import annotations

import argparse
import base64
import html
import json
import os
import shutil
import sys
import time
from pathlib import Path

from node.paths import absolute_path
from bench.analysis.series import curves, settings_of
from node.perf.results import HOPS, TOTAL_HOP
from node.tools.common import ToolError

PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
ACCURACY = 100_000           # percentile_approx: exact below this many samples per group
JAVA_HINT = "apt-get install openjdk-17-jre-headless"
LOG4J_CONFIG = Path(__file__).with_name("log4j2-analyze.properties")


def progress(message: str) -> None:
    print(f"analyze: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ inputs

def load_runs(root: Path) -> dict[str, dict]:
    if not root.is_dir():
        raise ToolError(f"{root}: no such results directory")
    runs = {}
    for path in sorted((root / "runs").glob("run_id=*/run.json")):
        try:
            record = json.loads(path.read_text())
            runs[record["run_id"]] = record
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ToolError(f"{path}: not a run description: {e}") from None
    if not runs:
        raise ToolError(f"{root}: no runs (expected {root}/runs/run_id=*/run.json; "
                        f"record some with --results)")
    return runs


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and Path(home, "bin", "java").exists()))


DEFAULT_MASTER = "local[2]"


def spark_session(master: str | None):
    """A session on ``master``; None: the master spark-submit was given (when it launched
    this script), else DEFAULT_MASTER."""
    if not java_available():
        raise ToolError(f"Spark needs Java, and none was found: {JAVA_HINT}")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Spark's Python workers run this interpreter (it has pyarrow and minikafka).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    builder = SparkSession.builder
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not spark-submit
        master = DEFAULT_MASTER
    if master is not None:
        builder = builder.master(master)
    return (builder.appName("minikafka-analyze")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions",
                    f"-Dlog4j2.configurationFile={LOG4J_CONFIG}")
            # Loopback unless SPARK_LOCAL_IP says otherwise (a remote cluster's executors
            # must reach the driver), whatever the host name resolves to.
            .config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
            .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .getOrCreate())


def read_kind(spark, root: Path, kind: str):
    """The DataFrame of one sample kind over every run, or None if no run has it."""
    import pyarrow.parquet as pq
    folder = root / "samples" / kind
    parts = sorted(folder.glob("run_id=*/*.parquet"))
    if not parts:
        return None
    for part in parts:   # a corrupt file is named here, before Spark fails on it
        try:
            pq.read_metadata(part)
        except Exception as e:  # pyarrow raises several types for a bad file
            raise ToolError(f"cannot read the {kind} samples: {part}: {e}") from None
    try:
        return spark.read.parquet(str(folder))
    except Exception as e:  # Spark raises Py4J and AnalysisException types
        raise ToolError(f"cannot read the {kind} samples under {folder}: "
                        f"{_first_line(e)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# ------------------------------------------------------------------ computations

def _percentile_columns(F, column: str):
    fractions = [f for _, f in PERCENTILES]
    approx = F.percentile_approx(column, fractions, ACCURACY)
    return [approx[i].alias(f"{name}_ms") for i, (name, _) in enumerate(PERCENTILES)] + \
        [F.max(column).alias("max_ms")]


def produce_tables(F, produce) -> tuple[list[dict], list[dict]]:
    ok = produce.where(F.col("error").isNull())
    per_run = produce.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("errors"),
        F.sum("bytes").alias("bytes"),
        ((F.max(F.col("ack_time").cast("double")) - F.min(F.col("send_time").cast("double"))
          )).alias("seconds"))
    latency = ok.groupBy("run_id").agg(*_percentile_columns(F, "latency_ms"))
    per_run = per_run.join(latency, "run_id", "left").withColumn(
        "records_per_s", F.col("records") / F.col("seconds")).withColumn(
        "mb_per_s", F.col("bytes") / F.col("seconds") / 1e6)
    per_second = ok.groupBy("run_id", F.window("ack_time", "1 second").alias("w")).agg(
        F.count(F.lit(1)).alias("records"), F.sum("bytes").alias("bytes"),
        *_percentile_columns(F, "latency_ms")).select(
        "run_id", F.col("w.start").alias("second"), "records", "bytes", "p50_ms",
        "p99_ms", "max_ms").orderBy("run_id", "second")
    return _rows(per_run.orderBy("run_id")), _rows(per_second)


def consume_tables(F, consume) -> tuple[list[dict], list[dict]]:
    per_run = consume.groupBy("run_id").agg(
        F.sum("records").alias("records"), F.sum("bytes").alias("bytes"),
        F.count(F.lit(1)).alias("seconds")).withColumn(
        "records_per_s", F.col("records") / F.col("seconds")).withColumn(
        "mb_per_s", F.col("bytes") / F.col("seconds") / 1e6)
    per_second = consume.select("run_id", "second", "records", "bytes").orderBy(
        "run_id", "second")
    return _rows(per_run.orderBy("run_id")), _rows(per_second)


def latency_table(F, samples) -> list[dict]:
    return _rows(samples.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("messages"), *_percentile_columns(F, "latency_ms")
    ).orderBy("run_id"))


def request_table(F, samples) -> list[dict]:
    return _rows(samples.groupBy("run_id", "scenario").agg(
        F.count(F.lit(1)).alias("requests"), *_percentile_columns(F, "latency_ms")
    ).orderBy("run_id", "scenario"))


def breakdown_table(F, samples) -> list[dict]:
    columns = []
    for name, start, end in (*HOPS, TOTAL_HOP):
        hop = (F.col(end) - F.col(start)) / 1000.0
        approx = F.percentile_approx(hop, [0.5, 0.99], ACCURACY)
        columns += [approx[0].alias(f"{name}|p50"), approx[1].alias(f"{name}|p99")]
    rows = _rows(samples.groupBy("run_id").agg(*columns).orderBy("run_id"))
    out = []
    for row in rows:
        for name, _, _ in (*HOPS, TOTAL_HOP):
            out.append({"run_id": row["run_id"], "hop": name,
                        "p50_us": row[f"{name}|p50"], "p99_us": row[f"{name}|p99"]})
    return out


def _rows(df) -> list[dict]:
    return [row.asDict() for row in df.collect()]


def comparison(runs: dict[str, dict], per_run: list[dict], baseline: str | None
               ) -> tuple[list[dict], list[str], str | None]:
    """Rows keyed by the settings that differ, with ratios to the baseline run."""
    if not per_run:
        return [], [], None
    ordered = sorted(per_run, key=lambda r: runs.get(r["run_id"], {}).get("start_time", ""))
    ids = [r["run_id"] for r in ordered]
    if baseline is not None and baseline not in ids:
        raise ToolError(f"--baseline {baseline}: not a producer run of this store "
                        f"({', '.join(ids)})")
    base_id = baseline or ids[0]
    settings = {r: settings_of(runs.get(r, {})) for r in ids}
    keys = sorted({k for s in settings.values() for k in s})
    differing = [k for k in keys if len({json.dumps(s.get(k)) for s in settings.values()}) > 1]
    base = next(r for r in ordered if r["run_id"] == base_id)
    rows = []
    for r in ordered:
        row = {"run_id": r["run_id"], **{k: settings[r["run_id"]].get(k) for k in differing},
               "records_per_s": r["records_per_s"], "p50_ms": r["p50_ms"],
               "p99_ms": r["p99_ms"]}
        row["throughput_ratio"] = _ratio(r["records_per_s"], base["records_per_s"])
        row["p99_ratio"] = _ratio(r["p99_ms"], base["p99_ms"])
        rows.append(row)
    return rows, differing, base_id


def _ratio(value, reference):
    return None if value is None or not reference else value / reference


# ------------------------------------------------------------------ outputs

def write_table(out: Path, name: str, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    if not rows:
        return
    table = pa.Table.from_pylist([{k: _plain(v) for k, v in row.items()} for row in rows])
    (out / "tables").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "tables" / f"{name}.parquet")
    pacsv.write_csv(table, out / "tables" / f"{name}.csv")


def _plain(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def run_labels(runs: dict[str, dict], differing: list[str]) -> dict[str, str]:
    """A legend label per run: the settings that tell it apart, else a short id."""
    labels = {}
    keys = [k for k in differing if k != "num_records"] or differing   # the run's length
    for run_id, record in runs.items():                                # rarely tells it
        settings = settings_of(record)
        parts = [f"{k}={settings[k]}" for k in keys if k in settings]
        labels[run_id] = ", ".join(parts) if parts else _short(run_id)
    return labels


def plots(out: Path, produce_seconds, consume_seconds, curve_points, breakdown,
          labels: dict[str, str]) -> list[tuple[str, Path]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    made = []

    def save(fig, name: str, title: str) -> None:
        fig.tight_layout()
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((title, path))

    for rows, what, name in ((produce_seconds, "acknowledged", "produce_throughput"),
                             (consume_seconds, "consumed", "consume_throughput")):
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(8, 4))
        for run_id, series in _by_run(rows).items():
            start = series[0]["second"]
            ax.plot([(r["second"] - start).total_seconds() for r in series],
                    [r["records"] for r in series], marker=".",
                    label=labels.get(run_id, _short(run_id)))
        ax.set_title(f"Records {what} per second")
        ax.set_xlabel("seconds since the run's first record")
        ax.set_ylabel("records / s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        save(fig, name, f"Records {what} per second")
    if produce_seconds:
        fig, ax = plt.subplots(figsize=(8, 4))
        for run_id, series in _by_run(produce_seconds).items():
            start = series[0]["second"]
            xs = [(r["second"] - start).total_seconds() for r in series]
            label = labels.get(run_id, _short(run_id))
            line, = ax.plot(xs, [r["p99_ms"] for r in series], label=f"{label}: p99")
            ax.plot(xs, [r["p50_ms"] for r in series], linestyle="--", color=line.get_color(),
                    label=f"{label}: p50")
        ax.set_title("Produce latency per second (send to acknowledgement)")
        ax.set_xlabel("seconds since the run's first record")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small", ncol=2)
        save(fig, "produce_latency", "Produce latency per second")
    if len(curve_points) >= 2:
        series = _by_key(curve_points, "series")
        fig, ax = plt.subplots(figsize=(12, 4.5 + 0.12 * len(series)))
        for label, points in series.items():
            xs = [r["records_per_s"] for r in points]
            line, = ax.plot(xs, [r["p99_ms"] for r in points], marker="o", label=label)
            ax.plot(xs, [r["p50_ms"] for r in points], marker=".", linestyle="--",
                    color=line.get_color())
        xs = sorted(r["records_per_s"] for r in curve_points)
        ax.set_title("A curve per client and setting: a point per producer run; "
                     "p99 solid, p50 dashed", fontsize="medium")
        ax.set_xlabel("achieved throughput (records / s)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        if xs[0] > 0 and xs[-1] > 20 * xs[0]:
            ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        save(fig, "throughput_latency", "Throughput-latency curves")
    if breakdown:
        last = breakdown[-1]["run_id"]
        hops = [r for r in breakdown if r["run_id"] == last and r["hop"] != "total"]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        names = [r["hop"] for r in hops][::-1]
        ax.barh(names, [r["p50_us"] for r in hops][::-1], label="p50")
        ax.barh(names, [r["p99_us"] - r["p50_us"] for r in hops][::-1],
                left=[r["p50_us"] for r in hops][::-1], alpha=0.4, label="p99")
        ax.set_title("Where an acks=all write spends its time")
        ax.set_xlabel("microseconds")
        ax.legend()
        save(fig, "breakdown", "acks=all write, hop by hop")
    return made


def _by_run(rows: list[dict]) -> dict[str, list[dict]]:
    return _by_key(rows, "run_id")


def _by_key(rows: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row[key], []).append(row)
    return out


def _short(run_id: str) -> str:
    return run_id.split("-")[0] + "-" + run_id.rsplit("-", 1)[-1]


def html_table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(k)))}</td>" for k in keys)
                   + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_report(out: Path, sections: list[tuple[str, list[dict]]], figures, runs) -> Path:
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             "<title>minikafka analysis</title><style>body{font-family:sans-serif;"
             "margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
             "th{background:#eee}</style></head><body>",
             f"<h1>minikafka analysis: {len(runs)} run(s)</h1>"]
    parts.append(html_table([{"run_id": r, "tool": d.get("tool"), "start": d.get("start_time"),
                              "git": (d.get("git_commit") or "")[:10]}
                             for r, d in sorted(runs.items())]))
    for title, rows in sections:
        parts.append(f"<h2>{html.escape(title)}</h2>{html_table(rows)}")
    for title, path in figures:
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<h2>{html.escape(title)}</h2><img src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    report = out / "report.html"
    report.write_text("".join(parts))
    return report


# ------------------------------------------------------------------ the job

AUDIT_WINDOW = "10 seconds"


def audit(spark, F, produce, runs: dict, bootstrap: str) -> tuple[list[dict], list[dict]]:
    """The Kafka paper's audit, exact: every acknowledged record of each producer run is
    looked up in its topic (read through format("minikafka") up to the high watermark)
    by partition and offset, with its value's length; per 10 s window of send time and
    topic: produced (acknowledged) against found. Returns (windows, mismatched)."""
    from node.spark import register
    register(spark)
    topics = {}
    for run_id, record in runs.items():
        topic = (record.get("topic") or {}).get("name") or \
            (record.get("arguments") or {}).get("topic")
        if record.get("tool") == "producer-perf-test" and topic:
            topics[run_id] = topic
    if not topics:
        return [], []
    run_topic = spark.createDataFrame(sorted(topics.items()), "run_id string, topic string")
    acked = produce.where(F.col("error").isNull()).join(run_topic, "run_id")
    found = None
    for topic in sorted(set(topics.values())):
        df = (spark.read.format("minikafka").option("bootstrap.servers", bootstrap)
              .option("subscribe", topic).load()
              .select("topic", "partition", "offset", F.length("value").alias("found_bytes")))
        found = df if found is None else found.unionByName(df)
    joined = acked.join(found, ["topic", "partition", "offset"], "left")
    windows = joined.groupBy("topic", F.window("send_time", AUDIT_WINDOW).alias("w")).agg(
        F.count(F.lit(1)).alias("produced"),
        F.count("found_bytes").alias("consumed"),
        F.sum(F.when(F.col("found_bytes") != F.col("bytes"), 1).otherwise(0)).alias(
            "wrong_size")).select(
        "topic", F.col("w.start").alias("window_start"), "produced", "consumed",
        "wrong_size").orderBy("topic", "window_start")
    rows = _rows(windows)
    return rows, [r for r in rows if r["produced"] != r["consumed"] or r["wrong_size"]]


def analyze(results_dir: str, out_dir: str | None, master: str | None, baseline: str | None,
            bootstrap: str | None = None) -> int:
    root = Path(results_dir)
    from bench.analysis import analyze_chaos
    if analyze_chaos.find_runs(root):     # a chaos run folder, or a folder of them
        return analyze_chaos_runs(root, out_dir, master)
    runs = load_runs(root)
    if baseline is not None and baseline not in runs:   # told before Spark starts
        raise ToolError(f"--baseline {baseline}: not a producer run of this store "
                        f"({root})")
    out = Path(out_dir) if out_dir else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    progress(f"{len(runs)} run(s) in {root}; starting Spark ({master or 'default master'})")
    spark = spark_session(master)
    progress(f"Spark master {spark.sparkContext.master}, "
             f"{spark.sparkContext.defaultParallelism} cores")
    try:
        spark.sparkContext.setLogLevel("OFF")   # failures are reported below, in one line
        from pyspark.sql import functions as F
        sections, produce_runs, produce_seconds, consume_seconds, breakdown = [], [], [], [], []
        curve_points: list[dict] = []
        differing: list[str] = []
        audit_summary = None
        produce = read_kind(spark, root, "produce")
        if produce is not None:
            progress("producer runs: throughput and latency, overall and per second")
            produce_runs, produce_seconds = produce_tables(F, produce)
            rows, differing, base_id = comparison(runs, produce_runs, baseline)
            sections += [("Producer runs", produce_runs),
                         (f"Comparison (baseline {base_id}; settings that differ: "
                          f"{', '.join(differing) or 'none'})", rows),
                         ("Producer runs per second", produce_seconds)]
            write_table(out, "produce_runs", produce_runs)
            write_table(out, "produce_per_second", produce_seconds)
            write_table(out, "comparison", rows)
            curve_points = curves(runs, produce_runs)
            sections.append(("Throughput-latency curves (one per client and setting)",
                             curve_points))
            write_table(out, "throughput_latency", curve_points)
            if bootstrap:
                progress(f"audit: every acknowledged record looked up in its topic at "
                         f"{bootstrap}")
                audited, mismatched = audit(spark, F, produce, runs, bootstrap)
                sections += [(f"Audit per {AUDIT_WINDOW} of send time: produced "
                              f"(acknowledged) against found in the topic; "
                              f"{len(mismatched)} mismatched window(s)", audited)]
                write_table(out, "audit", audited)
                audit_summary = (len(audited), mismatched)
        consume = read_kind(spark, root, "consume")
        if consume is not None:
            progress("consumer runs")
            consume_runs, consume_seconds = consume_tables(F, consume)
            for row in consume_runs:   # the run's own clock beats whole-second buckets
                elapsed = runs.get(row["run_id"], {}).get("summary", {}).get("seconds")
                if elapsed:
                    row["seconds"] = elapsed
                    row["records_per_s"] = row["records"] / elapsed
                    row["mb_per_s"] = row["bytes"] / elapsed / 1e6
            sections += [("Consumer runs", consume_runs)]
            write_table(out, "consume_runs", consume_runs)
            write_table(out, "consume_per_second", consume_seconds)
        for kind, title, fn in (("latency", "End-to-end latency runs", latency_table),
                                ("request", "Timed requests (bench.perf.latency; "
                                 "bench.kafka_groups: rebalances, commits, fail-overs), ms",
                                 request_table),
                                ("breakdown", "acks=all breakdown (µs)", breakdown_table)):
            samples = read_kind(spark, root, kind)
            if samples is None:
                continue
            progress(title)
            rows = fn(F, samples)
            if kind == "breakdown":
                breakdown = rows
            sections.append((title, rows))
            write_table(out, kind, rows)
        if not sections:
            raise ToolError(f"{root}: the runs have no samples")
        progress("plots")
        figures = plots(out, produce_seconds, consume_seconds, curve_points, breakdown,
                        run_labels(runs, differing))
        report = write_report(out, sections, figures, runs)
    finally:
        spark.stop()
    print(f"{len(runs)} run(s) analysed in {time.monotonic() - started:.1f} s")
    for row in produce_runs:
        print(f"produce {row['run_id']}: {row['records']} records, "
              f"{row['records_per_s']:,.0f} records/s, {row['mb_per_s']:.2f} MB/s, "
              f"p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms, "
              f"max {row['max_ms']:.3f} ms, {row['errors']} errors")
    for title, rows in sections:
        if title in ("Consumer runs", "End-to-end latency runs"):
            for row in rows:
                figures_text = ", ".join(f"{k} {_fmt(v)}" for k, v in row.items()
                                         if k != "run_id")
                print(f"{title.split()[0].lower()} {row['run_id']}: {figures_text}")
    if audit_summary is not None:
        windows, mismatched = audit_summary
        print(f"audit: {windows} window(s), {len(mismatched)} mismatched"
              + "".join(f"\n  {r['topic']} {r['window_start']}: produced {r['produced']}, "
                        f"found {r['consumed']}, wrong size {r['wrong_size']}"
                        for r in mismatched))
    print(f"report: {report}")
    print(f"tables: {out / 'tables'}")
    return 0


def analyze_chaos_runs(root: Path, out_dir: str | None, master: str | None) -> int:
    """The report over chaos runs (``bench.analysis.analyze_chaos``)."""
    from bench.analysis import analyze_chaos
    runs = analyze_chaos.find_runs(root)
    assert runs, root
    out = Path(out_dir) if out_dir else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    specs = {p.name: analyze_chaos.load_json(p / "run.json", {}) for p in runs}
    verdicts = {p.name: analyze_chaos.load_json(p / "verdict.json", {}) for p in runs}
    faults = {p.name: analyze_chaos.load_json(p / "faults.json", []) for p in runs}
    progress(f"{len(runs)} chaos run(s) in {root}; starting Spark "
             f"({master or 'default master'})")
    spark = spark_session(master)
    try:
        spark.sparkContext.setLogLevel("OFF")
        from pyspark.sql import functions as F
        progress("histories: acknowledged and failed sends per second")
        seconds, starts = analyze_chaos.per_second(spark, F, runs)
    finally:
        spark.stop()
    recovery = analyze_chaos.recovery_table(verdicts)
    anomalies = analyze_chaos.anomaly_table(specs, verdicts)
    write_table(out, "chaos_per_second", seconds)
    write_table(out, "chaos_recovery", recovery)
    write_table(out, "chaos_anomalies", anomalies)
    progress("plots")
    figures = analyze_chaos.timeline_plots(out, seconds, starts, faults, specs) + \
        analyze_chaos.recovery_plot(out, recovery)
    sections = [("Anomalies per run (the checker's verdict)", anomalies),
                ("Recovery per fault type (fault start to the next acknowledgement)",
                 recovery)]
    if len(runs) > analyze_chaos.PLOTTED_RUNS_MAX:
        sections.append((f"Timelines are drawn for the first "
                         f"{analyze_chaos.PLOTTED_RUNS_MAX} runs; "
                         f"every run's seconds are in tables/chaos_per_second", []))
    described = {p.name: {"tool": f"chaos run ({specs[p.name].get('profile')}, seed "
                                  f"{specs[p.name].get('seed')})"} for p in runs}
    report = write_report(out, sections, figures, described)
    print(f"{len(runs)} chaos run(s) analysed in {time.monotonic() - started:.1f} s")
    for row in anomalies:
        counts = ", ".join(f"{k} {row[k]}" for k in analyze_chaos.ANOMALIES)
        print(f"chaos {row['run']}: profile {row['profile']}, seed {row['seed']}, "
              f"{row['acknowledged']} acknowledged, {counts}, longest window without an "
              f"acknowledgement {_fmt(row['longest_gap_ms'])} ms, "
              f"{'VALID' if row['valid'] else 'INVALID'}")
    for row in recovery:
        print(f"recovery after {row['fault']}: {row['faults']} fault(s), median "
              f"{_fmt(row['median_ms'])} ms, worst {_fmt(row['worst_ms'])} ms"
              + (f", {row['never_recovered']} never recovered" if row["never_recovered"]
                 else ""))
    print(f"report: {report}")
    print(f"tables: {out / 'tables'}")
    return 0


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("results", metavar="RESULTS", type=absolute_path, help="a results store (--results DIR)")
    parser.add_argument("--out", default=None, type=absolute_path, help="where to write (default RESULTS/report)")
    parser.add_argument("--master", default=None,
                        help="Spark master URL (local[N], local-cluster[N,CORES,MB], "
                             "spark://HOST:PORT; default local[2], or spark-submit's "
                             "--master when spark-submit runs this file)")
    parser.add_argument("--audit", default=None, metavar="BOOTSTRAP",
                        help="audit: look every acknowledged record of the producer runs up "
                             "in its topic on this cluster (HOST:PORT,...)")
    parser.add_argument("--baseline", default=None, metavar="RUN_ID",
                        help="the producer run the comparison divides by (default: the "
                             "earliest)")
    return parser


def run(args) -> int:
    try:
        return analyze(args.results, args.out, args.master, args.baseline, args.audit)
    except ToolError as e:
        print(f"analyze: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
        if not isinstance(e, (Py4JError, PySparkException)):
            raise
        print(f"analyze: error: Spark failed: {_first_line(e)}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argparse.ArgumentParser(prog="minikafka analyze", description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
