"""Replica-state board: seqlock reads across processes, limits, lifecycle."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from shm.board import (CRC_START_BYTES, HEADER_DTYPE, REPLICAS_MAX, ROW_DTYPE, TOPIC_BYTES_MAX,
                       BoardError, BoardNotFoundError, BoardReader, BoardReadError,
                       ReplicaState, ReplicaStateBoard, Role, _decode, _encode, board_name)
from shm.names import SharedMemoryError, cleanup_cluster, exists

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = 8

# Every field of row i at step n is a function of (n, i); a reader that finds a row
# where they disagree has seen a torn row.
FIELDS_OF = """
def fields_of(n, i):
    return dict(
        role=1 + n % 3,
        leader_epoch=n,
        leader_id=n % 5,
        log_end_offset=2 * n + i,
        high_watermark=n + i,
        log_start_offset=n // 2,
        last_stable_offset=n + i - n % 2,
        isr=tuple(range(n % 4 + 1)),
        last_caught_up_ms={b: n * 1000 + b for b in range(1, n % 3 + 2)},
        follower_leo={b: 2 * n + b for b in range(1, n % 3 + 2)},
    )
"""
exec(FIELDS_OF)

WRITER = FIELDS_OF + """
import signal, sys, time
from shm.board import ReplicaStateBoard
cluster_id, rows, lifetime_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
board = ReplicaStateBoard.create(cluster_id, 0, capacity=rows)
for i in range(rows):
    board.publish("topic-" + str(i), i, **fields_of(0, i))
print("ready", flush=True)
n = 0
deadline = time.monotonic() + lifetime_s
while not stop and time.monotonic() < deadline:
    n += 1
    for i in range(rows):
        board.publish("topic-" + str(i), i, **fields_of(n, i))
board.close(unlink=True)
print("steps", n, flush=True)
"""


def check_row(state: ReplicaState) -> int:
    """Assert that ``state`` is whole (all fields from one step); return the step."""
    n = state.leader_epoch
    i = state.partition
    want = ReplicaState(f"topic-{i}", i, **fields_of(n, i))
    assert state == want, f"torn row: {state} is not {want}"
    return n


def _start(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise AssertionError(f"child printed nothing in {timeout_s}s")
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"child exited: {proc.wait(5)} {proc.stderr.read()}")
    return line.strip()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()


def test_reader_in_another_process_never_sees_a_torn_row(cluster_id):
    writer = _start(WRITER, cluster_id, str(ROWS), "60")
    try:
        assert _read_line(writer, 30) == "ready"
        reader = BoardReader.open(cluster_id, 0)
        snapshots, steps_seen = 0, set()
        deadline = time.monotonic() + 40
        try:
            # Keep going until the reader has provably overlapped writes (retries > 0).
            while not (snapshots >= 3000 and len(steps_seen) >= 200 and reader.retries > 0):
                assert time.monotonic() < deadline, (
                    f"{snapshots} snapshots, {len(steps_seen)} steps, {reader.retries} retries")
                rows = reader.snapshot()
                assert [s.partition for s in rows] == list(range(ROWS))
                for state in rows:
                    steps_seen.add(check_row(state))
                snapshots += 1
        finally:
            reader.close()
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(10) == 0, writer.stderr.read()
        assert _read_line(writer, 5).startswith("steps")
        assert not exists(board_name(cluster_id, 0))
    finally:
        _stop(writer)
        cleanup_cluster(cluster_id)


def test_the_torn_row_check_catches_a_half_written_row():
    a, b = np.zeros(1, ROW_DTYPE), np.zeros(1, ROW_DTYPE)
    # Steps 12 and 24 have lists of the same lengths, so the torn row passes the
    # board's own validation; only the cross-field check can tell.
    _encode(ReplicaState("topic-3", 3, **fields_of(12, 3)), a)
    _encode(ReplicaState("topic-3", 3, **fields_of(24, 3)), b)
    half = ROW_DTYPE.fields["isr"][1]  # offsets and epoch from step 24, lists from step 12
    torn = np.concatenate([b.view(np.uint8)[:half], a.view(np.uint8)[half:]])
    with pytest.raises(AssertionError, match="torn row"):
        check_row(_decode(torn.view(ROW_DTYPE)[0]))


READER = """
import json, sys
from shm.board import BoardReader
with BoardReader.open(sys.argv[1], int(sys.argv[2])) as reader:
    s = reader.get("orders", 2)
    print(json.dumps([s.role.name, s.leader_epoch, s.log_end_offset, s.high_watermark,
                      list(s.isr), [list(p) for p in s.last_caught_up_ms],
                      reader.writer_pid, len(reader.snapshot())]))
