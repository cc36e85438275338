"""The controller core's answers to composed faults (issue 23): broker epochs (KIP-380),
leaderships refused by replicas that lost data, KIP-966's eligible leader replicas and
unclean recovery."""
from __future__ import annotations

from node.core import controller
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

from tests.node.core.controller_harness import Harness, broker

B0, B1, B2 = broker(0), broker(1), broker(2)
ELR = controller.ControllerConfig(min_insync_replicas=2, eligible_leader_replicas=True,
                                  unclean_recovery_timeout_ms=10_000)


def start(config=controller.ControllerConfig(), brokers=(B0, B1, B2)) -> Harness:
    h = Harness(config)
    h.add_topic("t", {0: [0, 1, 2]}, {"min.insync.replicas": "2"})
    h.start(list(brokers))
    return h


def answer(h: Harness, api_key, broker_id: int, body: dict) -> None:
    req = [r for r in h.sent if r.api_key == api_key and r.broker_id == broker_id
           and r.tag is not None][-1]
    h.run(controller.BrokerResponse(req.tag, body))


def test_every_request_carries_the_receiving_brokers_epoch():
    h = start()
    assert h.sent
    for req in h.sent:
        assert req.body["broker_epoch"] == 100 + req.broker_id, req


def test_a_refusal_for_a_stale_broker_epoch_fails_that_registration_over():
    """The controller never saw broker 0 bounce: its restarted process refuses requests
    for the old registration, so the controller moves the leadership away and ignores
    that registration until a new one appears."""
    h = start()
    h.hold_tags = True
    h.clear()
    h.brokers_changed([B0, B1, B2])            # nothing changed: no-op
    h.run(controller.IsrChanged({}))
    h.core.step(controller.Tick(0))
    h.run(controller.BrokersChanged((B0, B1, B2)))
    h.clear()
    # Re-send the current state (as a failover would) and refuse it as a new process.
    h.core._leader_and_isr_to_replicas([("t", 0)])
    for e in h.core._out:
        h.sent.append(e)
    h.core._out = []
    answer(h, ApiKey.LEADER_AND_ISR, 0, {"error": ErrorCode.STALE_BROKER_EPOCH,
                                        "partitions": []})
    assert h.zk.state("t", 0).leader == 1
    assert 0 not in h.zk.state("t", 0).isr
    assert "STALE_BROKER_EPOCH" in h.log_text()
    h.run(controller.BrokersChanged((B0, B1, B2)))       # the same old registration: still ignored
    assert 0 not in h.core.brokers
    h.run(controller.BrokersChanged((broker(0, epoch=900), B1, B2)))   # registered again
    assert h.core.brokers[0].epoch == 900


def test_a_leader_that_refuses_as_ineligible_is_replaced():
    h = start()
    h.hold_tags = True
    h.clear()
    h.brokers_changed([B1, B2])                 # leader 0 dies: 1 elected
    assert h.zk.state("t", 0).leader == 1
    answer(h, ApiKey.LEADER_AND_ISR, 1, {"error": ErrorCode.NONE, "partitions": [
        ["t", 0, ErrorCode.INELIGIBLE_REPLICA]]})
    state = h.zk.state("t", 0)
    assert state.leader == 2 and 1 not in state.isr, state
    assert "INELIGIBLE_REPLICA" in h.log_text()


def test_a_replica_that_left_a_small_isr_is_elected_from_the_elr():
    """min.insync.replicas 2: the ISR shrinks to [0, 1] (2 is just lagging), then to [0]:
    1 left while the ISR was below 2, so the HW never passed its log end: it is in the
    ELR. When 0 dies, 1 is elected; without ELR the partition would go offline."""
    h = start(ELR)
    h.isr_changed("t", 0, [0, 1])
    h.brokers_changed([B0, B2])                  # 1 dies: ISR [0], ELR [1]
    assert h.zk.state("t", 0).isr == (0,) and h.zk.state("t", 0).elr == (1,)
    h.brokers_changed([B2])                      # 0 dies too
    h.brokers_changed([broker(1, epoch=700), B2])   # 1 comes back (cleanly)
    state = h.zk.state("t", 0)
    assert state.leader == 1 and state.isr == (1,), state
    assert "from the eligible leader replicas" in h.log_text()


