"""``minikafka chaos run|check|replay|sweep``: a chaos run a user can start, and its verdict.

    minikafka chaos run --dir RUN [--brokers 3] [--netns] \\
        [--profile safe|acks1|unclean|hw-truncation|kafka-txn] \\
        [--workload plain|txn [--txn-writes 3] [--txn-abort 0.2]] \\
        [--faults kill,pause,restart,controller,controller-move,coordinator,slow,\\
                  power-failure,partition] \\
        [--duration 30] [--seed S] [--compose] \\
        [--client native|confluent-kafka|kafka-python|aiokafka|kafkajs] \\
        [--group [--group-protocol classic|consumer]] \\
        [--producers 2 --consumers 1 --rate 200] [--schedule plan.json]
    minikafka chaos check RUN       # check a recorded run again
    minikafka chaos replay RUN      # the same schedule, profile and client, as a new run in RUN-replay
    minikafka chaos sweep ...       # many seeds (bench.chaos.sweep)

A run starts its own cluster under ``RUN/cluster`` (zk_lite and ``--brokers`` brokers),
creates the topic ``chaos`` (``--partitions``, default 3; replication factor 3), starts the
workload processes (``bench.chaos.clients``: one per producer and consumer, with the
client ``--client``; a real client connects to the brokers' Kafka listener, native to
the native one) and the nemesis (``bench.chaos.nemesis``), prints a progress line every
second from the workers' own counts, then heals every process, reads every partition
from offset 0 to the high watermark, and checks the history (``bench.chaos.checker``).

Profiles (``bench.chaos.options``: what each sets on the brokers and the clients):
- ``safe``: acks=all with idempotence, min.insync.replicas=2 (the topic's and the brokers'
  default, so ``__consumer_offsets`` too), unclean leader election off, leader-epoch
  truncation. It must find nothing (a duplicate is an anomaly).
- ``acks1``: acks=1 without idempotence, min.insync.replicas=1: a leader that dies with
  writes its followers had not fetched loses them; the checker lists them.
- ``unclean``: acks=all, min.insync.replicas=1, unclean leader election on: when the
  ISR is gone, an out-of-sync replica leads and what only the ISR had is lost.
- ``hw-truncation``: as ``safe`` but with ``replication.truncation.mode=high-watermark``
  (Kafka before KIP-101): a follower that restarts cuts its log to its HW, and a second
  failure then loses acknowledged writes.

``--workload txn`` (``bench.chaos.txn_run``): ``--producers`` transactional
read-process-write processes and ``--consumers`` read_committed readers (native client),
checked by ``bench.chaos.txn_checker`` (aborted, intermediate and torn reads, lost
writes, duplicates, G0/G1c cycles); ``--profile kafka-txn`` turns Kafka's transaction
defences (KIP-890) off on the brokers, every other profile keeps them on.

``--group``: the consumers subscribe as members of the group ``chaos-group``; an observer
thread (``bench.chaos.observer``) records the group's committed offsets as the brokers
report them, and the checker judges group delivery too (lost, double-read records,
committed offsets going backwards).

``--compose`` draws the seed's schedule as rounds of one or two OVERLAPPING faults
(``bench.chaos.compose``), as Jepsen composes its nemeses; the verdict lists the windows
where faults overlapped.

``--netns`` (root) runs the cluster with ``cluster up --netns`` and every workload
process in its own namespace too, so the ``partition`` fault can cut real links.

After the final read the cluster is stopped and every replica's segment files are read
below the high watermark (``replicas.parquet``): the checker compares them (LogMatching).

The run folder keeps ``schedule.json`` (replayable), ``run.json`` (the run's settings,
the client: name, version, settings), ``history/*.parquet`` (one file per workload
process, and ``observer.parquet``; schema in ``bench.chaos.history``), ``final.parquet``
(the final read), ``faults.json`` (what the nemesis did, when), every worker's log
(``p0.log`` ...: the client's stderr), ``clients.json`` (each worker's start and end
events and what its client reported that is not an op: errors, retries) and
``verdict.json``. Exit 0 when the history is valid, 1 when the
checker found anomalies or a workload process failed (a client's fatal error: the run
goes on, and what it recorded is checked), 2 on bad usage.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.chaos.checker import Fault, Op, check
from bench.chaos.history import read_history, write_history
from bench.chaos.options import (BROKER_SETTINGS, GROUP, PARTITIONS, PROFILES, TOPIC,
                                 Terminated, UsageError, build_parser, check_run_args,
                                 cluster_config, consumers_of, idempotence, topic_config,
                                 worker_options)
from bench.chaos.readback import read_log, read_replica, write_final, write_replicas
from bench.chaos.verdict import fault_overlaps, print_verdict
from node.tools.common import ToolError

# Kept importable from here: bench.cli builds the parser, bench.teach reads logs back.
__all__ = ["build_parser", "read_log", "read_replica", "run", "run_chaos", "judge",
           "load_run", "UsageError"]

HEAL_TIMEOUT_S = 60.0
WORKER_GRACE_S = 30.0        # past --duration: flushing, closing, leaving the group
WORKER_STOP_S = 15.0         # a worker asked to stop (stdin closed) gets this long
PROGRESS_EVERY_S = 1.0
START_TIMEOUT_S = 60.0       # for every worker's start event (its client constructed)


def load_run(run: Path) -> tuple[list[Op], dict, list[Fault], dict]:
    import pyarrow.parquet as pq
    meta_path = run / "run.json"
    if not meta_path.is_file():
        raise UsageError(f"{run}: not a chaos run (run.json missing)")
    meta = json.loads(meta_path.read_text())
    history = []
    for path in sorted((run / "history").glob("*.parquet")):
        history += read_history(path)
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
    meta_path = run / "run.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("workload") == "txn":
            from bench.chaos.txn_run import judge_txn
            return judge_txn(run, meta)
    history, final, faults, meta = load_run(run)
    group = bool(meta.get("group"))
    verdict = check(history, final, faults, duplicates_fail=bool(meta.get("idempotent")),
                    start_ns=meta.get("workload_start_ns"), end_ns=meta.get("workload_end_ns"),
                    replicas=meta.pop("replicas"),
                    high_watermarks={int(p): hw for p, hw in
                                     meta.get("high_watermarks", {}).items()},
                    group=group)
    summary = verdict.summary()
    summary["overlaps"] = fault_overlaps(faults, meta.get("workload_start_ns") or 0)
    summary["worker_failures"] = meta.get("worker_failures") or {}
    (run / "verdict.json").write_text(json.dumps(summary, indent=1, default=str))
    print_verdict(meta, summary)
    return 0 if verdict.valid and not summary["worker_failures"] else 1


def _schedule(args):
    from bench.chaos import nemesis
    try:
        if args.schedule:
            return nemesis.load(json.loads(Path(args.schedule).read_text()))
        faults = [f.strip() for f in args.faults.split(",") if f.strip()]
        if getattr(args, "compose", False):
            from bench.chaos import compose
            return compose.plan(args.seed, faults, args.duration,
                                lag_ms=int(BROKER_SETTINGS["replica.lag.time.max.ms"]))
        return nemesis.plan(args.seed, faults, args.duration)
    except (OSError, ValueError) as e:
        raise UsageError(f"schedule: {e}") from None


def _start_workers(cluster, run: Path, args, consumers: int, workers: dict) -> None:
    """One ``WorkerStream`` per producer and consumer, each in its own namespace with
    ``--netns``; a real client gets the Kafka listener."""
    from bench.chaos.clients import WorkerStream, worker_command
    bootstrap = cluster.bootstrap_servers if args.client == "native" else \
        cluster.kafka_bootstrap_servers
    extra = {}
    if getattr(args, "value_format", "plain") != "plain":
        extra = {"value_format": args.value_format, "schema_registry": cluster.zookeeper}
    for role, count in (("producer", args.producers), ("consumer", consumers)):
        for i in range(count):
            name = f"{role[0]}{i}"
            prefix = cluster.add_client_node(name)   # its own namespace with --netns
            options = worker_options(args.profile, role, args.client, args.group,
                                     args.group_protocol, getattr(args, "idempotence", None))
            command = worker_command(args.client, role=role, name=name, bootstrap=bootstrap,
                                     topic=TOPIC, duration=args.duration,
                                     **({"rate": args.rate} if role == "producer" else {}),
                                     **(extra if role == "producer" else {}), **options)
            workers[name] = WorkerStream(command, prefix=prefix, log_path=run / f"{name}.log")


def _wait_started(workers: dict, run: Path) -> None:
    """Until every worker has reported its start (imports done, client constructed): the
    faults' times count from the workload's real start, not from the processes' spawn."""
    from node.waiting import poll_until

    def ready():
        for name, w in workers.items():
            if w.client_info is None and w.returncode is not None:
                raise ToolError(f"workload process {name} exited ({w.returncode}) before "
                                f"it started: {_log_tail(run / f'{name}.log')}")
        return all(w.client_info is not None for w in workers.values())
    poll_until(ready, START_TIMEOUT_S, "every workload process to start",
               interval_s=0.05, error=ToolError)


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"see {path}"
    return (lines[-1][:300] if lines else "(nothing logged)") + f" (see {path})"


