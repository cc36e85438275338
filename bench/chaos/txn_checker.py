"""The transactional chaos checker: a pure function from a history of transactions and
the final read-back of every partition to a verdict (no I/O).

The history, Jepsen-style: each ``Txn`` is one transaction as its process saw it: an id,
the process, its ``writes`` ((topic, partition, value), in send order), its ``reads``
((topic, partition, offset, value), in the order the consumer got them, every read at
``isolation.level=read_committed``) and its outcome ``type``: ``ok`` (committed: EndTxn
commit answered), ``fail`` (certainly not committed: aborted, or never asked to commit)
or ``info`` (unknown: the commit's answer was lost). A committed reader (a consumer that
only reads) records each poll as a read-only ``ok`` transaction. ``continues`` says that
a transaction's reads carry on from the previous transaction of the same process with
no seek or reassignment in between (a standalone reader's polls; a read-process-write
loop's next transaction after a commit): only then are reads judged across the
boundary. Every value is written once in the whole run (the workload makes them unique).

The final read-back, after the faults heal and the writers stop: ``committed`` =
{(topic, partition): [(offset, value), ...]} read at read_committed from the log start
to the LSO, and ``uncommitted`` = the same at read_uncommitted to the high watermark
(aborted data included; markers take an offset and hold no value in either).

The fate of a transaction: committed if ``ok`` or if any of its writes was read at
read_committed (during the run or in the final read); aborted if ``fail``, or ``info``
with a write in the log (``uncommitted``) and none ever read committed; else unknown
(an ``info`` transaction of which nothing reached the log: not judged).

Anomalies, with Jepsen's names (``jepsen.tests.kafka``, "kafka.clj", and Elle's
Adya-style phenomena) in brackets:

- **aborted_read** [``:G1a``]: a read at read_committed (any transaction's, a reader's,
  or the final committed read-back, reader ``final``) returned a value of an aborted
  transaction. Reads by a transaction that itself aborted count too: the consumer was
  promised committed data whatever its own transaction then did (Elle judges only
  committed readers).
- **precommitted_read** [``:precommitted-read``]: a transaction read its own write (at
  read_committed it cannot be committed yet).
- **intermediate_read** [Jepsen's ``:int-*`` family; Adya's G1b for a log]: a reader
  read a transaction's write to a partition and read across an EARLIER write of the
  same transaction to that partition without reading it (it saw a later part of the
  transaction's writes there without the earlier part). A reader that stops inside a
  transaction's writes (a poll ends there, the rest comes next poll) is not one:
  Kafka's polls are not snapshots, and Jepsen's own "intermediate reads?" note
  (kafka.clj, analysis item 7) leaves that case open.
- **torn** [Bufstream's "torn transactions"]: part of a committed transaction visible
  without the rest: (a) in the final committed read-back some of its writes are there
  and some are not; (b) a reader read one of its writes and read across another of its
  writes (on another partition, or later on the same one) without reading it.
- **skip** [``:poll-skip``, ``:int-poll-skip``]: a reader read across a committed
  value (one in the final committed read-back) without reading it, and read nothing
  else of its transaction. Gaps of aborted data and markers are not skips (they are
  not in the committed read-back).
- **nonmonotonic** [``:nonmonotonic-poll``, ``:int-nonmonotonic-poll``]: within one
  reader's continuous reads of a partition an offset went backwards or repeated.
- **lost** [``:lost-write``]: a write of a committed transaction (``ok``, or ``info``
  seen committed) not in the final committed read-back. Stricter than Jepsen, which
  bounds it by the highest offset polled: our read-back covers the whole log.
- **duplicate** [``:duplicate``]: one value at two (partition, offset)s.
- **inconsistent** [``:inconsistent-offsets``]: two values at one (partition, offset).
- **unexpected**: a value read that no transaction wrote (Jepsen: ``:no-writer-of``).
- **G0** [Elle's ``:G0``, write cycle]: a cycle of ww edges. ww: T1 -> T2 when a value
  of T2 immediately follows one of T1 in a partition's committed log. Kafka lets
  transactions interleave their writes within and across partitions, so a G0 is what
  Kafka does, not a fault (Jepsen: ``--no-ww-deps``, "Redpanda allows write cycles
  everywhere"); reported always, it fails the verdict only with ``ww_deps=True``.
- **G1c** [Elle's ``:G1c``, cyclic information flow]: a cycle of wr edges (ww edges
  too with ``ww_deps=True``), at least one wr. wr: T1 -> T2 when T2 read a value T1
  wrote (every value read, not only the highest as Jepsen does: without ww edges the
  highest alone would hide edges). Under read_committed a pure wr cycle cannot happen
  (T1 commits before T2 reads, T2 before T1 reads), so one is always an anomaly.

Cycles: Tarjan's strongly connected components over committed transactions, then one
concrete cycle per component (a breadth-first path back to the start), as Elle does.

What it cannot see: rw (anti-)dependencies are not inferred, so G-single, G2 and
write skew are invisible (Kafka promises no serializability anyway); no real-time
edges (strict serializability is not checked); an aborted transaction's reads are not
in the graph; an ``info`` transaction of which nothing was read or logged has an
unknown fate and is left out, and one whose values were read committed is taken as
committed (so an unknown commit that really aborted, its values then made visible by
a later marker, is not an aborted read: only ``fail`` transactions are known aborted); reads are judged only within a transaction or a
``continues`` chain, so a jump over a committed value at a seek or a rebalance is
invisible; a log that lost data and wrote other values at the same offsets may hide a
skip behind an ``inconsistent``.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

EXAMPLES_MAX = 20
TYPES = ("ok", "fail", "info")
FINAL = "final"               # the reader name of the final committed read-back
ANOMALIES = ("aborted_read", "precommitted_read", "intermediate_read", "torn", "skip",
             "nonmonotonic", "lost", "duplicate", "inconsistent", "unexpected", "G0", "G1c")
ANOMALY_HELP = {
    "aborted_read": "read committed, written by an aborted transaction "
                    "[reader, txn, topic, partition, offset, value, writer]",
    "precommitted_read": "a transaction read its own write [txn, topic, partition, "
                         "offset, value]",
    "intermediate_read": "read a transaction's later write to a partition, skipping an "
                         "earlier one [reader, txn, topic, partition, skipped offset, "
                         "read offset, writer]",
    "torn": "part of a committed transaction visible without the rest "
            "[reader, txn, seen, missing, writer]",
    "skip": "read across a committed value without reading it "
            "[reader, txn, topic, partition, previous, next, skipped offset]",
    "nonmonotonic": "a reader's offsets went backwards [reader, txn, topic, partition, "
                    "previous, read]",
    "lost": "written by a committed transaction, not in the final read "
            "[writer, topic, partition, value]",
    "duplicate": "one value at two offsets [value, [(topic, partition, offset), ...]]",
    "inconsistent": "two values at one offset [topic, partition, offset, values]",
    "unexpected": "read, never written [value, [(topic, partition, offset), ...]]",
    "G0": "write cycle (ww edges; Kafka allows it) [cycle]",
    "G1c": "cyclic information flow (wr edges) [cycle]",
}


@dataclass(frozen=True)
class Txn:
    id: str
    process: str
    type: str                     # ok | fail | info
    writes: tuple = ()            # ((topic, partition, value), ...) in send order
    reads: tuple = ()             # ((topic, partition, offset, value), ...) in read order
    continues: bool = False       # its reads carry on from the process's previous txn
    start_ns: int = 0
    end_ns: int = 0

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"txn {self.id}: type {self.type!r} is none of {TYPES}")


@dataclass
class TxnVerdict:
    txns: int = 0                 # transactions that wrote (read-process-write)
    committed: int = 0            # of them: outcome ok
    aborted: int = 0              # outcome fail
    unknown: int = 0              # outcome info
    read_only: int = 0            # read-only transactions (a committed reader's polls)
    info_committed: int = 0       # info, seen committed
    info_aborted: int = 0         # info, in the log and never read committed
    writes: int = 0
    reads: int = 0
    ww_deps: bool = False
    aborted_read: list = field(default_factory=list)
    precommitted_read: list = field(default_factory=list)
    intermediate_read: list = field(default_factory=list)
    torn: list = field(default_factory=list)
    skip: list = field(default_factory=list)
    nonmonotonic: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    duplicate: list = field(default_factory=list)
    inconsistent: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    G0: list = field(default_factory=list)
    G1c: list = field(default_factory=list)

    @property
    def anomalies(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in ANOMALIES}

    @property
    def valid(self) -> bool:
        counts = self.anomalies
        if not self.ww_deps:
            counts.pop("G0")          # Kafka's transactions interleave: allowed
        return not any(counts.values())

    def summary(self) -> dict:
        return {"valid": self.valid, "txns": self.txns, "committed": self.committed,
                "aborted": self.aborted, "unknown": self.unknown, "read_only": self.read_only,
                "info_committed": self.info_committed, "info_aborted": self.info_aborted,
                "writes": self.writes, "reads": self.reads, "ww_deps": self.ww_deps,
                **self.anomalies,
                "examples": {k: [_show(x) for x in getattr(self, k)[:EXAMPLES_MAX]]
                             for k in ANOMALIES if getattr(self, k)}}


def _show(item):
    if isinstance(item, (list, tuple)):
        return [_show(x) for x in item]
    return item.decode(errors="replace") if isinstance(item, bytes) else item


class _Index:
    """Who wrote what, where each value is, each transaction's fate."""

    def __init__(self, txns, committed, uncommitted):
        self.by_id: dict[str, Txn] = {}
        self.writer: dict[bytes, tuple[str, int]] = {}     # value -> (txn id, write index)
        for t in txns:
            if t.id in self.by_id:
                raise ValueError(f"two transactions with the id {t.id!r}")
            self.by_id[t.id] = t
            for i, (_, _, value) in enumerate(t.writes):
                if value in self.writer:
                    raise ValueError(f"value {value!r} written twice (txns "
                                     f"{self.writer[value][0]} and {t.id}): the checker "
                                     f"needs unique values")
                self.writer[value] = (t.id, i)
        self.visible: dict[bytes, set] = {}    # value -> {(tp, offset)} committed read-back
        self.logged: dict[bytes, set] = {}     # value -> {(tp, offset)} uncommitted
        for view, out in ((committed, self.visible), (uncommitted, self.logged)):
            for tp, rows in view.items():
                for offset, value in rows:
                    out.setdefault(value, set()).add((tp, offset))
        # The committed log per partition: sorted offsets and offset -> value.
        self.log_offsets = {tp: sorted({o for o, _ in rows}) for tp, rows in committed.items()}
        self.log_value = {tp: dict(rows) for tp, rows in committed.items()}
        self.read_committed: set[bytes] = set(self.visible)
        for t in txns:
            self.read_committed.update(r[3] for r in t.reads)
        self.fate: dict[str, str] = {}
        for t in txns:
            values = [w[2] for w in t.writes]
            if t.type == "ok":
                fate = "committed"
            elif t.type == "fail":
                fate = "aborted"
            elif any(v in self.read_committed for v in values):
                fate = "committed"
            elif any(v in self.logged for v in values):
                fate = "aborted"
            else:
                fate = "unknown"
            self.fate[t.id] = fate

    def writer_of(self, value) -> str | None:
        w = self.writer.get(value)
        return None if w is None else w[0]