def test_without_elr_the_same_partition_stays_offline():
    h = start(controller.ControllerConfig(min_insync_replicas=2))
    h.isr_changed("t", 0, [0, 1])
    h.brokers_changed([B0, B2])
    h.brokers_changed([B2])
    h.brokers_changed([broker(1, epoch=700), B2])
    assert h.zk.state("t", 0).leader == -1


def test_a_broker_back_from_an_unclean_shutdown_leaves_the_elr_and_is_not_elected():
    h = start(ELR)
    h.isr_changed("t", 0, [0, 1])
    h.brokers_changed([B0, B2])
    h.brokers_changed([B2])
    unclean = controller.Broker(1, "127.0.0.1", 9001, None, 700, frozenset(), clean_shutdown=False)
    h.brokers_changed([unclean, B2])
    state = h.zk.state("t", 0)
    assert state.leader == -1 and 1 not in state.elr, state


def test_unclean_recovery_elects_the_longest_log_once_every_replica_answered():
    h = start(ELR)
    h.isr_changed("t", 0, [0])                   # 1 and 2 lagged out (ISR was 3 >= 2)
    h.brokers_changed([B1, B2])                  # 0 dies: offline, nobody eligible
    assert h.zk.state("t", 0).leader == -1
    h.hold_tags = True
    lost0 = controller.Broker(0, "127.0.0.1", 9000, None, 800, frozenset({("t", 0)}))
    h.brokers_changed([lost0, B1, B2])           # 0 back, but it lost its data
    h.run(controller.Tick(1_000))
    asked = {r.broker_id for r in h.sent if r.api_key == ApiKey.GET_REPLICA_LOG_INFO}
    assert asked == {0, 1, 2}
    for b, (epoch, end) in {0: (0, 10), 1: (0, 250), 2: (0, 200)}.items():
        answer(h, ApiKey.GET_REPLICA_LOG_INFO, b, {"error": 0, "partitions": [
            ["t", 0, 0, epoch, end]]})
    state = h.zk.state("t", 0)
    assert state.leader == 1 and state.isr == (1,), state
    entry = [e for e in h.leader_and_isr_entries(1) if e[3] == state.leader_epoch][-1]
    assert entry[9] == 1, entry                  # RECOVERING: accepted despite a loss
    assert "unclean recovery of t-0: electing broker 1" in h.log_text()
    assert "broker 1 (0)" not in h.log_text()


def test_unclean_recovery_waits_for_a_missing_replica_until_the_timeout():
    h = start(ELR)
    h.isr_changed("t", 0, [0])
    h.brokers_changed([B1])                      # 0 and 2 away
    h.hold_tags = True
    lost0 = controller.Broker(0, "127.0.0.1", 9000, None, 800, frozenset({("t", 0)}))
    h.brokers_changed([lost0, B1])
    h.run(controller.Tick(1_000))
    for b, end in {0: 10, 1: 50}.items():
        answer(h, ApiKey.GET_REPLICA_LOG_INFO, b, {"error": 0, "partitions": [
            ["t", 0, 0, 0, end]]})
    assert h.zk.state("t", 0).leader == -1      # broker 2 may come back with more
    h.run(controller.Tick(12_000))
    assert h.zk.state("t", 0).leader == 1


def test_a_lost_replica_is_back_only_as_a_caught_up_follower_in_the_isr():
    from node.core.replication import ReplicaCore, lost_replica_is_back
    from tests.sim.memlog import MemLog
    core, log = ReplicaCore("t", 0, 1), MemLog()
    assert not lost_replica_is_back(core, 0, (0, 1), 10, 5)       # not following yet
    core.become_follower(leader=0, leader_epoch=1, isr=(0, 1), replicas=(0, 1),
                         zk_version=0, now_ms=0, log=log)
    assert lost_replica_is_back(core, 0, (0, 1), 5, 5)
    assert not lost_replica_is_back(core, 0, (0, 1), 4, 5)        # its HW not back yet
    assert not lost_replica_is_back(core, 0, (0,), 10, 5)         # not in the ISR
    orphan = ReplicaCore("t", 0, 1)                 # told the partition has no leader
    orphan.become_follower(leader=-1, leader_epoch=1, isr=(0, 1, 2), replicas=(0, 1, 2),
                           zk_version=0, now_ms=0, log=MemLog())
    assert not lost_replica_is_back(orphan, -1, (0, 1, 2), 0, 0)   # the stale ISR