def _client_meta(client: str, workers: dict) -> dict:
    """``{"name", "version", "settings": {"producer": {...}, "consumer": {...}}}`` from the
    workers' start events (the settings the run gave, not the client's defaults)."""
    out = {"name": client, "version": None, "settings": {}}
    for w in workers.values():
        info = w.client_info or {}
        out["version"] = out["version"] or info.get("version")
        role = info.get("role")
        if role and role not in out["settings"]:
            out["settings"][role] = info.get("settings") or {}
    return out


def _write_client_events(path: Path, workers: dict) -> None:
    """What each client said that is not an op (errors, retries, log lines), with its
    start and end events: the run's record of the clients' own view."""
    path.write_text(json.dumps(
        {name: {"start": w.client_info, "end": w.end_info, "events": w.client_events}
         for name, w in workers.items()}, indent=1, default=str))


def _progress(workers: dict, observer, nemesis_, started: float, duration: float,
              last: dict, acks: str = "acks") -> str:
    """One progress line; ``acks`` names what the producers' count is (``committed``
    transactions in a transactional run)."""
    label = acks
    producers = [w for name, w in workers.items() if name.startswith("p")]
    count = sum(w.acked for w in producers)
    errors = sum(w.failed + w.unknown for w in producers)
    read = sum(w.read for name, w in workers.items() if name.startswith("c"))
    rate = count - last.get("acks", 0)
    last["acks"] = count
    active = ", ".join(f"{a.fault} {a.target}" + (f" ({a.detail})" if a.detail else "")
                       for a in list(nemesis_.active)) or "-"
    group = f", committed seen {len(observer.ops)}" if observer is not None else ""
    return (f"[{time.monotonic() - started:5.1f}/{duration:.0f} s] {label} {count} ({rate}/s), "
            f"errors {errors}, read {read}{group}, faults: {active}")


