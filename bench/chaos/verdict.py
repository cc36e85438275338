"""A chaos run's verdict as the user reads it: the client line first (which client,
its version, what the run set on it), the counts, each anomaly's count, recovery per
fault, the group's verdict lines with ``--group``, examples, VALID or INVALID."""
from __future__ import annotations

from bench.chaos.checker import ANOMALY_HELP, GROUP_ANOMALIES, Fault, explain
from bench.chaos.options import ms

COUNTS = ("sends", "acknowledged", "failed", "unknown", "read", "lost", "duplicate",
          "inconsistent", "nonmonotonic", "skip", "unexpected", "aborted_read", "divergent")
GROUP_COUNTS = GROUP_ANOMALIES
EXAMPLES_SHOWN = 5           # of each anomaly, in the printed verdict (all in verdict.json)
# The anomalies a sweep sums (``duplicate`` among them: it fails an idempotent run).
ANOMALIES = ("lost", "duplicate", "inconsistent", "nonmonotonic", "skip", "unexpected",
             "aborted_read", "divergent") + GROUP_COUNTS


def fault_overlaps(faults: list[Fault], origin_ns: int) -> list[dict]:
    """The windows where two or more of the applied faults were active at once, in
    seconds since ``origin_ns`` (the workload's start)."""
    from bench.chaos.compose import overlaps
    windows = [(f"{f.name} {f.target}", f.start_ns, f.end_ns or f.start_ns)
               for f in faults]
    return [{"from_s": round((a - origin_ns) / 1e9, 1), "to_s": round((b - origin_ns) / 1e9, 1),
             "faults": labels} for a, b, labels in overlaps(windows)]


def client_line(client: dict | None) -> str:
    """``client confluent-kafka 2.16.1 (librdkafka 2.16.0); producer acks=all ...``."""
    if not client:
        return "client native"
    out = f"client {client.get('name', '?')} {client.get('version') or ''}".rstrip()
    for role, settings in sorted((client.get("settings") or {}).items()):
        if settings:
            out += f"; {role} " + " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return out


def _protocol(meta: dict) -> str:
    if meta.get("group_protocol"):
        return f"{meta['group_protocol']} protocol"
    name = (meta.get("client") or {}).get("name", "native")
    return ("consumer" if name == "native" else "classic") + " protocol, the client's default"


def print_verdict(meta: dict, s: dict) -> None:
    print(client_line(meta.get("client")))
    group = meta.get("group")
    print(f"profile {meta['profile']}, seed {meta['seed']}, {meta['duration']} s, "
          f"faults {len(meta.get('schedule', []))}"
          + (", composed (--compose)" if meta.get("compose") else "")
          + (f", group {group} ({_protocol(meta)})" if group else ""))
    overlapping = s.get("overlaps", [])
    if meta.get("compose") or overlapping:
        print(f"  overlapping fault windows: {len(overlapping)}")
        for o in overlapping:
            print(f"    {o['from_s']:6.1f}-{o['to_s']:.1f} s: {' + '.join(o['faults'])}")
    for name in COUNTS + (GROUP_COUNTS if group else ()):
        note = ""
        if name == "duplicate" and s.get(name) and not meta.get("idempotent"):
            note = "  (expected without the idempotent producer)"
        print(f"  {name:<18}{s.get(name, 0):>10}{note}")
    if group:
        g = s.get("group_stats", {})
        print(f"  group: {len(g.get('members', []))} members, {g.get('assign', 0)} "
              f"assignments, {g.get('revoke', 0)} revocations ({g.get('lost', 0)} lost), "
              f"{g.get('commit', 0)} commits reported ({g.get('commit_failed', 0)} failed), "
              f"{g.get('committed_samples', 0)} committed offsets seen by the observer "
              f"({meta.get('observer_errors', 0)} samples failed)")
        print(f"  committed at the end: {g.get('committed', {})}")
    by_fault: dict[str, list] = {}
    for fault, _, value in s["recovery_ms"]:
        by_fault.setdefault(fault, []).append(value)
    for fault, values in sorted(by_fault.items()):
        known = sorted(v for v in values if v is not None)
        median = known[len(known) // 2] if known else None
        worst = known[-1] if known else None
        print(f"  recovery after {fault:<18} n={len(values)} median "
              f"{ms(median)} worst {ms(worst)}"
              + (f" ({len(values) - len(known)} without any ack after)"
                 if len(known) < len(values) else ""))
    print(f"  longest window without an acknowledgement: {s['longest_gap_ms']:.0f} ms")
    for kind, examples in s.get("examples", {}).items():
        if kind != "duplicate" or not s["valid"] or meta.get("idempotent"):
            print(f"  {kind}: {ANOMALY_HELP.get(kind, '')}")
            for example in examples[:EXAMPLES_SHOWN]:
                print(f"    {explain(kind, example)}")
    failures = s.get("worker_failures") or {}
    for name, why in sorted(failures.items()):
        print(f"  workload process {name} failed: {why[:300]}")
    if not s["valid"]:
        print("INVALID: the checker found anomalies")
    elif failures:
        print(f"VALID history, but {len(failures)} workload process(es) failed")
    else:
        print("VALID")
