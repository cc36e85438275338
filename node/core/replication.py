"""Replication of one partition on one broker: a pure core (no I/O, no clock, no log).

Theory of operation (Kafka's replication protocol, ZooKeeper mode, KIP-101/279/320):

- The controller makes this replica a leader or a follower with LeaderAndIsr
  (``become_leader`` / ``become_follower``), carrying the leader epoch, the ISR, the
  replica list and the version of the partition-state znode.
- Leader: every write goes to the leader's log. Followers fetch from their LEO; the
  fetch offset of a follower *is* its LEO as far as the leader knows
  (``on_follower_fetch``). The leader's high watermark (HW) is the minimum LEO over the
  ISR; it never moves backwards within an epoch. A follower that has not caught up to
  the leader's LEO within ``replica_lag_time_max_ms`` is dropped from the ISR (``tick``);
  one whose LEO reaches the HW (and the start of the current epoch) is added back.
  ISR changes are written to the coordinator with a conditional update (``WriteIsr``);
  until the write is confirmed (``on_isr_written``) the HW is computed over the larger
  of the old and the proposed ISR, so a leader that cannot write its shrunken ISR (lost
  session, a newer controller decision) stops acknowledging acks=all writes instead of
  advancing the HW on a shrunken ISR.
- acks: 0 and 1 complete after the local append; all (-1) completes once the HW passes
  the last offset of the append. acks=all is refused before the append with
  NOT_ENOUGH_REPLICAS when |ISR| < min.insync.replicas, and completes with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below it while it waited, and
  with REQUEST_TIMED_OUT after its timeout.
- Follower: on becoming a follower it truncates its log, then fetches from the leader.
  ``high-watermark`` mode (Kafka before KIP-101): truncate to the local HW at once.
  ``leader-epoch`` mode (KIP-101/279): ask the leader for the end offset of the
  follower's latest epoch (OffsetForLeaderEpoch), truncate to
  min(leader's end offset, own end offset of the epoch the leader answered with), and
  only then fetch. When the follower never had the epoch the leader answered with, it
  cuts to the end of its own largest older epoch and asks again for that one (KIP-279). The follower's HW is min(its LEO, the leader's HW).
- Eligible leader replicas (KIP-966, ``eligible_leader_replicas``): the HW does not
  advance while the ISR is smaller than min.insync.replicas ("strict min ISR"), so a
  replica that left the ISR while it was that small still holds everything below the
  HW: it joins the ELR (``next_elr``), from which the controller may elect a leader
  when no ISR member can lead. Once the ISR is back at min.insync.replicas the ELR
  empties. ISR writes carry the ELR.
- Fencing (KIP-320): a LeaderAndIsr with a leader epoch not newer than the current one
  is refused (STALE_CONTROLLER_EPOCH, as Kafka); a fetch carrying an older leader epoch
  gets FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH.

Invariants (asserted): leader in ISR, ISR a subset of replicas; HW never decreases on a
leader within an epoch; log start <= HW <= LEO.

How a shell drives it (``node.broker.server``; the simulator in tests does the same with an
in-memory log):
- Every method takes ``log``: a ``LogView`` of the local log *as it is now*, and
  returns a list of effects. The shell performs them **in order**: ``Truncate``,
  ``TruncateFully``, ``AssignEpoch`` and ``SetHighWatermark`` on the local log before
  anything after them; ``WriteIsr`` to the
  coordinator (conditional on ``zk_version``), reporting back with ``on_isr_written``;
  ``SendOffsetForLeaderEpoch`` to the leader, reporting back with
  ``on_offset_for_leader_epoch``; ``CompleteProduce`` answers the producer.
- Produce on the leader: ``check_produce(acks)`` (error code or 0), then the shell
  appends with ``Log.append_as_leader(records, core.leader_epoch)``, then
  ``on_leader_append(request_id, acks, first_offset, last_offset, timeout_ms, now_ms,
  log)``; ``CompleteProduce`` carries ``first_offset`` back as ``base_offset``.
- A leader answers OffsetForLeaderEpoch with ``answer_offset_for_leader_epoch``.
- LeaderAndIsr: ``check_leader_and_isr(leader_epoch)`` (error code or 0) first.
- Fetch on the leader: from a follower, ``on_follower_fetch(replica_id, fetch_offset,
  leader_epoch, now_ms, log)`` before reading (it may advance the HW); consumers read
  below ``log.high_watermark`` only. ``check_fetch_epoch(epoch)`` for both.
- Follower: ``fetch_state()`` says whether and from where to fetch; after appending a
  fetch response's batches with ``Log.append_as_follower`` the shell calls
  ``on_fetch_response(...)``.
- ``tick(now_ms, log)`` often (every ``replica.lag.time.max.ms / 2`` at least, and for
  produce timeouts); it also retries a failed ISR write and a failed
  OffsetForLeaderEpoch (after ``RETRY_BACKOFF_MS``).
- A request the shell could not deliver or that timed out is reported like an error
  answer (``error=REQUEST_TIMED_OUT``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace as dataclass_replace
from typing import Protocol

from node.wire.errors import ErrorCode
from node.wire.protocol import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class TruncationMode(str, enum.Enum):
    HIGH_WATERMARK = "high-watermark"
    LEADER_EPOCH = "leader-epoch"


class Role(enum.IntEnum):
    NONE = 0        # not yet told anything, or stopped
    LEADER = 1
    FOLLOWER = 2


@dataclass(frozen=True)
class ReplicationConfig:
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1
    truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH
    eligible_leader_replicas: bool = False      # KIP-966 (the broker turns it on)


def lost_replica_is_back(core: "ReplicaCore", leader: int, isr, high_watermark: int,
                         lost_high_watermark: int) -> bool:
    """A replica that lost committed data (its broker keeps a marker, and refuses to lead
    it) is back once it follows a leader, the partition's ISR (as the controller last
    said) has it, and its HW reached the one it had before the loss. Not while the
    partition has no leader (-1): the ISR it is told then is the stale one of before the
    loss, and a wiped checkpoint makes the HW to reach 0 (a wiped replica cleared its
    marker so, and was then elected from that ISR with an empty log)."""
    return (core.role is Role.FOLLOWER and leader >= 0 and leader != core.broker_id
            and core.broker_id in isr and high_watermark >= lost_high_watermark)


def next_elr(old_isr, new_isr, old_elr, min_insync_replicas: int) -> tuple[int, ...]:
    """KIP-966: the eligible leader replicas after the ISR goes from ``old_isr`` to
    ``new_isr``. While the new ISR is below min.insync.replicas the HW cannot pass what
    the replicas leaving it hold, so they join the ELR (and its members stay); once the
    ISR is back at min.insync.replicas every replica that matters is in it, and the ELR
    empties. An ISR member is never in the ELR. (The controller also removes a replica
    that lost data or restarted after an unclean shutdown.)"""
    if len(new_isr) >= min_insync_replicas:
        return ()
    new = set(new_isr)
    return tuple(sorted((set(old_elr) | set(old_isr)) - new))


class LogView(Protocol):
    """What the core may read of the local log (shm.log.Log adapts to it)."""

    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    def latest_epoch(self) -> int:
        """Latest leader epoch in the epoch cache, -1 if none."""
    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """KIP-279: (largest epoch <= ``epoch`` held here, its end offset); (-1, -1) if
        none: the end offset is the next epoch's start offset, or the LEO for the
        latest epoch."""


# ------------------------------------------------------------------ effects

@dataclass(frozen=True)
class Truncate:
    """Truncate the local log to ``offset`` (whole batches; Log.truncate_to)."""
    offset: int


@dataclass(frozen=True)
class TruncateFully:
    """Empty the local log and restart it at ``offset`` (Log.truncate_fully_and_start_at):
    a follower whose LEO is below the leader's log start."""
    offset: int


