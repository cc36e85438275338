"""``minikafka chaos sweep``: ``chaos run`` once per seed, each in its own process,
then one summary over them all (``RUN/sweep.json``, ``RUN/summary.json`` and a table
that starts with the client line). The same flags as ``chaos run`` for the client and
the group (``--client``, ``--group``, ``--group-protocol``); ``--workload txn`` sweeps
the transactional workload (``bench.chaos.txn_run``'s summary: transactions committed,
aborted and unknown, and each anomaly, over the runs)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.chaos.options import (Terminated, UsageError, check_client,
                                 check_segment_bytes, ms)
from bench.chaos.verdict import ANOMALIES, client_line


CHILD_STOP_TIMEOUT_S = 120     # an interrupted run's own stopping (workers, cluster)


class SweepInterrupted(Exception):
    """The sweep was stopped (SIGTERM or Ctrl-C) during a seed; its run has stopped."""


def _run_seed(command: list[str], out) -> int:
    """One seed's ``chaos run``, in its own process (in the sweep's process group, so
    Ctrl-C reaches both). Stopped, the sweep lets it stop its own cluster and workers
    (it treats SIGTERM as Ctrl-C): SIGTERM is passed on (Ctrl-C reached it already:
    a second signal would break into its stopping), then the sweep waits for it,
    SIGKILL only after ``CHILD_STOP_TIMEOUT_S``. Before, the sweep died at once and
    ``subprocess.call`` SIGKILLed the run, whose brokers and coordinator, in sessions
    of their own, were left running."""
    child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        return child.wait()
    except KeyboardInterrupt as e:
        if isinstance(e, Terminated) and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        try:
            code = child.wait(CHILD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
            raise SweepInterrupted(f"its run did not stop within {CHILD_STOP_TIMEOUT_S} s "
                                   f"and was killed (exit {code})") from None
        raise SweepInterrupted(f"its run stopped (exit {code})") from None


def _seeds(text: str) -> list[int]:
    out = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            out += list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise UsageError(f"--seeds {text!r}: e.g. 1-50 or 3,7,9") from None
    return out


def _workload_flags(args) -> list[str]:
    """``--rate`` when given and, for ``--workload txn``, its flags."""
    out = [] if args.rate is None else ["--rate", str(args.rate)]
    if getattr(args, "workload", "plain") == "txn":
        out += ["--workload", "txn"]
        for flag, value in (("--txn-writes", args.txn_writes),
                            ("--txn-abort", args.txn_abort)):
            if value is not None:
                out += [flag, str(value)]
    return out


def sweep(args) -> int:
    """``chaos sweep``: ``chaos run`` once per seed (each in its own process), then one
    summary over them all (``RUN/sweep.json`` and a table). Exit 1 if any run was
    invalid or failed."""
    import shutil
    check_client(args.client, args.group, args.group_protocol)
    check_segment_bytes(getattr(args, "segment_bytes", None))
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    txn = getattr(args, "workload", "plain") == "txn"
    rows = []
    for seed in _seeds(args.seeds):
        run = root / f"seed-{seed}"
        if run.exists():
            shutil.rmtree(run)
        command = [sys.executable, "-m", "bench.cli", "chaos", "run", "--dir", str(run),
                   "--profile", args.profile, "--faults", args.faults, "--seed", str(seed),
                   "--duration", str(args.duration)] + \
            (["--replica-transport", args.replica_transport]
             if getattr(args, "replica_transport", None) else []) + \
            _workload_flags(args) + \
            (["--netns"] if args.netns else []) + (["--compose"] if args.compose else []) + \
            (["--segment-bytes", str(args.segment_bytes)]
             if getattr(args, "segment_bytes", None) is not None else []) + \
            ["--client", args.client] + (["--group"] if args.group else []) + \
            (["--group-protocol", args.group_protocol] if args.group_protocol else []) + \
            (["--idempotence", args.idempotence] if args.idempotence else [])
        started = time.monotonic()
        with open(root / f"seed-{seed}.out", "w") as out:
            try:
                code = _run_seed(command, out)
            except SweepInterrupted as e:
                print(f"chaos sweep: interrupted during seed {seed}: {e}; {len(rows)} "
                      f"seed(s) done before it (RUN/sweep.json)", file=sys.stderr,
                      flush=True)
                (root / "sweep.json").write_text(json.dumps(rows, indent=1, default=str))
                return 130
        row = {"seed": seed, "exit": code, "wall_s": round(time.monotonic() - started, 1)}
        try:
            row["verdict"] = json.loads((run / "verdict.json").read_text())
            row["faults"] = json.loads((run / "faults.json").read_text())
            row["client"] = json.loads((run / "run.json").read_text()).get("client")
        except (OSError, ValueError):
            row["verdict"] = None
        rows.append(row)
        v = row["verdict"]
        if txn:
            from bench.chaos.txn_run import sweep_line
            print(f"seed {seed}: exit {code} in {row['wall_s']} s" + sweep_line(v), flush=True)
        else:
            print(f"seed {seed}: exit {code} in {row['wall_s']} s" + (
            f", {v['acknowledged']} acknowledged, lost {v['lost']}, duplicate "
            f"{v['duplicate']}, divergent {v['divergent']}"
            + "".join(f", {name} {v[name]}" for name in ANOMALIES[-3:] if v.get(name))
            + f", overlapping fault windows {len(v.get('overlaps', []))}" if v else ""),
                flush=True)
        if code == 0 and not args.keep and v is not None:
            shutil.rmtree(run / "cluster", ignore_errors=True)
        (root / "sweep.json").write_text(json.dumps(rows, indent=1, default=str))
    if txn:
        from bench.chaos.txn_run import print_txn_summary, summarize_txn
        summary = summarize_txn(rows)
        (root / "summary.json").write_text(json.dumps(summary, indent=1))
        print_txn_summary(args.profile, summary)
        return 0 if not (summary["invalid"] or summary["failed_runs"] or
                         summary["worker_failures"]) else 1
    summary = summarize(rows)
    summary["compose"] = bool(args.compose)
    summary["group"] = bool(args.group)
    summary["client"] = next((r["client"] for r in rows if r.get("client")),
                             {"name": args.client})
    (root / "summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(args.profile, summary)
    return 0 if not (summary["invalid"] or summary["failed_runs"] or
                     summary["worker_failures"]) else 1


def summarize(rows: list[dict]) -> dict:
    done = [r for r in rows if r["verdict"] is not None]
    out = {"runs": len(rows), "checked": len(done),
           "failed_runs": [r["seed"] for r in rows if r["verdict"] is None],
           "invalid": [r["seed"] for r in done if not r["verdict"]["valid"]],
           "worker_failures": [r["seed"] for r in done if r["verdict"].get("worker_failures")],
           "acknowledged": sum(r["verdict"]["acknowledged"] for r in done),
           "unknown": sum(r["verdict"]["unknown"] for r in done),
           "losing": [r["seed"] for r in done if r["verdict"]["lost"]],
           "overlaps": sum(len(r["verdict"].get("overlaps", [])) for r in done)}
    for name in ANOMALIES:
        out[name] = sum(r["verdict"].get(name, 0) for r in done)
    by_fault: dict[str, list] = {}
    for r in done:
        for fault, _, value in r["verdict"]["recovery_ms"]:
            by_fault.setdefault(fault, []).append(value)
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
    print(client_line(s.get("client")))
    print(f"sweep: {s['runs']} runs of profile {profile}"
          + (" (composed faults)" if s.get("compose") else "") + f", {s['checked']} checked, "
          f"{s['acknowledged']} acknowledged writes, {s['unknown']} unknown outcomes")
    print(f"  runs that lost acknowledged writes: {len(s['losing'])} {s['losing'] or ''}; "
          f"overlapping fault windows: {s['overlaps']}")
    print("  " + ", ".join(f"{name} {s[name]}" for name in ANOMALIES
                           if s.get("group") or name not in ANOMALIES[-3:]))
    for fault, r in s["recovery_ms"].items():
        print(f"  recovery after {fault:<18} n={r['n']:<4} median {ms(r['median'])}, "
              f"worst {ms(r['worst'])}" + (f", {r['never']} with no ack after"
                                            if r["never"] else ""))
    print(f"  longest window without an acknowledgement: median "
          f"{ms(s['longest_gap_ms']['median'])}, worst {ms(s['longest_gap_ms']['worst'])}")
    print(f"invalid runs: {s['invalid'] or 'none'}; runs where a workload process failed: "
          f"{s.get('worker_failures') or 'none'}; runs that did not finish: "
          f"{s['failed_runs'] or 'none'}")
