"""The shared-memory replication path (``replica.transport=shm``) in the simulator: a
mixin of ``Sim``, used when ``SimConfig.replica_transport == "shm"``.

It models what ``node.broker.shm_replication.manager`` does around the pure decisions it
shares with it (``node.broker.shm_replication.plan``: ``follower_step``, ``copy_valid``,
``fresh_reports``), and the world those decisions face:

- A slot is a name per (leader, partition) in /dev/shm. A leader makes one when it
  leads (``lead``: a fresh slot replaces one left by an earlier incarnation under the
  same name) and retires it (epoch -1) and unlinks the name when it stops leading,
  before it may truncate (``unlead``). A crash or power cut retires nothing: the dead
  incarnation's slot keeps its name and its epoch until a new incarnation leads.
- A follower maps the slot under its leader's name and keeps the mapping: a replaced
  slot is noticed only by looking at the name again (when the epochs differ, and at
  every report unless ``shm_check_slot_name_at_report`` is off: the bug of chaos seeds
  2, 14 and 18).
- A copy reads the leader's log directly (its segment files outlive its process), as
  much as the slot's LEO says, whatever the leader's process is doing; doorbells are
  reliable, delayed wake-ups; shared memory is not cut by an isolation.
- The follower's reports reach the leader's core as follower fetches; a partition whose
  leader has no slot, or whose offset is outside it, goes back to Fetch for a while.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from node.broker.shm_replication import plan
from node.core.replication import Role
from shm.replication_slot import FollowerReport, LeaderState

COPY_ENTRIES_MAX = 8           # per copy, as a fetch answer's
COPIES_PER_WAKE_MAX = 4
FETCH_BACKOFF_MS = 100         # replica.fetch.backoff.ms after a fallback


@dataclass
class SimSlot:
    """One slot object; ``Sim.slots`` maps the name to the current one."""
    leader: int
    incarnation: int
    epoch: int = -1
    leo: int = 0
    hw: int = 0
    log_start: int = 0
    reports: dict = field(default_factory=dict)    # follower -> (seq, epoch, leo)

    def state(self) -> LeaderState:
        return LeaderState(leader_epoch=self.epoch, log_end_offset=self.leo,
                           high_watermark=self.hw, log_start_offset=self.log_start, pid=0)


class ShmTransport:
    """``Sim``'s shared-memory replication (module docstring)."""

    def _shm(self) -> bool:
        return self.config.replica_transport == "shm"

    def _report_interval_ms(self) -> int:
        c = self.config
        return plan.report_interval_ms(c.fetch_max_wait_ms, c.replica_lag_time_max_ms)

    # ---- the leader ----------------------------------------------------------------------

    def _own_slot(self, broker, r) -> SimSlot | None:
        slot = self.slots.get((broker.broker_id, r.partition))
        return slot if slot is not None and slot.incarnation == broker.incarnation else None

    def _shm_lead(self, broker, r) -> None:
        """After ``become_leader``: this incarnation's slot (a new one replaces a slot
        left under the name), its reports forgotten."""
        self._shm_detach(r)
        slot = self._own_slot(broker, r)
        if slot is None:
            slot = SimSlot(broker.broker_id, broker.incarnation)
            self.slots[(broker.broker_id, r.partition)] = slot
        r.shm_seen = {}
        self._shm_publish(broker, r)

    def _shm_unlead(self, broker, r) -> None:
        """Before anything that may truncate: retire and unlink this incarnation's slot."""
        slot = self._own_slot(broker, r)
        if slot is not None:
            slot.epoch = -1
            del self.slots[(broker.broker_id, r.partition)]

    def _shm_publish(self, broker, r) -> None:
        slot = self._own_slot(broker, r)
        if slot is None or r.core.role is not Role.LEADER:
            return
        log = r.log
        moved = log.log_end_offset > slot.leo or slot.epoch != r.core.leader_epoch
        slot.epoch, slot.leo = r.core.leader_epoch, log.log_end_offset
        slot.hw, slot.log_start = log.hw, log.log_start_offset
        if moved:
            for b in self.assignment[r.partition]:
                if b != broker.broker_id:
                    self._shm_ring(b)

    def _shm_read_reports(self, broker, r) -> None:
        slot = self._own_slot(broker, r)
        core = r.core
        if slot is None or core.role is not Role.LEADER:
            return
        reports = [FollowerReport(b, seq, epoch, leo, (0, 0, 0, 0))
                   for b, (seq, epoch, leo) in sorted(slot.reports.items())]
        for report in plan.fresh_reports(reports, r.shm_seen, core.leader_epoch,
                                         core.followers):
            if core.role is not Role.LEADER:
                return
            self._perform(broker, r, core.on_follower_fetch(
                report.broker_id, report.log_end_offset, self.now, r.log))

    # ---- the follower --------------------------------------------------------------------

    def _shm_detach(self, r) -> None:
        r.shm_slot = None
        r.shm_serving = False
        r.shm_reported_leo = -1

    def _shm_follow(self, broker, r) -> None:
        """As ``fetchers.follow``: before the core's truncation."""
        self._shm_unlead(broker, r)
        self._shm_detach(r)

    def _shm_release(self, broker, r, wait_ms: int = FETCH_BACKOFF_MS) -> None:
        """Fetch serves the partition for a while."""
        self.stats["shm_fallbacks"] = self.stats.get("shm_fallbacks", 0) + 1
        self._shm_detach(r)
        r.shm_retry_ms = self.now + wait_ms
        self._maybe_fetch(broker, r)

    def _shm_slot(self, broker, r, leader: int, epoch: int, report_due: bool):
        slot = r.shm_slot
        if slot is not None and slot.leader != leader:
            self._shm_detach(r)
            slot = None
        look = report_due if self.config.shm_check_slot_name_at_report else False
        if slot is not None and (look or slot.epoch != epoch) and \
                self.slots.get((leader, r.partition)) is not slot:
            self._shm_detach(r)          # replaced (or unlinked): attach again
            slot = None
        if slot is None:
            slot = self.slots.get((leader, r.partition))
            if slot is None:
                r.shm_slot_retry_ms = plan.slot_retry_ms(r.shm_slot_retry_ms, FETCH_BACKOFF_MS)
                self._shm_release(broker, r, r.shm_slot_retry_ms)
                return None
            r.shm_slot_retry_ms = 0
            r.shm_slot = slot
        return slot

    def _shm_replicate(self, broker, r) -> None:
        if not broker.up or broker.paused or self.now < r.shm_retry_ms:
            return
        core, log = r.core, r.log
        for _ in range(COPIES_PER_WAKE_MAX):
            state = core.fetch_state(log)
            if state is None:
                return
            report_due = self.now - r.shm_last_report_ms >= self._report_interval_ms()
            slot = self._shm_slot(broker, r, state.leader, state.leader_epoch, report_due)
            if slot is None:
                return
            leader = slot.state()
            source_broker = self.brokers[state.leader]
            step = plan.follower_step(
                leader_epoch=state.leader_epoch, fetch_offset=state.fetch_offset,
                high_watermark=log.hw, log_start_offset=log.log_start_offset,
                leader=leader, report_due=report_due,
                leader_running=source_broker.up and not source_broker.paused,
                taking_over=not r.shm_serving)
            if isinstance(step, plan.Wait):
                return
            if isinstance(step, plan.Fallback):
                self._shm_release(broker, r)
                return
            r.shm_serving = True
            if isinstance(step, plan.Copy):
                source = self.brokers[state.leader].parts[r.partition].log
                if source.log_start_offset > step.start:
                    self._shm_release(broker, r)          # a read that fails: Fetch
                    return
                entries = source.read(step.start, COPY_ENTRIES_MAX, step.end)
                if not plan.copy_valid(state.leader_epoch, leader.leader_epoch, slot.epoch):
                    return
                if entries:
                    log.append_as_follower(list(entries), step.start)
                    self.stats["shm_copied"] = self.stats.get("shm_copied", 0) + len(entries)
            leo = log.log_end_offset
            if leo != r.shm_reported_leo or report_due:
                seq = slot.reports.get(broker.broker_id, (0,))[0] + 1
                slot.reports[broker.broker_id] = (seq, state.leader_epoch, leo)
                r.shm_reported_leo, r.shm_last_report_ms = leo, self.now
                self._shm_ring(state.leader)
            self._perform(broker, r, core.on_fetch_response(
                error=0, leader_high_watermark=plan.learnt_high_watermark(
                    step, leader.high_watermark, log.hw),
                leader_log_start_offset=leader.log_start_offset,
                leader_log_end_offset=leader.log_end_offset, now_ms=self.now, log=log))
            if log.log_end_offset >= leader.log_end_offset:
                return

    # ---- wake-ups ------------------------------------------------------------------------

    def _shm_ring(self, b: int) -> None:
        self._at(self.now + self._delay(), self._shm_bell, b)

    def _shm_bell(self, b: int) -> None:
        """A doorbell: a paused broker reads it when it resumes (its tick catches up)."""
        self._shm_wake(self.brokers[b])

    def _shm_wake(self, broker) -> None:
        if not broker.up or broker.paused:
            return
        for r in broker.parts.values():
            if r.core.role is Role.LEADER:
                self._shm_publish(broker, r)
                self._shm_read_reports(broker, r)
            else:
                self._shm_replicate(broker, r)
