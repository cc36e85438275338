"""Seeded simulation of the replication core: thousands of fault schedules in seconds.

Each seed builds its own schedule of message delays (reordering), drops, broker crashes
(the log survives, the HW comes back from its checkpoint), pauses (SIGSTOP: messages
queue up, the session expires) and isolation (a zombie cut off from everyone, the
coordinator included). A failure names its seed: ``Sim(seed, config).run()`` replays it.
``MK_SIM_SEEDS`` sets how many seeds the main test runs (default 2000).
"""
from __future__ import annotations

import os
import random

import pytest

from node.replication import TruncationMode
from tests.sim.simulator import InvariantViolation, Sim, SimConfig

SEEDS = int(os.environ.get("MK_SIM_SEEDS", "2000"))
CHUNK = 100


def config_for(seed: int, **overrides) -> SimConfig:
    """Vary the environment by seed as well as the schedule."""
    r = random.Random(seed * 7919)
    settings = dict(duration_ms=2_500, heal_ms=2_000,
                    concurrent_faults_max=r.choice([1, 1, 2]),
                    drop_probability=r.choice([0.0, 0.01, 0.05]),
                    delay_ms=r.choice([(1, 5), (1, 15), (1, 40)]),
                    fault_interval_ms=r.choice([(100, 400), (150, 900)]),
                    produce_interval_ms=r.choice([3, 7]))
    settings.update(overrides)
    return SimConfig(**settings)


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_no_acknowledged_write_is_lost_and_invariants_hold(first):
    """NoCommittedRecordLost, LogMatching, HW monotonic, one leader per epoch, consumers
    never see two values at an offset: leader-epoch truncation, clean elections, at most
    two brokers down together (min.insync.replicas = 2 of 3)."""
    acked = 0
    for seed in range(first, min(first + CHUNK, SEEDS)):
        sim = Sim(seed, config_for(seed)).run()
        sim.check_no_committed_record_lost()
        assert not sim.violations
        acked += len(sim.acked)
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
        Sim(seed, config_for(seed, concurrent_faults_max=2)).run().check_no_committed_record_lost()


def test_a_violation_names_the_seed_that_reproduces_it():
    sim = Sim(4242, config_for(4242, duration_ms=500, heal_ms=500)).run()
    broker = sim.brokers[1]
    assert broker.log.hw > 0
    offset = min(broker.log.hw, sim.brokers[0].log.hw, sim.brokers[2].log.hw) - 1
    epoch, _ = broker.log.entries[offset - broker.log.start]
    broker.log.entries[offset - broker.log.start] = (epoch, "forged")
    with pytest.raises(InvariantViolation, match="seed 4242"):
        sim._check_log_matching()


def test_the_same_seed_gives_the_same_run():
    a, b = Sim(7, config_for(7)).run(), Sim(7, config_for(7)).run()
    assert a.acked == b.acked and a.trace == b.trace and a.state == b.state
