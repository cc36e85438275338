"""``minikafka chaos run --workload txn``: the transactional workload's part of a chaos
run (``bench.chaos.run`` does the rest: the cluster, the nemesis, healing, LogMatching).

- ``--producers`` N read-process-write processes (``bench.chaos.txn_worker --role txn``,
  transactional ids ``chaos-p0`` ..., the consumer group ``chaos-txn``) over the topic
  ``chaos``: each transaction reads what the group gives it at read_committed and
  writes ``--txn-writes`` values to distinct partitions of the same topic, so
  transactions read each other's writes (wr edges for the cycle search);
- ``--consumers`` committed readers (``--role reader``, default 1);
- after healing: the final read-back at read_committed (``final-committed.jsonl``) and
  read_uncommitted (``final-uncommitted.jsonl``), the workers' transactions
  (``txns/<worker>.jsonl``), then ``bench.chaos.txn_checker`` and the verdict lines.

``--client native`` (default) or ``confluent-kafka`` for the read-process-write
processes (``bench.chaos.txn_clients``); the committed readers are native.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.chaos.txn_checker import ANOMALIES, ANOMALY_HELP, check_txns, explain
from bench.chaos.txn_history import completed, read_txns, read_view, write_txns, write_view

TXN_GROUP = "chaos-txn"
DEFAULT_WRITES = 3
DEFAULT_ABORT = 0.2
DEFAULT_RATE = 10.0             # transactions/s per process (``--rate`` when not given)
EXAMPLES_SHOWN = 5
COUNTS = ("txns", "committed", "aborted", "unknown", "info_committed", "info_aborted",
          "read_only", "writes", "reads")


def worker_command(role: str, name: str, bootstrap: str, topic: str, duration: float,
                   rate: float, writes: int, abort: float, seed: int,
                   client: str = "native") -> list[str]:
    return [sys.executable, "-m", "bench.chaos.txn_worker", "--role", role,
            "--client", client, "--name", name,
            "--bootstrap", bootstrap, "--topic", topic, "--duration", str(duration),
            "--rate", str(rate), "--writes", str(writes), "--abort", str(abort),
            "--group", TXN_GROUP, "--seed", str(seed)]


def start_workers(cluster, run: Path, args, consumers: int, workers: dict, topic: str
                  ) -> None:
    """The read-process-write processes (p0 ...: ``--client``, a real client on the
    Kafka listener) and the committed readers (c0 ...: native), each in its own
    namespace with ``--netns``."""
    from bench.chaos.clients import WorkerStream
    for role, prefix_, count in (("txn", "p", args.producers), ("reader", "c", consumers)):
        for i in range(count):
            name = f"{prefix_}{i}"
            prefix = cluster.add_client_node(name)
            client = args.client if role == "txn" else "native"
            bootstrap = cluster.bootstrap_servers if client == "native" else \
                cluster.kafka_bootstrap_servers
            command = worker_command(role, name, bootstrap, topic, args.duration,
                                     args.rate, args.txn_writes, args.txn_abort,
                                     args.seed, client)
            workers[name] = WorkerStream(command, prefix=prefix, log_path=run / f"{name}.log")


def write_histories(run: Path, workers: dict) -> None:
    (run / "txns").mkdir(exist_ok=True)
    for name, w in workers.items():
        write_txns(run / "txns" / f"{name}.jsonl", completed(w.txn_events))


def final_read(run: Path, bootstrap: str, topic: str, partitions: list[int], meta: dict
               ) -> dict[int, int]:
    """Both read-backs to ``run``; returns the high watermarks (for LogMatching)."""
    from bench.chaos.readback import read_committed_log, read_log
    uncommitted, ends = read_log(bootstrap, topic, partitions)
    committed, stable = read_committed_log(bootstrap, topic, partitions, ends)
    write_view(run / "final-uncommitted.jsonl",
               {(topic, p): rows for p, rows in uncommitted.items()})
    write_view(run / "final-committed.jsonl",
               {(topic, p): rows for p, rows in committed.items()})
    meta["last_stable_offsets"] = {str(p): o for p, o in stable.items()}
    return ends


def judge_txn(run: Path, meta: dict) -> int:
    """Check a transactional run's files; ``verdict.json``; print; 0 valid, 1 not."""
    from bench.chaos.checker import log_matching
    txns = []
    for path in sorted((run / "txns").glob("*.jsonl")):
        txns += read_txns(path)
    verdict = check_txns(txns, read_view(run / "final-committed.jsonl"),
                         read_view(run / "final-uncommitted.jsonl"),
                         ww_deps=bool(meta.get("ww_deps")))
    summary = verdict.summary()
    replicas = _replicas(run, meta)
    if replicas is not None:
        divergent = log_matching(replicas, {int(p): hw for p, hw in
                                            meta.get("high_watermarks", {}).items()})
        summary["divergent"] = len(divergent)
        if divergent:
            summary["valid"] = False
            summary["examples"]["divergent"] = [[p, o, {str(b): _text(v) for b, v in
                                                        held.items()}]
                                                for p, o, held in divergent[:20]]
    summary["worker_failures"] = meta.get("worker_failures") or {}
    (run / "verdict.json").write_text(json.dumps(summary, indent=1, default=str))
    print_txn_verdict(meta, summary)
    return 0 if summary["valid"] and not summary["worker_failures"] else 1


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _replicas(run: Path, meta: dict):
    if not (run / "replicas.parquet").is_file():
        return None
    import pyarrow.parquet as pq
    replicas: dict[int, dict[int, list]] = {}
    for row in pq.read_table(run / "replicas.parquet").to_pylist():
        replicas.setdefault(row["partition"], {}).setdefault(row["broker"], []).append(
            (row["offset"], row["value"]))
    for partition, brokers in meta.get("replica_brokers", {}).items():
        for broker in brokers:
            replicas.setdefault(int(partition), {}).setdefault(int(broker), [])
    return replicas


