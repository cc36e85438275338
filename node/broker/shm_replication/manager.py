"""The shared-memory replication path (``replica.transport=shm``), on the broker's loop.

As a leader, for every partition it leads the broker keeps a replication slot
(``shm.replication_slot``) with its epoch, LEO, HW and log start, and rings the bells of
the followers that replicate through it after every append (``leo_moved``) and every
HW move. As a follower, woken by its bell (or the tick), for every partition it follows
from a leader that has a slot it copies the new batches straight from the leader's
segment files (``shm.replication_reader``), appends them, writes its LEO into its row of
the slot and rings the leader's bell; the leader, woken, reads the rows and gives each
new report to its core as a follower fetch at that offset (``on_follower_fetch``): the
HW moves at once. The decisions are ``plan``'s.

What Fetch guarantees stays:
- epoch fencing: a report counts only in the leader's epoch; a follower copies only
  while the slot is in its epoch, and keeps a copy only if the epoch did not change
  during it (a leader writes -1 before it truncates);
- truncation on a new leader epoch: the core's OffsetForLeaderEpoch, over the socket as
  before, before ``fetch_state`` names an offset;
- ISR shrink: a follower reports at least every ``replica.fetch.wait.max.ms`` (as a
  long-polling fetcher fetches); one that stops (SIGSTOP, a hang) stops reporting, and
  the leader's core drops it after ``replica.lag.time.max.ms``;
- a leader that rolls, deletes or truncates segments under the reader: the reader's
  checks (``LocalReader``'s), retried, then Fetch;
- a reader that dies mid-copy: the leader only reads the rows (seqlocked); the
  follower's own log recovers like after any crash;
- a leader that dies and comes back (a new slot under the same name, maybe in the same
  epoch): its followers look at the name at every report and attach to the new slot,
  as a fetcher reconnects.
A partition whose leader has no slot (it uses Fetch, or another host), or that the
path cannot serve (offset out of range, reads failing), goes through Fetch
(``serving`` says which partitions the fetchers skip), and is tried again after
``replica.fetch.backoff.ms``.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from node.broker.loop import now_ms
from node.broker.shm_replication import plan
from node.broker.shm_replication.doorbell import Doorbell, Ringer
from node.core.replication import Role
from shm.batch import CorruptRecordError
from shm.errors import LocalReadError, LogError
from shm.names import SharedMemoryError
from shm.replication_reader import ReplicaSegmentReader
from shm.replication_slot import ROWS, ReplicationSlot

if TYPE_CHECKING:
    from node.broker.replica_manager import Partition, ReplicaManager

logger = logging.getLogger("node.broker.server")

COPIES_PER_WAKE_MAX = 8        # copies of one partition per wake-up (then the loop turns)
PROC_STAT_BYTES_MAX = 1024      # /proc/PID/stat is one line of a few hundred bytes
NOT_RUNNING = (b"T", b"t", b"Z", b"X", b"x", b"")   # stopped, traced, zombie, dead


@dataclass
class _Led:
    slot: ReplicationSlot
    seen: dict = field(default_factory=dict)   # follower -> seq of its last report acted on
    ring: set = field(default_factory=set)     # followers that replicate through the slot
    marks: tuple = ()                          # the rows' seqs when last read


@dataclass
class _Followed:
    leader: int
    slot: ReplicationSlot | None = None
    reader: ReplicaSegmentReader | None = None
    retry_ms: int = 0              # after a failure: Fetch until then
    slot_retry_ms: int = 0         # the last wait for a slot the leader had not (plan)
    last_report_ms: int = 0
    reported_leo: int = -1
    watch: tuple | None = None     # (leader pid, its /proc/PID/stat descriptor)
    # What the last pass decided "caught up" on (the slot's words and the replica's
    # own state: ``_idle_state``): a wake-up that changed neither skips the partition.
    idle: tuple | None = None


class ShmReplication:
    def __init__(self, replicas: "ReplicaManager", cluster_id: str) -> None:
        self.replicas = replicas
        self.config = replicas.config
        self.broker_id = replicas.broker_id
        self.cluster_id = cluster_id
        self.bell = Doorbell(cluster_id, self.broker_id)
        self.ringer = Ringer(cluster_id)
        self.led: dict[tuple[str, int], _Led] = {}
        self.followed: dict[tuple[str, int], _Followed] = {}
        self.serving: set[tuple[str, int]] = set()     # the fetchers skip these
        self.apis = None                 # the request handlers (traces), set by the broker
        self._woke_ns = 0
        # A follower reports at least this often (a fetcher's long poll).
        self.report_interval_ms = plan.report_interval_ms(
            self.config.replica_fetch_wait_max_ms, self.config.replica_lag_time_max_ms)
        replicas.loop.add_socket(self.bell.fd, self.on_bell)

    # ---- membership (the replica manager's LeaderAndIsr / StopReplica) ---------------------

    def lead(self, part: "Partition") -> None:
        """``part`` is led here now (after ``become_leader``)."""
        self.unfollow(part.key)
        if len(part.core.replicas) < 2:
            self.unlead(part.key)       # no follower to serve
            return
        led = self.led.get(part.key)
        if led is None:
            try:
                slot = ReplicationSlot.create(self.cluster_id, self.broker_id, part.topic,
                                              part.partition, part.log.data_dir)
            except (SharedMemoryError, OSError, ValueError) as e:
                logger.warning("%s-%d: no replication slot (followers use Fetch): %s",
                               part.topic, part.partition, e)
                return
            led = self.led[part.key] = _Led(slot)
        led.seen.clear()
        led.marks = ()
        self.publish(part)

    def publish(self, part: "Partition") -> None:
        led = self.led.get(part.key)
        if led is None or part.core.role is not Role.LEADER:
            return
        log = part.log
        led.slot.publish(leader_epoch=part.core.leader_epoch, log_end_offset=log.log_end_offset,
                         high_watermark=log.high_watermark,
                         log_start_offset=log.log_start_offset)

    def unlead(self, key: tuple[str, int]) -> None:
        """Not led here any more: before any truncation of its log."""
        led = self.led.pop(key, None)
        if led is not None:
            led.slot.retire()
            led.slot.close(unlink=True)

    def follow(self, key: tuple[str, int], leader: int) -> None:
        self.unlead(key)
        self.unfollow(key)
        if leader >= 0 and leader != self.broker_id:
            self.followed[key] = _Followed(leader)

    def unfollow(self, key: tuple[str, int]) -> None:
        followed = self.followed.pop(key, None)
        self.serving.discard(key)
        if followed is not None:
            _close_follower(followed)

    # ---- the leader ------------------------------------------------------------------------

    def leo_moved(self, key: tuple[str, int]) -> None:
        """After an append on a partition led here: the followers copy at once."""
        led = self.led.get(key)
        if led is None:
            return
        part = self.replicas.partitions.get(key)
        if part is None:
            return
        log = part.log
        led.slot.publish_end(log.log_end_offset, log.high_watermark,
                             time.monotonic_ns() if led.ring else 0)
        for broker in led.ring:
            self.ringer.ring(broker)

    # A HW move alone is not published at once: the slot's HW is the one of the last
    # append (as a parked fetch answered at that append carries it) until the next
    # append or the leader's tick. A follower that copies after another follower's
    # report moved the HW must not learn the new HW from that copy, or its HW would not
    # lag one round behind the leader's as Kafka's does (KIP-101's scenario 1: CI).

    def _read_reports(self) -> None:
        partitions = self.replicas.partitions
        now = None
        for key, led in self.led.items():
            part = partitions.get(key)
            if part is None or part.core.role is not Role.LEADER:
                continue
            marks = led.slot.report_marks()
            if marks == led.marks:
                continue                  # no follower wrote since the last read
            led.marks = marks
            core = part.core
            fresh = plan.fresh_reports(led.slot.reports(), led.seen, core.leader_epoch,
                                       core.followers)
            for report in fresh:
                led.ring.add(report.broker_id)
                now = now if now is not None else now_ms()
                traced = self._trace(key, report)
                try:
                    effects = core.on_follower_fetch(report.broker_id, report.log_end_offset,
                                                     now, part.view)
                    if effects:
                        self.replicas.apply_effects(part, effects)
                finally:
                    if traced:
                        self.apis.trace_replica = -1

    def _trace(self, key, report) -> bool:
        """A traced acks=all write (bench.perf.latency --breakdown) this report carries:
        the follower's stamps go into its trace as a fetching follower's would
        (answered = the leader's ring, received = the follower's wake-up, appended,
        sent = the report; then the leader's wake-up), and the report is the one that
        advances the HW (``trace_replica``) while its effects run."""
        apis = self.apis
        if apis is None or not apis.traces:
            return False
        traced = apis.traces.get(key)
        if traced is None or report.log_end_offset <= traced[0] or not any(report.stamps):
            return False
        traced[1].setdefault("followers", {})[str(report.broker_id)] = \
            [*report.stamps, time.monotonic_ns()]
        apis.trace_replica = report.broker_id
        return True

    # ---- the follower ----------------------------------------------------------------------

    def _replicate(self, now: int) -> None:
        partitions = self.replicas.partitions
        for key, followed in list(self.followed.items()):
            part = partitions.get(key)
            if part is None or now < followed.retry_ms or self.replicas.is_offline(part):
                continue
            try:
                self._replicate_one(part, followed, now)
            except OSError as e:              # a full or failing disk
                self._release(key, followed, now)
                self.replicas.storage_failed(part, e)
            except (LocalReadError, CorruptRecordError, LogError, SharedMemoryError,
                    ValueError) as e:
                logger.warning("%s-%d: shared-memory replication from broker %d failed, "
                               "using Fetch for %d ms: %s", part.topic, part.partition,
                               followed.leader, self.config.replica_fetch_backoff_ms, e)
                self._release(key, followed, now)

    def _replicate_one(self, part: "Partition", followed: _Followed, now: int) -> None:
        key = part.key
        if followed.idle is not None:
            # Only after a pass that ended caught up (not on the hot path: a copy
            # leaves it None, and the next ring has a batch to copy).
            if followed.slot is not None and \
                    now - followed.last_report_ms < self.report_interval_ms and \
                    followed.idle == _idle_state(part, followed.slot.leader_words()):
                return
            followed.idle = None
        for _ in range(COPIES_PER_WAKE_MAX):
            state = part.core.fetch_state(part.view)
            if state is None or state.leader != followed.leader:
                return
            report_due = now - followed.last_report_ms >= self.report_interval_ms
            slot = self._slot(part, followed, state.leader_epoch, now, report_due)
            if slot is None:
                return
            leader = slot.leader_state()
            log = part.log
            running = state.fetch_offset >= leader.log_end_offset or \
                self._leader_running(followed, leader.pid)
            if running is None:
                logger.info("%s-%d: broker %d's process %d is not on this host's /proc: "
                            "using Fetch", part.topic, part.partition, followed.leader,
                            leader.pid)
                self._release(key, followed, now)
                return
            step = plan.follower_step(
                leader_epoch=state.leader_epoch, fetch_offset=state.fetch_offset,
                high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
                leader=leader, report_due=report_due, leader_running=running,
                taking_over=key not in self.serving)
            if isinstance(step, plan.Wait):
                if step.reason == "caught up":
                    # What this decision was made on: while neither the slot's words
                    # nor this replica's state move, a wake-up decides the same.
                    followed.idle = _idle_state(part, leader[:4])
                return
            if isinstance(step, plan.Fallback):
                logger.info("%s-%d: %s: using Fetch", part.topic, part.partition, step.reason)
                self._release(key, followed, now)
                return
            if key not in self.serving:
                logger.info("%s-%d: replicating from broker %d through shared memory",
                            part.topic, part.partition, followed.leader)
                self.serving.add(key)
            if isinstance(step, plan.Copy):
                rang = slot.rang_ns()        # the ring of (at least) what is copied
                copying_ns = time.monotonic_ns()
                data, _next = followed.reader.copy(
                    step.start, step.end, self.config.replica_fetch_max_bytes,
                    leader_epoch=state.leader_epoch, log_start=leader.log_start_offset)
                if not plan.copy_valid(state.leader_epoch, leader.leader_epoch,
                                       slot.leader_epoch()):
                    return          # the leader left the epoch during the copy
                if data:
                    part.log.append_as_follower(data)
                appended_ns = time.monotonic_ns()
            # The report first (it is what lets the leader advance its HW), then the
            # core's bookkeeping, as the fetcher sends its next fetch first. A new HW
            # alone is not reported (the leader learns nothing from it).
            leo = part.log.log_end_offset
            if leo != followed.reported_leo or \
                    now - followed.last_report_ms >= self.report_interval_ms:
                stamps = (0, 0, 0, 0)
                if isinstance(step, plan.Copy):
                    # woken by that ring, or (a later write, copied in the same wake-up)
                    # already awake: then it learnt of it when it began this copy
                    woke = self._woke_ns if self._woke_ns >= rang else copying_ns
                    stamps = (rang, woke, appended_ns, time.monotonic_ns())
                slot.report(self._row(part), self.broker_id, state.leader_epoch, leo, stamps)
                followed.reported_leo = leo
                followed.last_report_ms = now
                self.ringer.ring(followed.leader)
            effects = part.core.on_fetch_response(
                error=0, leader_high_watermark=plan.learnt_high_watermark(
                    step, leader.high_watermark, log.high_watermark),
                leader_log_start_offset=leader.log_start_offset,
                leader_log_end_offset=leader.log_end_offset, now_ms=now, log=part.view)
            self.replicas.apply_effects(part, effects)
            if part.log.log_end_offset >= leader.log_end_offset:
                return

    def _slot(self, part: "Partition", followed: _Followed, epoch: int, now: int,
              report_due: bool) -> ReplicationSlot | None:
        """The leader's slot, attached (again, if the leader restarted); None: use Fetch.

        A leader that restarted made a new slot under the same name. It may lead the
        same epoch as before (a controller elected meanwhile tells it its leadership
        again, as Kafka's failover does; this replica refuses that LeaderAndIsr, not a
        newer epoch), and the dead process's slot still holds that epoch (a SIGKILL
        retires nothing): so the name is checked whenever the epochs differ and at
        least at every report (one stat per ``report_interval_ms``), not only when
        they differ, or this follower would read and report to a dead slot for good
        (while ``serving`` keeps Fetch off)."""
        slot = followed.slot
        if slot is not None and (report_due or slot.leader_epoch() != epoch) and \
                slot.replaced():
            _close_follower(followed)
            slot = None
        if slot is None:
            try:
                slot = ReplicationSlot.attach(self.cluster_id, followed.leader, part.topic,
                                              part.partition)
            except SharedMemoryError:
                # The leader replicates by Fetch only (or is elsewhere), or has not made
                # its slot yet: look again soon, then less and less often.
                if followed.slot_retry_ms == 0:
                    logger.info("%s-%d: broker %d has no replication slot (yet): using Fetch "
                                "until it has", part.topic, part.partition, followed.leader)
                followed.slot_retry_ms = plan.slot_retry_ms(
                    followed.slot_retry_ms, self.config.replica_fetch_backoff_ms)
                self._release(part.key, followed, now, followed.slot_retry_ms)
                return None
            followed.slot_retry_ms = 0
            followed.slot = slot
            followed.reader = ReplicaSegmentReader(self.cluster_id, followed.leader,
                                                   slot.log_dir(), part.topic, part.partition)
        return slot

    @staticmethod
    def _leader_running(followed: _Followed, pid: int) -> bool | None:
        """Whether the leader's process runs now: not stopped (SIGSTOP), not a zombie,
        not gone. Its /proc/PID/stat, opened once per leader process and read again
        before every copy (pread: ~4 µs; a descriptor that outlives its process fails
        with ESRCH, so a reused pid cannot pass for it). A leader killed or stopped a
        moment ago is not running, although its files and slot are still there. None:
        no such process to open (gone before we looked, or in another pid namespace):
        the caller leaves the partition to Fetch, which reaches a leader that runs."""
        watch = followed.watch
        if watch is None or watch[0] != pid:
            _unwatch(followed)
            try:
                fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            followed.watch = watch = (pid, fd)
        try:
            stat = os.pread(watch[1], PROC_STAT_BYTES_MAX, 0)
        except OSError:
            return False                    # reaped
        at = stat.rfind(b")") + 2           # the state follows "(comm) "
        return stat[at:at + 1] not in NOT_RUNNING

    def _row(self, part: "Partition") -> int:
        replicas = part.core.replicas
        row = list(replicas).index(self.broker_id)
        if row >= ROWS:
            raise ValueError(f"replica {self.broker_id} is number {row} of {list(replicas)}: "
                             f"a slot has {ROWS} rows")
        return row

    def _release(self, key, followed: _Followed, now: int, wait_ms: int | None = None) -> None:
        """Fetch serves this partition until the retry time (``wait_ms`` from now, by
        default ``replica.fetch.backoff.ms``)."""
        self.serving.discard(key)
        if wait_ms is None:
            wait_ms = self.config.replica_fetch_backoff_ms
        followed.retry_ms = now + max(wait_ms, 1)
        _close_follower(followed)

    # ---- wake-ups --------------------------------------------------------------------------

    def on_bell(self) -> None:
        self._woke_ns = time.monotonic_ns()
        self.bell.drain()
        now = now_ms()
        if self.followed:
            self._replicate(now)
        if self.led:
            self._read_reports()

    def tick(self, now: int) -> None:
        """The broker's tick: heartbeats, retries, reports a lost ring left unread."""
        if self.led:
            partitions = self.replicas.partitions
            for key in self.led:
                part = partitions.get(key)
                if part is not None:
                    self.publish(part)      # the log start moves without an append
            self._read_reports()
        if self.followed:
            self._replicate(now)

    def close(self) -> None:
        for key in list(self.led):
            self.unlead(key)
        for key in list(self.followed):
            self.unfollow(key)
        self.replicas.loop.remove_socket(self.bell.fd)
        self.bell.close()
        self.ringer.close()


def _idle_state(part: "Partition", leader_words: tuple) -> tuple:
    """The slot's (epoch, LEO, HW, log start) and what ``fetch_state`` and
    ``follower_step`` read of this replica: equal tuples, equal decisions."""
    core, log = part.core, part.log
    return (leader_words, log.log_end_offset, log.high_watermark, log.log_start_offset,
            core.leader_epoch, core.leader, core.fetching)


def _unwatch(followed: _Followed) -> None:
    if followed.watch is not None and followed.watch[1] is not None:
        os.close(followed.watch[1])
    followed.watch = None


def _close_follower(followed: _Followed) -> None:
    _unwatch(followed)
    if followed.reader is not None:
        followed.reader.close()
        followed.reader = None
    if followed.slot is not None:
        followed.slot.close()
        followed.slot = None
    followed.reported_leo = -1
    followed.idle = None