"""


def test_another_process_opens_the_board_by_cluster_and_broker_id(cluster_id):
    with ReplicaStateBoard.create(cluster_id, 3, capacity=4) as board:
        board.publish("orders", 1, role=Role.FOLLOWER, log_end_offset=5, high_watermark=5)
        board.publish("orders", 2, role=Role.LEADER, leader_epoch=7, leader_id=3,
                      log_end_offset=120, high_watermark=100, isr=(3, 1),
                      last_caught_up_ms={1: 1_700_000_000_000})
        reader = _start(READER, cluster_id, "3")
        try:
            line = _read_line(reader, 30)
            assert reader.wait(10) == 0
        finally:
            _stop(reader)
    assert json.loads(line) == ["LEADER", 7, 120, 100, [3, 1], [[1, 1_700_000_000_000]],
                                os.getpid(), 2]
    assert not exists(board_name(cluster_id, 3))


def test_opening_a_missing_board_says_which_broker(cluster_id):
    with pytest.raises(BoardNotFoundError, match="broker 9 of cluster"):
        BoardReader.open(cluster_id, 9)


def test_publish_merges_fields_and_remove_frees_the_slot_for_reuse(cluster_id):
    with ReplicaStateBoard.create(cluster_id, 0, capacity=2) as board, \
            BoardReader.open(cluster_id, 0) as reader:
        board.publish("a", 0, role=Role.LEADER, leader_epoch=1, log_end_offset=10)
        board.publish("a", 0, high_watermark=4)
        got = reader.get("a", 0)
        assert (got.role, got.leader_epoch, got.log_end_offset, got.high_watermark) == \
            (Role.LEADER, 1, 10, 4)
        board.publish("b", 0)
        with pytest.raises(BoardError, match="full"):
            board.publish("c", 0)
        generation = reader.generation
        assert board.remove("a", 0)
        assert reader.generation == generation + 1
        assert reader.get("a", 0) is None
        board.publish("c", 0, log_end_offset=3)   # takes a's old slot
        assert reader.get("c", 0).log_end_offset == 3
        assert [s.topic for s in reader.snapshot()] == ["b", "c"]


def test_a_leaders_last_stable_offset_is_published_or_the_hw_stands_for_it(cluster_id):
    with ReplicaStateBoard.create(cluster_id, 0, capacity=2) as board, \
            BoardReader.open(cluster_id, 0) as reader:
        board.publish("a", 0, log_end_offset=10, high_watermark=8)
        got = reader.get("a", 0)
        assert got.last_stable_offset is None and got.stable_offset == 8
        board.publish("a", 0, last_stable_offset=5)
        got = reader.get("a", 0)
        assert (got.last_stable_offset, got.stable_offset, got.high_watermark) == (5, 5, 8)
        with pytest.raises(ValueError, match="last_stable_offset"):
            board.publish("a", 0, last_stable_offset=9)     # above the HW
        with pytest.raises(ValueError, match="last_stable_offset"):
            board.publish("a", 0, log_start_offset=6, last_stable_offset=5)
        assert reader.get("a", 0).last_stable_offset == 5   # nothing written
        board.publish("a", 0, high_watermark=3, log_start_offset=1)   # without it: dropped
        got = reader.get("a", 0)
        assert got.last_stable_offset is None and got.stable_offset == 3


def test_limits_are_enforced_before_anything_is_written(cluster_id):
    with ReplicaStateBoard.create(cluster_id, 0, capacity=4) as board, \
            BoardReader.open(cluster_id, 0) as reader:
        with pytest.raises(ValueError, match="high_watermark"):
            board.publish("t", 0, log_end_offset=5, high_watermark=6)
        with pytest.raises(ValueError, match="log_start_offset"):
            board.publish("t", 0, log_end_offset=5, high_watermark=2, log_start_offset=3)
        with pytest.raises(ValueError, match="isr"):
            board.publish("t", 0, isr=tuple(range(REPLICAS_MAX + 1)))
        with pytest.raises(ValueError, match="topic"):
            board.publish("x" * (TOPIC_BYTES_MAX + 1), 0)
        with pytest.raises(ValueError, match="topic"):
            board.publish("bad/topic", 0)
        with pytest.raises(ValueError, match="follower_leo"):
            board.publish("t", 0, last_caught_up_ms={1: 5}, follower_leo={2: 7})
        with pytest.raises(ValueError, match="last_stable_offset"):
            board.publish("t", 0, log_end_offset=5, high_watermark=3, last_stable_offset=4)
        assert reader.snapshot() == []
        board.publish("x" * TOPIC_BYTES_MAX, 0, isr=tuple(range(REPLICAS_MAX)))
        assert reader.get("x" * TOPIC_BYTES_MAX, 0).isr == tuple(range(REPLICAS_MAX))


def test_a_leader_row_holds_its_followers_log_end_offsets(cluster_id):
    """The leader's view of its followers travels in its own row: one seqlock read gives
    the leader's LEO, its HW and every follower's LEO as one cut."""
    with ReplicaStateBoard.create(cluster_id, 0, capacity=4) as board, \
            BoardReader.open(cluster_id, 0) as reader:
        board.publish("t", 0, role=1, log_end_offset=1005, high_watermark=1001,
                      last_caught_up_ms={1: 10, 2: 20}, follower_leo={1: 1005, 2: 1001})
        row = reader.get("t", 0)
        assert row.follower_log_end_offset(1) == 1005 and row.follower_log_end_offset(2) == 1001
        assert row.follower_log_end_offset(3) is None
        board.publish("t", 0, last_caught_up_ms={1: 11, 2: 20}, follower_leo={1: 1005})
        assert reader.get("t", 0).follower_leo == ((1, 1005),)  # 2's LEO is unknown now


def test_a_row_left_mid_write_is_an_error_not_a_value(cluster_id):
    with ReplicaStateBoard.create(cluster_id, 0, capacity=2) as board, \
            BoardReader.open(cluster_id, 0, read_attempts_max=100) as reader:
        board.publish("t", 0, log_end_offset=1)
        board._m.seq[0] += 1  # what a writer SIGKILLed inside _write leaves behind
        with pytest.raises(BoardReadError, match="stayed odd"):
            reader.get("t", 0)
        board._m.seq[0] += 1
        assert reader.get("t", 0).log_end_offset == 1


def test_a_corrupt_row_fails_its_checksum_and_is_never_returned(cluster_id):
    with ReplicaStateBoard.create(cluster_id, 0, capacity=2) as board, \
            BoardReader.open(cluster_id, 0, read_attempts_max=100) as reader:
        board.publish("t", 0, log_end_offset=1)
        board._m.raw[0, ROW_DTYPE.fields["log_end_offset"][1]] ^= 0x40
        with pytest.raises(BoardReadError, match="checksum"):
            reader.snapshot()


KILLED_WRITER = """
import sys, time
from shm.board import ReplicaStateBoard
board = ReplicaStateBoard.create(sys.argv[1], 0, capacity=2)
board.publish("t", 0, log_end_offset=1)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_restarted_broker_replaces_the_board_of_its_dead_predecessor(cluster_id):
    child = _start(KILLED_WRITER, cluster_id)
    try:
        assert _read_line(child, 30) == "ready"
        with pytest.raises(SharedMemoryError, match="exists"):
            ReplicaStateBoard.create(cluster_id, 0)  # its writer is alive
        child.kill()
        child.wait(10)
        with BoardReader.open(cluster_id, 0) as reader:
            assert not reader.writer_alive()
            assert reader.get("t", 0).log_end_offset == 1
        with ReplicaStateBoard.create(cluster_id, 0) as board, \
                BoardReader.open(cluster_id, 0) as reader:
            assert reader.writer_pid == os.getpid() and reader.snapshot() == []
            board.publish("t", 0)
    finally:
        _stop(child)
        cleanup_cluster(cluster_id)


