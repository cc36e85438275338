"""A simulated correct Kafka with transactions, for the transactional checker's tests
(a test double inside the unit tests of a pure core): partitions as lists of entries,
transactions whose data is appended as they send and becomes visible at read_committed
only when their marker lands, consumers that stop at the LSO and skip aborted data and
markers, and read-process-write processes that rewind their positions after an abort.

``run(actions)`` turns a list of small integer tuples (drawn by hypothesis) into a
history of ``Txn`` and the two final read-backs, all of which a correct checker must
find valid.

``run(actions, hang=True)`` is Kafka without KIP-890 instead: an abort may leave its last
write in flight, and the retry lands after the abort marker (its first attempt never
did). The partition leader takes it as the producer's new transaction; the process's
next transaction that writes to that partition adopts it (same producer id and epoch,
no verification), so its commit marker commits an aborted transaction's value; left
unadopted it holds the LSO for good (Kafka's hanging transaction)."""
from __future__ import annotations

from dataclasses import dataclass, field

from bench.chaos.txn_checker import Txn

TOPIC = "out"
PARTITIONS = 3
TPS = [(TOPIC, p) for p in range(PARTITIONS)]
WRITERS = ("p0", "p1", "p2")
READER = "c0"


@dataclass
class Open:
    id: str
    writes: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    continues: bool = False
    first_read: dict = field(default_factory=dict)      # tp -> first offset read


class Sim:
    def __init__(self, serial: bool = False, hang: bool = False) -> None:
        self.hang = hang
        self.pending: dict[str, list] = {}        # process -> late entries, no owner yet
        self.hung: list = []                       # (value, tp, offset) of each late write
        self.log: dict = {tp: [] for tp in TPS}   # [value or None (marker), txn id]
        self.state: dict[str, str] = {}           # txn id -> open | committed | aborted
        self.txns: list[Txn] = []
        self.open: dict[str, Open] = {}
        self.pos: dict[tuple, int] = {}
        self.count: dict[str, int] = {}
        self.continues: dict[str, bool] = {}
        self.serial = serial

    # -- the log
    def lso(self, tp) -> int:
        for offset, entry in enumerate(self.log[tp]):
            if entry[0] is not None and self.state.get(entry[1], "open") == "open":
                return offset
        return len(self.log[tp])

    def poll(self, process, tp, max_values) -> list:
        """read_committed from the process's position up to the LSO."""
        out = []
        pos = self.pos.get((process, tp), 0)
        stop = self.lso(tp)
        while pos < stop and len(out) < max_values:
            value, txn = self.log[tp][pos][:2]
            if value is not None and self.state.get(txn) == "committed":
                out.append((tp[0], tp[1], pos, value))
            pos += 1
        self.pos[(process, tp)] = pos
        return out

    # -- transactions
    def begin(self, process) -> Open:
        if process in self.open:
            return self.open[process]
        if self.serial:
            for other in list(self.open):
                self.end(other, commit=True, lost_answer=False)
        n = self.count.get(process, 0)
        self.count[process] = n + 1
        txn = Open(f"{process}-{n}", continues=self.continues.get(process, False))
        self.open[process] = txn
        self.state[txn.id] = "open"
        return txn

    def read(self, process, tp, max_values) -> None:
        txn = self.begin(process)
        for r in self.poll(process, tp, max_values):
            txn.first_read.setdefault(tp, r[2])
            txn.reads.append(r)

    def write(self, process, tp) -> None:
        txn = self.begin(process)
        for entry in self.pending.get(process, []):
            if entry[2] == tp and entry[1].startswith("late-"):
                entry[1] = txn.id               # adopted: its marker decides it now
        value = f"{txn.id}-{len(txn.writes)}".encode()
        self.log[tp].append([value, txn.id])
        txn.writes.append((tp[0], tp[1], value))

    def end(self, process, commit: bool, lost_answer: bool) -> None:
        """Commit or abort; ``lost_answer``: the outcome is ``info`` (the client never
        heard) while ``commit`` says what the coordinator actually did."""
        txn = self.open.pop(process, None)
        if txn is None:
            return
        self.state[txn.id] = "committed" if commit else "aborted"
        for tp in sorted({(w[0], w[1]) for w in txn.writes}):
            self.log[tp].append([None, txn.id])                    # the marker
        if self.hang and not commit and txn.writes:
            topic, partition, value = txn.writes[-1]
            tp = (topic, partition)
            for entry in self.log[tp]:
                if entry[0] == value:           # its first attempt never landed
                    entry[0] = None
            late = [value, f"late-{process}", tp]
            self.log[tp].append(late)
            self.pending.setdefault(process, []).append(late)
            self.hung.append((value, tp, len(self.log[tp]) - 1))
        outcome = "info" if lost_answer else ("ok" if commit else "fail")
        self.txns.append(Txn(txn.id, process, outcome, tuple(txn.writes), tuple(txn.reads),
                             continues=txn.continues))
        if not commit:                       # read-process-write: back to the last commit
            for tp, offset in txn.first_read.items():
                self.pos[(process, tp)] = offset
        self.continues[process] = commit and not lost_answer

    def reader_poll(self, max_values) -> None:
        n = self.count.get(READER, 0)
        self.count[READER] = n + 1
        reads = []
        for tp in TPS:
            reads += self.poll(READER, tp, max_values)
        self.txns.append(Txn(f"{READER}-{n}", READER, "ok", (), tuple(reads),
                             continues=n > 0))

    def finish(self) -> tuple[list[Txn], dict, dict]:
        hang, self.hang = self.hang, False      # the last aborts leave nothing in flight
        for process in list(self.open):
            self.end(process, commit=False, lost_answer=False)
        self.hang = hang
        # A read_committed read-back stops at the LSO (an unadopted late write holds it).
        committed = {tp: [(o, e[0]) for o, e in enumerate(rows)
                          if e[0] is not None and o < self.lso(tp)
                          and self.state.get(e[1]) == "committed"]
                     for tp, rows in self.log.items()}
        uncommitted = {tp: [(o, e[0]) for o, e in enumerate(rows) if e[0] is not None]
                       for tp, rows in self.log.items()}
        return self.txns, committed, uncommitted


def run(actions, serial: bool = False, hang: bool = False, sim: Sim | None = None
        ) -> tuple[list[Txn], dict, dict]:
    """actions: (who, kind, partition, n) small integers. who indexes WRITERS, and one
    past them is the reader; kind 0 read, 1 write, 2 commit, 3 abort; n: values per
    read, and for a commit n % 3 == 0 loses the answer (info; n % 2 picks what the
    coordinator did)."""
    sim = sim if sim is not None else Sim(serial=serial, hang=hang)
    for who, kind, partition, n in actions:
        if who >= len(WRITERS):
            sim.reader_poll(1 + n % 4)
            continue
        process = WRITERS[who]
        tp = TPS[partition % PARTITIONS]
        if kind == 0:
            sim.read(process, tp, 1 + n % 4)
        elif kind == 1:
            sim.write(process, tp)
        elif kind == 2:
            lost = n % 3 == 0
            sim.end(process, commit=not lost or n % 2 == 0, lost_answer=lost)
        else:
            sim.end(process, commit=False, lost_answer=False)
    sim.reader_poll(1 << 30)        # a last poll of everything
    return sim.finish()