def run_chaos(args) -> int:
    from node.client import Admin
    from node.cluster import Cluster, ClusterError
    from bench.chaos import nemesis
    run = Path(args.dir)
    if run.exists() and any(run.iterdir()):
        raise UsageError(f"{run} is not empty: give a new run directory")
    check_run_args(args)
    profile = PROFILES[args.profile]
    consumers = consumers_of(args)
    schedule = _schedule(args)
    if any(p.fault == "partition" for p in schedule) and not getattr(args, "netns", False):
        raise UsageError("the partition fault needs --netns (each process in its own "
                         "network namespace)")
    transport = getattr(args, "replica_transport", None) or \
        ("fetch" if getattr(args, "netns", False) else "shm")
    if transport == "shm" and getattr(args, "netns", False):
        raise UsageError("--replica-transport shm needs the brokers on one host without "
                         "network namespaces (a partition would not cut shared memory); "
                         "--netns clusters replicate by Fetch")
    if getattr(args, "netns", False):
        from node.cluster.netns import NetnsError, require_root
        try:
            require_root()
        except NetnsError as e:
            raise UsageError(str(e)) from None
    (run / "history").mkdir(parents=True)
    (run / "schedule.json").write_text(json.dumps(nemesis.dump(schedule), indent=1))
    meta = {"profile": args.profile, "seed": args.seed, "duration": args.duration,
            "brokers": args.brokers, "producers": args.producers, "consumers": consumers,
            "rate": args.rate, "schedule": nemesis.dump(schedule), "topic": TOPIC,
            "value_format": getattr(args, "value_format", "plain"),
            # idempotent producers: then a duplicate is an anomaly like any other.
            "idempotent": idempotence(args.profile, getattr(args, "idempotence", None)) == "on",
            "idempotence": getattr(args, "idempotence", None),
            "partitions": args.partitions, "compose": bool(getattr(args, "compose", False)),
            "segment_bytes": getattr(args, "segment_bytes", None),
            "client": {"name": args.client}, "group": GROUP if args.group else None,
            "group_protocol": args.group_protocol,
            "workload": getattr(args, "workload", "plain"), "replica_transport": transport}
    txn = meta["workload"] == "txn"
    if txn:
        meta.update(txn_writes=args.txn_writes, txn_abort=args.txn_abort)
    try:
        cluster = Cluster.up(run / "cluster", args.brokers,
                             config=cluster_config(args.profile, transport,
                                                   meta["segment_bytes"]),
                             netns=getattr(args, "netns", False))
    except (ClusterError, TimeoutError) as e:     # e.g. a broker not ready in time
        raise ToolError(f"the cluster did not start: {e}") from None
    meta["netns"] = cluster.mesh is not None
    workers: dict = {}        # name -> WorkerStream
    observer = None
    stopped = False
    try:
        admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
        try:
            admin.create_topic(TOPIC, args.partitions, min(3, args.brokers),
                               config=topic_config(profile["min.insync.replicas"],
                                                   meta["segment_bytes"]))
        finally:
            admin.close()
        running_nemesis = nemesis.Nemesis(cluster, schedule, TOPIC, args.seed)
        if txn:
            from bench.chaos import txn_run
            txn_run.start_workers(cluster, run, args, consumers, workers, TOPIC)
        else:
            _start_workers(cluster, run, args, consumers, workers)
        _wait_started(workers, run)
        if args.group:
            from bench.chaos.observer import Observer
            observer = Observer(cluster.bootstrap_servers, GROUP, TOPIC)
            observer.start()
        meta["workload_start_ns"] = time.monotonic_ns()
        meta["workload_start_wall"] = time.time()   # to read the logs' timestamps against
        running_nemesis.start()
        started = time.monotonic()
        last: dict = {}
        hung: dict = {}
        while any(w.returncode is None for w in workers.values()):
            time.sleep(PROGRESS_EVERY_S)
            print(_progress(workers, observer, running_nemesis, started, args.duration, last,
                            "committed" if txn else "acks"), flush=True)
            if time.monotonic() - started > args.duration + WORKER_GRACE_S:
                # A client hung in its close is a finding too: stop it, check the rest.
                for name, w in workers.items():
                    if w.returncode is None:
                        code = w.stop(WORKER_STOP_S)
                        hung[name] = (f"did not finish {WORKER_GRACE_S:.0f} s after its "
                                      f"duration (last error: {w.last_error or 'none'}); "
                                      f"stopped, exit {code}")
                        print(f"workload process {name} {hung[name]}", flush=True)
        # The workload's end: its duration (the sends stop then; a client's flush or a
        # hung close after it is not a window without acknowledgements).
        meta["workload_end_ns"] = min(time.monotonic_ns(),
                                      meta["workload_start_ns"] + int(args.duration * 1e9))
        running_nemesis.stop()
        running_nemesis.heal_all()
        if observer is not None:
            observer.stop()
            meta["observer_errors"] = observer.errors
            meta["observer_last_error"] = observer.last_error
            write_history(run / "history" / "observer.parquet", observer.ops)
        meta["client"] = _client_meta(args.client, workers)
        _write_client_events(run / "clients.json", workers)
        for name, w in workers.items():
            w.wait(WORKER_STOP_S)     # its last events read
            write_history(run / "history" / f"{name}.parquet", w.history())
        if txn:
            txn_run.write_histories(run, workers)
        # A client that gave up (a fatal error) is a finding, not the end of the run:
        # what it recorded until then is checked like the rest.
        # Its log's last line says why it exited (a client's last error event need not:
        # a kafkajs worker ended by its stop's backstop had logged a retried JoinGroup).
        meta["worker_failures"] = {
            name: hung.get(name) or
            f"exit {w.returncode}: {_log_tail(run / f'{name}.log')}" +
            (f"; its last client error: {w.last_error}" if w.last_error else "")
            for name, w in workers.items() if w.returncode or name in hung}
        for name, why in meta["worker_failures"].items():
            if name not in hung:
                print(f"workload process {name} failed: {why[:300]}", flush=True)
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
        if txn:
            ends = txn_run.final_read(run, cluster.bootstrap_servers, TOPIC,
                                      list(range(args.partitions)), meta)
        else:
            final, ends = read_log(cluster.bootstrap_servers, TOPIC,
                                   list(range(args.partitions)))
            write_final(run / "final.parquet", final)
        (run / "faults.json").write_text(json.dumps(
            [{"fault": a.fault, "target": a.target, "start_ns": a.start_ns,
              "end_ns": a.end_ns, "error": a.error, "detail": a.detail,
              "links": [list(link) for link in a.links]}
             for a in running_nemesis.applied], indent=1))
        meta["high_watermarks"] = {str(p): hw for p, hw in ends.items()}
        meta["replica_brokers"] = {
            str(p): list(cluster.partition_state(TOPIC, p).isr) for p in range(args.partitions)}
        cluster.down(grace_s=10)
        stopped = True
        # LogMatching: every replica's segment files, below the HW, now that nothing
        # writes to them.
        write_replicas(run / "replicas.parquet", cluster, TOPIC, ends)
        (run / "run.json").write_text(json.dumps(meta, indent=1))
    finally:
        for w in workers.values():
            w.stop(WORKER_STOP_S)
        if observer is not None:
            observer.stop(timeout_s=1.0)
        if not stopped:
            cluster.down(grace_s=10)
    return judge(run)


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
                              segment_bytes=meta.get("segment_bytes"),
                              client=(meta.get("client") or {}).get("name", "native"),
                              group=bool(meta.get("group")),
                              group_protocol=meta.get("group_protocol"),
                              idempotence=meta.get("idempotence"),
                              workload=meta.get("workload", "plain"),
                              replica_transport=meta.get("replica_transport", "fetch"),
                              txn_writes=meta.get("txn_writes", 3),
                              txn_abort=meta.get("txn_abort", 0.2),
                              schedule=str(run / "schedule.json"))
    return run_chaos(copy)


def _interrupted(signum, frame):
    raise Terminated(f"signal {signum}")


def run(args) -> int:
    import signal
    # SIGTERM stops a run like Ctrl-C: the cluster (and its namespaces) still go down.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.chaos_command == "run":
            return run_chaos(args)
        if args.chaos_command == "check":
            return judge(Path(args.run))
        if args.chaos_command == "sweep":
            from bench.chaos.sweep import sweep
            return sweep(args)
        return replay(args)
    except UsageError as e:
        print(f"chaos: error: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"chaos: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:      # Ctrl-C or SIGTERM: the cluster went down
        print(f"chaos: interrupted ({e or 'Ctrl-C'}); every process it started is "
              f"stopped", file=sys.stderr)
        return 130
