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
  only then fetch. The follower's HW is min(its LEO, the leader's HW).
- Fencing (KIP-320): a LeaderAndIsr with a leader epoch not newer than the current one
  is refused (STALE_CONTROLLER_EPOCH, as Kafka); a fetch carrying an older leader epoch
  gets FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH.

Invariants (asserted): leader in ISR, ISR a subset of replicas; HW never decreases on a
leader within an epoch; log start <= HW <= LEO.

How a shell drives it (``node.broker``; the simulator in tests does the same with an
in-memory log):
- Every method takes ``log``: a ``LogView`` of the local log *as it is now*, and
  returns a list of effects. The shell performs them **in order**: ``Truncate`` and
  ``SetHighWatermark`` on the local log before anything else; ``WriteIsr`` to the
  coordinator (conditional on ``zk_version``), reporting back with ``on_isr_written``;
  ``SendOffsetForLeaderEpoch`` to the leader, reporting back with
  ``on_offset_for_leader_epoch``; ``CompleteProduce`` answers the producer.
- Produce on the leader: ``check_produce(acks)`` (error code or 0), then the shell
  appends with ``Log.append_as_leader(records, core.leader_epoch)``, then
  ``on_leader_append(request_id, acks, last_offset, timeout_ms, now_ms, log)``.
- Fetch on the leader: from a follower, ``on_follower_fetch(replica_id, fetch_offset,
  leader_epoch, now_ms, log)`` before reading (it may advance the HW); consumers read
  below ``log.high_watermark`` only. ``check_fetch_epoch(epoch)`` for both.
- Follower: ``fetch_state()`` says whether and from where to fetch; after appending a
  fetch response's batches with ``Log.append_as_follower`` the shell calls
  ``on_fetch_response(...)``.
- ``tick(now_ms, log)`` often (every ``replica.lag.time.max.ms / 2`` at least, and for
  produce timeouts).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from node import errors as E
from node.protocol import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


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
class SetHighWatermark:
    offset: int


@dataclass(frozen=True)
class WriteIsr:
    """Conditionally write the partition state znode (leader, leader_epoch, isr) at
    version ``zk_version``, then notify /isr_change_notification; report with
    ``on_isr_written``."""
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int


@dataclass(frozen=True)
class SendOffsetForLeaderEpoch:
    leader: int
    current_leader_epoch: int
    leader_epoch: int          # the follower's latest epoch, whose end offset it asks


@dataclass(frozen=True)
class CompleteProduce:
    request_id: object
    error: int                  # node.errors code, 0 = NONE
    base_offset: int = -1


Effect = Truncate | SetHighWatermark | WriteIsr | SendOffsetForLeaderEpoch | CompleteProduce


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
    required_offset: int              # HW must reach this (last offset + 1)
    deadline_ms: int


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
        self.pending_isr: tuple[int, ...] | None = None   # proposed, not yet written
        self.zk_version = -1
        self.followers: dict[int, FollowerProgress] = {}
        self.pending: list[_PendingProduce] = []
        self.fetching = False            # follower: truncation done, fetch allowed
        self.awaiting_epoch_answer = False

    # ---- implemented in node/replication.py below (see the docstrings above)
    def become_leader(self, *, leader_epoch: int, isr, replicas, zk_version: int,
                      now_ms: int, log: LogView) -> list[Effect]:
        raise NotImplementedError

    def become_follower(self, *, leader: int, leader_epoch: int, isr, replicas,
                        zk_version: int, now_ms: int, log: LogView) -> list[Effect]:
        raise NotImplementedError

    def stop(self, now_ms: int) -> list[Effect]:
        """StopReplica / broker shutdown: fail pending produces NOT_LEADER_OR_FOLLOWER."""
        raise NotImplementedError

    def check_produce(self, acks: int) -> int:
        raise NotImplementedError

    def on_leader_append(self, request_id, acks: int, last_offset: int, timeout_ms: int,
                         now_ms: int, log: LogView) -> list[Effect]:
        raise NotImplementedError

    def check_fetch_epoch(self, current_leader_epoch: int) -> int:
        raise NotImplementedError

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                          log: LogView) -> list[Effect]:
        raise NotImplementedError

    def on_isr_written(self, ok: bool, *, isr=None, leader_epoch: int | None = None,
                       zk_version: int | None = None, now_ms: int, log: LogView
                       ) -> list[Effect]:
        raise NotImplementedError

    def fetch_state(self, log: LogView) -> FetchState | None:
        raise NotImplementedError

    def on_fetch_response(self, *, error: int, leader_high_watermark: int,
                          leader_log_start_offset: int, leader_log_end_offset: int,
                          now_ms: int, log: LogView) -> list[Effect]:
        raise NotImplementedError

    def on_offset_for_leader_epoch(self, *, error: int, leader_epoch: int, end_offset: int,
                                   now_ms: int, log: LogView) -> list[Effect]:
        raise NotImplementedError

    def tick(self, now_ms: int, log: LogView) -> list[Effect]:
        raise NotImplementedError
