"""Composed faults in the simulator (issue 23): two brokers faulty at once, power cuts
among the faults (at most one broker without power at a time), and the fixes that keep
acknowledged writes: broker epochs (KIP-380), durable lost-replica markers, KIP-966's
eligible leader replicas and unclean recovery."""
from __future__ import annotations

import pytest

from tests.sim.simulator import Sim, SimConfig

COMPOSED = dict(brokers=3, partitions=2, duration_ms=4_000, heal_ms=4_000, power_cuts=True,
                concurrent_faults_max=2, eligible_leader_replicas=True)


def composed(seed: int, **overrides) -> Sim:
    return Sim(seed, SimConfig(**{**COMPOSED, **overrides})).run()


@pytest.mark.parametrize("seed", [3, 26])
def test_without_eligible_leader_replicas_a_composed_run_loses_acknowledged_writes(seed):
    """Kafka's ZooKeeper-mode elections: the last ISR member loses its unflushed tail and
    the replicas that still had the records were not in the ISR, so nothing may lead: the
    partition stays offline and the acknowledged records are not there to read (an
    unclean election would lose them outright). Found by a seed sweep of the composed
    configuration."""
    sim = composed(seed, eligible_leader_replicas=False, unclean_recovery=False)
    assert sim.lost(), f"seed {seed} no longer loses without ELR: pick another"
    assert not sim.stats["unclean_recoveries"]


@pytest.mark.parametrize("seed", [3, 26])
def test_eligible_leader_replicas_keep_those_writes(seed):
    sim = composed(seed)
    sim.check_no_committed_record_lost()
    assert not sim.violations, sim.violations


def test_composed_faults_lose_only_after_every_clean_leader_lost_its_data():
    """Over many seeds, a composed run loses acknowledged writes only after an unclean
    recovery, which happens only when every ISR and ELR member lost committed data
    (two power cuts in turn took every copy); the rest keep every write and every
    invariant."""
    recovered = clean = 0
    lossy = []
    for seed in range(30):
        sim = composed(seed)
        if sim.stats["unclean_recoveries"]:
            recovered += 1
            if sim.lost():
                lossy.append(seed)
            continue
        sim.check_no_committed_record_lost()
        assert not sim.violations, (seed, sim.violations)
        clean += 1
    # A broker back from an unclean shutdown leaves the ISRs where another member is
    # live (KIP-966): seed 13 no longer loses 287 records that way, and seeds 12 and 22
    # go through an unclean recovery instead (losing nothing). Before it: 25 clean, 3
    # lossy.
    assert clean >= 24, (clean, recovered)
    assert len(lossy) <= 2, lossy


def test_a_restarted_broker_refuses_requests_meant_for_its_previous_incarnation():
    """KIP-380: a broker restarted before its old session expired is still registered
    under the old one; the controller's requests for that registration reach the new
    incarnation, which refuses them (STALE_BROKER_EPOCH) instead of acting on them."""
    refused = 0
    for seed in range(10):
        sim = composed(seed)
        refused += sim.stats["stale_broker_epoch_refused"]
        if not sim.stats["unclean_recoveries"]:
            sim.check_no_committed_record_lost()
    assert refused > 0


@pytest.mark.parametrize("durable", [True, False])
def test_the_finding_of_a_loss_survives_the_next_restart_only_when_durable(durable):
    """A power-cut follower restarts and registers its loss; it is killed again before
    it caught up. By then its HW checkpoint says nothing is missing (it was rewritten
    from the short log), so only the durable marker still names the partition."""
    config = SimConfig(random_faults=False, drop_probability=0.0, duration_ms=3_000,
                       heal_ms=2_000, partitions=1, durable_lost_marker=durable)
    sim = Sim(1, config)
    sim.script(1_000, "pause", 0)          # keeps broker 1 from catching up in time
    sim.script(1_000, "power-cut", 1)
    sim.script(1_050, "restart", 1)
    sim.script(1_600, "crash", 1)
    sim.script(1_650, "restart", 1)
    seen = []
    sim._at(1_700, lambda: seen.append(sim.brokers[1].lost))
    sim.script(1_800, "resume", 0)
    sim.run()
    assert sim.stats["lost_registrations"] >= 1
    assert bool(seen[0]) is durable, seen
    sim.check_no_committed_record_lost()
