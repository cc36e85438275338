"""The consumer-group part of the chaos checker (``check(..., group=True)``): pure
functions of a history (``bench.chaos.checker.Op``) and the final read; no I/O.

Group consumers (processes that report ``assign``, ``revoke`` or ``commit``) own a
partition from the ``assign`` that lists it to the ``revoke`` that lists it (or the
end of the history): an *ownership interval*, with the member's generation and whether
it ended ``lost`` (the client found out it had been expelled, not a clean revoke).
What Kafka promises a group, and what it does not:

- at-least-once: after a rebalance the new owner starts at the committed offset, so
  records read but not yet committed are read again by someone (*not* an anomaly);
  everything below a committed offset was read by some member (else ``group_lost``);
- a partition has one owner per generation (else ``group_double_read``). Fetches are
  not fenced, so an expelled member that has not noticed yet (a zombie) may read on
  while the next generation's owner reads too: tolerated when the two report
  different generations, or, where a generation is unknown, when the zombie's
  ownership ended ``lost``;
- a committed offset only moves forward (else ``commit_backwards``), as the brokers
  report it (the observer's ``committed`` samples), and as each member's own commit
  acknowledgements report it within one ownership interval (in the order of the
  member's callbacks; a new interval starts from the then committed offset).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

GROUP_FS = ("assign", "revoke", "commit")


@dataclass
class Interval:
    """One process's ownership of one partition: from ``start_ns`` (its assign) to
    ``end_ns`` (its revoke; None: it still owned it when the history ends)."""
    start_ns: int
    end_ns: int | None = None
    generation: int = -1
    member: str = ""
    lost: bool = False

    def holds(self, t: int) -> bool:
        return self.start_ns <= t and (self.end_ns is None or t <= self.end_ns)


def _sample(op) -> bool:
    """An observer's reading of the committed offsets (a failed one says nothing)."""
    return op.f == "committed" and op.type not in ("invoke", "fail")


def members(history) -> set[str]:
    """The processes that took part in a group (reported an assign, revoke or commit)."""
    return {op.process for op in history if op.f in GROUP_FS}


def ownership(history) -> dict[tuple[str, int], list[Interval]]:
    """(process, partition) -> its ownership intervals in time order. An assign of a
    partition the process already owns ends the previous interval there."""
    out: dict[tuple[str, int], list[Interval]] = {}
    for op in history:
        if op.type != "ok" or op.f not in ("assign", "revoke"):
            continue
        for partition in op.partitions:
            intervals = out.setdefault((op.process, partition), [])
            current = intervals[-1] if intervals and intervals[-1].end_ns is None else None
            if current is not None:
                current.end_ns = op.time_ns
                current.lost = op.f == "revoke" and op.error == "lost"
            if op.f == "assign":
                intervals.append(Interval(op.time_ns, None, op.generation, op.member))
    return out


def committed_offsets(history) -> dict[int, int]:
    """partition -> the highest offset the group ever committed: any member's commit
    ``ok`` or any of the observer's ``committed`` samples (negative offsets, which
    some clients report for "nothing to commit", are ignored)."""
    out: dict[int, int] = {}
    for op in history:
        if (op.f == "commit" and op.type == "ok") or _sample(op):
            for partition, offset in op.offsets:
                if offset >= 0:
                    out[partition] = max(out.get(partition, offset), offset)
    return out


def group_lost(history, final: dict[int, list[tuple[int, bytes]]],
               group: set[str]) -> list[tuple[int, int, bytes, int]]:
    """(partition, offset, value, committed) for each offset of the final read below
    the group's highest committed offset of its partition that no member read. An
    offset read with another value (a truncated log rewritten) counts as read: the
    value mismatch is ``inconsistent`` already."""
    committed = committed_offsets(history)
    read = {(p, o) for op in history
            if op.f == "poll" and op.type == "ok" and op.process in group
            for p, o, _ in op.reads}
    return [(partition, offset, value, committed[partition])
            for partition, rows in sorted(final.items()) if partition in committed
            for offset, value in sorted(rows)
            if offset < committed[partition] and (partition, offset) not in read]


def _generation_at(assigns: list[tuple[int, int]], t: int) -> int:
    """The generation of the member's latest assign at or before ``t`` (-1: unknown)."""
    i = bisect.bisect_right(assigns, (t, float("inf")))
    return assigns[i - 1][1] if i else -1


