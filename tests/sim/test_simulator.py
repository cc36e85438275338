"""Seeded simulation of the replication and controller cores: thousands of fault
schedules in seconds.

Each seed builds its own schedule of message delays (reordering), drops, broker crashes
(the log survives, the HW comes back from its checkpoint), pauses (SIGSTOP: messages
queue up, the session expires) and isolation (a zombie cut off from everyone, the
coordinator included); the controller is the real core on whichever broker won
``/controller``, and fails over with the rest. A failure names its seed and a replay
line. ``MK_SIM_SEEDS`` sets how many seeds the main test runs (default 2000);
``MK_SIM_SEED=N`` runs that one seed only (with its trace on failure).
"""
from __future__ import annotations

import os
import random

import pytest

from node.replication import TruncationMode
from tests.sim.simulator import InvariantViolation, Sim, SimConfig

SEEDS = int(os.environ.get("MK_SIM_SEEDS", "2000"))
ONLY_SEED = os.environ.get("MK_SIM_SEED")
CHUNK = 100


def config_for(seed: int, **overrides) -> SimConfig:
    """Vary the environment by seed as well as the schedule."""
    r = random.Random(seed * 7919)
    settings = dict(duration_ms=2_000, heal_ms=1_500, partitions=r.choice([1, 1, 2, 3]),
                    concurrent_faults_max=r.choice([1, 1, 2]),
                    drop_probability=r.choice([0.0, 0.01, 0.05]),
                    delay_ms=r.choice([(1, 5), (1, 15), (1, 40)]),
                    fault_interval_ms=r.choice([(100, 400), (150, 900)]),
                    produce_interval_ms=r.choice([4, 8]),
                    auto_leader_rebalance=r.random() < 0.3)
    settings.update(overrides)
    return SimConfig(**settings)


def run_checked(seed: int, config: SimConfig) -> Sim:
    sim = Sim(seed, config).run()
    sim.check_no_committed_record_lost()
    if sim.violations:
        sim._fail(f"violations: {sim.violations}")
    return sim


@pytest.mark.parametrize("first", [int(ONLY_SEED)] if ONLY_SEED else range(0, SEEDS, CHUNK))
def test_no_acknowledged_write_is_lost_and_invariants_hold(first):
    """NoCommittedRecordLost, LogMatching, HW monotonic, one leader per epoch, leader in
    ISR within replicas, consumers never see two values at an offset, one controller per
    controller epoch: leader-epoch truncation, clean elections, the real controller core
    failing over with its broker, at most two brokers down together (min.insync.replicas
    = 2 of 3)."""
    acked = 0
    last = first + 1 if ONLY_SEED else min(first + CHUNK, SEEDS)
    for seed in range(first, last):
        acked += len(run_checked(seed, config_for(seed)).acked)
    assert acked > 0, "the simulated client got acknowledgements"


def kip101_double_failure(seed: int, mode: TruncationMode) -> Sim:
    """Leader 0 dies; broker 1 is paused a moment later so that it is elected but never
    serves; follower 2 becomes its follower (and, in high-watermark mode, cuts its log to
    its own lagging HW); broker 1's session expires and 2 becomes leader."""
    config = SimConfig(truncation_mode=mode, random_faults=False, drop_probability=0.0,
                       duration_ms=3_000, heal_ms=3_000)
    sim = Sim(seed, config)
    sim.script(1000, "crash", 0).script(1100, "pause", 1).script(1900, "crash", 1)
    sim.script(2500, "restart", 0).script(2600, "restart", 1)
    return sim.run()


def test_high_watermark_truncation_loses_acked_writes_after_a_double_failure():
    hw_losses = [len(kip101_double_failure(s, TruncationMode.HIGH_WATERMARK).lost())
                 for s in range(20)]
    assert sum(1 for n in hw_losses if n) >= 3, hw_losses
    for seed in range(20):
        sim = kip101_double_failure(seed, TruncationMode.LEADER_EPOCH)
        sim.check_no_committed_record_lost()
        assert not sim.violations