def _unclean(i: int, epoch: int) -> controller.Broker:
    return controller.Broker(i, "127.0.0.1", 9000 + i, None, epoch, frozenset(),
                             clean_shutdown=False)


def _failover(h: Harness, brokers) -> Harness:
    """A new controller (broker 2, controller epoch 2) takes over ``h``'s coordinator."""
    h2 = Harness(ELR, broker_id=2, epoch=2)
    h2.zk = h.zk
    h2.start(brokers)
    return h2


def test_a_leader_back_from_an_unclean_shutdown_is_not_told_it_leads_at_failover():
    """Chaos sweep seed 12 (--segment-bytes 65536): broker 0's controlled shutdown made
    1 the leader (ISR [1, 2]); 1, the controller too, lost power at once and came back
    with an empty log before its session expired. The next controller found it leading:
    told so, it led epoch 1 with nothing, and 2 truncated to it (453 acknowledged
    records lost). Now 2, which has them, leads, and 1 is out of the ISR until it has
    caught up."""
    h = start(ELR)
    h.isr_changed("t", 0, [1, 2], leader=1)
    h2 = _failover(h, [_unclean(1, 701), B2])
    state = h2.zk.state("t", 0)
    assert state.leader == 2 and state.isr == (2,) and 1 not in state.elr, state
    assert all(e[2] != 1 for e in h2.leader_and_isr_entries(1)), "1 was told it leads"
    h2.isr_changed("t", 0, [2, 1])              # 2 takes it back in: caught up
    assert ("t", 0) not in h2.core.unclean_isr
    h2.brokers_changed([_unclean(1, 701)])      # 2 dies: 1 may lead now
    assert h2.zk.state("t", 0).leader == 1


def test_a_follower_back_from_an_unclean_shutdown_leaves_the_isr_at_failover():
    h = start(ELR)
    h2 = _failover(h, [B0, _unclean(1, 701), B2])
    state = h2.zk.state("t", 0)
    assert state.leader == 0 and state.isr == (0, 2), state


def test_the_only_isr_member_alive_still_leads_after_an_unclean_shutdown():
    """No live replica is known to hold more: as before, it leads."""
    h = start(ELR)
    h.isr_changed("t", 0, [1, 2], leader=1)
    h2 = _failover(h, [B0, _unclean(1, 701)])
    state = h2.zk.state("t", 0)
    assert state.leader == 1 and 1 in state.isr, state


def test_a_broker_registering_uncleanly_in_a_live_controllers_term_leaves_the_isrs():
    """The controller sees the new registration only (its old one was never seen
    failing, e.g. it registered while this controller was being elected)."""
    h = start(ELR, brokers=(B0, B2))
    h.isr_changed("t", 0, [0, 1, 2])             # as the state says before 1 shows up
    h.clear()
    h.brokers_changed([B0, _unclean(1, 701), B2])
    state = h.zk.state("t", 0)
    assert 1 not in state.isr and state.leader == 0, state
    assert "unclean shutdown" in h.log_text()


def test_a_leaders_isr_write_racing_the_removal_does_not_make_the_unclean_broker_trusted():
    """The controller sends its write taking 1 (back from an unclean shutdown) out of
    the ISR, but the leader's own ISR write, which still names 1, lands first and its
    event comes before the controller's write fails. Only a leader taking 1 *in* says
    it caught up; one keeping it says nothing, so the controller writes the removal
    again (before: 1 stayed in the ISR, trusted, having caught up with nothing)."""
    h = start(ELR)
    h.isr_changed("t", 0, [0, 1, 2])
    effects = h.core.step(controller.BrokersChanged((B0, _unclean(1, 701), B2)))
    writes = [e for e in effects if isinstance(e, controller.ZkOps)]
    assert writes
    h.isr_changed("t", 0, [0, 2, 1])             # the leader's write, and its event
    assert h.core.unclean_isr == {("t", 0): {1}}
    for e in writes:                             # the controller's, now a conflict
        h.run(controller.ZkOpsDone(e.op_id, tuple(h.zk.apply(op) for op in e.ops)))
    state = h.zk.state("t", 0)
    assert 1 not in state.isr and state.leader == 0, state
    h.isr_changed("t", 0, [0, 2, 1])             # taken back in: caught up
    assert ("t", 0) not in h.core.unclean_isr
