"""Replicas whose committed data this broker lost, and whether its last run ended cleanly.

Kafka in ZooKeeper mode lets a replica that lost committed data lead with its short
log, and every follower of that epoch then truncates to it; KIP-966 is Kafka's answer.
Here a broker finds such replicas at start-up (``find_lost``): the coordinator names it
in a partition's ISR, yet none of its log dirs has the partition (a wiped or new disk),
or its log, once recovered, ends below the high watermark it had checkpointed (a power
failure took what the page cache held).

The finding must outlive the broker: its own HW checkpoint is rewritten as soon as it
runs again, so the next start would find nothing wrong. ``LostReplicas`` therefore
keeps a marker per partition in ``lost-replica-checkpoint`` in every log dir (Kafka's
checkpoint format: ``topic partition offset``, the offset being the HW it had
checkpointed), written and fsynced before the broker registers. A marker goes only
when the replica is back: a follower in the ISR whose HW reached the one it lost, or a
leader elected by unclean recovery (the controller found no better log). While a marker
is there the broker names the partition in its registration and refuses to lead it
(INELIGIBLE_REPLICA).

``.kafka_cleanshutdown`` (Kafka's name) is written in each log dir after a clean
shutdown and taken away at start-up; a broker that does not find it restarted after an
unclean one, and says so in its registration (it then leaves every ELR, KIP-966).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

from shm.checkpoint import (REPLICATION_OFFSET_CHECKPOINT, CheckpointError,
                            OffsetCheckpointFile, fsync_dir)

logger = logging.getLogger(__name__)

LOST_REPLICA_CHECKPOINT = "lost-replica-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

TopicPartition = tuple[str, int]


class LostReplicas:
    """The durable markers: partition -> the HW its replica had checkpointed before it
    lost data (0 when unknown: the directory was gone)."""

    def __init__(self, log_dirs: Iterable[str]) -> None:
        self.log_dirs = tuple(log_dirs)
        self.marked: dict[TopicPartition, int] = {}

    def __contains__(self, tp: TopicPartition) -> bool:
        return tp in self.marked

    def __len__(self) -> int:
        return len(self.marked)

    def load(self) -> None:
        for d in self.log_dirs:
            path = os.path.join(d, LOST_REPLICA_CHECKPOINT)
            try:
                for tp, hw in OffsetCheckpointFile(path).read().items():
                    self.marked[tp] = max(hw, self.marked.get(tp, 0))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, CheckpointError) as e:
                # Unreadable: the partitions it named cannot be told apart, so the log
                # dir's other evidence (the HW checkpoint) has to do this time.
                logger.error("%s: cannot read the lost-replica markers: %s", path, e)

    def mark(self, found: dict[TopicPartition, int]) -> None:
        if not found:
            return
        for tp, hw in found.items():
            self.marked[tp] = max(hw, self.marked.get(tp, 0))
        self._save()

    def clear(self, tp: TopicPartition, why: str) -> None:
        if self.marked.pop(tp, None) is None:
            return
        logger.warning("%s-%d: the marker of lost committed data is removed: %s", tp[0], tp[1],
                       why)
        self._save()

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions deleted or no longer assigned here."""
        gone = [tp for tp in tps if tp in self.marked]
        for tp in gone:
            del self.marked[tp]
        if gone:
            self._save()

    def _save(self) -> None:
        for d in self.log_dirs:
            if not os.path.isdir(d):
                continue
            path = os.path.join(d, LOST_REPLICA_CHECKPOINT)
            try:
                OffsetCheckpointFile(path).write(self.marked)
            except OSError as e:
                logger.error("%s: cannot write the lost-replica markers: %s", path, e)


def take_clean_shutdown_marker(log_dirs: Iterable[str]) -> bool:
    """True if the previous run ended with a clean shutdown: every log dir that holds
    partitions has the marker. The markers are removed (and the removal fsynced), so a
    crash from now on reads as unclean."""
    clean = True
    for d in log_dirs:
        path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        try:
            holds_data = any(os.path.isdir(os.path.join(d, name)) for name in os.listdir(d))
        except FileNotFoundError:
            continue
        if os.path.exists(path):
            os.remove(path)
            fsync_dir(d)
        elif holds_data:
            clean = False
    return clean


def write_clean_shutdown_marker(log_dirs: Iterable[str]) -> None:
    """After the logs are closed (flushed): the next start knows nothing was lost."""
    for d in log_dirs:
        if not os.path.isdir(d):
            continue
        path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        try:
            with open(path, "wb") as f:
                os.fsync(f.fileno())
            fsync_dir(d)
        except OSError as e:
            logger.error("%s: cannot write the clean-shutdown marker: %s", path, e)


def checkpointed_high_watermarks(log_dirs: Iterable[str]) -> dict[TopicPartition, int]:
    """The replication-offset-checkpoint of every log dir, as the last run left it."""
    out: dict[TopicPartition, int] = {}
    for d in log_dirs:
        try:
            out.update(OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).read())
        except FileNotFoundError:
            continue
        except (OSError, ValueError, CheckpointError) as e:
            logger.warning("%s: cannot read the high-watermark checkpoint: %s", d, e)
    return out


def find_lost(in_isr: Iterable[TopicPartition], log_dirs: tuple[str, ...],
              log_end: Callable[[TopicPartition], int | None]) -> dict[TopicPartition, int]:
    """Of the partitions whose ISR names this broker (``in_isr``), those whose copy lost
    committed data, with the HW it had checkpointed: no log dir has the partition's
    directory, or ``log_end(tp)`` (the recovered log's end; None if it cannot be opened)
    is below that HW."""
    lost: dict[TopicPartition, int] = {}
    checkpoints = checkpointed_high_watermarks(log_dirs)
    for topic, partition in in_isr:
        tp = (topic, partition)
        hw = checkpoints.get(tp, 0)
        if not any(os.path.isdir(os.path.join(d, f"{topic}-{partition}")) for d in log_dirs):
            lost[tp] = hw
            continue
        if hw > 0:
            end = log_end(tp)
            if end is not None and end < hw:
                logger.warning("%s-%d: the log ends at %d, below the high watermark %d "
                               "checkpointed before the crash: committed records were lost "
                               "(power failure?)", topic, partition, end, hw)
                lost[tp] = hw
    return lost
