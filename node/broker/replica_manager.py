"""The broker's replica manager: the partition replicas it hosts and their cores.

One ``Partition`` per hosted replica: its ``shm.log.Log``, its ``ReplicaCore`` and the
shell's bookkeeping. The ``ReplicaManager`` (Kafka's name) applies the controller's
LeaderAndIsr and StopReplica to the cores, performs the effects the cores return, in
order (``apply_effects``), writes ISR changes to the coordinator, ticks the cores, runs
the logs' periodic duties (HW checkpoint, retention, flush) and publishes each replica
on the shared-memory board.

Effects, in the order a core returns them (``node.core.replication`` says why), each
by its handler in a table keyed by effect type:
- ``Truncate`` / ``TruncateFully`` / ``AssignEpoch`` / ``SetHighWatermark`` /
  ``IncrementLogStart`` (a follower following the leader's DeleteRecords) on the
  local log before anything after them;
- ``WriteIsr``: a conditional ``set`` of the partition-state znode at ``zk_version``,
  then an ``/isr_change_notification/isr_change_`` sequential node; the outcome goes to
  ``core.on_isr_written`` (on BadVersion with what the znode holds now);
- ``SendOffsetForLeaderEpoch``: through the follower fetchers;
- ``CompleteProduce``: to the broker's produce tracking (``on_produce_complete``).

A new HW wakes parked fetches (``on_high_watermark``). Logs are opened when a
LeaderAndIsr names them, as Kafka; topic-level overrides are read from
``/config/topics/T`` then, and follow its changes (``node.broker.topic_configs``).

A log directory that fails a write (a full disk: ENOSPC or a short write; EIO, EROFS)
goes offline, as in Kafka (KIP-112): its replicas stop (no more appends, fetches or
leadership; clients get the retriable KAFKA_STORAGE_ERROR), the failure is logged once
at ERROR, and the controller is told through ``/log_dir_event_notification`` so that it
moves their leaderships to in-sync replicas elsewhere and takes them out of the ISRs.
The directory stays offline until the broker restarts. When every log directory is
offline the broker stops (``on_all_log_dirs_offline``), as Kafka halts.

Everything runs on the loop thread; kazoo completions are posted back to it.

About 700 lines, kept whole: every part (LeaderAndIsr, effects, ISR writes, offline
dirs, the periodic duties) changes the same table of partitions on the loop thread; the
shared-memory board's publishing is the part that could leave first.
"""
from __future__ import annotations

import logging
import os
import time
import weakref
from typing import Callable

from kazoo.exceptions import BadVersionError

from node.broker import limits
from node.wire.errors import ErrorCode
from node.wire import zkdata
from node.wire.control import LEADER_RECOVERING, LeaderAndIsrPartition
from node.broker.lost_replicas import LostReplicas
from node.broker.loop import EventLoop, now_ms
from node.broker.coordinator import GuardedZk
from node.broker.failures import COORDINATOR_ERRORS, STORAGE_ERRORS, LogLimiter
from node.config import BrokerConfig, topic_log_config, topic_setting
from node.broker.metadata_cache import MetadataCache
from node.broker.topic_configs import TopicConfigs
from node.core.replication import (AssignEpoch, CompleteProduce, Effect, IncrementLogStart,
                                   ReplicaCore, ReplicationConfig, Role, SendOffsetForLeaderEpoch,
                                   SetHighWatermark, Truncate, TruncateFully, TruncationMode,
                                   WriteIsr, lost_replica_is_back)
from shm import batch
from shm import board
from shm.batch import CorruptRecordError
from shm.checkpoint import (RECOVERY_POINT_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
                            OffsetCheckpointFile)
from shm.log import Log

logger = logging.getLogger("node.broker.server")

NONE = 0
_BOARD_ROLE = {Role.LEADER: board.Role.LEADER, Role.FOLLOWER: board.Role.FOLLOWER,
               Role.NONE: board.Role.OFFLINE}


class LogView:
    """``shm.log.Log`` as the core's ``LogView``."""

    __slots__ = ("log",)

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def latest_epoch(self) -> int:
        return self.log.leader_epoch_cache.latest_epoch

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch)


class Partition:
    """One hosted partition replica: its log, its core, and the loop's bookkeeping."""

    def __init__(self, topic: str, partition: int, log: Log, core: ReplicaCore) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.log = log
        self.view = LogView(log)
        self.core = core
        self.controller_epoch = -1       # of the LeaderAndIsr that set the current state
        self.log_dir = log.data_dir
        self.fetch_backoff_until_ms = 0  # follower: after a fetch error
        self.checkpointed_high_watermark = -1
        self.compression_type = "producer"  # Kafka's compression.type, for Kafka fetches

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, {self.core!r})"


