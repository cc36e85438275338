"""The chaos checker: a pure function from a recorded history to a verdict (no I/O).

A history is a list of operations, Jepsen-style (``Op``): a process invokes a ``send``
or a ``poll`` and later completes it ``ok``, ``fail`` (it certainly did not happen) or
``info`` (the outcome is unknown: a timeout, a lost connection). A ``send`` carries one
unique value; its ``ok`` carries the partition and offset the leader acknowledged. A
``poll`` ``ok`` carries what was read: ``reads`` = [(partition, offset, value), ...] in
the order the consumer got them. After the faults heal, the final read of every
partition, offset 0 to the high watermark, is given as ``final`` =
{partition: [(offset, value), ...]}.

Anomalies, as Jepsen's Kafka checker names them:

- **lost**: acknowledged, yet absent from the final read. The final read covers the
  whole committed log once every fault has healed and every writer has stopped, so an
  acknowledged offset beyond its end is lost too (a deposed leader's log truncated
  away). Stricter than Jepsen's "never read": a value a consumer saw before the log
  lost it counts too. A partition the final read has no entry for is not judged.
- **duplicate**: one value at two offsets (a retried send written twice; expected
  without the idempotent producer, so counted apart from the anomalies that fail a run);
- **inconsistent offsets**: two different values read at one (partition, offset);
- **nonmonotonic poll**: a consumer's reads of a partition went backwards;
- **poll skip**: a consumer jumped over offsets that the final read holds;
- **unexpected**: a value read that no process ever sent;
- **aborted read** (Adya's G1a): a value in the log, read by a poll or the final read,
  whose send completed ``fail`` (the client was told it certainly did not happen). An
  ``info`` send's value may or may not be there: neither its absence nor its presence
  is an anomaly.

And one Jepsen cannot check, from the brokers' own segment files after the run
(``replicas`` = {partition: {broker: [(offset, value), ...]}} below each partition's
high watermark ``high_watermarks`` = {partition: hw}):

- **divergent** (Raft's Log Matching, which Kafka's replication must give below the
  HW): at some offset below the HW two replicas hold different values, or a replica
  lacks an offset another holds (a replica whose log starts later, after retention, is
  compared from its start).

And availability: for each fault window, the time from its start to the first
acknowledgement after it, and over the run the longest stretch with no acknowledgement.
"""
from __future__ import annotations

from dataclasses import dataclass, field

EXAMPLES_MAX = 20


@dataclass(frozen=True)
class Op:
    process: str
    type: str            # invoke | ok | fail | info
    f: str               # send | poll | assign | revoke | commit | committed
    time_ns: int
    value: bytes | None = None
    partition: int = -1
    offset: int = -1
    reads: tuple = ()    # poll ok: ((partition, offset, value), ...)
    error: str | None = None
    partitions: tuple = ()   # assign / revoke: (partition, ...)
    offsets: tuple = ()      # commit / committed: ((partition, offset), ...)
    member: str = ""         # assign: the group member id, where the client exposes it
    generation: int = -1     # assign: the group generation (-1: unknown)


@dataclass(frozen=True)
class Fault:
    name: str
    start_ns: int
    end_ns: int
    target: str = ""


@dataclass
class Verdict:
    sends: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    read: int = 0
    lost: list = field(default_factory=list)
    duplicate: list = field(default_factory=list)
    inconsistent: list = field(default_factory=list)
    nonmonotonic: list = field(default_factory=list)
    skip: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    aborted_read: list = field(default_factory=list)  # (value, [(partition, offset)])
    divergent: list = field(default_factory=list)   # (partition, offset, {broker: value})
    recovery_ms: list = field(default_factory=list)   # (fault, target, ms or None)
    longest_gap_ms: float = 0.0
    duplicates_fail: bool = False

    @property
    def anomalies(self) -> dict[str, int]:
        return {"lost": len(self.lost), "duplicate": len(self.duplicate),
                "inconsistent": len(self.inconsistent),
                "nonmonotonic": len(self.nonmonotonic), "skip": len(self.skip),
                "unexpected": len(self.unexpected), "aborted_read": len(self.aborted_read),
                "divergent": len(self.divergent)}

    @property
    def valid(self) -> bool:
        counts = self.anomalies
        if not self.duplicates_fail:
            counts.pop("duplicate")
        return not any(counts.values())

    def summary(self) -> dict:
        return {"valid": self.valid, "sends": self.sends, "acknowledged": self.acknowledged,
                "failed": self.failed, "unknown": self.unknown, "read": self.read,
                **self.anomalies, "longest_gap_ms": round(self.longest_gap_ms, 1),
                "recovery_ms": self.recovery_ms,
                "examples": {k: [_show(x) for x in getattr(self, k)[:EXAMPLES_MAX]]
                             for k in self.anomalies if getattr(self, k)}}