@dataclass(frozen=True)
class SetHighWatermark:
    offset: int


@dataclass(frozen=True)
class IncrementLogStart:
    """Move the local log start up to ``offset`` (Log.increment_log_start_offset): a
    follower following the leader's DeleteRecords; never above its own HW."""
    offset: int


@dataclass(frozen=True)
class AssignEpoch:
    """Record (leader_epoch, start_offset) in the local leader-epoch cache (Kafka does it
    when a replica becomes leader, so OffsetForLeaderEpoch is right before any write)."""
    leader_epoch: int
    start_offset: int


@dataclass(frozen=True)
class WriteIsr:
    """Conditionally write the partition state znode (leader, leader_epoch, isr) at
    version ``zk_version``, then notify /isr_change_notification; report with
    ``on_isr_written``."""
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    elr: tuple[int, ...] = ()


@dataclass(frozen=True)
class SendOffsetForLeaderEpoch:
    leader: int
    current_leader_epoch: int
    leader_epoch: int          # the follower's latest epoch, whose end offset it asks


@dataclass(frozen=True)
class CompleteProduce:
    request_id: object
    error: int                  # node.wire.errors code, 0 = NONE
    base_offset: int = -1


Effect = (Truncate | TruncateFully | SetHighWatermark | IncrementLogStart | AssignEpoch
          | WriteIsr | SendOffsetForLeaderEpoch | CompleteProduce)


