"""``minikafka chaos run|check|replay``: a chaos run a user can start, and its verdict.

    minikafka chaos run --dir RUN [--brokers 3] [--netns] \\
        [--profile safe|acks1|unclean|hw-truncation] \\
        [--faults kill,pause,restart,controller,controller-move,coordinator,slow,\\
                  power-failure,partition] \\
        [--duration 30] [--seed S] [--compose] \\
        [--producers 2 --consumers 1 --rate 200] [--schedule plan.json]
    minikafka chaos check RUN       # check a recorded run again
    minikafka chaos replay RUN      # the same schedule and profile, as a new run in RUN-replay

A run starts its own cluster under ``RUN/cluster`` (zk_lite and ``--brokers`` brokers),
creates the topic ``chaos`` (``--partitions``, default 3; replication factor 3), starts the workload
processes (``bench.chaos.worker``) and the nemesis (``bench.chaos.nemesis``), prints a
progress line every second, then heals every process, reads every partition from
offset 0 to the high watermark, and checks the history (``bench.chaos.checker``).

Profiles:
- ``safe``: acks=all, min.insync.replicas=2, unclean leader election off,
  leader-epoch truncation. It must find nothing. Duplicates from retried sends are
  expected until the idempotent producer exists: counted, shown, not a failure.
- ``acks1``: acks=1, min.insync.replicas=1: a leader that dies with writes its
  followers had not fetched loses them; the checker lists them.
- ``unclean``: acks=all, min.insync.replicas=1, unclean leader election on: when the
  ISR is gone, an out-of-sync replica leads and what only the ISR had is lost.
- ``hw-truncation``: as ``safe`` but with ``replication.truncation.mode=high-watermark``
  (Kafka before KIP-101): a follower that restarts cuts its log to its HW, and a second
  failure then loses acknowledged writes.

``--compose`` draws the seed's schedule as rounds of one or two OVERLAPPING faults
(``bench.chaos.compose``: the ISR shrunk to the leader and then the leader killed, a
kill during a controller move, a partition while a broker is paused, random pairs),
as Jepsen composes its nemeses; the verdict lists the windows where faults overlapped.

``--netns`` (root) runs the cluster with ``cluster up --netns`` and every workload
process in its own namespace too, so the ``partition`` fault can cut real links.

After the final read the cluster is stopped and every replica's segment files are read
below the high watermark (``replicas.parquet``): the checker compares them (LogMatching).

The run folder keeps ``schedule.json`` (replayable), ``history/*.parquet`` (one file per
workload process; schema in ``bench.chaos.worker``), ``final.parquet`` (the final read),
``faults.json`` (what the nemesis did, when) and ``verdict.json``. Exit 0 when the
history is valid, 1 when the checker found anomalies, 2 on bad usage.

About 600 lines, kept whole: run, check, replay and sweep share the run folder's files,
the verdict and the command line; the sweep with its summary is the part that could
leave first (it needs ``UsageError`` and ``_ms`` moved below both to avoid a cycle).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.chaos.checker import Fault, Op, check
from node.tools.common import ToolError

TOPIC = "chaos"
PARTITIONS = 3
PROFILES = {
    "safe": {"acks": "all", "min.insync.replicas": "2",
             "broker": {"unclean.leader.election.enable": "false",
                        "replication.truncation.mode": "leader-epoch"}},
    "acks1": {"acks": "1", "min.insync.replicas": "1",
              "broker": {"unclean.leader.election.enable": "false"}},
    # An out-of-sync replica may be elected when no ISR member is left: it lacks what
    # the ISR acknowledged (the seeds' acks=all walkthrough, its last step).
    "unclean": {"acks": "all", "min.insync.replicas": "1",
                "broker": {"unclean.leader.election.enable": "true",
                           "replication.truncation.mode": "leader-epoch"}},
    # Kafka before KIP-101: a restarted follower truncates to its high watermark, so a
    # double failure loses acknowledged writes (seeds 000/001/004, KIP-101 scenario 1).
    "hw-truncation": {"acks": "all", "min.insync.replicas": "2",
                      "broker": {"unclean.leader.election.enable": "false",
                                 "replication.truncation.mode": "high-watermark"}},
}
BROKER_SETTINGS = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "4000",
                   "replica.fetch.wait.max.ms": "100"}
HEAL_TIMEOUT_S = 60.0
WORKER_GRACE_S = 30.0


class UsageError(ToolError):
    """Bad flags or a bad schedule file: exit 2."""


def read_log(bootstrap: str, topic: str, partitions: list[int]
             ) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, int]]:
    """Every record of ``topic``'s ``partitions`` from the log start to the high
    watermark, as {partition: [(offset, value), ...]}, and the high watermarks. The
    chaos run's final read; the teaching scenarios' verdicts read the same way."""
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        tps = [(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = {tp.partition if hasattr(tp, "partition") else tp[1]: o
                for tp, o in consumer.end_offsets(tps, timeout_ms=30_000).items()}
        final: dict[int, list] = {p: [] for p in partitions}
        positions = {p: 0 for p in partitions}
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in positions):
            if time.monotonic() > deadline:
                raise ToolError(f"final read stuck at {positions}, ends {ends}")
            for r in consumer.poll(timeout_ms=500):
                if r.offset < ends[r.partition]:
                    final[r.partition].append((r.offset, r.value))
                positions[r.partition] = max(positions[r.partition], r.offset + 1)
            for tp in tps:      # a compacted log may end in a hole below its HW
                if consumer.hole_until(tp) >= ends[tp[1]]:
                    positions[tp[1]] = max(positions[tp[1]], ends[tp[1]])
        return final, ends
    finally:
        consumer.close()


def _write_final(path: Path, final: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [(p, o, v) for p, items in sorted(final.items()) for o, v in items]
    pq.write_table(pa.table({"partition": pa.array([r[0] for r in rows], type=pa.int32()),
                             "offset": pa.array([r[1] for r in rows], type=pa.int64()),
                             "value": pa.array([r[2] for r in rows], type=pa.binary())}), path)


def load_run(run: Path) -> tuple[list[Op], dict, list[Fault], dict]:
    import pyarrow.parquet as pq
    meta_path = run / "run.json"
    if not meta_path.is_file():
        raise UsageError(f"{run}: not a chaos run (run.json missing)")
    meta = json.loads(meta_path.read_text())
    history = []
    for path in sorted((run / "history").glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            history.append(Op(row["process"], row["type"], row["f"], row["time_ns"],
                              row["value"], row["partition"], row["offset"],
                              tuple((r["partition"], r["offset"], r["value"])
                                    for r in row["reads"] or ()), row["error"]))
    history.sort(key=lambda op: op.time_ns)
    final: dict[int, list] = {}
    for row in pq.read_table(run / "final.parquet").to_pylist():
        final.setdefault(row["partition"], []).append((row["offset"], row["value"]))
    faults = [Fault(f["fault"], f["start_ns"], f["end_ns"], f["target"])
              for f in json.loads((run / "faults.json").read_text())]
    meta["replicas"] = None
    if (run / "replicas.parquet").is_file():
        replicas: dict[int, dict[int, list]] = {}
        for row in pq.read_table(run / "replicas.parquet").to_pylist():
            replicas.setdefault(row["partition"], {}).setdefault(row["broker"], []).append(
                (row["offset"], row["value"]))
        for partition, brokers in meta.get("replica_brokers", {}).items():
            for broker in brokers:   # a replica with nothing below the HW has no rows
                replicas.setdefault(int(partition), {}).setdefault(int(broker), [])
        meta["replicas"] = replicas
    return history, final, faults, meta


def judge(run: Path) -> int:
    history, final, faults, meta = load_run(run)
    verdict = check(history, final, faults, duplicates_fail=bool(meta.get("idempotent")),
                    start_ns=meta.get("workload_start_ns"), end_ns=meta.get("workload_end_ns"),
                    replicas=meta.pop("replicas"),
                    high_watermarks={int(p): hw for p, hw in
                                     meta.get("high_watermarks", {}).items()})
    summary = verdict.summary()
    summary["overlaps"] = fault_overlaps(faults, meta.get("workload_start_ns") or 0)
    (run / "verdict.json").write_text(json.dumps(summary, indent=1, default=str))
    print_verdict(meta, summary)
    return 0 if verdict.valid else 1


def fault_overlaps(faults: list[Fault], origin_ns: int) -> list[dict]:
    """The windows where two or more of the applied faults were active at once, in
    seconds since ``origin_ns`` (the workload's start)."""
    from bench.chaos.compose import overlaps
    windows = [(f"{f.name} {f.target}", f.start_ns, f.end_ns or f.start_ns)
               for f in faults]
    return [{"from_s": round((a - origin_ns) / 1e9, 1), "to_s": round((b - origin_ns) / 1e9, 1),
             "faults": labels} for a, b, labels in overlaps(windows)]


def print_verdict(meta: dict, s: dict) -> None:
    print(f"profile {meta['profile']}, seed {meta['seed']}, {meta['duration']} s, "
          f"faults {len(meta.get('schedule', []))}"
          + (", composed (--compose)" if meta.get("compose") else ""))
    overlapping = s.get("overlaps", [])
    if meta.get("compose") or overlapping:
        print(f"  overlapping fault windows: {len(overlapping)}")
        for o in overlapping:
            print(f"    {o['from_s']:6.1f}-{o['to_s']:.1f} s: {' + '.join(o['faults'])}")
    for name in ("sends", "acknowledged", "failed", "unknown", "read", "lost", "duplicate",
                 "inconsistent", "nonmonotonic", "skip", "unexpected", "aborted_read",
                 "divergent"):
        note = ""
        if name == "duplicate" and s[name] and not meta.get("idempotent"):
            note = "  (expected without the idempotent producer)"
        print(f"  {name:<14}{s[name]:>10}{note}")
    by_fault: dict[str, list] = {}
    for fault, _, ms in s["recovery_ms"]:
        by_fault.setdefault(fault, []).append(ms)
    for fault, values in sorted(by_fault.items()):
        known = sorted(v for v in values if v is not None)
        median = known[len(known) // 2] if known else None
        worst = known[-1] if known else None
        print(f"  recovery after {fault:<18} n={len(values)} median "
              f"{_ms(median)} worst {_ms(worst)}"
              + (f" ({len(values) - len(known)} without any ack after)"
                 if len(known) < len(values) else ""))
    print(f"  longest window without an acknowledgement: {s['longest_gap_ms']:.0f} ms")
    for kind, examples in s.get("examples", {}).items():
        if kind != "duplicate" or not s["valid"] or meta.get("idempotent"):
            print(f"  {kind}: {examples[:5]}")
    print("VALID" if s["valid"] else "INVALID: the checker found anomalies")


def _ms(value) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def run_chaos(args) -> int:
    from node.client import Admin
    from node.cluster import Cluster
    from bench.chaos import nemesis
    run = Path(args.dir)
    if run.exists() and any(run.iterdir()):
        raise UsageError(f"{run} is not empty: give a new run directory")
    if args.profile not in PROFILES:
        raise UsageError(f"--profile: one of {', '.join(PROFILES)}")
    profile = PROFILES[args.profile]
    try:
        if args.schedule:
            schedule = nemesis.load(json.loads(Path(args.schedule).read_text()))
        elif getattr(args, "compose", False):
            from bench.chaos import compose
            schedule = compose.plan(
                args.seed, [f.strip() for f in args.faults.split(",") if f.strip()],
                args.duration, lag_ms=int(BROKER_SETTINGS["replica.lag.time.max.ms"]))
        else:
            schedule = nemesis.plan(
                args.seed, [f.strip() for f in args.faults.split(",") if f.strip()],
                args.duration)
    except (OSError, ValueError) as e:
        raise UsageError(f"schedule: {e}") from None
    if any(p.fault == "partition" for p in schedule) and not getattr(args, "netns", False):
        raise UsageError("the partition fault needs --netns (each process in its own "
                         "network namespace)")
    if getattr(args, "netns", False):
        from node.cluster.netns import NetnsError, require_root
        try:
            require_root()
        except NetnsError as e:
            raise UsageError(str(e)) from None
    (run / "history").mkdir(parents=True)
    (run / "progress").mkdir()
    (run / "schedule.json").write_text(json.dumps(nemesis.dump(schedule), indent=1))
    meta = {"profile": args.profile, "seed": args.seed, "duration": args.duration,
            "brokers": args.brokers, "producers": args.producers, "consumers": args.consumers,
            "rate": args.rate, "schedule": nemesis.dump(schedule), "topic": TOPIC,
            "value_format": getattr(args, "value_format", "plain"),
            # acks=all producers are idempotent (the client's default, as Kafka 3's):
            # then a duplicate is an anomaly like any other.
            "idempotent": profile["acks"] == "all",
            "partitions": args.partitions, "compose": bool(getattr(args, "compose", False))}
    from node.cluster import ClusterError
    try:
        cluster = Cluster.up(run / "cluster", args.brokers,
                             config={**BROKER_SETTINGS, **profile["broker"]},
                             netns=getattr(args, "netns", False))
    except ClusterError as e:
        raise ToolError(str(e)) from None
    meta["netns"] = cluster.mesh is not None
    workers = []
    stopped = False
    try:
        admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
        try:
            admin.create_topic(TOPIC, args.partitions, min(3, args.brokers),
                               config={"min.insync.replicas": profile["min.insync.replicas"]})
        finally:
            admin.close()
        running_nemesis = nemesis.Nemesis(cluster, schedule, TOPIC, args.seed)
        env = dict(os.environ)
        for role, count in (("producer", args.producers), ("consumer", args.consumers)):
            for i in range(count):
                name = f"{role[0]}{i}"
                prefix = cluster.add_client_node(name)   # its own namespace with --netns
                workers.append(subprocess.Popen(
                    prefix + [sys.executable, "-m", "bench.chaos.worker", "--role", role, "--name", name,
                     "--bootstrap", cluster.bootstrap_servers, "--topic", TOPIC,
                     "--duration", str(args.duration), "--acks", profile["acks"],
                     "--rate", str(args.rate), "--out", str(run / "history" / f"{name}.parquet"),
                     "--progress", str(run / "progress" / name),
                     "--value-format", getattr(args, "value_format", "plain"),
                     "--schema-registry", cluster.zookeeper],
                    env=env, stdout=subprocess.DEVNULL, stderr=open(run / f"{name}.log", "w")))
        meta["workload_start_ns"] = time.monotonic_ns()
        running_nemesis.start()
        started = time.monotonic()
        last = {}
        while any(w.poll() is None for w in workers):
            time.sleep(1.0)
            counts = {}
            for path in (run / "progress").iterdir():
                try:
                    ok, errors = (int(x) for x in path.read_text().split())
                    counts[path.name] = (ok, errors)
                except (OSError, ValueError):
                    pass   # a .tmp being written
            acks = sum(c[0] for n, c in counts.items() if n.startswith("p"))
            errors = sum(c[1] for c in counts.values())
            rate = acks - last.get("acks", 0)
            last["acks"] = acks
            active = ", ".join(f"{a.fault} {a.target}" + (f" ({a.detail})" if a.detail else "")
                               for a in list(running_nemesis.active)) or "-"
            print(f"[{time.monotonic() - started:5.1f}/{args.duration:.0f} s] acks {acks} "
                  f"({rate}/s), errors {errors}, faults: {active}", flush=True)
            if time.monotonic() - started > args.duration + WORKER_GRACE_S:
                raise ToolError("workload processes did not finish")
        meta["workload_end_ns"] = time.monotonic_ns()
        running_nemesis.stop()
        running_nemesis.heal_all()
        for w in workers:
            if w.returncode:
                raise ToolError(f"a workload process failed: see {run}/*.log")
        print("healed; waiting for every partition to have a leader and a full ISR",
              flush=True)
        try:
            cluster.wait_for(lambda: all(
                (s := cluster.partition_state(TOPIC, p)) is not None and s.leader >= 0 and
                len(s.isr) == min(3, args.brokers) for p in range(args.partitions)),
                HEAL_TIMEOUT_S, "a healed cluster")
        except TimeoutError:
            states = {p: cluster.partition_state(TOPIC, p) for p in range(args.partitions)}
            status = ", ".join(f"{s.name} {s.state}" for s in cluster.status())
            raise ToolError(f"the cluster did not heal in {HEAL_TIMEOUT_S:.0f} s: "
                            f"partitions {states}; processes: {status}") from None
        final, ends = read_log(cluster.bootstrap_servers, TOPIC, list(range(args.partitions)))
        _write_final(run / "final.parquet", final)
        (run / "faults.json").write_text(json.dumps(
            [{"fault": a.fault, "target": a.target, "start_ns": a.start_ns,
              "end_ns": a.end_ns, "error": a.error, "detail": a.detail,
              "links": [list(link) for link in a.links]}
             for a in running_nemesis.applied], indent=1))
        meta["high_watermarks"] = {str(p): hw for p, hw in ends.items()}
        meta["replica_brokers"] = {
            str(p): list(cluster.partition_state(TOPIC, p).isr) for p in range(args.partitions)}
        for w in workers:
            w.wait()
        cluster.down(grace_s=10)
        stopped = True
        # LogMatching: every replica's segment files, below the HW, now that nothing
        # writes to them.
        _write_replicas(run / "replicas.parquet", cluster, TOPIC, ends)
        (run / "run.json").write_text(json.dumps(meta, indent=1))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        if not stopped:
            cluster.down(grace_s=10)
    return judge(run)


def read_replica(cluster, broker_id: int, topic: str, partition: int,
                 end: int) -> list[tuple[int, bytes]]:
    """(offset, value) of one stopped replica's log below ``end``, from its segment files."""
    from shm.batch import parse_batches
    from shm.log import Log

    data_dir = cluster.broker_dir(broker_id) / "logs"
    if not (data_dir / f"{topic}-{partition}").is_dir():
        return []
    log_ = Log.open(str(data_dir), topic, partition, cluster_id=cluster.cluster_id,
                    broker_id=broker_id)
    rows = []
    try:
        position = log_.log_start_offset
        stop = min(end, log_.log_end_offset)
        while position < stop:
            view = log_.read(position, 1 << 20, max_offset=stop)
            if not len(view):
                break
            for batch in parse_batches(bytes(view)):
                rows += [(o, v) for o, _, _, v in batch.records() if o < stop]
                position = batch.header.next_offset
    finally:
        log_.close()
    return rows


def _write_replicas(path: Path, cluster, topic: str, ends: dict[int, int]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shm.names import cleanup_cluster
    rows = []
    try:
        for broker_id in cluster.broker_ids:
            for partition, end in sorted(ends.items()):
                rows += [(broker_id, partition, o, v)
                         for o, v in read_replica(cluster, broker_id, topic, partition, end)]
    finally:
        cleanup_cluster(cluster.cluster_id)
    pq.write_table(pa.table({
        "broker": pa.array([r[0] for r in rows], type=pa.int32()),
        "partition": pa.array([r[1] for r in rows], type=pa.int32()),
        "offset": pa.array([r[2] for r in rows], type=pa.int64()),
        "value": pa.array([r[3] for r in rows], type=pa.binary())}), path)


def replay(args) -> int:
    run = Path(args.run)
    try:
        meta = json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"{run}: not a chaos run (run.json missing)") from None
    copy = argparse.Namespace(dir=str(run) + "-replay", brokers=meta["brokers"],
                              profile=meta["profile"], faults="", duration=meta["duration"],
                              seed=meta["seed"], producers=meta["producers"],
                              consumers=meta["consumers"], rate=meta["rate"],
                              netns=meta.get("netns", False),
                              value_format=meta.get("value_format", "plain"),
                              partitions=meta.get("partitions", PARTITIONS),
                              compose=meta.get("compose", False),
                              schedule=str(run / "schedule.json"))
    return run_chaos(copy)


def _seeds(text: str) -> list[int]:
    out = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            out += list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise UsageError(f"--seeds {text!r}: e.g. 1-50 or 3,7,9") from None
    return out


def sweep(args) -> int:
    """``chaos sweep``: ``chaos run`` once per seed (each in its own process), then one
    summary over them all (``RUN/sweep.json`` and a table). Exit 1 if any run was
    invalid or failed."""
    import shutil
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in _seeds(args.seeds):
        run = root / f"seed-{seed}"
        if run.exists():
            shutil.rmtree(run)
        command = [sys.executable, "-m", "bench.cli", "chaos", "run", "--dir", str(run),
                   "--profile", args.profile, "--faults", args.faults, "--seed", str(seed),
                   "--duration", str(args.duration), "--rate", str(args.rate)] + \
            (["--netns"] if args.netns else []) + (["--compose"] if args.compose else [])
        started = time.monotonic()
        with open(root / f"seed-{seed}.out", "w") as out:
            code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT)
        row = {"seed": seed, "exit": code, "wall_s": round(time.monotonic() - started, 1)}
        try:
            row["verdict"] = json.loads((run / "verdict.json").read_text())
            row["faults"] = json.loads((run / "faults.json").read_text())
        except (OSError, ValueError):
            row["verdict"] = None
        rows.append(row)
        v = row["verdict"]
        print(f"seed {seed}: exit {code} in {row['wall_s']} s" + (
            f", {v['acknowledged']} acknowledged, lost {v['lost']}, duplicate "
            f"{v['duplicate']}, divergent {v['divergent']}, overlapping fault windows "
            f"{len(v.get('overlaps', []))}" if v else ""), flush=True)
        if code == 0 and not args.keep and v is not None:
            shutil.rmtree(run / "cluster", ignore_errors=True)
        (root / "sweep.json").write_text(json.dumps(rows, indent=1, default=str))
    summary = summarize(rows)
    summary["compose"] = bool(args.compose)
    (root / "summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(args.profile, summary)
    return 0 if not summary["invalid"] and not summary["failed_runs"] else 1


ANOMALIES = ("lost", "duplicate", "inconsistent", "nonmonotonic", "skip", "unexpected",
             "aborted_read", "divergent")


def summarize(rows: list[dict]) -> dict:
    done = [r for r in rows if r["verdict"] is not None]
    out = {"runs": len(rows), "checked": len(done),
           "failed_runs": [r["seed"] for r in rows if r["verdict"] is None],
           "invalid": [r["seed"] for r in done if not r["verdict"]["valid"]],
           "acknowledged": sum(r["verdict"]["acknowledged"] for r in done),
           "unknown": sum(r["verdict"]["unknown"] for r in done),
           "losing": [r["seed"] for r in done if r["verdict"]["lost"]],
           "overlaps": sum(len(r["verdict"].get("overlaps", [])) for r in done)}
    for name in ANOMALIES:
        out[name] = sum(r["verdict"].get(name, 0) for r in done)
    by_fault: dict[str, list] = {}
    for r in done:
        for fault, _, ms in r["verdict"]["recovery_ms"]:
            by_fault.setdefault(fault, []).append(ms)
    out["recovery_ms"] = {}
    for fault, values in sorted(by_fault.items()):
        known = sorted(v for v in values if v is not None)
        out["recovery_ms"][fault] = {
            "n": len(values), "median": known[len(known) // 2] if known else None,
            "worst": known[-1] if known else None, "never": len(values) - len(known)}
    gaps = sorted(r["verdict"]["longest_gap_ms"] for r in done)
    out["longest_gap_ms"] = {"median": gaps[len(gaps) // 2] if gaps else None,
                             "worst": gaps[-1] if gaps else None}
    return out


def print_summary(profile: str, s: dict) -> None:
    print(f"sweep: {s['runs']} runs of profile {profile}"
          + (" (composed faults)" if s.get("compose") else "") + f", {s['checked']} checked, "
          f"{s['acknowledged']} acknowledged writes, {s['unknown']} unknown outcomes")
    print(f"  runs that lost acknowledged writes: {len(s['losing'])} {s['losing'] or ''}; "
          f"overlapping fault windows: {s['overlaps']}")
    print("  " + ", ".join(f"{name} {s[name]}" for name in ANOMALIES))
    for fault, r in s["recovery_ms"].items():
        print(f"  recovery after {fault:<18} n={r['n']:<4} median {_ms(r['median'])}, "
              f"worst {_ms(r['worst'])}" + (f", {r['never']} with no ack after"
                                            if r["never"] else ""))
    print(f"  longest window without an acknowledgement: median "
          f"{_ms(s['longest_gap_ms']['median'])}, worst {_ms(s['longest_gap_ms']['worst'])}")
    print(f"invalid runs: {s['invalid'] or 'none'}; runs that did not finish: "
          f"{s['failed_runs'] or 'none'}")


COMPOSE_HELP = ("the seed draws rounds of one or two overlapping faults (Jepsen's "
                "composed nemeses) instead of one fault at a time")


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from node.paths import absolute_path

    sub = parser.add_subparsers(dest="chaos_command", required=True)
    run = sub.add_parser("run", help="start a cluster, run the workload under faults, check")
    run.add_argument("--dir", required=True, type=absolute_path, help="a new directory for the run")
    run.add_argument("--brokers", type=int, default=3)
    run.add_argument("--netns", action="store_true",
                     help="every process in its own network namespace (root): enables the "
                          "partition fault")
    run.add_argument("--profile", default="safe", choices=sorted(PROFILES))
    run.add_argument("--faults", default="kill,pause,restart,controller,coordinator")
    run.add_argument("--duration", type=float, default=30.0, help="seconds of workload")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--partitions", type=int, default=PARTITIONS,
                     help="of the topic chaos (replication factor 3)")
    run.add_argument("--producers", type=int, default=2)
    run.add_argument("--consumers", type=int, default=1)
    run.add_argument("--rate", type=float, default=200.0, help="sends/s per producer")
    run.add_argument("--schedule", default=None, type=absolute_path,
                     help="a schedule.json to run instead")
    run.add_argument("--compose", action="store_true", help=COMPOSE_HELP)
    run.add_argument("--value-format", choices=("plain", "avro"), default="plain",
                     help="avro: the producers write typed values (bench.chaos.worker's "
                          "CHAOS_VALUE_SCHEMA) registered in the cluster's schema registry")
    sweep = sub.add_parser("sweep", help="many seeded runs one after another, and a summary")
    sweep.add_argument("--dir", required=True, type=absolute_path, help="a directory for the runs (RUN/seed-N)")
    sweep.add_argument("--seeds", default="1-50", help="e.g. 1-50 or 3,7,9")
    sweep.add_argument("--profile", default="safe", choices=sorted(PROFILES))
    sweep.add_argument("--faults", default="kill,pause,restart,controller,coordinator,"
                                           "coordinator-pause,slow,power-failure")
    sweep.add_argument("--duration", type=float, default=60.0)
    sweep.add_argument("--netns", action="store_true")
    sweep.add_argument("--compose", action="store_true", help=COMPOSE_HELP)
    sweep.add_argument("--rate", type=float, default=200.0)
    sweep.add_argument("--keep", action="store_true",
                       help="keep every run's files (default: only the invalid runs')")
    check_ = sub.add_parser("check", help="check a recorded run again")
    check_.add_argument("run", type=absolute_path)
    again = sub.add_parser("replay", help="run a recorded run's schedule again")
    again.add_argument("run", type=absolute_path)
    return parser


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run(args) -> int:
    import signal
    # SIGTERM stops a run like Ctrl-C: the cluster (and its namespaces) still go down.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.chaos_command == "run":
            if args.brokers < 1 or args.duration <= 0 or args.rate <= 0 or \
                    args.producers < 1 or args.consumers < 0 or args.partitions < 1:
                raise UsageError("--brokers, --duration, --rate and --producers must be "
                                 "positive")
            if args.compose and args.schedule:
                raise UsageError("--compose draws a schedule from --seed; --schedule gives "
                                 "one: not both")
            return run_chaos(args)
        if args.chaos_command == "check":
            return judge(Path(args.run))
        if args.chaos_command == "sweep":
            return sweep(args)
        return replay(args)
    except UsageError as e:
        print(f"chaos: error: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"chaos: error: {e}", file=sys.stderr)
        return 1
