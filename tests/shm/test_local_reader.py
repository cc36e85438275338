"""LocalReader: batches below the board's HW, straight from segment files and shm indexes."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from shm.batch import build_batch, parse_batch
from shm.board import BoardNotFoundError, BoardReader, ReplicaStateBoard, Role
from shm.config import LogConfig
from shm.local_reader import LocalReader, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from shm.log import Log
from shm.names import cleanup_cluster

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "events"

VALUES = """
def value_at(offset):
    return (str(offset) + ":").encode() * (1 + offset % 5)
"""
exec(VALUES)


def check_batches(read, start_offset: int) -> int:
    """Every batch whole (CRC), contiguous from ``start_offset``, below the HW, with the
    committed values of its offsets; returns the next offset."""
    offset = start_offset
    for view in read.batches:
        batch = parse_batch(view)  # checks the CRC and the structure
        assert batch.header.base_offset <= offset < batch.header.next_offset or \
            batch.header.base_offset == offset
        assert batch.header.next_offset <= read.high_watermark, "a batch at or above the HW"
        values = batch.values.to_pylist()
        assert values == [value_at(batch.header.base_offset + i) for i in range(len(values))], \
            f"batch at {batch.header.base_offset} is not committed data: {values[:2]}"
        offset = batch.header.next_offset
    assert read.next_offset == offset
    return offset


class Writer:
    """A Log plus the board entry a broker would publish for it, in this process."""

    def __init__(self, cluster_id, data_dir, config, epoch=0):
        self.log = Log.open(str(data_dir), TOPIC, 0, config, cluster_id=cluster_id, broker_id=0)
        self.board = ReplicaStateBoard.create(cluster_id, 0, capacity=4)
        self.epoch = epoch
        self.publish()

    def publish(self):
        log = self.log
        self.board.publish(TOPIC, 0, role=Role.LEADER, leader_epoch=self.epoch, leader_id=0,
                           log_end_offset=log.log_end_offset, high_watermark=log.high_watermark,
                           log_start_offset=log.log_start_offset, isr=(0,))

    def append(self, n: int, commit: bool = True):
        base = self.log.log_end_offset
        self.log.append_as_leader(build_batch([value_at(base + i) for i in range(n)], None, 0),
                                  self.epoch)
        if commit:
            self.log.update_high_watermark(self.log.log_end_offset)
        self.publish()

    def close(self):
        self.board.close()
        self.log.close()


@pytest.fixture
def writer(cluster_id, tmp_path):
    w = Writer(cluster_id, tmp_path, LogConfig(segment_bytes=4096, index_interval_bytes=256))
    yield w
    w.close()


def test_reads_whole_batches_across_segments_and_stops_below_the_hw(writer, cluster_id, tmp_path):
    for i in range(200):
        writer.append(1 + i % 4)
    writer.append(3, commit=False)  # LEO moves, HW does not
    assert len(writer.log.segments) > 3
    hw = writer.log.high_watermark
    with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0, verify_crc=True) as reader:
        offset, reads = 0, 0
        while offset < hw:
            read = reader.read(offset, 200)
            assert read.batches, f"no progress at {offset}"
            offset = check_batches(read, offset)
            reads += 1
        assert offset == hw and reads > 10
        assert reader._index._attached, "positions came from the shared-memory index"
        assert reader.read(hw, 1 << 20).batches == []          # at the HW: nothing yet
        assert reader.read(hw + 1, 1 << 20).batches == []      # in (HW, LEO]: nothing
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(writer.log.log_end_offset + 1, 1 << 20)
        # One big read returns everything below the HW, as views of the segment maps.
        everything = reader.read(0, 1 << 30)
        assert check_batches(everything, 0) == hw
        assert all(isinstance(v, memoryview) and v.readonly for v in everything.batches)


def test_a_read_from_inside_a_batch_returns_that_whole_batch(writer, cluster_id, tmp_path):
    writer.append(5)
    writer.append(5)
    with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0) as reader:
        read = reader.read(7, 1)  # smaller than a batch: still one whole batch (KIP-74)
        assert len(read.batches) == 1 and read.next_offset == 10
        assert parse_batch(read.batches[0]).header.base_offset == 5


def test_retention_moves_log_start_and_reads_below_it_are_out_of_range(cluster_id, tmp_path):
    config = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_bytes=4096)
    w = Writer(cluster_id, tmp_path, config)
    try:
        with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0) as reader:
            for i in range(80):
                w.append(3)
            check_batches(reader.read(0, 1 << 20), 0)  # maps the first segments
            assert w.log.delete_old_segments() > 0
            w.publish()
            start = w.log.log_start_offset
            assert start > 0
            with pytest.raises(OffsetOutOfRangeError, match="outside"):
                reader.read(0, 1 << 20)
            assert check_batches(reader.read(start, 1 << 20), start) > start
    finally:
        w.close()


def test_a_segment_replaced_under_the_same_name_is_mapped_again(writer, cluster_id, tmp_path):
    log = writer.log
    while len(log.segments) < 2:
        writer.append(4)
    second = log.segments[1].base_offset
    writer.append(4)
    with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0) as reader:
        check_batches(reader.read(second, 1 << 20), second)  # maps the second segment
        # Cut back into the first segment, then grow again past the same roll point:
        # a new file with the same name, whose bytes must be read, not the old ones.
        log.truncate_to(second - 4)
        writer.publish()
        while log.log_end_offset <= second + 8:
            writer.append(4)
        assert log.segments[1].base_offset == second
        assert check_batches(reader.read(second, 1 << 20), second) == log.high_watermark


def test_without_its_shared_memory_index_a_segment_is_scanned_from_its_start(
        writer, cluster_id, tmp_path):
    for i in range(40):
        writer.append(2)
    for segment in writer.log.segments:
        segment.offset_index.unlink()  # as if /dev/shm had been cleared
    with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0) as reader:
        middle = writer.log.high_watermark // 2 + 1
        assert check_batches(reader.read(middle, 1 << 20), middle) == writer.log.high_watermark
        assert not reader._index._attached


def test_missing_board_or_partition_is_a_clear_error(cluster_id, tmp_path):
    with pytest.raises(BoardNotFoundError):
        LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0)
    with ReplicaStateBoard.create(cluster_id, 0, capacity=1):
        with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0) as reader:
            with pytest.raises(UnknownTopicOrPartitionError):
                reader.read(0, 100)


WRITER = VALUES + """
import signal, sys, time
from shm.batch import build_batch
from shm.board import ReplicaStateBoard, Role
from shm.config import LogConfig
from shm.log import Log
cluster_id, data_dir, lifetime_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
config = LogConfig(segment_bytes=16384, index_interval_bytes=512, retention_bytes=65536)
log = Log.open(data_dir, "events", 0, config, cluster_id=cluster_id, broker_id=0)
board = ReplicaStateBoard.create(cluster_id, 0, capacity=1)

