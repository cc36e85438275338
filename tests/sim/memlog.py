"""An in-memory partition log for the simulator: the ``LogView`` the replication core
reads, plus the operations a broker shell performs on a real ``shm.log.Log``.

Each entry is (leader_epoch, value); offsets are list positions shifted by the log start.
The leader-epoch cache is kept as Kafka keeps it: (epoch, start offset) pairs, assigned on
append and on becoming leader, truncated with the log.
"""
from __future__ import annotations


class MemLog:
    def __init__(self) -> None:
        self.start = 0
        self.entries: list[tuple[int, object]] = []
        self.hw = 0
        self.epochs: list[tuple[int, int]] = []   # (epoch, start offset), ascending

    # ---- LogView
    @property
    def log_start_offset(self) -> int:
        return self.start

    @property
    def log_end_offset(self) -> int:
        return self.start + len(self.entries)

    @property
    def high_watermark(self) -> int:
        return self.hw

    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """As Kafka's LeaderEpochFileCache.endOffsetFor (and shm's LeaderEpochCache)."""
        if epoch < 0 or not self.epochs:
            return (-1, -1)
        if epoch == self.epochs[-1][0]:
            return (epoch, self.log_end_offset)
        higher = [(e, s) for e, s in self.epochs if e > epoch]
        if not higher:
            return (-1, -1)
        floor = [(e, s) for e, s in self.epochs if e <= epoch]
        return ((floor[-1][0] if floor else epoch), higher[0][1])

    # ---- shell operations
    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        if self.epochs and self.epochs[-1][0] >= epoch:
            return
        self.epochs = [(e, s) for e, s in self.epochs if s < start_offset] + [(epoch, start_offset)]

    def append_as_leader(self, values, epoch: int) -> tuple[int, int]:
        first = self.log_end_offset
        self.assign_epoch(epoch, first)
        self.entries += [(epoch, v) for v in values]
        return first, self.log_end_offset - 1

    def append_as_follower(self, entries, first_offset: int) -> None:
        assert first_offset == self.log_end_offset, (first_offset, self.log_end_offset)
        for offset, (epoch, value) in enumerate(entries, first_offset):
            self.assign_epoch(epoch, offset)
            self.entries.append((epoch, value))

    def read(self, offset: int, max_entries: int, max_offset: int | None = None):
        end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        end = min(end, offset + max_entries)
        return self.entries[offset - self.start:end - self.start]

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        if offset < self.start:
            self.truncate_fully(offset)
            return
        del self.entries[offset - self.start:]
        self.hw = min(self.hw, offset)
        self.epochs = [(e, s) for e, s in self.epochs if s < offset]

    def truncate_fully(self, offset: int) -> None:
        self.start, self.entries, self.hw, self.epochs = offset, [], offset, []

    def set_hw(self, offset: int) -> None:
        self.hw = min(max(offset, self.start), self.log_end_offset)

    def value_at(self, offset: int):
        return self.entries[offset - self.start]