def test_unclean_leader_election_loses_acked_writes():
    unclean = [Sim(s, config_for(s, unclean_leader_election=True, concurrent_faults_max=2)).run()
               for s in range(40)]
    assert any(sim.lost() for sim in unclean), "unclean election must be able to lose data"
    for seed in range(40):
        run_checked(seed, config_for(seed, concurrent_faults_max=2))


@pytest.mark.parametrize("fault", ["crash", "pause", "isolate"])
def test_controller_failover_elects_a_higher_epoch_and_the_old_one_is_fenced(fault):
    """The controller's broker fails for longer than its session: another broker's core
    takes over with the next controller epoch (the writes and requests of each epoch
    come from its one core: checked on every write and every accepted request). A
    paused or cut-off old controller comes back as a zombie: brokers that heard the new
    epoch refuse its requests (STALE_CONTROLLER_EPOCH)."""
    refused = 0
    for seed in range(30):
        sim = Sim(seed, config_for(seed, random_faults=False, drop_probability=0.0,
                                   auto_leader_rebalance=False))
        sim.script_controller(800, fault, 900)
        sim.run()
        sim.check_no_committed_record_lost()
        assert not sim.violations
        assert sim.stats["controller_epochs"] >= 2, sim.trace
        assert sim.zk.controller_epoch[0] >= 2
        assert sim.state["leader"] >= 0
        refused += sim.stats["stale_controller_refused"]
        by_epoch = {epoch: b for b, epoch in sim.terms.values()}
        assert by_epoch[2] != by_epoch[1], by_epoch
    if fault != "crash":
        assert refused > 0, "a zombie controller's requests reach brokers and are refused"


def test_leader_isr_writes_race_the_controller_through_the_coordinator():
    """The leader's conditional ISR writes and the controller's state writes meet at the
    same znode version: some of each lose the race and re-read."""
    totals = {"isr_writes": 0, "isr_write_conflicts": 0, "controller_epochs": 0}
    for seed in range(40):
        sim = run_checked(seed, config_for(seed, partitions=3))
        for key in totals:
            totals[key] += sim.stats[key]
    assert totals["isr_writes"] > 100 and totals["isr_write_conflicts"] > 0, totals
    assert totals["controller_epochs"] > 40, totals


def test_two_controllers_in_one_epoch_is_a_violation():
    sim = Sim(5, config_for(5, duration_ms=300, heal_ms=100, random_faults=False)).run()
    epoch, version = sim.zk.controller_epoch
    other = next(b for b in sim.brokers.values() if b.controller is None)
    with pytest.raises(InvariantViolation, match="seed 5 .*two controllers for controller "
                                                 "epoch"):
        sim._start_controller(other, sim.zk.snapshot(epoch, sim.now), version)


def test_a_violation_names_the_seed_that_reproduces_it():
    sim = Sim(4242, config_for(4242, duration_ms=500, heal_ms=500)).run()
    broker = sim.brokers[1]
    assert broker.log.hw > 0
    offset = min(broker.log.hw, sim.brokers[0].log.hw, sim.brokers[2].log.hw) - 1
    epoch, _ = broker.log.entries[offset - broker.log.start]
    broker.log.entries[offset - broker.log.start] = (epoch, "forged")
    with pytest.raises(InvariantViolation, match="seed 4242") as info:
        sim._check_log_matching()
    assert "replay: Sim(4242, SimConfig(" in str(info.value)


def test_an_assertion_in_a_core_also_names_the_seed():
    sim = Sim(77, config_for(77))
    sim.script(700, "crash", 0)
    real = sim._leader_and_isr

    def broken(broker, entry, controller_epoch):
        assert entry[3] < 1, "a planted core bug"
        return real(broker, entry, controller_epoch)
    sim._leader_and_isr = broken
    with pytest.raises(InvariantViolation, match="seed 77 .*a planted core bug"):
        sim.run()


def test_the_same_seed_gives_the_same_run():
    a, b = Sim(7, config_for(7)).run(), Sim(7, config_for(7)).run()
    assert a.acked == b.acked and a.trace == b.trace and a.state == b.state
    assert a.stats == b.stats