def _show(item):
    return [_show(x) for x in item] if isinstance(item, (list, tuple)) else \
        (item.decode(errors="replace") if isinstance(item, bytes) else item)


def log_matching(replicas: dict[int, dict[int, list[tuple[int, bytes]]]],
                 high_watermarks: dict[int, int]) -> list[tuple[int, int, dict]]:
    """Offsets below a partition's HW where its replicas' logs differ:
    (partition, offset, {broker: value, or None where that replica lacks the offset}).
    A replica is compared from its first offset on (retention may have removed the
    ones before); one that holds nothing below a positive HW is reported at offset 0."""
    out = []
    for partition, by_broker in sorted(replicas.items()):
        hw = high_watermarks.get(partition, 0)
        logs = {b: {o: v for o, v in rows if o < hw} for b, rows in by_broker.items()}
        starts = {b: min(rows) for b, rows in logs.items() if rows}
        for b, rows in sorted(logs.items()):
            if not rows and hw > 0:
                out.append((partition, 0, {b: None}))
        for offset in sorted(set().union(*logs.values())):
            held = {b: logs[b].get(offset) for b in sorted(starts) if offset >= starts[b]}
            if len(set(held.values())) > 1:
                out.append((partition, offset, held))
    return out


def check(history: list[Op], final: dict[int, list[tuple[int, bytes]]],
          faults: list[Fault] = (), *, duplicates_fail: bool = False,
          start_ns: int | None = None, end_ns: int | None = None,
          replicas: dict | None = None, high_watermarks: dict | None = None) -> Verdict:
    v = Verdict(duplicates_fail=duplicates_fail)
    if replicas is not None:
        v.divergent = log_matching(replicas, high_watermarks or {})
    sent: set[bytes] = set()
    failed: set[bytes] = set()
    acked: dict[bytes, tuple[int, int, int]] = {}      # value -> (partition, offset, t)
    for op in history:
        if op.f != "send":
            continue
        if op.type == "invoke":
            v.sends += 1
            sent.add(op.value)
        elif op.type == "ok":
            acked[op.value] = (op.partition, op.offset, op.time_ns)
        elif op.type == "fail":
            v.failed += 1
            failed.add(op.value)
        elif op.type == "info":
            v.unknown += 1
    v.acknowledged = len(acked)

    # Everything read: the final read and every poll, as (partition, offset) -> values.
    at: dict[tuple[int, int], set[bytes]] = {}
    where: dict[bytes, set[tuple[int, int]]] = {}
    final_offsets = {p: {o for o, _ in rows} for p, rows in final.items()}

    def saw(partition: int, offset: int, value: bytes) -> None:
        at.setdefault((partition, offset), set()).add(value)
        where.setdefault(value, set()).add((partition, offset))

    for partition, rows in final.items():
        for offset, value in rows:
            saw(partition, offset, value)
    last_read: dict[tuple[str, int], int] = {}
    for op in history:
        if op.f != "poll" or op.type != "ok":
            continue
        for partition, offset, value in op.reads:
            v.read += 1
            saw(partition, offset, value)
            key = (op.process, partition)
            previous = last_read.get(key)
            if previous is not None:
                if offset <= previous:
                    v.nonmonotonic.append((op.process, partition, previous, offset))
                elif offset > previous + 1:
                    skipped = [o for o in range(previous + 1, offset)
                               if o in final_offsets.get(partition, ())]
                    if skipped:
                        v.skip.append((op.process, partition, previous, offset))
            last_read[key] = offset

    in_final = {value for rows in final.values() for _, value in rows}
    for value, (partition, offset, _) in sorted(acked.items(), key=lambda kv: kv[1][:2]):
        # Stricter than Jepsen's (never read by anyone): a value a consumer saw before
        # the log lost it is lost too (and its offset shows as inconsistent).
        if value not in in_final and partition in final:
            v.lost.append((value, partition, offset))
    for (partition, offset), values in sorted(at.items()):
        if len(values) > 1:
            v.inconsistent.append((partition, offset, sorted(values)))
    for value, places in where.items():
        if len(places) > 1:
            v.duplicate.append((value, sorted(places)))
        if value not in sent:
            v.unexpected.append((value, sorted(places)))
        if value in failed:
            v.aborted_read.append((value, sorted(places)))
    v.duplicate.sort()
    v.unexpected.sort()
    v.aborted_read.sort()

    ack_times = sorted(t for _, _, t in acked.values())
    for fault in faults:
        after = next((t for t in ack_times if t >= fault.start_ns), None)
        v.recovery_ms.append((fault.name, fault.target,
                              None if after is None else (after - fault.start_ns) / 1e6))
    edges = ([start_ns] if start_ns is not None else []) + ack_times + \
        ([end_ns] if end_ns is not None else [])
    v.longest_gap_ms = max((b - a for a, b in zip(edges, edges[1:])), default=0) / 1e6
    return v