def check_txns(txns: list[Txn], committed: dict, uncommitted: dict, *,
               ww_deps: bool = False) -> TxnVerdict:
    """The verdict of ``txns`` (any order; within a process, the order they ran) and the
    final read-backs (see the module doc)."""
    v = TxnVerdict(ww_deps=ww_deps)
    ix = _Index(txns, committed, uncommitted)
    for t in txns:
        v.writes += len(t.writes)
        v.reads += len(t.reads)
        if not t.writes:
            v.read_only += 1
            continue
        v.txns += 1
        v.committed += t.type == "ok"
        v.aborted += t.type == "fail"
        v.unknown += t.type == "info"
        if t.type == "info":
            v.info_committed += ix.fate[t.id] == "committed"
            v.info_aborted += ix.fate[t.id] == "aborted"
    _placement(v, ix, txns, committed, uncommitted)
    _aborted_reads(v, ix, txns, committed)
    _final_writes(v, ix, txns, committed)
    _read_continuity(v, ix, txns)
    ww, wr = _edges(ix, txns, committed)
    v.G0 = find_cycles(ww, {}, need=None)
    v.G1c = find_cycles(wr, ww if ww_deps else {}, need="wr")
    return v


def _placement(v, ix, txns, committed, uncommitted) -> None:
    """duplicate, inconsistent, unexpected: over every observation of a value."""
    at: dict[tuple, set] = {}
    where: dict[bytes, set] = {}

    def saw(tp, offset, value):
        at.setdefault((tp, offset), set()).add(value)
        where.setdefault(value, set()).add((tp, offset))
    for view in (committed, uncommitted):
        for tp, rows in view.items():
            for offset, value in rows:
                saw(tp, offset, value)
    for t in txns:
        for topic, partition, offset, value in t.reads:
            saw((topic, partition), offset, value)
    for value, places in where.items():
        if len(places) > 1:
            v.duplicate.append((value, sorted((tp[0], tp[1], o) for tp, o in places)))
        if value not in ix.writer:
            v.unexpected.append((value, sorted((tp[0], tp[1], o) for tp, o in places)))
    for (tp, offset), values in sorted(at.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(values) > 1:
            v.inconsistent.append((tp[0], tp[1], offset, sorted(values)))


def _aborted_reads(v, ix, txns, committed) -> None:
    for t in txns:
        for topic, partition, offset, value in t.reads:
            writer = ix.writer_of(value)
            if writer is None:
                continue
            if writer == t.id:
                v.precommitted_read.append((t.id, topic, partition, offset, value))
            elif ix.fate[writer] == "aborted":
                v.aborted_read.append((t.process, t.id, topic, partition, offset, value,
                                       writer))
    for tp, rows in sorted(committed.items()):
        for offset, value in rows:
            writer = ix.writer_of(value)
            if writer is not None and ix.fate[writer] == "aborted":
                v.aborted_read.append((FINAL, FINAL, tp[0], tp[1], offset, value, writer))


def _final_writes(v, ix, txns, committed) -> None:
    """lost and torn (a): committed transactions against the final committed read-back.
    A partition the read-back has no entry for is not judged."""
    for t in txns:
        if ix.fate[t.id] != "committed":
            continue
        seen, missing = [], []
        for topic, partition, value in t.writes:
            if (topic, partition) not in committed:
                continue
            (seen if value in ix.visible else missing).append((topic, partition, value))
        for topic, partition, value in missing:
            v.lost.append((t.id, topic, partition, value))
        if seen and missing:
            v.torn.append((FINAL, FINAL, seen, missing, t.id))


def _read_continuity(v, ix, txns) -> None:
    """nonmonotonic, skip, intermediate_read and torn (b), per reader and partition over
    its continuous reads (one transaction, or a ``continues`` chain)."""
    by_process: dict[str, list[Txn]] = {}
    for t in txns:
        by_process.setdefault(t.process, []).append(t)
    for process, chain in by_process.items():
        last: dict[tuple, int] = {}        # tp -> last offset read in this stretch
        current: dict[tuple, tuple] = {}   # tp -> the open run
        seen_of: dict[str, set] = {}       # writer -> values this reader read (stretch)
        stretch: list = []

        def close_stretch():
            if stretch:
                _judge_stretch(v, ix, process, stretch, seen_of)
            stretch.clear()
            seen_of.clear()
            last.clear()
            current.clear()

        for t in chain:
            if not t.continues:
                close_stretch()
            for topic, partition, offset, value in t.reads:
                tp = (topic, partition)
                writer = ix.writer_of(value)
                if writer is not None:
                    seen_of.setdefault(writer, set()).add(value)
                previous = last.get(tp)
                if previous is not None and offset <= previous:
                    v.nonmonotonic.append((process, t.id, topic, partition, previous, offset))
                    current.pop(tp, None)
                run = current.get(tp)
                if run is None:
                    run = (tp, [], [], [])
                    current[tp] = run
                    stretch.append(run)
                run[1].append(offset)
                run[2].append(writer)
                run[3].append(t.id)
                last[tp] = offset
        close_stretch()


def _judge_stretch(v, ix, process, stretch, seen_of) -> None:
    for tp, offsets, writers, txn_ids in stretch:
        log = ix.log_offsets.get(tp)
        if not log or len(offsets) < 2:
            continue
        read = set(offsets)
        for k, (a, b) in enumerate(zip(offsets, offsets[1:])):
            txn_id = txn_ids[k + 1]         # the read after the gap
            i = bisect_right(log, a)
            while i < len(log) and log[i] < b:
                o = log[i]
                i += 1
                if o in read:
                    continue
                value = ix.log_value[tp][o]
                writer = ix.writer_of(value)
                later_same = [x for x, w in zip(offsets, writers)
                              if x > o and writer is not None and w == writer]
                if later_same:
                    v.intermediate_read.append((process, txn_id, tp[0], tp[1], o,
                                                later_same[0], writer))
                elif writer is not None and seen_of.get(writer):
                    v.torn.append((process, txn_id, sorted(_where(ix, seen_of[writer])),
                                   [(tp[0], tp[1], value)], writer))
                else:
                    v.skip.append((process, txn_id, tp[0], tp[1], a, b, o))


def _where(ix, values) -> list:
    out = []
    for value in values:
        txn, i = ix.writer[value]
        topic, partition, _ = ix.by_id[txn].writes[i]
        out.append((topic, partition, value))
    return out


def _edges(ix, txns, committed) -> tuple[dict, dict]:
    """ww (consecutive committed values of two transactions in a partition's log) and wr
    (a committed transaction read another's value), over committed transactions."""
    ww: dict[str, set] = {}
    wr: dict[str, set] = {}
    for tp, rows in committed.items():
        previous = None
        for _, value in sorted(rows, key=lambda r: r[0]):
            writer = ix.writer_of(value)
            if writer is None or ix.fate[writer] != "committed":
                continue
            if previous is not None and previous != writer:
                ww.setdefault(previous, set()).add(writer)
            previous = writer
    for t in txns:
        if ix.fate[t.id] != "committed":
            continue
        for read in t.reads:
            writer = ix.writer_of(read[3])
            if writer is not None and writer != t.id and ix.fate[writer] == "committed":
                wr.setdefault(writer, set()).add(t.id)
    return ww, wr


def strongly_connected(graph: dict[str, set]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` (node -> successors),
    iteratively (no recursion limit); only the components of two or more nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    nodes = set(graph)
    for succ in graph.values():
        nodes |= succ
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def find_cycles(primary: dict[str, set], other: dict[str, set],
                need: str | None) -> list[list]:
    """One cycle per strongly connected component of ``primary`` + ``other`` edges, as
    [t1, kind, t2, kind, ..., t1] (kind: "wr" for ``primary`` edges when ``need`` is
    "wr", else "ww"). With ``need`` the cycle holds at least one ``primary`` edge."""
    kind_p = need or "ww"
    graph: dict[str, set] = {}
    for edges in (primary, other):
        for a, succ in edges.items():
            graph.setdefault(a, set()).update(succ)
    out = []
    for component in strongly_connected(graph):
        members = set(component)

        def kind(a, b):
            return kind_p if b in primary.get(a, ()) else "ww"
        starts = [(a, b) for a in component for b in sorted(primary.get(a, ()))
                  if b in members] if need else [(component[0], None)]
        for a, b in starts:
            path = _path(graph, members, b, a) if b is not None else \
                _path(graph, members, None, a)
            if path is None:
                continue
            cycle = [a] + (path if b is not None else path[1:])
            steps: list = [cycle[0]]
            for x, y in zip(cycle, cycle[1:]):
                steps += [kind(x, y), y]
            assert steps[0] == steps[-1], steps
            out.append(steps)
            break
    return out


def _path(graph, members, start, goal):
    """Shortest path start -> goal inside ``members`` (start None: a cycle through goal,
    returned as [goal, ..., goal])."""
    if start is None:
        first = [(goal, n) for n in sorted(graph.get(goal, ())) if n in members]
        queue = deque((n, [goal, n]) for _, n in first)
    else:
        queue = deque([(start, [start])])
    seen = set()
    while queue:
        node, path = queue.popleft()
        if node == goal:
            return path
        if node in seen:
            continue
        seen.add(node)
        for n in sorted(graph.get(node, ())):
            if n in members and n not in seen:
                queue.append((n, path + [n]))
    return None


def explain(name: str, example) -> str:
    """One example of anomaly ``name`` as a sentence, for a printed verdict."""
    e = _show(example)
    if name == "aborted_read":
        reader, txn, topic, partition, offset, value, writer = e
        return (f"{reader} ({txn}) read {value} at {topic}-{partition}@{offset}, written "
                f"by aborted {writer}")
    if name == "lost":
        writer, topic, partition, value = e
        return f"{value} ({writer}, committed) to {topic}-{partition}: not in the log"
    if name == "torn":
        reader, txn, seen, missing, writer = e
        return (f"{reader} ({txn}) saw {len(seen)} of {writer}'s writes, not "
                f"{', '.join(f'{m[0]}-{m[1]}:{m[2]}' for m in missing[:3])}")
    if name in ("G0", "G1c"):
        return " ".join(str(x) if i % 2 == 0 else f"-{x}->" for i, x in enumerate(e))
    return f"{name}: {e}"