def verdict_lines(meta: dict, s: dict) -> list[str]:
    """The printed verdict of a transactional run (pure: tested without a cluster)."""
    client = (meta.get("client") or {}).get("name", "native")
    lines = [f"client {client} (transactional), workload txn: {meta.get('producers')} "
             f"read-process-write processes, {meta.get('consumers')} committed readers, "
             f"{meta.get('txn_writes')} writes per transaction, abort "
             f"{meta.get('txn_abort')}",
             f"profile {meta.get('profile')}, seed {meta.get('seed')}, "
             f"{meta.get('duration')} s, faults {len(meta.get('schedule', []))}"]
    lines.append(f"  transactions {s['txns']}: committed {s['committed']}, aborted "
                 f"{s['aborted']}, unknown {s['unknown']} (of which seen committed "
                 f"{s['info_committed']}, aborted {s['info_aborted']})")
    lines.append(f"  values written {s['writes']}, read {s['reads']} (the readers' polls: "
                 f"{s.get('read_only', 0)})")
    for name in ANOMALIES + (("divergent",) if "divergent" in s else ()):
        note = ""
        if name == "G0" and s.get(name) and not s.get("ww_deps"):
            note = "  (allowed: Kafka's transactions interleave; not counted)"
        lines.append(f"  {name:<18}{s.get(name, 0):>10}{note}")
    for kind, examples in s.get("examples", {}).items():
        if kind == "G0" and not s.get("ww_deps"):
            continue
        lines.append(f"  {kind}: {ANOMALY_HELP.get(kind, '')}")
        for example in examples[:EXAMPLES_SHOWN]:
            lines.append(f"    {explain(kind, example)}")
    lso, hw = meta.get("last_stable_offsets") or {}, meta.get("high_watermarks") or {}
    held = {p: (o, hw[p]) for p, o in sorted(lso.items()) if p in hw and o < hw[p]}
    if held:
        lines.append("  an open transaction held the LSO below the HW at the end "
                     "(Kafka's hanging transaction): " +
                     ", ".join(f"partition {p} LSO {o} < HW {h}" for p, (o, h) in held.items()))
    for name, why in sorted((s.get("worker_failures") or {}).items()):
        lines.append(f"  workload process {name} failed: {why[:300]}")
    if not s["valid"]:
        lines.append("INVALID: the checker found anomalies")
    elif s.get("worker_failures"):
        lines.append(f"VALID history, but {len(s['worker_failures'])} workload "
                     f"process(es) failed")
    else:
        lines.append("VALID")
    return lines


def print_txn_verdict(meta: dict, summary: dict) -> None:
    for line in verdict_lines(meta, summary):
        print(line)


def sweep_line(v: dict | None) -> str:
    """One seed's line in ``chaos sweep --workload txn``."""
    if not v:
        return ""
    bad = {name: v.get(name, 0) for name in ANOMALIES + ("divergent",)
           if v.get(name) and (name != "G0" or v.get("ww_deps"))}
    return (f", transactions committed {v['committed']} aborted {v['aborted']} unknown "
            f"{v['unknown']}" + "".join(f", {k} {n}" for k, n in bad.items()))


def summarize_txn(rows: list[dict]) -> dict:
    """A transactional sweep's summary: runs, transactions, each anomaly's sum."""
    done = [r for r in rows if r["verdict"] is not None]
    out = {"runs": len(rows), "checked": len(done),
           "failed_runs": [r["seed"] for r in rows if r["verdict"] is None],
           "invalid": [r["seed"] for r in done if not r["verdict"]["valid"]],
           "worker_failures": [r["seed"] for r in done
                               if r["verdict"].get("worker_failures")]}
    for name in COUNTS + ANOMALIES + ("divergent",):
        out[name] = sum(r["verdict"].get(name, 0) for r in done)
    out["runs_with"] = {name: [r["seed"] for r in done if r["verdict"].get(name)]
                        for name in ANOMALIES + ("divergent",)}
    return out


def print_txn_summary(profile: str, s: dict) -> None:
    print(f"sweep (workload txn): {s['runs']} runs of profile {profile}, {s['checked']} "
          f"checked; transactions {s['txns']}: committed {s['committed']}, aborted "
          f"{s['aborted']}, unknown {s['unknown']}")
    print("  " + ", ".join(f"{name} {s[name]}" for name in ANOMALIES + ("divergent",)))
    for name, seeds in s["runs_with"].items():
        if seeds:
            print(f"  runs with {name}: {seeds}" + ("  (G0 allowed: not counted)"
                                                     if name == "G0" else ""))
    print(f"invalid runs: {s['invalid'] or 'none'}; runs where a workload process failed: "
          f"{s['worker_failures'] or 'none'}; runs that did not finish: "
          f"{s['failed_runs'] or 'none'}")
