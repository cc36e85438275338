"""Property test: a Log against a plain in-memory model of batches.

Random append (leader / follower) / read / roll / truncate_to / truncate_fully /
retention / flush / close-and-reopen / kill-and-recover (with and without a torn tail).
A kill is simulated by abandoning the Log object without close: indexes are not
persisted, shared memory stays, the active file stays preallocated.
"""
from __future__ import annotations

import itertools
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from shm import batch as batch_codec
from shm.config import LogConfig
from shm.log import Log, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from shm.names import cluster_objects

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=150, retention_bytes=2500,
                   cleanup_policy="compact,delete",  # follower appends with holes
                   retention_ms=-1)
values_strategy = st.lists(st.binary(max_size=60), min_size=1, max_size=6)


def make_machine(cluster_id: str):
    brokers = itertools.count()

    class LogMachine(RuleBasedStateMachine):
        @initialize()
        def open_log(self):
            self.broker_id = next(brokers)
            self.data_dir = tempfile.mkdtemp(prefix="mk-log-model-")
            self.log = self._open()
            self.batches: list[tuple[int, list[bytes]]] = []  # (base offset, values)
            self.start = 0
            self.leo = 0
            self.epoch = 0

        def _open(self, reattach: bool = True) -> Log:
            return Log.open(self.data_dir, "topic", 3, CONFIG, cluster_id=cluster_id,
                            broker_id=self.broker_id, reattach_indexes=reattach, now_ms=0)

        def teardown(self):
            if hasattr(self, "log"):
                self.log.delete()
                shutil.rmtree(self.data_dir, ignore_errors=True)
                left = [n for n in cluster_objects(cluster_id) if f"-b{self.broker_id}-" in n]
                assert not left, f"delete() left shared memory behind: {left}"

        # ------------------------------------------------------------ writes

        @rule(batches=st.lists(values_strategy, min_size=1, max_size=8),
              bump_epoch=st.booleans(), together=st.booleans())
        def append_as_leader(self, batches, bump_epoch, together):
            """One append per batch, or all batches in one region (one append call)."""
            self.epoch += bump_epoch
            # Keyed: a compacted log refuses records without a key from a producer.
            encoded = [batch_codec.build_batch(values, keys=[b"k"] * len(values), timestamps_ms=1)
                       for values in batches]
            calls = [b"".join(encoded)] if together else encoded
            expected_first = self.leo
            for buf in calls:
                info = self.log.append_as_leader(bytearray(buf), self.epoch)
                assert info.first_offset == expected_first
                expected_first = info.last_offset + 1
            for values in batches:
                self.batches.append((self.leo, values))
                self.leo += len(values)
            assert info.last_offset == self.leo - 1

        @rule(values=values_strategy, gap=st.sampled_from([0, 0, 0, 1, -1]))
        def append_as_follower(self, values, gap):
            buf = batch_codec.build_batch(values, timestamps_ms=1,
                                          base_offset=max(0, self.leo + gap),
                                          partition_leader_epoch=self.epoch)
            if gap < 0 and self.leo + gap >= 0:
                with pytest.raises(UnexpectedAppendOffsetError):
                    self.log.append_as_follower(bytes(buf))
                return
            if self.leo + gap < 0:
                return
            # A batch past the LEO (a compacted leader's hole) is appended there.
            self.log.append_as_follower(bytes(buf))
            self.batches.append((self.leo + gap, values))
            self.leo += gap + len(values)

        @rule()
        def roll(self):
            self.log.roll(now_ms=0)

        @rule()
        def flush(self):
            self.log.flush(now_ms=0)

        @rule(data=st.data())
        def truncate_to(self, data):
            offset = data.draw(st.integers(0, self.leo + 2))
            self.log.truncate_to(offset)
            if offset >= self.leo:
                return
            if offset < self.start:
                self.batches, self.start, self.leo = [], offset, offset
                return
            kept = [(b, v) for b, v in self.batches if b + len(v) <= offset]
            self.leo = kept[-1][0] + len(kept[-1][1]) if kept else self.start
            self.batches = kept

        @rule(offset=st.integers(0, 400), rarely=st.integers(0, 3))
        def truncate_fully_and_start_at(self, offset, rarely):
            if rarely:
                return
            self.log.truncate_fully_and_start_at(offset, now_ms=0)
            self.batches, self.start, self.leo = [], offset, offset

        @rule(data=st.data())
        def retention(self, data):
            hw = data.draw(st.integers(self.start, self.leo))
            self.log.update_high_watermark(hw)
            size_before = self.log.size_bytes
            self.log.delete_old_segments(now_ms=0)
            new_start = self.log.log_start_offset
            assert self.start <= new_start <= max(hw, self.start)
            if new_start > self.start:
                assert size_before > CONFIG.retention_bytes
                # A segment boundary: a batch's base, the LEO, or a hole's start.
                assert all(b + len(v) <= new_start or b >= new_start
                           for b, v in self.batches)
            self.batches = [(b, v) for b, v in self.batches if b >= new_start]
            self.start = new_start

        # ------------------------------------------------------------ crashes

        @rule()
        def close_and_reopen(self):
            hw = self.log.high_watermark
            self.log.close()
            self.log = self._open()
            assert not self.log.recovery.truncated
            assert self.log.high_watermark == hw

        @rule(reattach=st.booleans())
        def kill_and_recover(self, reattach):
            self.log.abandon()
            self.log = self._open(reattach)
            assert not self.log.recovery.truncated, self.log.recovery

        @rule(values=values_strategy, data=st.data())
        def kill_with_torn_tail(self, values, data):
            buf = batch_codec.build_batch(values, timestamps_ms=1, base_offset=self.leo)
            segment = self.log.active_segment
            position = segment.size_bytes
            room = min(len(buf) - 1, len(segment._map) - position)
            if room < 1:
                return
            cut = data.draw(st.integers(1, room))
            segment._map[position:position + cut] = bytes(buf[:cut])  # a write torn by the kill
            fits = position + len(buf) <= len(segment._map)  # else it cannot be whole
            self.log.abandon()
            self.log = self._open()
            report = self.log.recovery
            torn = bytes(buf[:cut])
            if not any(torn[:batch_codec.LENGTH_OVERHEAD_BYTES]):
                assert not report.truncated, "a zero prefix is the end of the log"
                return
            if not any(buf[cut:]) and fits:  # the bytes not written were zeros anyway
                assert not report.truncated, report
                self.batches.append((self.leo, values))
                self.leo += len(values)
                return
            assert len(report.truncations) == 1, report
            truncation = report.truncations[0]
            assert truncation.position == position and truncation.offset == self.leo
            assert truncation.bytes == len(torn.rstrip(b"\0"))

        # ------------------------------------------------------------ reads

        @rule(data=st.data(), max_bytes=st.integers(0, 1500), bounded=st.booleans())
        def read(self, data, max_bytes, bounded):
            offset = data.draw(st.integers(self.start, self.leo))
            # max_offset as a consumer's HW: a batch boundary (or the LEO).
            bound = None
            if bounded:
                bound = data.draw(st.sampled_from([b for b, _ in self.batches] + [self.leo]))
            view = self.log.read(offset, max_bytes, max_offset=bound)
            if offset == self.leo or (bound is not None and offset >= bound):
                assert len(view) == 0
                return
            parsed = batch_codec.parse_batches(view)
            # The batch holding ``offset``, or the next one when it is in a hole.
            holder = min(b for b, v in self.batches if b + len(v) > offset)
            if bound is not None and not parsed:
                assert holder + len(dict(self.batches)[holder]) > bound
                return
            assert parsed, "a read below the LEO returns at least one batch"
            assert len(view) <= max_bytes or len(parsed) == 1
            if bound is not None:
                last = parsed[-1]
                assert last.base_offset + last.record_count <= bound
            expected = {b: v for b, v in self.batches}
            assert parsed[0].base_offset == holder
            bases = [b for b, _ in self.batches if b >= holder]
            for batch, base in zip(parsed, bases):
                assert batch.base_offset == base, "the log's batches, in order"
                assert batch.values.to_pylist() == expected[base]

        @rule(offset=st.sampled_from([-1, 1, 10**6]))
        def read_out_of_range(self, offset):
            offset = self.start - 1 if offset < 0 else self.leo + offset
            if offset < 0:
                return
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, 100)

        @invariant()
        def matches_model(self):
            if not hasattr(self, "log"):
                return
            self.log.check()
            assert (self.log.log_start_offset, self.log.log_end_offset) == (self.start, self.leo)
            assert self.log.recovery_point <= self.leo
            if self.batches and self.log.leader_epoch_cache.latest_epoch >= 0:
                epoch, end = self.log.leader_epoch_cache.end_offset_for(
                    self.log.leader_epoch_cache.latest_epoch)
                assert end == self.leo

    return LogMachine


def test_log_matches_model(cluster_id):
    machine = make_machine(cluster_id)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None,
        suppress_health_check=list(HealthCheck)))