def test_a_zombie_writer_counts_as_dead():
    """A SIGKILLed broker nobody reaped yet is a zombie: its board may be replaced."""
    import signal
    import subprocess
    import sys
    import time

    from shm.board import _pid_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert _pid_alive(child.pid)
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _pid_alive(child.pid):  # a zombie until we reap it below
            assert time.monotonic() < deadline, "a killed child still counts as alive"
            time.sleep(0.01)
        assert os.path.exists(f"/proc/{child.pid}"), "still a zombie: not reaped yet"
    finally:
        child.kill()
        child.wait()


def _encode_by_fields(state: ReplicaState) -> bytes:
    """The row as numpy's field assignments write it (the encoder before it packed the
    body with one struct): the reference for ``_encode``."""
    out = np.zeros(1, ROW_DTYPE)
    row = out[0]
    for name in ("partition", "leader_epoch", "leader_id", "log_end_offset",
                 "high_watermark", "log_start_offset"):
        row[name] = getattr(state, name)
    row["role"] = int(state.role)
    row["last_stable_offset"] = -1 if state.last_stable_offset is None else \
        state.last_stable_offset
    row["isr_count"] = len(state.isr)
    row["isr"][:len(state.isr)] = state.isr
    row["follower_count"] = len(state.last_caught_up_ms)
    leos = dict(state.follower_leo)
    for i, (b, ms) in enumerate(state.last_caught_up_ms):
        row["follower_ids"][i] = b
        row["last_caught_up_ms"][i] = ms
        row["follower_leo"][i] = leos.get(b, -1)
    row["topic"] = state.topic.encode("ascii")
    return out.tobytes()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_row_is_packed_as_its_fields_would_be_written_and_reads_back(data):
    ids = st.integers(0, 2**31 - 1)
    offsets = st.integers(0, 2**63 - 1)
    followers = data.draw(st.lists(ids, unique=True, max_size=REPLICAS_MAX))
    start, hw, leo = sorted(data.draw(st.lists(offsets, min_size=3, max_size=3)))
    state = ReplicaState(
        topic=data.draw(st.text("abcXYZ019._-", min_size=1, max_size=TOPIC_BYTES_MAX)
                        .filter(lambda t: t not in (".", ".."))),
        partition=data.draw(ids), role=data.draw(st.sampled_from(list(Role))),
        leader_epoch=data.draw(st.integers(-1, 2**31 - 1)),
        leader_id=data.draw(st.integers(-1, 2**31 - 1)),
        log_end_offset=leo, high_watermark=hw, log_start_offset=start,
        last_stable_offset=data.draw(st.one_of(st.none(), st.integers(start, hw))),
        isr=data.draw(st.lists(ids, unique=True, max_size=REPLICAS_MAX)),
        last_caught_up_ms={b: data.draw(offsets) for b in followers},
        follower_leo={b: data.draw(offsets) for b in followers
                      if data.draw(st.booleans())})
    out = np.zeros(1, ROW_DTYPE)
    out.view(np.uint8)[:] = 0xAB            # a used scratch row: every byte is written
    out[0]["seq"], out[0]["crc"] = 0, 0
    _encode(state, out)
    assert out.tobytes() == _encode_by_fields(state)
    assert _decode(out[0]) == state