def publish():
    board.publish("events", 0, role=Role.LEADER, leader_epoch=0, leader_id=0,
                  log_end_offset=log.log_end_offset, high_watermark=log.high_watermark,
                  log_start_offset=log.log_start_offset, isr=(0,))

publish()
print("ready", flush=True)
step, deadline = 0, time.monotonic() + lifetime_s
while not stop and time.monotonic() < deadline:
    step += 1
    n = 1 + step % 7
    leo = log.log_end_offset
    if step % 4 == 0:  # a truncation is durable (fsyncs), so not on every step
        # Bytes above the HW that are then cut: a reader must never return them.
        log.append_as_leader(build_batch([b"uncommitted"] * n, None, 0), 0)
        publish()
        log.truncate_to(leo)
        publish()
    log.append_as_leader(build_batch([value_at(leo + i) for i in range(n)], None, 0), 0)
    publish()
    log.update_high_watermark(log.log_end_offset)
    publish()
    if step % 16 == 0 and log.delete_old_segments():
        publish()
board.close()
log.close()
print("steps", step, len(log.segments), flush=True)
"""


def _line(proc, timeout_s):
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "writer printed nothing"
    line = proc.stdout.readline()
    assert line, f"writer exited: {proc.stderr.read()}"
    return line.strip()


@pytest.mark.slow
def test_reader_process_follows_a_live_writer_through_rolls_retention_and_truncation(
        cluster_id, tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", WRITER, cluster_id, str(tmp_path), "150"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _line(writer, 30) == "ready"
        board = BoardReader.open(cluster_id, 0)
        reader = LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0, verify_crc=True)
        try:
            offset, batches, restarts, reads = 0, 0, 0, 0
            # Generous: a loaded 2-core machine (pytest -n auto) runs the writer slowly.
            deadline = time.monotonic() + 120
            while not (batches >= 1500 and restarts >= 1):
                assert time.monotonic() < deadline, (batches, restarts, reads)
                try:
                    read = reader.read(offset, 1 + reads % 3000)
                except OffsetOutOfRangeError:
                    # Retention passed us (auto.offset.reset=earliest). The broker
                    # deletes files first and publishes the new log start right after.
                    wait_until = time.monotonic() + 5
                    while board.get(TOPIC, 0).log_start_offset <= offset:
                        assert time.monotonic() < wait_until, "log start never moved"
                    offset, restarts = board.get(TOPIC, 0).log_start_offset, restarts + 1
                    continue
                reads += 1
                offset = check_batches(read, offset)
                batches += len(read.batches)
                if reads % 50 == 0:  # fall behind now and then, so retention passes us
                    wait_until = time.monotonic() + 5
                    while board.get(TOPIC, 0).log_start_offset <= offset and \
                            time.monotonic() < wait_until:
                        pass
        finally:
            reader.close()
            board.close()
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(20) == 0, writer.stderr.read()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(10)
        writer.stdout.close()
        writer.stderr.close()
        cleanup_cluster(cluster_id)
