"""The chaos checker: a pure function from a recorded history to a verdict (no I/O).

A history is a list of operations, Jepsen-style (``Op``): a process invokes a ``send``
or a ``poll`` and later completes it ``ok``, ``fail`` (it certainly did not happen) or
``info`` (the outcome is unknown: a timeout, a lost connection). A ``send`` carries one
unique value; its ``ok`` carries the partition and offset the leader acknowledged. A
``poll`` ``ok`` carries what was read: ``reads`` = [(partition, offset, value), ...] in
the order the consumer got them. After the faults heal, the final read of every
partition, offset 0 to the high watermark, is given as ``final`` =
{partition: [(offset, value), ...]}. Group consumers also report (all ``ok``) ``assign``
and ``revoke`` (``partitions``, ``member``, ``generation``; a revoke with ``error``
"lost" when the client found it had been expelled) and ``commit`` (``offsets`` =
((partition, offset), ...) the client says were committed); ``committed`` ops are what
an observer read from the brokers (the group's committed offsets, sampled).

Anomalies, named after Jepsen's Kafka checker (``jepsen.tests.kafka``, its keyword in
brackets) where it has one; where we differ, it says so:

- **lost** [``:lost-write``]: acknowledged, yet absent from the final read. The final
  read covers the whole committed log once every fault has healed and every writer has
  stopped, so an acknowledged offset beyond its end is lost too (a deposed leader's log
  truncated away). Jepsen instead bounds the check by the highest offset any consumer
  polled and calls "lost" only what no one polled; ours is stricter: a value a consumer
  saw before the log lost it counts too. A partition the final read has no entry for
  is not judged.
- **duplicate** [``:duplicate``]: one value at two offsets (a retried send written
  twice; expected without the idempotent producer, so counted apart from the anomalies
  that fail a run unless ``duplicates_fail``);
- **inconsistent** [``:inconsistent-offsets``]: two different values read at one
  (partition, offset);
- **nonmonotonic** [``:nonmonotonic-poll`` and ``:int-nonmonotonic-poll``]: a
  consumer's reads of a partition went backwards or repeated an offset, within a poll
  or between two polls;
- **skip** [``:poll-skip`` and ``:int-poll-skip``]: a consumer jumped over offsets that
  the final read holds (gaps the final read lacks, e.g. transaction markers, are not
  skips). For a group consumer both restart at each ``assign`` of the partition (the
  new owner starts at the committed offset; partitions it keeps, as in a cooperative
  rebalance, keep their continuity); a standalone consumer is held to them over the
  whole run. Jepsen keeps the last reads of the partitions still assigned after an
  ``:assign``/``:subscribe`` and, with subscribe, allows poll-skip and
  nonmonotonic-poll altogether;
- **unexpected**: a value read that no process ever sent (Jepsen has no name for it:
  its analysis stops with ``:no-writer-of``);
- **aborted_read** [``:G1a``, Adya's aborted read]: a value in the log, read by a poll
  or the final read, whose send completed ``fail`` (the client was told it certainly
  did not happen). An ``info`` send's value may or may not be there: neither its
  absence nor its presence is an anomaly.

With ``group=True``, three about consumer groups (``bench.chaos.group_checker`` holds
the details). Jepsen has none of them: it checks no committed offsets, and its nearest,
``consume-counts`` (a value polled twice by one subscribed process), is only reported.

- **group_lost**: an offset in the final read, below the highest offset the group ever
  committed for its partition (a member's ``commit`` ok or an observer's
  ``committed`` sample), that no member of the group ever read. At-least-once allows
  re-reads, never gaps below a commit (Jepsen's lost-write, bounded by the committed
  offset instead of the highest poll). A record no one read above every commit is not
  one (the group had not got there);
- **group_double_read**: one (partition, offset) read by two different members while
  both owned the partition: both reads fall where their ownership intervals (assign to
  revoke) overlap, and where both report a generation, it is the same one. Not one:
  the next owner re-reading from the committed offset what the last owner read before
  it was assigned (at-least-once redelivery), a zombie of an older generation, or one
  whose ownership ended ``lost`` when generations are unknown (fetches are not fenced,
  Kafka allows it);
- **commit_backwards**: the observer's committed offset for a partition went down from
  one sample to the next, or one member's own commit acknowledgements for a partition
  went down within one ownership interval (in the order of its callbacks).

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

from bench.chaos import group_checker

EXAMPLES_MAX = 20
GROUP_ANOMALIES = ("group_lost", "group_double_read", "commit_backwards")
# One line per anomaly, for a verdict's reader (the examples' fields in brackets).
ANOMALY_HELP = {
    "lost": "acknowledged, yet not in the final read [value, partition, offset]",
    "duplicate": "one value at two offsets [value, [(partition, offset), ...]]",
    "inconsistent": "two values read at one offset [partition, offset, values]",
    "nonmonotonic": "a consumer's reads went backwards [process, partition, last, read]",
    "skip": "a consumer jumped over offsets the log holds [process, partition, last, read]",
    "unexpected": "read, never sent [value, [(partition, offset), ...]]",
    "aborted_read": "its send failed, yet it was read [value, [(partition, offset), ...]]",
    "divergent": "replicas differ below the high watermark [partition, offset, {broker: value}]",
    "group_lost": "below a committed offset, read by no member "
                  "[partition, offset, value, committed]",
    "group_double_read": "read by two members owning the partition at once "
                         "[partition, offset, member, member]",
    "commit_backwards": "a committed offset went down [observer or member, partition, "
                        "before, after]",
}


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
    group: bool = False          # judged as a consumer group (check(..., group=True))
    group_lost: list = field(default_factory=list)          # (p, offset, value, committed)
    group_double_read: list = field(default_factory=list)   # (p, offset, member, member)
    commit_backwards: list = field(default_factory=list)    # (who, p, before, after)
    group_stats: dict = field(default_factory=dict)
    recovery_ms: list = field(default_factory=list)   # (fault, target, ms or None)
    longest_gap_ms: float = 0.0
    duplicates_fail: bool = False

    @property
    def anomalies(self) -> dict[str, int]:
        return {"lost": len(self.lost), "duplicate": len(self.duplicate),
                "inconsistent": len(self.inconsistent),
                "nonmonotonic": len(self.nonmonotonic), "skip": len(self.skip),
                "unexpected": len(self.unexpected), "aborted_read": len(self.aborted_read),
                "divergent": len(self.divergent),
                **({k: len(getattr(self, k)) for k in GROUP_ANOMALIES} if self.group else {})}

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
                **({"group_stats": self.group_stats} if self.group else {}),
                "examples": {k: [_show(x) for x in getattr(self, k)[:EXAMPLES_MAX]]
                             for k in self.anomalies if getattr(self, k)}}


def _show(item):
    return [_show(x) for x in item] if isinstance(item, (list, tuple)) else \
        (item.decode(errors="replace") if isinstance(item, bytes) else item)


def explain(name: str, example) -> str:
    """One example of anomaly ``name`` (as in ``Verdict`` or, shown, in a summary's
    ``examples``) as a sentence, for a printed verdict."""
    e = _show(example)
    if name == "group_lost":
        partition, offset, value, committed = e
        return (f"partition {partition} offset {offset} ({value}): below the group's "
                f"committed {committed}, read by no member")
    if name == "group_double_read":
        partition, offset, a, b = e
        return (f"partition {partition} offset {offset}: read by {a} and {b} while both "
                f"owned the partition")
    if name == "commit_backwards":
        who, partition, before, after = e
        return f"partition {partition}: committed offset {before} -> {after} ({who})"
    if name in ("nonmonotonic", "skip"):
        process, partition, last, read = e
        return f"{process} read partition {partition} offset {read} after {last}"
    if name == "lost":
        value, partition, offset = e
        return f"{value} acknowledged at partition {partition} offset {offset}, not in the log"
    return f"{name}: {e}"


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
          replicas: dict | None = None, high_watermarks: dict | None = None,
          group: bool = False) -> Verdict:
    v = Verdict(duplicates_fail=duplicates_fail, group=group)
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
        if op.f == "assign" and op.type == "ok":
            for partition in op.partitions:   # a new owner starts at the committed offset
                last_read.pop((op.process, partition), None)
            continue
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

    if group:
        members = group_checker.members(history)
        v.group_lost = group_checker.group_lost(history, final, members)
        v.group_double_read = group_checker.double_reads(history,
                                                         group_checker.ownership(history))
        v.commit_backwards = group_checker.commit_backwards(history)
        v.group_stats = group_checker.stats(history, members)

    ack_times = sorted(t for _, _, t in acked.values())
    for fault in faults:
        after = next((t for t in ack_times if t >= fault.start_ns), None)
        v.recovery_ms.append((fault.name, fault.target,
                              None if after is None else (after - fault.start_ns) / 1e6))
    edges = ([start_ns] if start_ns is not None else []) + ack_times + \
        ([end_ns] if end_ns is not None else [])
    v.longest_gap_ms = max((b - a for a, b in zip(edges, edges[1:])), default=0) / 1e6
    return v