class ReplicaManager:
    def __init__(self, *, broker_id: int, config: BrokerConfig, loop: EventLoop,
                 zk: GuardedZk, metadata: MetadataCache,
                 on_produce_complete: Callable[[Partition, CompleteProduce], None],
                 on_high_watermark: Callable[[Partition], None],
                 on_all_log_dirs_offline: Callable[[], None] = lambda: None) -> None:
        self.broker_id = broker_id
        self.config = config
        self.loop = loop
        self.zk = zk
        self.metadata = metadata
        self.topic_configs = TopicConfigs(self)   # topic overrides, watched for changes
        self.on_produce_complete = on_produce_complete
        self.on_high_watermark = on_high_watermark
        self.on_all_log_dirs_offline = on_all_log_dirs_offline
        self.on_lost_cleared: Callable[[], None] = lambda: None
        self.offline_dirs: dict[str, str] = {}        # log dir -> why it went offline
        self.offline_partitions: dict[tuple[str, int], str] = {}   # a damaged log -> why
        self._corrupt_logged: set[tuple[str, int]] = set()
        # The scrubber's place: (partition, segment base offset, position, the segment): a
        # position is a batch boundary of that Segment object only (a clean swaps in a new
        # one under the same base offset).
        self._scrub_cursor: tuple[tuple[str, int], int, int, weakref.ref] | None = None
        self._unsent_log_dir_events: list[list[tuple[str, int]]] = []
        # Partitions whose ISR write the controller is still to be told of
        # (send_isr_changes), and when a notification was last attempted.
        self._unannounced_isr_changes: set[tuple[str, int]] = set()
        self._isr_notified_ms = 0
        self._storage_errors = LogLimiter(60.0)      # once a minute per partition
        self.fetchers = None             # node.broker.fetcher.ReplicaFetcherManager, set by the broker
        # node.broker.shm_replication.ShmReplication (replica.transport=shm), set by the broker
        self.shm = None
        self.cleaner = None              # node.broker.log_cleaner.LogCleaner, set by the broker
        self.cluster_id: str | None = None
        self.board: board.ReplicaStateBoard | None = None
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.leader_endpoints: dict[int, str] = {}   # from LeaderAndIsr live_leaders
        self.controller_epoch = -1                   # the highest seen (fencing)
        self.lost = LostReplicas(())                 # the broker's, set by it
        # Partitions whose board row is out of date, published together by one timer
        # BOARD_PUBLISH_DELAY_MS after the first change: a row costs tens of
        # microseconds, so under load rows are written once per delay, not per request,
        # and never between a request and its answer.
        self.dirty: set[Partition] = set()
        self._wall_offset_ms = int(time.time() * 1000) - now_ms()
        # One handler per effect type (the controller's events have such a table too).
        self._effect_handlers: dict[type, Callable[[Partition, Effect], None]] = {
            CompleteProduce: self._complete_produce,
            SetHighWatermark: self._set_high_watermark,
            IncrementLogStart: self._increment_log_start,
            Truncate: self._truncate,
            TruncateFully: self._truncate_fully,
            AssignEpoch: self._assign_epoch,
            WriteIsr: self._write_isr,
            SendOffsetForLeaderEpoch: self._send_offset_for_leader_epoch,
        }
        assert set(self._effect_handlers) == set(Effect.__args__)

    def endpoint_of(self, broker_id: int) -> str | None:
        return self.leader_endpoints.get(broker_id) or self.metadata.endpoint(broker_id)

    # ================================================================ the board

    def open_board(self, cluster_id: str, capacity: int) -> None:
        self.cluster_id = cluster_id
        self.board = board.ReplicaStateBoard.create(cluster_id, self.broker_id, capacity=capacity)

    def mark_dirty(self, part: Partition) -> None:
        if not self.dirty:
            self.loop.call_later(limits.BOARD_PUBLISH_DELAY_MS, self.publish_dirty)
        self.dirty.add(part)

    def publish_dirty(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for part in dirty:
            self._publish(part)

    def _publish(self, part: Partition) -> None:
        if self.board is None or self.partitions.get(part.key) is not part:
            return
        core, log = part.core, part.log
        caught_up, leos = {}, {}
        if core.role is Role.LEADER:
            followers = list(core.followers.items())[:board.REPLICAS_MAX]
            caught_up = {r: f.last_caught_up_ms + self._wall_offset_ms for r, f in followers}
            leos = {r: f.log_end_offset for r, f in followers if f.log_end_offset >= 0}
        try:
            self.board.publish(part.topic, part.partition, role=_BOARD_ROLE[core.role],
                               leader_epoch=core.leader_epoch, leader_id=core.leader,
                               log_end_offset=log.log_end_offset,
                               high_watermark=log.high_watermark,
                               log_start_offset=log.log_start_offset,
                               last_stable_offset=_last_stable_offset(log),
                               isr=core.isr[:board.REPLICAS_MAX], last_caught_up_ms=caught_up,
                               follower_leo=leos)
        except (board.BoardError, ValueError) as e:
            logger.error("%s-%d: cannot publish on the board: %s", part.topic,
                         part.partition, e)

    # ================================================================ effects

    def apply_effects(self, part: Partition, effects) -> None:
        """Perform a core's effects in the order it returned them."""
        handlers = self._effect_handlers
        for effect in effects:
            handler = handlers.get(type(effect))
            if handler is None:
                raise AssertionError(f"unknown effect {effect!r}")
            handler(part, effect)
        self.mark_dirty(part)

    def _complete_produce(self, part: Partition, effect: CompleteProduce) -> None:
        self.on_produce_complete(part, effect)

    def _set_high_watermark(self, part: Partition, effect: SetHighWatermark) -> None:
        part.log.update_high_watermark(effect.offset)
        self.on_high_watermark(part)

    def _increment_log_start(self, part: Partition, effect: IncrementLogStart) -> None:
        part.log.increment_log_start_offset(effect.offset)

    def _stop_cleaning(self, part: Partition) -> None:
        """Before a log is truncated, deleted or closed (Kafka's abortAndPauseCleaning)."""
        if self.cleaner is not None:
            self.cleaner.abort(part.key)

    def _truncate(self, part: Partition, effect: Truncate) -> None:
        self._stop_cleaning(part)
        self._log_truncation(part, effect.offset, "truncating to")
        part.log.truncate_to(effect.offset)

    def _truncate_fully(self, part: Partition, effect: TruncateFully) -> None:
        self._stop_cleaning(part)
        self._log_truncation(part, effect.offset, "truncating fully, restarting at")
        part.log.truncate_fully_and_start_at(effect.offset)

    def _assign_epoch(self, part: Partition, effect: AssignEpoch) -> None:
        part.log.leader_epoch_cache.assign(effect.leader_epoch, effect.start_offset)

    def _send_offset_for_leader_epoch(self, part: Partition,
                                      effect: SendOffsetForLeaderEpoch) -> None:
        self.fetchers.send_offset_for_leader_epoch(part, effect)

    def _log_truncation(self, part: Partition, offset: int, what: str) -> None:
        """INFO for a truncation of uncommitted records; WARN with counts when it cuts
        below the high watermark (committed records: a data loss somewhere)."""
        log = part.log
        hw, leo = log.high_watermark, log.log_end_offset
        if offset < hw:
            logger.warning("%s-%d: %s %d cuts %d committed records (offsets %d..%d, below the "
                           "high watermark %d) and %d more", part.topic, part.partition,
                           what, offset, hw - offset, offset, hw - 1, hw, max(0, leo - hw))
        else:
            logger.info("%s-%d: %s %d (LEO %d)", part.topic, part.partition, what, offset, leo)

    # ================================================================ controller requests

    def check_controller_epoch(self, epoch: int) -> bool:
        """Fence a stale controller: False if a newer controller epoch was seen."""
        if epoch < self.controller_epoch:
            return False
        self.controller_epoch = epoch
        return True

    def become_leader_or_follower(self, controller_epoch: int,
                                  entry: LeaderAndIsrPartition) -> int:
        """Apply one partition of a LeaderAndIsr (already fenced); its error code."""
        topic, partition, leader, leader_epoch = (entry.topic, entry.partition, entry.leader,
                                                  entry.leader_epoch)
        isr, zk_version, replicas = list(entry.isr), entry.zk_version, list(entry.replicas)
        if self.broker_id not in replicas:
            logger.warning("ignoring LeaderAndIsr for %s-%d: broker %d is not a replica (%s)",
                           topic, partition, self.broker_id, replicas)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not set(isr) <= set(replicas) or (leader >= 0 and isr and leader not in isr) or \
                (leader == self.broker_id and self.broker_id not in isr):
            logger.warning("invalid LeaderAndIsr for %s-%d: leader %d isr %s replicas %s",
                           topic, partition, leader, isr, replicas)
            return ErrorCode.INVALID_REQUEST
        existing = self.partitions.get((topic, partition))
        if existing is not None and self.is_offline(existing):
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            part = self._partition(topic, partition)
        except STORAGE_ERRORS + COORDINATOR_ERRORS as e:
            logger.error("%s-%d: cannot open the log: %s", topic, partition, e)
            log_dir = self._dir_holding(topic, partition)
            if isinstance(e, OSError) and log_dir is not None:
                self.dir_failed(log_dir, e, f"{topic}-{partition}")
            return ErrorCode.KAFKA_STORAGE_ERROR
        error = part.core.check_leader_and_isr(leader_epoch)
        if error:
            logger.info("%s-%d: ignoring LeaderAndIsr with leader epoch %d (current %d)",
                        topic, partition, leader_epoch, part.core.leader_epoch)
            return error
        if leader == self.broker_id and part.key in self.lost:
            if entry.leader_recovery_state != LEADER_RECOVERING:
                logger.warning("%s-%d: refusing to lead in epoch %d: this replica lost "
                               "committed data (INELIGIBLE_REPLICA)", topic, partition,
                               leader_epoch)
                return ErrorCode.INELIGIBLE_REPLICA
            self.lost.clear(part.key, f"elected by unclean recovery in epoch {leader_epoch} "
                                      f"(log end {part.log.log_end_offset})")
        part.controller_epoch = controller_epoch
        now = now_ms()
        if leader == self.broker_id:
            self.fetchers.unfollow(part.key)
            effects = part.core.become_leader(leader_epoch=leader_epoch, isr=isr,
                                              replicas=replicas, zk_version=zk_version,
                                              now_ms=now, log=part.view, elr=entry.elr)
            logger.info("%s-%d: leader in epoch %d, isr %s", topic, partition, leader_epoch,
                        isr)
        else:
            effects = part.core.become_follower(leader=leader, leader_epoch=leader_epoch,
                                                isr=isr, replicas=replicas,
                                                zk_version=zk_version, now_ms=now,
                                                log=part.view, elr=entry.elr)
            self.fetchers.follow(part.key, leader)   # (the shm slot retires: before truncating)
            part.fetch_backoff_until_ms = 0
            logger.info("%s-%d: follower of %d in epoch %d", topic, partition, leader,
                        leader_epoch)
        self.apply_effects(part, effects)
        if leader == self.broker_id and self.shm is not None:
            self.shm.lead(part)
        return NONE

    def stop_replica(self, topic: str, partition: int, leader_epoch, delete: bool) -> int:
        """Apply one partition of a StopReplica (already fenced); its error code."""
        if not isinstance(leader_epoch, int) or isinstance(leader_epoch, bool):
            return ErrorCode.INVALID_REQUEST
        part = self.partitions.get((topic, partition))
        if part is None:
            if delete:
                self._delete_stray_log(topic, partition)
            return NONE
        if 0 <= leader_epoch < part.core.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        self.fetchers.unfollow(part.key)
        if self.shm is not None:
            self.shm.unlead(part.key)
        self.apply_effects(part, part.core.stop(now_ms()))
        logger.info("%s-%d: replica stopped%s", topic, partition,
                    " and deleted" if delete else "")
        if delete:
            self.lost.forget([part.key])
            del self.partitions[part.key]
            self.dirty.discard(part)
            self._stop_cleaning(part)
            part.log.delete()
            if self.board is not None:
                self.board.remove(topic, partition)
        return NONE

    def _delete_stray_log(self, topic: str, partition: int) -> None:
        """A deleted partition this incarnation never opened (the broker was down when
        the topic was deleted): its directory must go too."""
        for d in self.config.log_dirs:
            if os.path.isdir(os.path.join(d, f"{topic}-{partition}")):
                try:
                    Log.open(d, topic, partition, self.config.log_config,
                             cluster_id=self.cluster_id, broker_id=self.broker_id).delete()
                    logger.info("%s-%d: deleted a stray log in %s", topic, partition, d)
                except STORAGE_ERRORS as e:
                    logger.error("%s-%d: cannot delete the stray log in %s: %s", topic,
                                 partition, d, e)

    def open_partition(self, topic: str, partition: int) -> Partition:
        """The partition's replica, its log opened (and recovered) if it was not yet."""
        return self._partition(topic, partition)

    def _partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is not None:
            return part
        overrides = self._topic_overrides(topic)
        log = Log.open(self._log_dir_for(topic, partition), topic, partition,
                       topic_log_config(self.config, overrides),
                       cluster_id=self.cluster_id, broker_id=self.broker_id)
        if log.recovery.truncated:
            logger.warning("%s-%d: recovery cut the log: %s", topic, partition,
                           log.recovery.truncations)
        core = ReplicaCore(topic, partition, self.broker_id, ReplicationConfig(
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            min_insync_replicas=topic_setting(self.config, overrides, "min.insync.replicas"),
            truncation_mode=TruncationMode(self.config.replication_truncation_mode),
            eligible_leader_replicas=self.config.eligible_leader_replicas))
        part = Partition(topic, partition, log, core)
        part.compression_type = topic_setting(self.config, overrides, "compression.type")
        self.partitions[part.key] = part
        return part

    def _topic_overrides(self, topic: str) -> dict[str, str]:
        return self.topic_configs.overrides(topic)     # and watched (node.broker.topic_configs)

    def _log_dir_for(self, topic: str, partition: int) -> str:
        """The log dir already holding this partition, else the least loaded online one."""
        held = self._dir_holding(topic, partition)
        if held is not None:
            if held in self.offline_dirs:
                raise OSError(f"log directory {held} holding {topic}-{partition} is "
                              f"offline: {self.offline_dirs[held]}")
            return held
        dirs = self.config.log_dirs
        online = [d for d in dirs if d not in self.offline_dirs]
        if not online:
            raise OSError("every log directory is offline")
        return min(online, key=lambda d: len(os.listdir(d)) if os.path.isdir(d) else 0)

    def _dir_holding(self, topic: str, partition: int) -> str | None:
        name = f"{topic}-{partition}"
        return next((d for d in self.config.log_dirs if os.path.isdir(os.path.join(d, name))),
                    None)

    # ================================================================ log dir failure

    def is_offline(self, part: Partition) -> bool:
        return (bool(self.offline_dirs) and part.log_dir in self.offline_dirs) or \
            (bool(self.offline_partitions) and part.key in self.offline_partitions)

    def replica_corrupt(self, part: Partition, error: BaseException) -> bool:
        """A damaged batch in ``part``'s log (found by a fetch or the scrubber): logged
        once, and the replica goes offline until the broker restarts: a leader stops
        leading (the controller elects an in-sync replica, whose copy came over the
        network, not from this file), a follower leaves the ISR. A leader that is the
        only in-sync replica keeps serving what is intact (clients get CORRUPT_MESSAGE
        at the damaged offset) rather than take the partition offline. True if the
        replica went offline."""
        if self.is_offline(part):
            return True
        if part.core.role is Role.LEADER and len(part.core.isr) <= 1:
            if part.key not in self._corrupt_logged:
                self._corrupt_logged.add(part.key)
                logger.error("%s-%d: corrupt data in the log: %s. No other in-sync replica "
                             "can take over: serving on", part.topic, part.partition, error)
            return False
        self.offline_partitions[part.key] = str(error)
        logger.error("%s-%d: corrupt data in the log: %s. The replica goes offline until "
                     "the broker restarts; an in-sync replica takes over", part.topic,
                     part.partition, error)
        self._stop_and_report([part.key])
        return True

    def storage_failed(self, part: Partition, error: BaseException) -> None:
        """A write to ``part``'s log failed with an I/O error: its log dir goes offline."""
        self.dir_failed(part.log_dir, error, f"{part.topic}-{part.partition}")

    def dir_failed(self, log_dir: str, error: BaseException, where: str) -> None:
        """Take ``log_dir`` offline (once); ``where`` names what failed there."""
        if log_dir in self.offline_dirs:
            return
        self.offline_dirs[log_dir] = str(error)
        gone = sorted(key for key, p in self.partitions.items() if p.log_dir == log_dir)
        logger.error("Error while writing to %s in dir %s: %s. Stopping serving replicas "
                     "in dir %s (%d partitions): the log directory is offline until the "
                     "broker restarts", where, log_dir, error, log_dir, len(gone))
        if len(self.offline_dirs) == len(set(self.config.log_dirs)):
            logger.critical("Shutdown broker because all log dirs in %s have failed",
                            ", ".join(self.config.log_dirs))
            self.on_all_log_dirs_offline()
            return
        self._stop_and_report(gone)

    def _stop_and_report(self, keys: list[tuple[str, int]]) -> None:
        """Stop these replicas (no fetching, no leading; pending acks=all writes fail)
        and tell the controller, which moves their leaderships and ISR places."""
        now = now_ms()
        for key in keys:
            part = self.partitions[key]
            self.fetchers.unfollow(key)
            if self.shm is not None:
                self.shm.unlead(key)
            self.apply_effects(part, part.core.stop(now))
        self._unsent_log_dir_events.append(keys)
        self.send_log_dir_events()

    def send_log_dir_events(self) -> None:
        """Tell the controller (retried from the tick while the coordinator is away)."""
        while self._unsent_log_dir_events:
            partitions = self._unsent_log_dir_events[0]
            try:
                self.zk.create(zkdata.LOG_DIR_EVENT_PREFIX,
                               zkdata.encode_log_dir_event(self.broker_id, partitions),
                               sequence=True, makepath=True)
            except COORDINATOR_ERRORS as e:
                logger.warning("cannot write the log dir event notification yet: %s", e)
                return
            self._unsent_log_dir_events.pop(0)

    # ================================================================ scrubber

    def scrub(self, budget_bytes: int) -> None:
        """Verify up to ``budget_bytes`` of sealed segments, batch by batch (structure
        and CRC), continuing where the last call stopped and going round the partitions
        for ever (HDFS's block scanner). Kafka verifies CRCs only at recovery above the
        recovery point, so bit rot in an old segment is served until a consumer trips on
        it; here the replica goes offline first (``replica_corrupt``)."""
        seen: set[tuple[tuple[str, int], int]] = set()
        checked = batches = 0
        while checked < budget_bytes and batches < limits.SCRUB_BATCHES_PER_RUN_MAX:
            target = self._scrub_target()
            if target is None:
                return
            part, segment, position = target
            if (part.key, segment.base_offset) in seen and position == 0:
                return                      # one pass per call at most
            seen.add((part.key, segment.base_offset))
            size = segment.size_bytes
            view = segment.view(0, size) if size else memoryview(b"")
            try:
                while position < size and checked < budget_bytes and \
                        batches < limits.SCRUB_BATCHES_PER_RUN_MAX:
                    header = batch.check_batch(view, position)
                    position += header.size_bytes
                    checked += header.size_bytes
                    batches += 1
            except CorruptRecordError as e:
                self._scrub_cursor = (part.key, segment.base_offset, size, weakref.ref(segment))
                self.replica_corrupt(part, f"{segment.path}: {e} (found by the scrubber)")
                continue
            self._scrub_cursor = (part.key, segment.base_offset, position, weakref.ref(segment))

    def _scrub_target(self):
        """(partition, sealed segment, position) to verify next, or None."""
        keys = sorted(k for k, p in self.partitions.items() if not self.is_offline(p))
        if not keys:
            return None
        key, base, position, scrubbed = self._scrub_cursor or (keys[0], -1, 0, None)
        start = next((i for i, k in enumerate(keys) if k >= key), 0)
        if keys[start] != key:
            base, position = -1, 0
        for step in range(len(keys) + 1):
            part = self.partitions[keys[(start + step) % len(keys)]]
            sealed = [seg for seg in part.log.segments if not seg.active]
            if step == 0:
                current = next((seg for seg in sealed if seg.base_offset == base), None)
                if current is not None and scrubbed is not None and current is not scrubbed():
                    return part, current, 0     # cleaned since (a new file): from its start
                if current is not None and position < current.size_bytes:
                    return part, current, position
                later = next((seg for seg in sealed if seg.base_offset > base), None)
            else:
                later = sealed[0] if sealed else None
            if later is not None:
                return part, later, 0
        return None

    def log_storage_error(self, part: Partition, what: str, error: BaseException) -> None:
        """A storage error on a request path, logged at most once a minute per partition."""
        if self._storage_errors.allow(part.key):
            logger.error("%s-%d: %s failed: %s (logged once a minute)", part.topic,
                         part.partition, what, error)

    # ================================================================ ISR writes

    def _write_isr(self, part: Partition, effect: WriteIsr) -> None:
        state = zkdata.PartitionState(self.broker_id, effect.leader_epoch, tuple(effect.isr),
                                      part.controller_epoch, elr=tuple(effect.elr))
        path = zkdata.partition_state_path(part.topic, part.partition)
        logger.info("%s-%d: writing ISR %s (leader epoch %d, zk version %d)", part.topic,
                    part.partition, list(effect.isr), effect.leader_epoch, effect.zk_version)
        try:
            result = self.zk.set_async(path, zkdata.encode_partition_state(state),
                                       version=effect.zk_version)
        except COORDINATOR_ERRORS as e:
            logger.warning("%s-%d: ISR write failed: %s", part.topic, part.partition, e)
            self.loop.post(lambda: self._isr_written(part, ok=False))
            return
        # The result is read on the loop (it is ready by then: get() does not block), so
        # that anything unexpected in handling it stops the broker instead of dying
        # quietly in a kazoo thread.
        result.rawlink(lambda r: self.loop.post(lambda: self._isr_write_done(part, r)))

    def _isr_write_done(self, part: Partition, result) -> None:
        try:
            stat = result.get()
        except BadVersionError:
            self._isr_conflict(part)
            return
        except COORDINATOR_ERRORS as e:
            logger.warning("%s-%d: ISR write failed: %s", part.topic, part.partition, e)
            self._isr_written(part, ok=False)
            return
        self._isr_written(part, ok=True, zk_version=stat.version)

    def _isr_conflict(self, part: Partition) -> None:
        """BadVersion: read what the znode holds now and tell the core."""
        path = zkdata.partition_state_path(part.topic, part.partition)
        try:
            result = self.zk.get_async(path)
        except COORDINATOR_ERRORS:
            self._isr_written(part, ok=False)
            return

        def done(async_result) -> None:  # on the loop; the result is ready
            try:
                data, stat = async_result.get()
                state = zkdata.decode_partition_state(data, stat.version, path)
            except COORDINATOR_ERRORS as e:
                logger.warning("%s: cannot read after a conflict: %s", path, e)
                self._isr_written(part, ok=False)
                return
            self._isr_written(part, ok=False, isr=state.isr, leader_epoch=state.leader_epoch,
                              zk_version=state.zk_version)

        result.rawlink(lambda r: self.loop.post(lambda: done(r)))

    def _isr_written(self, part: Partition, *, ok: bool, isr=None, leader_epoch=None,
                     zk_version=None) -> None:
        if self.partitions.get(part.key) is not part:
            return
        if ok:
            logger.info("%s-%d: ISR is now %s (zk version %d)", part.topic, part.partition,
                        list(part.core.pending_isr or ()), zk_version)
            self._notify_isr_change(part)
        else:
            logger.warning("%s-%d: ISR write refused (znode: isr %s, leader epoch %s, "
                           "version %s)", part.topic, part.partition, isr, leader_epoch,
                           zk_version)
        effects = part.core.on_isr_written(ok, isr=isr, leader_epoch=leader_epoch,
                                           zk_version=zk_version, now_ms=now_ms(),
                                           log=part.view)
        self.apply_effects(part, effects)

    def _notify_isr_change(self, part: Partition) -> None:
        self._unannounced_isr_changes.add(part.key)
        self.send_isr_changes()

    def send_isr_changes(self) -> None:
        """One ``/isr_change_notification`` node naming every partition whose written ISR
        the controller has not been told of. A create that fails (refused at once or
        failed later: the session lost) is tried again from the tick, at most every
        ISR_NOTIFY_RETRY_MS: a lost notification would leave the controller, and every
        broker's metadata, with the old ISR until the partition's next change."""
        if not self._unannounced_isr_changes:
            return
        keys = sorted(self._unannounced_isr_changes)
        self._unannounced_isr_changes.clear()
        self._isr_notified_ms = now_ms()
        try:
            result = self.zk.create_async(zkdata.ISR_CHANGE_PREFIX,
                                          zkdata.encode_partition_list(keys), sequence=True)
        except COORDINATOR_ERRORS as e:
            self._isr_changes_unsent(keys, e)
            return
        result.rawlink(lambda r: self.loop.post(lambda: self._isr_changes_sent(keys, r)))

    def _isr_changes_sent(self, keys: list[tuple[str, int]], result) -> None:
        try:
            result.get()        # ready: the completion is posted after it is set
        except COORDINATOR_ERRORS as e:
            self._isr_changes_unsent(keys, e)

    def _isr_changes_unsent(self, keys: list[tuple[str, int]], error) -> None:
        logger.warning("cannot create an ISR change notification yet (%s); tried again "
                       "within %d ms", str(error) or type(error).__name__,
                       limits.ISR_NOTIFY_RETRY_MS)
        self._unannounced_isr_changes.update(keys)

    # ================================================================ periodic duties

    def tick(self, now: int) -> None:
        if self._unsent_log_dir_events and self.zk.available:
            self.send_log_dir_events()
        if self._unannounced_isr_changes and self.zk.available and \
                now - self._isr_notified_ms >= limits.ISR_NOTIFY_RETRY_MS:
            self.send_isr_changes()
        if self.lost:
            self._clear_recovered_lost()
        for part in list(self.partitions.values()):
            effects = part.core.tick(now, part.view)
            if effects:
                self.apply_effects(part, effects)
        if self.shm is not None:
            self.shm.tick(now)

    def _clear_recovered_lost(self) -> None:
        """Drop the markers of lost replicas that are back (``lost_replica_is_back``,
        with the ISR of the controller's last metadata)."""
        for key, lost_hw in sorted(self.lost.marked.items()):
            part = self.partitions.get(key)
            meta = self.metadata.partition(*key)
            if part is None or meta is None:
                continue
            if lost_replica_is_back(part.core, meta.leader, meta.isr,
                                    part.log.high_watermark, lost_hw):
                self.lost.clear(key, f"back in the ISR {list(meta.isr)} with its high "
                                     f"watermark at {part.log.high_watermark}")
                self.on_lost_cleared()

    def checkpoint_high_watermarks(self) -> None:
        """Every replica.high.watermark.checkpoint.interval.ms: one write (and fsync) of
        each log dir's replication-offset-checkpoint for all its changed partitions, as
        Kafka, instead of one per partition."""
        def checkpointed(part: Partition, hw: int) -> None:
            part.checkpointed_high_watermark = hw
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, "HW",
                         lambda part: part.log.high_watermark,
                         lambda part: part.checkpointed_high_watermark, checkpointed)

    def checkpoint_recovery_points(self) -> None:
        """Every log.flush.offset.checkpoint.interval.ms: the recovery points that roll
        flushes moved since, one write of each log dir's recovery-point-offset-checkpoint,
        as Kafka's checkpointLogRecoveryOffsets (a roll's flush moves the recovery point
        in memory only: writing the file there stalled every partition of the broker,
        40-200 ms behind a busy disk). A checkpoint that lags is safe: recovery scans
        from it. Truncations and flushes still write theirs at once."""
        def checkpointed(part: Partition, offset: int) -> None:
            part.log.checkpointed_recovery_point = offset
        self._checkpoint(RECOVERY_POINT_OFFSET_CHECKPOINT, "recovery point",
                         lambda part: part.log.recovery_point,
                         lambda part: part.log.checkpointed_recovery_point, checkpointed)
        # and the leader-epoch caches that retention or DeleteRecords cut from the start
        # (written later, as Kafka's truncateFromStartAsyncFlush)
        self._each_log("leader-epoch checkpoint",
                       lambda part: part.log.leader_epoch_cache.flush_if_dirty())

    def _checkpoint(self, file_name: str, what: str, value: Callable[[Partition], int],
                    written: Callable[[Partition], int | None],
                    checkpointed: Callable[[Partition, int], None]) -> None:
        changed: dict[str, dict[tuple[str, int], int]] = {}
        for part in self.partitions.values():
            offset = value(part)
            if offset != written(part) and not self.is_offline(part):
                changed.setdefault(part.log.data_dir, {})[part.key] = offset
        for data_dir, updates in changed.items():
            file = OffsetCheckpointFile(os.path.join(data_dir, file_name))
            try:
                offsets = file.read()
                offsets.update(updates)
                file.write(offsets)
            except STORAGE_ERRORS as e:  # a failing disk must not stop the broker
                logger.error("%s: %s checkpoint failed: %s", data_dir, what, e)
                if isinstance(e, OSError):
                    self.dir_failed(data_dir, e, file_name)
                continue
            for key, offset in updates.items():
                checkpointed(self.partitions[key], offset)

    def retention(self) -> None:
        """Kafka's retention thread: logs whose cleanup.policy has "delete" (a compact-only
        log keeps every segment), not while the cleaner reads them."""
        def run(part: Partition) -> None:
            policy = getattr(part.log.config, "cleanup_policy", ("delete",))
            if "delete" not in policy or (self.cleaner is not None and
                                          part.key in self.cleaner.jobs):
                return
            if part.log.delete_old_segments():
                self.mark_dirty(part)
        self._each_log("retention", run)

    def flush_due(self) -> None:
        self._each_log("flush", lambda part: part.log.flush_if_due())

    def expire_producers(self) -> None:
        """Kafka's producer-id expiration check (``producer.id.expiration.ms``): each
        log forgets the idempotent producers idle that long (``Log.expire_producers``)."""
        expiration_ms = self.config.producer_id_expiration_ms

        def run(part: Partition) -> None:
            expired = part.log.expire_producers(int(time.time() * 1000), expiration_ms)
            if expired:
                logger.info("%s-%d: forgot %d producer(s) idle for %d ms or more: %s",
                            part.topic, part.partition, len(expired), expiration_ms,
                            ", ".join(map(str, expired[:10])) +
                            (", ..." if len(expired) > 10 else ""))
        self._each_log("producer expiration", run)

    def _each_log(self, what: str, fn: Callable[[Partition], object]) -> None:
        for part in list(self.partitions.values()):
            if self.is_offline(part):
                continue
            try:
                fn(part)
            except STORAGE_ERRORS as e:  # a failing disk must not stop the other partitions
                logger.error("%s-%d: %s failed: %s", part.topic, part.partition, what, e)
                if isinstance(e, OSError):
                    self.storage_failed(part, e)

    def close(self) -> None:
        """Close every log (trim, fsync, HW checkpoint, unlink indexes) and the board."""
        for part in list(self.partitions.values()):
            try:
                part.log.close()
            except STORAGE_ERRORS as e:
                logger.error("%s-%d: close failed: %s", part.topic, part.partition, e)
        self.partitions.clear()
        self.dirty.clear()
        if self.board is not None:
            self.board.close(unlink=True)
            self.board = None


def _last_stable_offset(log) -> int | None:
    """The log's LSO for the board; None (not published) when its transactions cannot
    be read (the request paths meet and report that failure)."""
    try:
        return log.last_stable_offset()
    except STORAGE_ERRORS:
        return None