def _publish_reference(old: ReplicaState | None, topic: str, partition: int,
                       fields: dict) -> ReplicaState:
    """What a publish makes of ``old`` and ``fields``, through the dataclass alone."""
    fields = dict(fields)
    if old is not None and old.last_stable_offset is not None and \
            "last_stable_offset" not in fields and \
            ("high_watermark" in fields or "log_start_offset" in fields):
        fields["last_stable_offset"] = None
    return ReplicaState(**{**(old.__dict__ if old is not None else
                              {"topic": topic, "partition": partition}), **fields})


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # a board per example
@given(st.data())
def test_publishing_only_moved_offsets_writes_what_a_whole_publish_writes(cluster_id, data):
    """A publish that moves only the offsets and the followers' times and LEOs rewrites
    those fields of the row it last wrote (``_moved``): the state, the row read back and
    the row's bytes are the same as building and encoding the whole state; one that
    breaks a rule is refused as the whole check refuses it, and changes nothing."""
    offsets = st.integers(0, 2**40)
    board = ReplicaStateBoard.create(cluster_id, 0, capacity=4)
    reader = None
    try:
        keys = [("moving", 0), ("moving", 1)]
        for _ in range(data.draw(st.integers(1, 25))):
            topic, partition = data.draw(st.sampled_from(keys))
            old = board.get(topic, partition)
            followers = data.draw(st.sampled_from([(), (2,), (2, 3), (1, 2, 3)]))
            if old is not None and data.draw(st.booleans()):
                followers = tuple(b for b, _ in old.last_caught_up_ms)   # the usual case
            start, hw, leo = sorted(data.draw(st.lists(offsets, min_size=3, max_size=3)))
            fields = dict(
                log_end_offset=leo, high_watermark=hw, log_start_offset=start,
                last_caught_up_ms={b: data.draw(offsets) for b in followers},
                follower_leo={b: data.draw(offsets) for b in followers
                              if data.draw(st.booleans())})
            if data.draw(st.booleans()):
                fields["last_stable_offset"] = data.draw(
                    st.one_of(st.none(), st.integers(start, hw)))
            if old is None or data.draw(st.integers(0, 4)) == 0:   # or the shape changes
                fields.update(role=data.draw(st.sampled_from(list(Role))),
                              leader_epoch=data.draw(st.integers(-1, 5)),
                              leader_id=data.draw(st.integers(-1, 3)),
                              isr=data.draw(st.sampled_from([(), (1,), (1, 2), (3, 1, 2)])))
            elif data.draw(st.booleans()):                   # the same shape, given again
                fields.update(role=old.role, leader_epoch=old.leader_epoch,
                              leader_id=old.leader_id, isr=list(old.isr))
            broken = data.draw(st.sampled_from([None, None, None, "hw", "leo", "lso"]))
            if broken == "hw":
                fields["high_watermark"] = leo + 1
            elif broken == "leo" and followers:
                fields["follower_leo"] = {**fields["follower_leo"], 99: 5}
            elif broken == "lso":
                fields["last_stable_offset"] = hw + 1
            slot_before = board._slots.get((topic, partition))
            before = bytes(board._mv[:]) if slot_before is not None else None
            try:
                expected = _publish_reference(old, topic, partition, fields)
            except ValueError:
                with pytest.raises(ValueError):
                    board.publish(topic, partition, **fields)
                assert board.get(topic, partition) == old
                if before is not None:
                    assert bytes(board._mv[:]) == before
                continue
            assert board.publish(topic, partition, **fields) == expected
            assert board.get(topic, partition) == expected
            if reader is None:
                reader = BoardReader.open(cluster_id, 0)
            assert reader.get(topic, partition) == expected
            slot = board._slots[(topic, partition)]
            at = HEADER_DTYPE.itemsize + ROW_DTYPE.itemsize * slot
            row = bytes(board._mv[at:at + ROW_DTYPE.itemsize])
            assert row[CRC_START_BYTES:] == _encode_by_fields(expected)[CRC_START_BYTES:]
    finally:
        if reader is not None:
            reader.close()
        board.close()