@dataclass(frozen=True)
class FetchState:
    """Where a follower fetches from (None from ``fetch_state`` while it must not)."""
    leader: int
    leader_epoch: int
    fetch_offset: int


@dataclass
class FollowerProgress:
    """What a leader knows of one follower."""
    log_end_offset: int = -1          # its last fetch offset; -1 = unknown
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1   # leader LEO at its previous fetch


@dataclass
class _PendingProduce:
    request_id: object
    first_offset: int
    required_offset: int              # HW must reach this (last offset + 1)
    deadline_ms: int

RETRY_BACKOFF_MS = 100
PENDING_PRODUCES_MAX = 100_000
class ReplicaCore:
    """One partition replica's replication state machine. See the module docstring."""

    def __init__(self, topic: str, partition: int, broker_id: int,
                 config: ReplicationConfig = ReplicationConfig()) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.config = config
        self.role = Role.NONE
        self.leader = -1
        self.leader_epoch = UNDEFINED_EPOCH
        self.leader_epoch_start_offset = 0
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.elr: tuple[int, ...] = ()    # KIP-966, as the partition state holds it
        self.zk_version = -1
        # Leader: an ISR change proposed to the coordinator and not yet confirmed.
        self.pending_isr: tuple[int, ...] | None = None
        self.pending_elr: tuple[int, ...] = ()
        self._isr_write_in_flight = False
        self._isr_retry_ms = 0
        self.followers: dict[int, FollowerProgress] = {}
        self.pending: list[_PendingProduce] = []
        self._hw = 0                      # the HW as this core last set or saw it
        # Follower: truncation first (leader-epoch mode waits for the leader's answer).
        self.fetching = False
        self.awaiting_epoch_answer = False
        self._epoch_request_in_flight = False
        self._epoch_retry_ms = 0

    def __repr__(self) -> str:
        return (f"ReplicaCore({self.topic}-{self.partition} on {self.broker_id}: "
                f"{self.role.name} leader={self.leader} epoch={self.leader_epoch} "
                f"isr={list(self.isr)} pending_isr={self.pending_isr})")

    # ================================================================ controller commands

    def check_leader_and_isr(self, leader_epoch: int) -> int:
        """0 if a LeaderAndIsr with this leader epoch may be applied (it must be newer
        than the one we have, as Kafka); else STALE_CONTROLLER_EPOCH."""
        return 0 if leader_epoch > self.leader_epoch else ErrorCode.STALE_CONTROLLER_EPOCH

    def _apply_partition_state(self, leader: int, leader_epoch: int, isr, replicas,
                               zk_version: int, elr=()) -> None:
        assert leader_epoch > self.leader_epoch, (self, leader_epoch)
        isr, replicas = tuple(isr), tuple(replicas)
        assert set(isr) <= set(replicas), (isr, replicas)
        assert leader < 0 or leader in isr or not isr, (leader, isr)
        self.leader, self.leader_epoch = leader, leader_epoch
        self.isr, self.replicas, self.zk_version = isr, replicas, zk_version
        self.elr = tuple(r for r in elr if r in replicas and r not in isr)
        self.pending_isr, self._isr_write_in_flight = None, False

    def become_leader(self, *, leader_epoch: int, isr, replicas, zk_version: int,
                      now_ms: int, log: LogView, elr=()) -> list[Effect]:
        self._apply_partition_state(self.broker_id, leader_epoch, isr, replicas, zk_version,
                                    elr)
        assert self.broker_id in self.isr, (self, "a leader must be in its ISR")
        self.role = Role.LEADER
        self.fetching = self.awaiting_epoch_answer = self._epoch_request_in_flight = False
        self.leader_epoch_start_offset = log.log_end_offset
        # Kafka resets what it knows of followers: their LEO is unknown until they fetch,
        # so the HW cannot move on stale knowledge; in-ISR followers count as caught up now.
        self.followers = {r: FollowerProgress(last_caught_up_ms=now_ms if r in self.isr else 0,
                                              last_fetch_ms=now_ms)
                          for r in self.replicas if r != self.broker_id}
        self._hw = log.high_watermark
        effects: list[Effect] = [AssignEpoch(leader_epoch, log.log_end_offset)]
        effects += self._maybe_increment_hw(now_ms, log)
        return effects

    def become_follower(self, *, leader: int, leader_epoch: int, isr, replicas,
                        zk_version: int, now_ms: int, log: LogView, elr=()) -> list[Effect]:
        assert leader != self.broker_id, self
        effects = self._fail_pending(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._apply_partition_state(leader, leader_epoch, isr, replicas, zk_version, elr)
        self.role = Role.FOLLOWER
        self.followers = {}
        self._hw = log.high_watermark
        self.fetching = self.awaiting_epoch_answer = self._epoch_request_in_flight = False
        if leader < 0:
            return effects  # no leader: nothing to follow until the controller says
        if self.config.truncation_mode is TruncationMode.HIGH_WATERMARK or \
                log.latest_epoch() < 0:
            # Kafka before KIP-101 (and KIP-101's fallback without epochs): cut to the HW.
            if log.log_end_offset > log.high_watermark:
                effects.append(Truncate(log.high_watermark))
            self.fetching = True
        else:
            self.awaiting_epoch_answer = True
            effects.append(self._epoch_request(log))
        return effects

    def stop(self, now_ms: int) -> list[Effect]:
        effects = self._fail_pending(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.role = Role.NONE
        self.fetching = self.awaiting_epoch_answer = False
        self.followers = {}
        self.pending_isr, self._isr_write_in_flight = None, False
        return effects

    # ================================================================ leader: produce

    def check_produce(self, acks: int) -> int:
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return 0

    def on_leader_append(self, request_id, acks: int, first_offset: int, last_offset: int,
                         timeout_ms: int, now_ms: int, log: LogView) -> list[Effect]:
        assert self.role is Role.LEADER, self
        assert first_offset <= last_offset < log.log_end_offset, (first_offset, last_offset)
        effects: list[Effect] = []
        if acks == -1:
            if len(self.pending) >= PENDING_PRODUCES_MAX:
                effects.append(CompleteProduce(request_id, ErrorCode.REQUEST_TIMED_OUT, first_offset))
            else:
                self.pending.append(_PendingProduce(request_id, first_offset, last_offset + 1,
                                                    now_ms + timeout_ms))
        else:
            effects.append(CompleteProduce(request_id, 0, first_offset))
        effects += self._maybe_increment_hw(now_ms, log)
        return effects

    def _fail_pending(self, error: int) -> list[Effect]:
        effects = [CompleteProduce(p.request_id, error, p.first_offset) for p in self.pending]
        self.pending = []
        return effects

    def _complete_pending(self, hw: int) -> list[Effect]:
        effects, waiting = [], []
        for p in self.pending:
            if p.required_offset <= hw:
                error = 0 if len(self.isr) >= self.config.min_insync_replicas \
                    else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                effects.append(CompleteProduce(p.request_id, error, p.first_offset))
            else:
                waiting.append(p)
        self.pending = waiting
        return effects

    # ================================================================ leader: HW and ISR

    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW is computed over: the committed one plus any proposed member,
        so a shrink only takes effect once the coordinator has it."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def _maybe_increment_hw(self, now_ms: int, log: LogView) -> list[Effect]:
        leo = log.log_end_offset
        candidate = leo
        for r in self.maximal_isr():
            if r != self.broker_id:
                candidate = min(candidate, self.followers[r].log_end_offset)
        effects: list[Effect] = []
        if self.config.eligible_leader_replicas and \
                len(self.isr) < self.config.min_insync_replicas:
            candidate = self._hw      # KIP-966's strict min ISR: the HW waits
        if candidate > self._hw:
            assert candidate <= leo
            self._hw = candidate
            effects.append(SetHighWatermark(candidate))
        if self.pending:
            effects += self._complete_pending(self._hw)
        return effects

    def check_fetch_epoch(self, current_leader_epoch: int) -> int:
        if self.role is Role.NONE:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch < 0:
            return 0
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return 0

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                          log: LogView) -> list[Effect]:
        """A follower's fetch at ``fetch_offset`` (its LEO). Call before reading."""
        if self.role is not Role.LEADER or replica_id not in self.followers:
            return []
        leo = log.log_end_offset
        if fetch_offset > leo or fetch_offset < 0:
            return []  # the shell answers OFFSET_OUT_OF_RANGE; nothing learnt
        progress = self.followers[replica_id]
        if fetch_offset >= leo:
            progress.last_caught_up_ms = now_ms
        elif progress.last_fetch_leader_leo >= 0 and fetch_offset >= progress.last_fetch_leader_leo:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_leo = leo
        progress.last_fetch_ms = now_ms
        progress.log_end_offset = fetch_offset
        effects = self._maybe_expand_isr(replica_id, fetch_offset, now_ms, log)
        effects += self._maybe_increment_hw(now_ms, log)
        return effects

    def _maybe_expand_isr(self, replica_id: int, fetch_offset: int, now_ms: int,
                          log: LogView) -> list[Effect]:
        if replica_id in self.isr or self.pending_isr is not None:
            return []
        if fetch_offset >= self._hw and fetch_offset >= self.leader_epoch_start_offset:
            return self._propose_isr(self.isr + (replica_id,), now_ms)
        return []

    def _propose_isr(self, isr: tuple[int, ...], now_ms: int) -> list[Effect]:
        assert self.broker_id in isr and set(isr) <= set(self.replicas), (isr, self)
        self.pending_isr = isr
        self.pending_elr = next_elr(self.isr, isr, self.elr, self.config.min_insync_replicas) \
            if self.config.eligible_leader_replicas else ()
        self._isr_write_in_flight = True
        return [WriteIsr(self.leader_epoch, isr, self.zk_version, self.pending_elr)]

    def set_min_insync_replicas(self, min_insync_replicas: int, *, now_ms: int,
                                log: LogView) -> list[Effect]:
        """A topic config change of min.insync.replicas, on a running replica. Under the
        strict min ISR a raise above |ISR| holds the HW: the acks=all writes waiting for
        it are answered NOT_ENOUGH_REPLICAS_AFTER_APPEND now (as an ISR shrink answers
        them), not at their timeout; a lowered one may let a held HW move."""
        assert min_insync_replicas >= 1, min_insync_replicas
        self.config = dataclass_replace(self.config, min_insync_replicas=min_insync_replicas)
        if self.role is not Role.LEADER:
            return []
        if self.config.eligible_leader_replicas and \
                len(self.isr) < min_insync_replicas and self.pending:
            return self._fail_pending(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        return self._maybe_increment_hw(now_ms, log)

    def on_isr_written(self, ok: bool, *, isr=None, leader_epoch: int | None = None,
                       zk_version: int | None = None, now_ms: int, log: LogView
                       ) -> list[Effect]:
        """The outcome of a WriteIsr. On success ``zk_version`` is the new version; on a
        conflict, pass what the znode holds now (leader_epoch, isr, zk_version) if it
        could be read, else nothing (the write is retried after a backoff)."""
        if self.role is not Role.LEADER or self.pending_isr is None:
            return []
        self._isr_write_in_flight = False
        if ok:
            assert zk_version is not None
            self.isr, self.zk_version, self.pending_isr = self.pending_isr, zk_version, None
            self.elr = self.pending_elr
            if self.config.eligible_leader_replicas and \
                    len(self.isr) < self.config.min_insync_replicas:
                # Strict min ISR: the HW will not reach them while the ISR is this small;
                # say so now, as the HW passing them would (Kafka's answer).
                return self._fail_pending(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            return self._maybe_increment_hw(now_ms, log)
        if leader_epoch is not None and leader_epoch == self.leader_epoch and \
                zk_version is not None and isr is not None and self.broker_id in isr:
            # Same epoch, other version (e.g. our earlier write did land): adopt and redo.
            self.isr, self.zk_version, self.pending_isr = tuple(isr), zk_version, None
            return self._maybe_increment_hw(now_ms, log)
        # A newer controller decision (or no coordinator): keep the maximal ISR, so the
        # HW cannot advance on the shrunken one; wait for LeaderAndIsr, retrying the write.
        self._isr_retry_ms = now_ms + RETRY_BACKOFF_MS
        return []

    def answer_offset_for_leader_epoch(self, current_leader_epoch: int, requested_epoch: int,
                                       log: LogView) -> tuple[int, int, int]:
        """(error, leader_epoch, end_offset) for an OffsetForLeaderEpoch request."""
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        error = self.check_fetch_epoch(current_leader_epoch)
        if error:
            return error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epoch, end_offset = log.end_offset_for(requested_epoch)
        return 0, epoch, end_offset

    # ================================================================ follower

    def _epoch_request(self, log: LogView) -> SendOffsetForLeaderEpoch:
        self._epoch_request_in_flight = True
        return SendOffsetForLeaderEpoch(self.leader, self.leader_epoch, log.latest_epoch())

    def fetch_state(self, log: LogView) -> FetchState | None:
        if self.role is not Role.FOLLOWER or not self.fetching or self.leader < 0:
            return None
        return FetchState(self.leader, self.leader_epoch, log.log_end_offset)

    def on_offset_for_leader_epoch(self, *, error: int, leader_epoch: int, end_offset: int,
                                   now_ms: int, log: LogView) -> list[Effect]:
        if self.role is not Role.FOLLOWER or not self.awaiting_epoch_answer:
            return []  # an answer to an older request
        self._epoch_request_in_flight = False
        if error:
            self._epoch_retry_ms = now_ms + RETRY_BACKOFF_MS
            return []  # keep the log as it is until the leader answers (KIP-101)
        leo = log.log_end_offset
        if end_offset == UNDEFINED_EPOCH_OFFSET or leader_epoch == UNDEFINED_EPOCH:
            point = log.high_watermark  # the leader knows no epoch of ours: KIP-101 fallback
        else:
            own_epoch, own_end = log.end_offset_for(leader_epoch)
            if 0 <= own_epoch < leader_epoch:
                # KIP-279: we never had the epoch the leader answered with. Cutting to the
                # end of our largest older epoch is only a step: ask again for that epoch
                # (the epochs asked for strictly decrease, so this ends).
                effects: list[Effect] = []
                if own_end < leo:
                    effects.append(Truncate(max(own_end, 0)))
                self._epoch_request_in_flight = True
                effects.append(SendOffsetForLeaderEpoch(self.leader, self.leader_epoch,
                                                        own_epoch))
                return effects
            point = min(end_offset, leo) if own_epoch < 0 else min(end_offset, own_end, leo)
        self.awaiting_epoch_answer = False
        self.fetching = True
        if point < leo:
            return [Truncate(max(point, 0))]
        return []

    def on_fetch_response(self, *, error: int, leader_high_watermark: int,
                          leader_log_start_offset: int, leader_log_end_offset: int,
                          now_ms: int, log: LogView) -> list[Effect]:
        """After the shell appended the response's batches (if any)."""
        if self.role is not Role.FOLLOWER or not self.fetching:
            return []
        if error == 0:
            effects: list[Effect] = []
            hw = min(log.log_end_offset, leader_high_watermark)
            if hw != log.high_watermark and hw >= log.log_start_offset:
                self._hw = hw
                effects.append(SetHighWatermark(hw))
            else:
                hw = log.high_watermark
            # DeleteRecords on the leader: follow its log start, up to our own HW.
            start = min(leader_log_start_offset, hw)
            if start > log.log_start_offset:
                effects.append(IncrementLogStart(start))
            return effects
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            leo = log.log_end_offset
            if leo > leader_log_end_offset >= 0:
                # Ahead of the leader (possible in high-watermark mode after an unclean
                # or HW-lossy election): Kafka before KIP-101 cuts to the leader's LEO.
                return [Truncate(leader_log_end_offset)]
            if leo < leader_log_start_offset:
                return [TruncateFully(leader_log_start_offset)]
        return []  # fenced / not leader: wait for the controller's LeaderAndIsr

    # ================================================================ time

    def tick(self, now_ms: int, log: LogView) -> list[Effect]:
        effects: list[Effect] = []
        if self.role is Role.LEADER:
            effects += self._expire_produces(now_ms)
            if self.pending_isr is None:
                lagging = [r for r in self.isr if r != self.broker_id and
                           now_ms - self.followers[r].last_caught_up_ms >
                           self.config.replica_lag_time_max_ms]
                if lagging:
                    effects += self._propose_isr(
                        tuple(r for r in self.isr if r not in lagging), now_ms)
            elif not self._isr_write_in_flight and now_ms >= self._isr_retry_ms:
                effects += self._propose_isr(self.pending_isr, now_ms)
        elif self.role is Role.FOLLOWER and self.awaiting_epoch_answer and \
                not self._epoch_request_in_flight and now_ms >= self._epoch_retry_ms:
            effects.append(self._epoch_request(log))
        return effects

    def _expire_produces(self, now_ms: int) -> list[Effect]:
        expired = [p for p in self.pending if p.deadline_ms <= now_ms]
        if not expired:
            return []
        self.pending = [p for p in self.pending if p.deadline_ms > now_ms]
        return [CompleteProduce(p.request_id, ErrorCode.REQUEST_TIMED_OUT, p.first_offset)
                for p in expired]

    def check_invariants(self, log: LogView) -> None:
        """Assert DESIGN.md's per-replica invariants (tests and the simulator call it)."""
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset, \
            (self, log.log_start_offset, log.high_watermark, log.log_end_offset)
        if self.role is Role.LEADER:
            assert self.broker_id in self.isr and set(self.isr) <= set(self.replicas), self
            assert self._hw <= log.log_end_offset
