"""The pure decisions of the shared-memory replication path (no I/O).

A follower, woken, compares where its core says to fetch (``FetchState``: leader, leader
epoch, fetch offset = its LEO) with what the leader's slot says (``LeaderState``) and
does one of:

- ``Wait``: nothing to copy now (the leader is not yet, or no longer, in this epoch: a
  LeaderAndIsr is on its way to one of them; or the follower is caught up and the HW
  tells it nothing new);
- ``Copy(start, end)``: copy the batches in [start, end) from the leader's segments,
  then report; only from a leader process that is running (``leader_running``): a
  Fetch reaches no dead or SIGSTOPped leader, so a copy must not either, or a follower
  would rescue what Kafka loses (acks=1 and unclean elections: the data-loss modes this
  project shows) from a dead leader's files;
- ``Report``: a report is due (a heartbeat, as a parked fetch answered after
  ``replica.fetch.wait.max.ms``): the follower's core hears the leader's HW and log
  start with it. A HW or log start that moved alone does not make one, as it does not
  complete a parked Fetch: a follower learns the HW with the next copy or report, one
  round behind the leader, as Kafka's do (KIP-101's scenarios need that lag);
- ``Fallback(reason)``: the offset is outside the leader's log (what Fetch answers
  OFFSET_OUT_OF_RANGE to, and the core's truncation rules handle): this partition goes
  through Fetch, which carries the error to the core.

Truncation on a new leader epoch is not decided here: the core does it through
OffsetForLeaderEpoch (KIP-101/279) before ``fetch_state`` names a fetch offset, exactly
as for Fetch. And the copied bytes are kept only if the slot's epoch did not change
during the copy (``copy_valid``).
"""
from __future__ import annotations

from dataclasses import dataclass

from shm.replication_slot import FollowerReport, LeaderState


@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class Copy:
    start: int
    end: int


@dataclass(frozen=True)
class Report:
    # False for the first report after Fetch served the partition (or at the start): it
    # is a fetch just sent, not a long poll answered (``follower_step``)
    learn_high_watermark: bool = True


@dataclass(frozen=True)
class Fallback:
    reason: str


Step = Wait | Copy | Report | Fallback


def follower_step(*, leader_epoch: int, fetch_offset: int, high_watermark: int,
                  log_start_offset: int, leader: LeaderState, report_due: bool,
                  leader_running: bool = True, taking_over: bool = False) -> Step:
    """What a follower in ``leader_epoch`` at ``fetch_offset`` (its LEO) with its
    ``high_watermark`` and ``log_start_offset`` does next, given the leader's slot and
    whether the leader's process is running (not exited, not stopped); ``taking_over``:
    Fetch served the partition until now (or nothing did yet)."""
    if leader.leader_epoch != leader_epoch:
        return Wait(f"the slot is in epoch {leader.leader_epoch}, the follower in "
                    f"{leader_epoch}")
    if fetch_offset < leader.log_start_offset or fetch_offset > leader.log_end_offset:
        return Fallback(f"offset {fetch_offset} outside the leader's log "
                        f"[{leader.log_start_offset}, {leader.log_end_offset}]")
    if fetch_offset < leader.log_end_offset:
        if not leader_running:
            return Wait("the leader's process is not running")
        return Copy(fetch_offset, leader.log_end_offset)
    if report_due:
        # Taking over from Fetch, a caught-up follower's report is a fetch just sent at
        # the log end, which the leader would park: the leader hears the LEO, and the
        # follower learns the HW at the next copy or report, not now (else it could learn
        # a HW that no Fetch answer would carry for replica.fetch.wait.max.ms: KIP-101's
        # scenario 1 then had nothing to lose, 1 run in 8, when the first writes went by
        # Fetch while the leader's slot was not yet made)
        return Report(learn_high_watermark=not taking_over)
    return Wait("caught up")


SLOT_RETRY_MS_MIN = 10


def slot_retry_ms(previous_ms: int, backoff_ms: int) -> int:
    """How long a follower whose leader has no slot waits before it looks again
    (``previous_ms``: what it waited last time, 0 at first). The leader may just not have
    made it yet: a LeaderAndIsr reaches the followers a moment before the leader, and a
    full ``replica.fetch.backoff.ms`` (1 s by default) spent on Fetch then was a whole
    short benchmark run. So the first look again comes soon and each next one waits
    twice as long, up to the backoff, at which a leader that replicates by Fetch only
    (or from another host) is asked, as a fetcher retries."""
    return max(1, min(backoff_ms, max(SLOT_RETRY_MS_MIN, 2 * previous_ms)))


def learnt_high_watermark(step: Step, leader_high_watermark: int, high_watermark: int) -> int:
    """The HW the follower's core hears after ``step`` (a copy or a report): the leader's,
    or its own (no change) for a report that learns none."""
    if isinstance(step, Report) and not step.learn_high_watermark:
        return high_watermark
    return leader_high_watermark


def report_interval_ms(fetch_wait_max_ms: int, lag_time_max_ms: int) -> int:
    """How often a caught-up follower reports (a heartbeat): as often as a fetcher's long
    poll returns, ``replica.fetch.wait.max.ms``, so that it learns the leader's HW no
    sooner than a Fetch follower would (KIP-101's scenario 1 needs the lag). At least
    twice per ``replica.lag.time.max.ms`` all the same, or a caught-up follower could
    be dropped from the ISR (the config allows a wait up to the lag time)."""
    return max(1, min(fetch_wait_max_ms, lag_time_max_ms // 2))


def copy_valid(leader_epoch: int, before: int, after: int) -> bool:
    """Keep a copy made between two reads of the slot's epoch."""
    return before == leader_epoch and after == leader_epoch


def fresh_reports(reports: list[FollowerReport], seen: dict[int, int], leader_epoch: int,
                  followers) -> list[FollowerReport]:
    """The leader's side: reports it has not acted on yet, in its epoch, from its
    followers; ``seen`` (broker -> seq) is updated. A report of another epoch is a
    follower still fetching for an earlier leader (fenced, as FENCED_LEADER_EPOCH) or
    ahead of this one (UNKNOWN_LEADER_EPOCH): ignored either way."""
    out = []
    for report in reports:
        if report.broker_id not in followers or report.leader_epoch != leader_epoch:
            continue
        if seen.get(report.broker_id) == report.seq:
            continue
        seen[report.broker_id] = report.seq
        out.append(report)
    return out
