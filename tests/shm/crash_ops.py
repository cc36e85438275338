"""Shared by the truncation / retention / roll crash tests and their child processes.

The child drives a real Log and keeps a journal (one line per step, fsync'd) of what it
is about to do (``begin <op> <args>``) and what it has done (``end <op> <result>``).
Every record's value is ``<offset>:<generation>``; the generation changes with every
truncation, so a batch that a truncation removed cannot pass for the data written at
its offsets afterwards.

The parent replays the journal into a ``Model`` (the log as a list of batches) and
checks the recovered log: it must equal the model before the operation the kill
interrupted, or the model after it. A SIGKILL keeps the page cache, so appended data is
never lost; the operations are atomic, so no half-done state is acceptable. That covers:
contiguous offsets, no corrupt batch, flushed batches present unless truncated, the log
start never behind a completed retention, nothing resurrected by a completed truncation.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from shm import batch as batch_codec
from shm.config import LogConfig
from shm.log import Log

TOPIC = "ops"
PARTITION = 0
BROKER_ID = 5
# Small segments (truncations and retention span several), retention by size.
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=512, retention_bytes=8192,
                   retention_ms=-1, flush_interval_messages=300)


def open_log(data_dir: str, cluster_id: str) -> Log:
    return Log.open(data_dir, TOPIC, PARTITION, CONFIG, cluster_id=cluster_id,
                    broker_id=BROKER_ID)


class Journal:
    """Append-only, one fsync per line: a line is on disk before the step it names.
    (``fsync=False`` where the child only ever dies by os._exit / SIGKILL: the page
    cache outlives the process, so the line is there either way.)"""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fsync = fsync

    def write(self, *words: object) -> None:
        os.write(self._fd, (" ".join(map(str, words)) + "\n").encode())
        if self._fsync:
            os.fsync(self._fd)


class Driver:
    """Runs journaled operations on a Log (in the child)."""

    def __init__(self, log: Log, journal: Journal, generation: int) -> None:
        self.log = log
        self.journal = journal
        self.generation = generation
        journal.write("open", log.log_start_offset, log.log_end_offset)

    def append(self, count: int) -> None:
        leo = self.log.log_end_offset
        values = [f"{leo + i}:{self.generation}".encode() for i in range(count)]
        self.journal.write("begin", "append", count, self.generation)
        self.log.append_as_leader(batch_codec.build_batch(values, timestamps_ms=1), leader_epoch=1)
        self.journal.write("end", "append")

    def flush(self) -> None:
        self.journal.write("begin", "flush")
        self.log.flush()
        self.journal.write("end", "flush", self.log.recovery_point)

    def roll(self) -> None:
        self.journal.write("begin", "roll")
        self.log.roll()
        self.journal.write("end", "roll")

    def truncate_to(self, offset: int) -> None:
        self.journal.write("begin", "truncate_to", offset)
        self.log.truncate_to(offset)
        self.generation += 1
        self.journal.write("end", "truncate_to")

    def truncate_fully(self, offset: int) -> None:
        self.journal.write("begin", "truncate_fully", offset)
        self.log.truncate_fully_and_start_at(offset)
        self.generation += 1
        self.journal.write("end", "truncate_fully")

    def retention(self) -> None:
        self.log.update_high_watermark(self.log.log_end_offset)
        self.journal.write("begin", "retention", self.log.high_watermark)
        self.log.delete_old_segments()
        self.journal.write("end", "retention", self.log.log_start_offset)


def random_step(driver: Driver, rng: random.Random) -> None:
    log = driver.log
    choice = rng.random()
    if choice < 0.55 or log.log_end_offset == log.log_start_offset:
        driver.append(rng.randint(1, 20))
    elif choice < 0.63:
        driver.flush()
    elif choice < 0.71:
        driver.roll()
    elif choice < 0.81:
        driver.truncate_to(rng.randint(max(0, log.log_start_offset - 3), log.log_end_offset))
    elif choice < 0.86:
        start, leo = log.log_start_offset, log.log_end_offset
        driver.truncate_fully(rng.choice([leo + rng.randint(0, 50),
                                          rng.randint(start, leo),
                                          max(0, start - rng.randint(1, 50))]))
    else:
        driver.retention()


def scripted(driver: Driver, arm) -> None:
    """Every crash point at least once: a multi-segment truncate_to, an explicit roll,
    retention of several segments, truncate_fully above the LEO, at an existing segment's
    base and below the log start, and a truncation inside the active segment.
    ``arm()`` is called after the set-up appends (the crash hook goes live there)."""
    log = driver.log
    while len(log.segments) < 6:
        driver.append(12)
    driver.flush()
    arm()
    driver.append(5)
    driver.roll()
    driver.append(5)
    driver.truncate_to((log.segments[1].base_offset + log.segments[1].next_offset) // 2)
    for _ in range(40):
        driver.append(12)
    driver.retention()
    driver.truncate_fully(log.log_end_offset + 7)
    for _ in range(30):
        driver.append(12)
    driver.truncate_fully(log.segments[1].base_offset)
    for _ in range(30):
        driver.append(12)
    driver.truncate_fully(log.log_start_offset - 5)
    for _ in range(5):
        driver.append(12)
    driver.truncate_to(log.log_end_offset - 3)


# ==================================================================== parent side

@dataclass
class Model:
    start: int = 0
    batches: list[tuple[int, int, int]] = field(default_factory=list)  # base, count, gen

    @property
    def leo(self) -> int:
        return self.batches[-1][0] + self.batches[-1][1] if self.batches else self.start

    def copy(self) -> "Model":
        return Model(self.start, list(self.batches))

    def apply(self, op: str, args: list[int]) -> "Model":
        m = self.copy()
        if op == "append":
            m.batches.append((m.leo, args[0], args[1]))
        elif op == "truncate_to":
            offset = args[0]
            if offset < m.start:
                m.start, m.batches = offset, []
            else:
                m.batches = [b for b in m.batches if b[0] + b[1] <= offset]
        elif op == "truncate_fully":
            m.start, m.batches = args[0], []
        elif op == "retention":
            m.start = args[0]
            m.batches = [b for b in m.batches if b[0] >= m.start]
        return m

    def boundaries(self) -> list[int]:
        return [b[0] for b in self.batches] + [self.leo]


def read_journal(path: str) -> list[list[str]]:
    with open(path, "rb") as f:
        return [line.split() for line in f.read().decode().split("\n")[:-1]]


def replay(model: Model, lines: list[list[str]]) -> tuple[Model, list[Model], str]:
    """(model after the last completed op, acceptable recovered states, what was
    interrupted). ``model`` is the state the child opened (checked against ``open``)."""
    pending = None
    for words in lines:
        if words[0] == "open":
            assert [int(words[1]), int(words[2])] == [model.start, model.leo], \
                f"the child opened {words[1:]}, the parent had {model.start, model.leo}"
        elif words[0] == "begin":
            pending = (words[1], [int(w) for w in words[2:]])
        elif words[0] == "end":
            op, args = pending
            assert words[1] == op
            if op == "retention":
                args = [int(words[2])]
            model = model.apply(op, args)
            pending = None
    if pending is None:
        return model, [model], "nothing"
    op, args = pending
    if op == "retention":  # the new start is only known at the end
        hw = args[0]
        afters = [model.apply(op, [s]) for s in model.boundaries() if s <= hw]
    else:
        afters = [model.apply(op, args)]
    return model, [model] + afters, f"{op} {args}"


def recovered_state(log: Log) -> Model:
    """Read the whole log back (every CRC checked, every value at its own offset)."""
    model = Model(log.log_start_offset)
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        view = log.read(offset, 1 << 20)
        assert len(view), f"empty read at {offset} below the LEO {log.log_end_offset}"
        for position, header in batch_codec.iter_batches(view):
            batch = batch_codec.parse_batch(view, position)
            assert batch.base_offset == offset, f"gap or overlap at offset {offset}"
            generations = set()
            for i, value in enumerate(batch.values.to_pylist()):
                at, generation = value.decode().split(":")
                assert int(at) == offset + i, f"offset {offset + i} holds {value!r}"
                generations.add(int(generation))
            assert len(generations) == 1, generations
            model.batches.append((offset, batch.record_count, generations.pop()))
            offset += batch.record_count
    assert offset == log.log_end_offset
    return model


def check_recovery(log: Log, candidates: list[Model], interrupted: str, context: str) -> Model:
    log.check()
    assert log.recovery_point <= log.log_end_offset
    got = recovered_state(log)
    if got not in candidates:
        want = candidates[0]
        raise AssertionError(
            f"{context}: interrupted {interrupted}; recovered start {got.start} LEO {got.leo} "
            f"({len(got.batches)} batches) is none of the acceptable states, e.g. before: "
            f"start {want.start} LEO {want.leo} ({len(want.batches)} batches); after: "
            f"{[(c.start, c.leo, len(c.batches)) for c in candidates[1:]]}; first difference "
            f"{next((a, b) for a, b in zip(got.batches + [None], want.batches + [None]) if a != b)}"
            f"; truncations {log.recovery.truncations}")
    return got
