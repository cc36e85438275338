"""Which producer runs belong together: the settings a run was made with
(``settings_of``, what the comparison keys on) and the throughput-latency curves, one
per client and per setting (``curves``). Pure functions over run.json records and the
per-run table, so they are tested without Spark.
"""
from __future__ import annotations

import json


def settings_of(run: dict) -> dict:
    """The settings a producer run was made with, flattened (what a comparison keys on):
    a sweep's point as it tagged it, else the tool's flags, properties and topic."""
    point = (run.get("tags") or {}).get("settings")
    if isinstance(point, dict):
        return dict(point)
    out = {}
    for key in ("num_records", "record_size", "throughput"):
        if key in run.get("arguments", {}):
            out[key] = run["arguments"][key]
    for key, value in (run.get("cluster", {}).get("producer_props") or {}).items():
        if key != "bootstrap.servers":
            out[key] = value
    topic = run.get("topic", {})
    for key in ("name", "partitions", "replication_factor"):
        if key in topic:
            out[f"topic.{key}"] = topic[key]
    for key, value in (topic.get("configs") or {}).items():
        if key == "min.insync.replicas":
            out[key] = value
    return out


# Settings that move a run along its throughput-latency curve (the target rate, how long
# it ran, its topic's name) instead of making it another curve.
CURVE_AXES = frozenset({"throughput", "rate", "num_records", "records", "warmup_records",
                        "topic.name"})
# The client a run without a ``client`` tag drove: node.client (producer-perf-test's).
NATIVE_CLIENT = "minikafka"


def series_of(run: dict) -> dict:
    """What makes a producer run part of one curve and not another: its client (the
    ``client`` tag a driver such as ``bench.kafka_clients`` gives it) and its settings
    other than ``CURVE_AXES``; acks ``-1`` is acks ``all``."""
    settings = {k: v for k, v in settings_of(run).items() if k not in CURVE_AXES}
    if str(settings.get("acks")) == "-1":
        settings["acks"] = "all"
    return {"client": (run.get("tags") or {}).get("client") or NATIVE_CLIENT, **settings}


def curves(runs: dict[str, dict], per_run: list[dict]) -> list[dict]:
    """The throughput-latency curves: one per client and setting (``series_of``), each
    a list of points (one per producer run, by achieved records/s). The series' label
    names its client, its acks and every other setting that tells series apart."""
    series = {r["run_id"]: series_of(runs.get(r["run_id"], {})) for r in per_run}
    keys = sorted({k for s in series.values() for k in s})
    differing = [k for k in keys
                 if len({json.dumps(s.get(k), sort_keys=True) for s in series.values()}) > 1]
    shown = ["client", "acks"] + [k for k in differing if k not in ("client", "acks")]
    rows = []
    for r in per_run:
        s = series[r["run_id"]]
        label = ", ".join(str(s[k]) if k == "client" else f"{k}={s[k]}"
                          for k in shown if k in s)
        rows.append({"series": label, "run_id": r["run_id"],
                     "records_per_s": r["records_per_s"], "p50_ms": r["p50_ms"],
                     "p99_ms": r["p99_ms"]})
    rows.sort(key=lambda row: (row["series"], row["records_per_s"] or 0.0))
    assert len({row["series"] for row in rows}) == \
        len({json.dumps(s, sort_keys=True) for s in series.values()}), "a label per series"
    return rows