def double_reads(history, owned: dict[tuple[str, int], list[Interval]]
                 ) -> list[tuple[int, int, str, str]]:
    """(partition, offset, member a, member b): an offset two members read while both
    owned its partition, both reads inside the overlap of their ownership intervals
    (so a re-read by the next owner of what an earlier owner read before it was
    assigned is at-least-once redelivery, not this). Tolerated: the two members'
    generations at their reads are both known and differ, or one is unknown and
    either interval ended ``lost`` (a zombie)."""
    generations: dict[str, list[tuple[int, int]]] = {}
    for op in history:
        if op.f == "assign" and op.type == "ok" and op.generation >= 0:
            generations.setdefault(op.process, []).append((op.time_ns, op.generation))
    for assigns in generations.values():
        assigns.sort()
    readers: dict[tuple[int, int], dict[str, list[int]]] = {}
    for op in history:
        if op.f == "poll" and op.type == "ok":
            for partition, offset, _ in op.reads:
                if (op.process, partition) in owned:
                    readers.setdefault((partition, offset), {}).setdefault(
                        op.process, []).append(op.time_ns)
    out = []
    for (partition, offset), by_process in sorted(readers.items()):
        if len(by_process) < 2:
            continue
        reads = [(process, t, interval) for process, times in sorted(by_process.items())
                 for t in times
                 for interval in owned[(process, partition)] if interval.holds(t)]
        found = None
        for i, (a, ta, ia) in enumerate(reads):
            for b, tb, ib in reads[i + 1:]:
                if a == b or not (ia.holds(tb) and ib.holds(ta)):
                    continue        # one member, or a read outside the other's ownership
                ga = _generation_at(generations.get(a, []), ta)
                gb = _generation_at(generations.get(b, []), tb)
                if ga >= 0 and gb >= 0:
                    if ga != gb:
                        continue    # a zombie of an older generation
                elif ia.lost or ib.lost:
                    continue        # the client said it had been expelled
                found = (partition, offset, a, b)
                break
            if found:
                break
        if found:
            out.append(found)
    return out


def commit_backwards(history) -> list[tuple[str, int, int, int]]:
    """(who, partition, before, after): the observer's committed offset of a partition
    went down from one sample to the next (who = the observer's process name), or one
    member's commit acknowledgements of a partition went down within one ownership
    interval (counted by its assigns of that partition, so a late callback after a
    revoke still belongs to the interval it committed for). A partition missing from a
    sample, or a negative offset, says nothing."""
    out = []
    observed: dict[tuple[str, int], int] = {}
    epoch: dict[tuple[str, int], int] = {}
    committed: dict[tuple[str, int, int], int] = {}
    for op in history:
        if _sample(op):
            for partition, offset in op.offsets:
                before = observed.get((op.process, partition))
                if offset < 0:
                    continue
                if before is not None and offset < before:
                    out.append((op.process, partition, before, offset))
                observed[(op.process, partition)] = offset
        elif op.f == "assign" and op.type == "ok":
            for partition in op.partitions:
                epoch[(op.process, partition)] = epoch.get((op.process, partition), 0) + 1
        elif op.f == "commit" and op.type == "ok":
            for partition, offset in op.offsets:
                if offset < 0:
                    continue
                key = (op.process, partition, epoch.get((op.process, partition), 0))
                before = committed.get(key)
                if before is not None and offset < before:
                    out.append((op.process, partition, before, offset))
                committed[key] = offset
    return out


def stats(history, group: set[str]) -> dict:
    """What the group did, for the verdict: members, rebalance callbacks, commits."""
    count = {f: 0 for f in ("assign", "revoke", "lost", "commit", "commit_failed",
                            "committed_samples")}
    for op in history:
        if op.f == "assign" and op.type == "ok":
            count["assign"] += 1
        elif op.f == "revoke" and op.type == "ok":
            count["lost" if op.error == "lost" else "revoke"] += 1
        elif op.f == "commit":
            if op.type == "ok":
                count["commit"] += 1
            elif op.type in ("fail", "info"):
                count["commit_failed"] += 1
        elif _sample(op):
            count["committed_samples"] += 1
    return {"members": sorted(group), **count,
            "committed": {p: o for p, o in sorted(committed_offsets(history).items())}}
