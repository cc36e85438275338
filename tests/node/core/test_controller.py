"""The pure controller core, driven event by event against an in-memory coordinator
(tests/node/controller_harness.py performs its effects exactly as the shell does)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from node.core import controller
from node.wire.errors import ErrorCode
from node.wire import zkdata
from node.wire.protocol import ApiKey

from tests.node.core.controller_harness import Harness, broker

B0, B1, B2, B3 = broker(0), broker(1), broker(2), broker(3)


def three_brokers(config=controller.ControllerConfig(), assignment=None, topic_config=None, **kw):
    h = Harness(config)
    h.add_topic("t", assignment or {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]}, topic_config)
    h.start([B0, B1, B2], **kw)
    return h


def state(h, partition=0, topic="t"):
    return h.zk.state(topic, partition)


# ------------------------------------------------------------------ new partitions

def test_new_topic_leader_is_first_live_replica_isr_the_live_replicas_epoch_zero():
    h = Harness()
    h.add_topic("t", {0: [2, 0, 1], 1: [1, 2, 0]})
    h.start([B0, B2])     # broker 1 is down
    assert state(h, 0) == zkdata.PartitionState(2, 0, (2, 0), 1, 0)
    assert state(h, 1) == zkdata.PartitionState(2, 0, (2, 0), 1, 0)
    entries = h.leader_and_isr_entries(0)
    assert ["t", 0, 2, 0, [2, 0], 0, [2, 0, 1], True] in entries
    assert h.requests(ApiKey.LEADER_AND_ISR, 1) == []


def test_every_request_carries_the_controller_epoch_and_id():
    h = three_brokers()
    assert h.sent
    for req in h.sent:
        assert req.body["controller_epoch"] == 1 and req.body["controller_id"] == 0
        assert req.endpoint == f"tcp://127.0.0.1:{9000 + req.broker_id}"


def test_state_znodes_are_written_before_brokers_hear_of_them():
    h = three_brokers()
    first_send = next(i for i, e in enumerate(h.effects)
                      if isinstance(e, controller.SendRequest)
                      and e.api_key == ApiKey.LEADER_AND_ISR)
    first_write = next(i for i, e in enumerate(h.effects) if isinstance(e, controller.ZkOps))
    assert first_write < first_send


def test_new_partitions_of_an_existing_topic_get_states():
    h = three_brokers()
    h.zk.put(zkdata.topic_path("t"), zkdata.encode_assignment(
        {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1], 3: [0, 2, 1]}))
    h.clear()
    h.run(controller.TopicChanged(h.topic_snapshot("t")))
    assert state(h, 3) == zkdata.PartitionState(0, 0, (0, 2, 1), 1, 0)
    assert state(h, 0).zk_version == 0          # untouched
    assert ["t", 3, 0, 0, [0, 2, 1], 0, [0, 2, 1], True] in h.leader_and_isr_entries(1)


def test_new_partition_with_no_live_replica_waits_for_one():
    h = Harness()
    h.add_topic("t", {0: [1, 2]})
    h.start([B0])
    assert h.zk.get(zkdata.partition_state_path("t", 0)) is None
    assert "no live replica" in h.log_text()
    h.brokers_changed([B0, B2])
    assert state(h) == zkdata.PartitionState(2, 0, (2,), 1, 0)


# ------------------------------------------------------------------ log dir failure

def test_offline_replicas_lose_leadership_and_leave_the_isr():
    h = three_brokers()          # t-0 led by 0, t-1 by 1, t-2 by 2
    h.clear()
    h.run(controller.ReplicasOffline(0, (("t", 0), ("t", 1))))
    assert state(h, 0) == zkdata.PartitionState(1, 1, (1, 2), 1, 1)     # leader moved
    assert state(h, 1) == zkdata.PartitionState(1, 1, (1, 2), 1, 1)     # follower left the ISR
    assert state(h, 2) == zkdata.PartitionState(2, 0, (2, 0, 1), 1, 0)  # not named: untouched
    assert "replicas of broker 0 went offline (log dir failure): t-0, t-1" in h.log_text()
    entries = [e for r in h.requests(ApiKey.UPDATE_METADATA) for e in r.body["partitions"]]
    assert any(e[0] == "t" and e[1] == 0 and e[-1] == [0] for e in entries)  # offline replica
    # The same notification again changes nothing.
    h.clear()
    h.run(controller.ReplicasOffline(0, (("t", 0),)))
    assert not h.requests(ApiKey.LEADER_AND_ISR) and state(h, 0).zk_version == 1


def test_an_offline_replica_is_never_elected_until_its_broker_restarts():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.run(controller.ReplicasOffline(0, (("t", 0),)))
    assert state(h).leader == 1
    h.isr_changed("t", 0, [1, 2, 0])      # even back in the ISR (it cannot fetch, though)
    h.run(controller.ElectionRequested((("t", 0),), "preferred", -1))
    assert state(h).leader == 1           # the preferred replica is offline
    h.brokers_changed([B0, B2])           # leader 1 dies: 2 is elected, not the offline 0
    assert state(h).leader == 2 and 0 not in state(h).isr
    assert h.core.offline_replicas == {0: {("t", 0)}}
    h.brokers_changed([B2])               # 0 stops; restarted, its dirs are back
    h.brokers_changed([broker(0, epoch=700), B2])
    assert h.core.offline_replicas == {}


def test_a_notification_without_partitions_means_every_replica_of_the_broker():
    h = three_brokers()
    h.run(controller.ReplicasOffline(2, ()))
    for p in range(3):
        assert 2 not in state(h, p).isr and state(h, p).leader != 2


def test_a_notification_for_an_unregistered_broker_is_ignored():
    h = three_brokers()
    assert h.run(controller.ReplicasOffline(7, (("t", 0),))) == []
    assert state(h, 0).zk_version == 0


def test_a_wiped_leader_restarting_alone_is_not_elected_and_the_isr_is_kept():
    """Every broker died; broker 0, the leader, comes back first with its data gone (its
    registration names t-0 as lost). It must not lead with an empty log, and the ISR
    must keep the replicas that have the data, so that one of them leads on return."""
    h = three_brokers(assignment={0: [0, 1, 2]})
    h2 = Harness(broker_id=0, epoch=2)
    h2.zk = h.zk
    wiped = controller.Broker(0, "127.0.0.1", 9000, None, 500, frozenset({("t", 0)}))
    h2.start([wiped])
    after = state(h2)
    assert after.leader == -1 and set(after.isr) == {0, 1, 2}, after
    assert "broker 0 lost committed data of replicas it was in the ISR of (t-0)" in h2.log_text()
    h2.brokers_changed([wiped, B2])              # a replica with the data returns
    assert state(h2).leader == 2 and state(h2).isr == (2,)
    # Broker 0 catches up and the leader takes it back into the ISR: eligible again.
    h2.isr_changed("t", 0, [2, 0])
    h2.brokers_changed([wiped])                  # 2 dies: 0 (caught up) is elected
    assert state(h2).leader == 0


# ------------------------------------------------------------------ broker failure

def test_leader_death_elects_first_live_isr_member_in_isr_order():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0, 2, 1])            # the ISR's order, not the assignment's
    h.clear()
    h.brokers_changed([B1, B2])
    assert state(h) == zkdata.PartitionState(2, 1, (2, 1), 1, 2)
    assert ["t", 0, 2, 1, [2, 1], 2, [0, 1, 2], False] in h.leader_and_isr_entries(1)
    assert h.requests(ApiKey.LEADER_AND_ISR, 0) == []


def test_follower_death_removes_it_from_the_isr_with_a_new_leader_epoch():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.clear()
    h.brokers_changed([B0, B1])
    assert state(h) == zkdata.PartitionState(0, 1, (0, 1), 1, 1)
    assert {r.broker_id for r in h.requests(ApiKey.LEADER_AND_ISR)} == {0, 1}


def test_death_of_a_replica_outside_the_isr_changes_no_state():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0, 1])
    before = state(h)
    h.brokers_changed([B0, B1])
    assert state(h) == before


def test_last_isr_replica_dies_partition_goes_offline_without_unclean_election():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0])                  # followers fell out of the ISR
    h.clear()
    h.brokers_changed([B1, B2])
    assert state(h) == zkdata.PartitionState(-1, 1, (0,), 1, 2)
    assert "NoReplicaOnlineException: No replica in ISR for partition t-0 is alive" in h.log_text()
    # The remaining replicas hear that there is no leader.
    assert ["t", 0, -1, 1, [0], 2, [0, 1, 2], False] in h.leader_and_isr_entries(1)
    # Another broker event does not elect an out-of-sync replica.
    h.brokers_changed([B1, B2, B3])
    assert state(h).leader == -1


def test_offline_partition_comes_back_when_an_isr_replica_returns():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0])
    h.brokers_changed([B1, B2])
    h.clear()
    h.brokers_changed([broker(0, epoch=500), B1, B2])
    assert state(h) == zkdata.PartitionState(0, 2, (0,), 1, 3)
    assert ["t", 0, 0, 2, [0], 3, [0, 1, 2], False] in h.leader_and_isr_entries(0)


def test_isr_replica_back_while_the_offline_write_is_in_flight_is_elected():
    """Found by the simulator (tests/sim, seed 99 at the time): the last ISR replica's
    session expires, the controller writes the partition offline, and the replica
    re-registers before that write's answer arrives. The startup was decided on the
    state before the write (leader 0, "alive"), so nothing was elected and the
    partition stayed offline with its ISR replica alive."""
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0])
    core = h.core
    ops = [e for e in core.step(controller.BrokersChanged((B1, B2)))
           if isinstance(e, controller.ZkOps)]
    assert len(ops) == 1
    results = tuple(h.zk.apply(op) for op in ops[0].ops)     # the write lands ...
    assert state(h).leader == -1
    # ... but the core hears of broker 0's return first: its state still says leader 0.
    assert not [e for e in core.step(controller.BrokersChanged((broker(0, epoch=500), B1, B2)))
                if isinstance(e, controller.ZkOps)]
    h.run(controller.ZkOpsDone(ops[0].op_id, results))
    assert state(h).leader == 0 and state(h).isr == (0,)


def test_unclean_election_enabled_by_broker_config_elects_an_out_of_sync_replica():
    h = three_brokers(controller.ControllerConfig(unclean_leader_election_enable=True),
                      assignment={0: [0, 2, 1]})
    h.isr_changed("t", 0, [0])
    h.brokers_changed([B1, B2])
    assert state(h) == zkdata.PartitionState(2, 1, (2,), 1, 2)
    assert "Unclean leader election" in h.log_text()


@pytest.mark.parametrize("broker_flag,topic_flag,elected", [
    (False, "true", True), (True, "false", False), (False, None, False)])
def test_topic_override_of_unclean_leader_election_enable(broker_flag, topic_flag, elected):
    cfg = None if topic_flag is None else {"unclean.leader.election.enable": topic_flag}
    h = three_brokers(controller.ControllerConfig(unclean_leader_election_enable=broker_flag),
                      assignment={0: [0, 1, 2]}, topic_config=cfg)
    h.isr_changed("t", 0, [0])
    h.brokers_changed([B1, B2])
    assert (state(h).leader == 1) is elected
    assert (state(h).leader == -1) is (not elected)


def test_enabling_unclean_election_on_a_topic_elects_its_offline_partitions():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0])
    h.brokers_changed([B1, B2])
    h.run(controller.TopicConfigChanged("t", {"unclean.leader.election.enable": "true"}))
    assert state(h).leader == 1 and state(h).isr == (1,)


def test_simultaneous_death_of_the_whole_isr_keeps_it_for_the_return():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0, 1])
    h.brokers_changed([B2])
    assert state(h) == zkdata.PartitionState(-1, 1, (0, 1), 1, 2)
    h.brokers_changed([B1, B2])
    assert state(h) == zkdata.PartitionState(1, 2, (1,), 1, 3)


def test_bounced_broker_is_a_failure_and_a_restart():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.clear()
    h.brokers_changed([broker(0, epoch=999), B1, B2])   # same id, new registration
    assert state(h).leader == 1 and state(h).leader_epoch == 1
    assert h.leader_and_isr_entries(0)                    # the restarted broker is told


def test_restarted_broker_gets_leader_and_isr_for_its_replicas_and_full_metadata():
    h = three_brokers(assignment={0: [0, 1, 2], 1: [1, 2, 0]})
    h.brokers_changed([B0, B1])
    h.clear()
    h.brokers_changed([B0, B1, B2])
    entries = h.leader_and_isr_entries(2)
    assert sorted(e[1] for e in entries) == [0, 1]
    assert all(e[4] == [0, 1] or e[4] == [1, 0] for e in entries)   # not in the ISR yet
    um = h.requests(ApiKey.UPDATE_METADATA, 2)[0].body
    assert len(um["partitions"]) == 2 and [b[0] for b in um["brokers"]] == [0, 1, 2]


# ------------------------------------------------------------------ ISR changes by leaders

def test_isr_change_notification_updates_metadata_everywhere():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.clear()
    h.isr_changed("t", 0, [0, 1])
    assert {r.broker_id for r in h.requests(ApiKey.UPDATE_METADATA)} == {0, 1, 2}
    entry = h.requests(ApiKey.UPDATE_METADATA, 0)[0].body["partitions"][0]
    assert entry[:6] == ["t", 0, 0, 0, [0, 1], 1]
    assert h.core.states[("t", 0)].zk_version == 1


def test_stale_isr_notification_is_ignored():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0, 1])
    h.clear()
    old = zkdata.PartitionState(0, 0, (0, 1, 2), 1, 0)
    h.run(controller.IsrChanged({("t", 0): old}))
    assert h.core.states[("t", 0)].isr == (0, 1) and h.sent == []


# ------------------------------------------------------------------ conditional writes

def test_version_conflict_rereads_the_state_and_decides_again():
    h = three_brokers(assignment={0: [0, 1, 2]})
    # The leader shrinks its ISR to [0, 2] in the coordinator, and the controller has not
    # heard of it when broker 0 dies.
    h.zk.put(zkdata.partition_state_path("t", 0),
             zkdata.encode_partition_state(zkdata.PartitionState(0, 0, (0, 2), 1)))
    h.clear()
    h.brokers_changed([B1, B2])
    writes = [op for ops in h.zk_ops for op in ops.ops if isinstance(op, controller.ZkSetData)]
    assert [w.version for w in writes] == [0, 1]          # conditional, then re-decided
    assert state(h) == zkdata.PartitionState(2, 1, (2,), 1, 2)


def test_a_state_read_back_after_a_conflict_that_needs_no_write_is_still_announced():
    """CI (test_unclean_election_brings_an_offline_partition_back): the leader shrank its
    ISR to [0] in the coordinator as the controller handled the follower's death; the
    controller's write met the new version, it read the state back and found nothing
    left to write, and the leader's ISR notification then carried the version it
    already held: nobody sent UpdateMetadata, and every broker kept answering ISR [0, 1]."""
    h = Harness()
    h.add_topic("t", {0: [0, 1]})
    h.start([B0, B1])
    shrunk = zkdata.PartitionState(0, 0, (0,), 1)
    version = h.zk.put(zkdata.partition_state_path("t", 0),
                       zkdata.encode_partition_state(shrunk))
    h.clear()
    h.brokers_changed([B0])
    h.run(controller.IsrChanged({("t", 0): replace(shrunk, zk_version=version)}))
    assert state(h) == zkdata.PartitionState(0, 0, (0,), 1, 1)   # nothing else written
    entries = [e for r in h.requests(ApiKey.UPDATE_METADATA, 0) for e in r.body["partitions"]]
    assert entries and entries[-1][:6] == ["t", 0, 0, 0, [0], 1]


def test_every_state_write_is_conditional_on_the_version_held():
    h = three_brokers()
    h.brokers_changed([B1, B2])          # t-0 leader 0 -> 1, and 0 leaves every ISR
    h.brokers_changed([B0, B1, B2])
    h.isr_changed("t", 0, [1, 2, 0])     # t-0's leader takes 0 back: version 2
    h.run(controller.ElectionRequested(None))     # preferred: t-0 back to 0
    writes = [(op.path.split("/")[5], op.version) for ops in h.zk_ops for op in ops.ops
              if isinstance(op, controller.ZkSetData) and op.path.endswith("/state")]
    assert writes == [("0", 0), ("1", 0), ("2", 0), ("0", 2)]
    assert state(h) == zkdata.PartitionState(0, 2, (1, 2, 0), 1, 3)


def test_a_state_written_by_a_newer_controller_makes_this_one_resign():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.zk.put(zkdata.partition_state_path("t", 0),
             zkdata.encode_partition_state(zkdata.PartitionState(1, 5, (1, 2), 7)))
    h.brokers_changed([B1, B2])
    assert h.resigned and "controller epoch 7" in h.resigned[0].reason
    assert not h.core.active
    h.clear()
    assert h.brokers_changed([B2]) == []


def test_fenced_write_resigns_and_stale_controller_ignores_everything_after():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.zk.fenced = True            # another controller bumped /controller_epoch
    h.clear()
    h.brokers_changed([B1, B2])
    assert h.resigned and not h.core.active
    assert h.requests(ApiKey.LEADER_AND_ISR, 1) == []     # nothing sent on a failed write
    reply = h.core.step(controller.ControlledShutdownRequested("r", 1))
    assert reply[0].body["error"] == ErrorCode.NOT_CONTROLLER


def test_leader_epoch_strictly_increases_and_leader_is_in_isr_through_a_storm():
    h = three_brokers(controller.ControllerConfig(unclean_leader_election_enable=True))
    seen: dict = {}
    sequence = [[B1, B2], [B2], [], [B0], [B0, B1, B2], [B1], [broker(0, 7), B1, B2]]
    for brokers in sequence:
        h.brokers_changed(brokers)
        for p in range(3):
            s = state(h, p)
            assert s.leader == -1 or s.leader in s.isr
            assert set(s.isr) <= {0, 1, 2}
            assert s.leader_epoch >= seen.get(p, -1)
            seen[p] = s.leader_epoch
    epochs = {}
    for req in h.requests(ApiKey.LEADER_AND_ISR):
        for t, p, leader, epoch, isr, *_ in req.body["partitions"]:
            if leader >= 0:
                assert epochs.setdefault((p, epoch), leader) == leader   # one leader per epoch


# ------------------------------------------------------------------ failover

def test_failover_rebuilds_state_elects_for_dead_leaders_and_tells_every_replica():
    h = three_brokers(assignment={0: [0, 1, 2], 1: [1, 2, 0]})
    # A new controller (broker 1, epoch 2) takes over after broker 0 died unnoticed.
    h2 = Harness(broker_id=1, epoch=2)
    h2.zk = h.zk
    h2.start([B1, B2])
    assert state(h2, 0) == zkdata.PartitionState(1, 1, (1, 2), 2, 1)
    assert state(h2, 1) == zkdata.PartitionState(1, 1, (1, 2), 2, 1)
    # Every live replica is told the state with the new controller epoch.
    assert all(r.body["controller_epoch"] == 2 for r in h2.sent)
    assert {e[1] for e in h2.leader_and_isr_entries(2)} == {0, 1}


def test_failover_resumes_pending_admin_work():
    h = three_brokers(assignment={0: [1, 0, 2]})
    h.brokers_changed([B0, B2])                # 1 dies: 0 leads
    h.brokers_changed([B0, broker(1, 300), B2])
    h.isr_changed("t", 0, [0, 2, 1])           # 1 caught up
    assert state(h).leader == 0
    h2 = Harness(broker_id=2, epoch=2)
    h2.zk = h.zk
    h2.zk.put(zkdata.PREFERRED_REPLICA_ELECTION, zkdata.encode_partition_list([("t", 0)]))
    h2.start([B0, broker(1, 300), B2],
             election=controller.ElectionRequested((("t", 0),), "preferred", 0))
    assert state(h2).leader == 1 and state(h2).controller_epoch == 2
    assert h2.zk.get(zkdata.PREFERRED_REPLICA_ELECTION) is None


def test_failover_initializes_partitions_the_old_controller_never_did():
    h = Harness(epoch=4)
    h.add_topic("t", {0: [1, 2]})              # written by an admin; no state yet
    h.start([B0, B1, B2])
    assert state(h) == zkdata.PartitionState(1, 0, (1, 2), 4, 0)


# ------------------------------------------------------------------ preferred election

def _move_leader_off_preferred(h):
    h.brokers_changed([B1, B2])               # broker 0 (preferred of t-0) dies
    h.brokers_changed([broker(0, 300), B1, B2])
    h.isr_changed("t", 0, [1, 2, 0])          # it catches up and rejoins the ISR
    assert state(h).leader == 1


def test_preferred_replica_election_moves_leadership_back():
    h = three_brokers(assignment={0: [0, 1, 2]})
    _move_leader_off_preferred(h)
    h.zk.put(zkdata.PREFERRED_REPLICA_ELECTION, zkdata.encode_partition_list([("t", 0)]))
    before = state(h)
    h.clear()
    h.run(controller.ElectionRequested((("t", 0),), "preferred", 0))
    after = state(h)
    assert (after.leader, after.leader_epoch, after.isr) == (0, before.leader_epoch + 1, before.isr)
    assert h.zk.get(zkdata.PREFERRED_REPLICA_ELECTION) is None
    assert {r.broker_id for r in h.requests(ApiKey.LEADER_AND_ISR)} == {0, 1, 2}


def test_preferred_election_needs_the_preferred_replica_in_the_isr():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.brokers_changed([B1, B2])
    h.brokers_changed([broker(0, 300), B1, B2])    # back, but not caught up
    before = state(h)
    h.run(controller.ElectionRequested(None, "preferred"))
    assert state(h) == before


def test_requested_unclean_election_elects_a_live_replica_of_an_offline_partition():
    h = three_brokers(assignment={0: [0, 1, 2], 1: [1, 2, 0]})
    h.isr_changed("t", 0, [0])
    h.brokers_changed([B1, B2])
    assert state(h, 0).leader == -1
    before1 = state(h, 1)
    h.run(controller.ElectionRequested(None, "unclean"))
    assert state(h, 0) == zkdata.PartitionState(1, 2, (1,), 1, 3)
    assert state(h, 1) == before1            # had a leader: not touched


# ------------------------------------------------------------------ auto rebalance

def test_auto_rebalance_runs_when_a_brokers_imbalance_exceeds_the_percentage():
    cfg = controller.ControllerConfig(auto_leader_rebalance_enable=True,
                                      leader_imbalance_check_interval_seconds=30,
                                      leader_imbalance_per_broker_percentage=10)
    h = three_brokers(cfg, assignment={0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]})
    _move_leader_off_preferred(h)
    h.run(controller.Tick(4_999))
    assert state(h).leader == 1               # first check 5 s after failover
    h.run(controller.Tick(5_000))
    assert state(h).leader == 0
    assert "leader imbalance of broker 0: 100.0% > 10%" in h.log_text()


def test_auto_rebalance_respects_the_threshold_and_the_interval():
    cfg = controller.ControllerConfig(auto_leader_rebalance_enable=True,
                                      leader_imbalance_check_interval_seconds=30,
                                      leader_imbalance_per_broker_percentage=50)
    h = three_brokers(cfg, assignment={0: [0, 1, 2], 1: [0, 2, 1], 2: [2, 0, 1]})
    h.run(controller.Tick(5_000))                      # balanced: next check at 35 s
    h.brokers_changed([B1, B2])
    h.brokers_changed([broker(0, 300), B1, B2])
    h.isr_changed("t", 0, [1, 2, 0])
    h.isr_changed("t", 1, [2, 1, 0])
    assert h.core.imbalance()[0] == (2, 2)
    h.run(controller.Tick(34_999))
    assert state(h, 0).leader == 1
    h.run(controller.Tick(35_000))                     # 100% > 50%
    assert state(h, 0).leader == 0 and state(h, 1).leader == 0


def test_auto_rebalance_at_or_below_the_threshold_does_nothing_and_disabled_never_runs():
    cfg = controller.ControllerConfig(auto_leader_rebalance_enable=True,
                                      leader_imbalance_per_broker_percentage=50)
    h = three_brokers(cfg, assignment={0: [0, 1, 2], 1: [0, 2, 1]})
    h.brokers_changed([B1, B2])
    h.brokers_changed([broker(0, 300), B1, B2])
    h.isr_changed("t", 0, [1, 2, 0])
    h.isr_changed("t", 1, [2, 1, 0])
    h.run(controller.ElectionRequested((("t", 1),)))   # t-1 back on 0; t-0 still on 1
    assert h.core.imbalance()[0] == (1, 2)    # 50% is not > 50%
    h.run(controller.Tick(10_000))
    assert state(h, 0).leader == 1 and state(h, 1).leader == 0
    off = three_brokers(controller.ControllerConfig(auto_leader_rebalance_enable=False),
                        assignment={0: [0, 1, 2]})
    _move_leader_off_preferred(off)
    off.run(controller.Tick(10**9))
    assert state(off).leader == 1


# ------------------------------------------------------------------ controlled shutdown

def test_controlled_shutdown_moves_leadership_and_shrinks_isrs_before_answering():
    h = three_brokers(assignment={0: [0, 1, 2], 1: [1, 0, 2], 2: [0]})
    h.clear()
    h.run(controller.ControlledShutdownRequested("req-1", 0, B0.epoch))
    # t-0: led by 0 -> first replica alive, in ISR, not shutting down; ISR without 0.
    assert state(h, 0) == zkdata.PartitionState(1, 1, (1, 2), 1, 1)
    # t-1: 0 follows -> leaves the ISR; 0 gets StopReplica(delete=false) for it.
    assert state(h, 1) == zkdata.PartitionState(1, 1, (1, 2), 1, 1)
    stops = h.requests(ApiKey.STOP_REPLICA, 0)
    assert stops and stops[0].body["delete_partitions"] is False
    assert stops[0].body["partitions"] == [["t", 1, -1]]
    # t-2 has one replica: not moved, not reported (Kafka counts RF > 1 only).
    reply = h.replies[-1]
    assert reply.request_id == "req-1" and reply.body == {"error": 0, "remaining_partitions": []}
    last_write = max(i for i, e in enumerate(h.effects) if isinstance(e, controller.ZkOps))
    assert h.effects.index(reply) > last_write


def test_controlled_shutdown_reports_partitions_without_another_isr_replica():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.isr_changed("t", 0, [0])
    h.run(controller.ControlledShutdownRequested("r", 0))
    assert h.replies[-1].body["remaining_partitions"] == [["t", 0]]
    assert state(h).leader == 0
    # A shutting-down broker is never elected, even by a later failure.
    h.isr_changed("t", 0, [0, 1])
    h.run(controller.ControlledShutdownRequested("r2", 1))
    assert state(h).leader == 0


def test_controlled_shutdown_of_unknown_broker_or_stale_epoch_is_refused():
    h = three_brokers()
    h.run(controller.ControlledShutdownRequested("a", 9))
    assert h.replies[-1].body["error"] == ErrorCode.BROKER_NOT_AVAILABLE
    h.run(controller.ControlledShutdownRequested("b", 1, broker_epoch=12345))
    assert h.replies[-1].body["error"] != 0


# ------------------------------------------------------------------ reassignment

def _reassign(h, moves):
    data = zkdata.encode_reassignment(moves)
    h.zk.put(zkdata.REASSIGN_PARTITIONS, data)
    return h.run(controller.ReassignmentRequested(moves, h.zk.get(zkdata.REASSIGN_PARTITIONS)[1]))


def test_reassignment_adds_catches_up_moves_leader_and_drops_old_replicas():
    h = Harness()
    h.add_topic("t", {0: [0, 1, 2]})
    h.start([B0, B1, B2, B3])
    h.clear()
    _reassign(h, {("t", 0): [1, 2, 3]})
    # U: RS = TRS + ORS, AR/RR recorded in the topic znode.
    topic = zkdata._load(h.zk.get(zkdata.topic_path("t"))[0], "t")
    assert topic["partitions"]["0"] == [1, 2, 3, 0]
    assert topic["adding_replicas"] == {"0": [3]} and topic["removing_replicas"] == {"0": [0]}
    # A: leader epoch bumped, RS told; broker 3 as a new replica.
    assert state(h) == zkdata.PartitionState(0, 1, (0, 1, 2), 1, 1)
    entry3 = h.leader_and_isr_entries(3)[-1]
    assert entry3[6] == [1, 2, 3, 0] and entry3[7] is True
    assert h.leader_and_isr_entries(1)[-1][7] is False
    assert ("t", 0) in h.core.reassigning
    h.clear()
    # The new replica catches up: the leader adds it to the ISR.
    h.isr_changed("t", 0, [0, 1, 2, 3])
    s = state(h)
    assert (s.leader, s.leader_epoch, s.isr) == (1, 2, (1, 2, 3))
    assert {r.broker_id for r in h.requests(ApiKey.LEADER_AND_ISR)} == {1, 2, 3}
    stop = h.requests(ApiKey.STOP_REPLICA, 0)[-1].body
    assert stop["delete_partitions"] is True and stop["partitions"] == [["t", 0, 2]]
    topic = zkdata._load(h.zk.get(zkdata.topic_path("t"))[0], "t")
    assert topic["partitions"]["0"] == [1, 2, 3] and topic["adding_replicas"] == {}
    assert h.zk.get(zkdata.REASSIGN_PARTITIONS) is None
    assert ("t", 0) not in h.core.reassigning


def test_reassignment_that_only_removes_replicas_completes_at_once():
    h = three_brokers(assignment={0: [0, 1, 2]})
    _reassign(h, {("t", 0): [0, 1]})
    assert state(h).isr == (0, 1) and state(h).leader == 0
    assert zkdata.decode_assignment("t", h.zk.get(zkdata.topic_path("t"))[0]) == {0: [0, 1]}
    assert h.zk.get(zkdata.REASSIGN_PARTITIONS) is None


def test_reassignment_to_a_dead_broker_is_refused_and_removed():
    h = three_brokers(assignment={0: [0, 1, 2]})
    _reassign(h, {("t", 0): [0, 1, 7]})
    assert "refused" in h.log_text()
    assert h.zk.get(zkdata.REASSIGN_PARTITIONS) is None
    assert zkdata.decode_assignment("t", h.zk.get(zkdata.topic_path("t"))[0]) == {0: [0, 1, 2]}


def test_reassignment_in_progress_is_resumed_by_a_new_controller():
    h = Harness()
    h.add_topic("t", {0: [0, 1]})
    h.start([B0, B1, B2])
    _reassign(h, {("t", 0): [2, 1]})
    h2 = Harness(broker_id=1, epoch=2)
    h2.zk = h.zk
    moves = zkdata.decode_reassignment(h.zk.get(zkdata.REASSIGN_PARTITIONS)[0])
    h2.start([B0, B1, B2], reassignments=moves,
             reassignments_zk_version=h.zk.get(zkdata.REASSIGN_PARTITIONS)[1])
    assert ("t", 0) in h2.core.reassigning
    h2.isr_changed("t", 0, [0, 1, 2])
    assert zkdata.decode_assignment("t", h.zk.get(zkdata.topic_path("t"))[0]) == {0: [2, 1]}
    assert state(h2).leader in (2, 1) and 0 not in state(h2).isr


def test_new_reassignment_requests_written_meanwhile_are_not_lost():
    h = Harness()
    h.add_topic("t", {0: [0, 1], 1: [1, 0]})
    h.start([B0, B1, B2])
    _reassign(h, {("t", 0): [0, 1, 2]})
    # Someone adds t-1 to the znode; the controller has not seen that write yet.
    h.zk.put(zkdata.REASSIGN_PARTITIONS, zkdata.encode_reassignment(
        {("t", 0): [0, 1, 2], ("t", 1): [1, 0, 2]}))
    h.isr_changed("t", 0, [0, 1, 2])       # t-0 completes and removes its entry
    assert ("t", 1) in h.core.reassigning
    assert zkdata.decode_reassignment(h.zk.get(zkdata.REASSIGN_PARTITIONS)[0]) == \
        {("t", 1): [1, 0, 2]}


# ------------------------------------------------------------------ topic deletion

def test_topic_deletion_stops_replicas_then_removes_znodes():
    h = three_brokers(assignment={0: [0, 1], 1: [1, 2]}, topic_config={"retention.ms": "5"})
    h.zk.put(zkdata.delete_topic_path("t"), b"")
    h.clear()
    h.run(controller.TopicDeletionRequested(("t",)))
    stops = {r.broker_id: r.body for r in h.requests(ApiKey.STOP_REPLICA)}
    assert set(stops) == {0, 1, 2} and all(b["delete_partitions"] for b in stops.values())
    assert stops[1]["partitions"] == [["t", 0, -1], ["t", 1, -1]]
    um = h.requests(ApiKey.UPDATE_METADATA, 0)[0].body["partitions"]
    assert {e[2] for e in um} == {controller.LEADER_DURING_DELETE}
    assert not [p for p in h.zk.nodes if p.startswith(("/brokers/topics/t", "/config/topics/t",
                                                        "/admin/delete_topics/t"))]
    assert "t" not in h.core.assignments


def test_topic_deletion_waits_for_a_dead_replica_to_come_back():
    h = three_brokers(assignment={0: [0, 1, 2]})
    h.brokers_changed([B0, B1])
    h.run(controller.TopicDeletionRequested(("t",)))
    assert h.zk.get(zkdata.topic_path("t")) is not None
    h.clear()
    h.brokers_changed([B0, B1, B2])
    assert h.requests(ApiKey.STOP_REPLICA, 2)
    assert not [e for e in h.leader_and_isr_entries(2) if e[0] == "t"]
    assert h.zk.get(zkdata.topic_path("t")) is None


def test_topic_deletion_retries_unconfirmed_stop_replica():
    h = three_brokers(assignment={0: [0, 1]})
    h.hold_tags = True
    h.run(controller.TopicDeletionRequested(("t",)))
    tags = [r.tag for r in h.requests(ApiKey.STOP_REPLICA)]
    h.hold_tags = False
    h.run(controller.BrokerResponse(tags[0], None))           # timed out: sent again, confirmed
    assert h.zk.get(zkdata.topic_path("t")) is not None
    h.run(controller.BrokerResponse(tags[1], {"error": 0, "partitions": [["t", 0, 0]]}))
    assert h.zk.get(zkdata.topic_path("t")) is None


# ------------------------------------------------------------------ determinism

def test_same_events_give_the_same_effects_whatever_the_input_order():
    def run(order):
        h = Harness(controller.ControllerConfig(unclean_leader_election_enable=True))
        assignment = {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1], 3: [0, 2, 1]}
        h.add_topic("b", {p: assignment[p] for p in order})
        h.add_topic("a", {p: assignment[p] for p in reversed(order)})
        brokers = [B0, B1, B2]
        h.start(brokers if order[0] == 0 else list(reversed(brokers)))
        h.brokers_changed([B2, B1] if order[0] else [B1, B2])
        h.brokers_changed([B0, B2, B1])
        h.run(controller.ElectionRequested(None))
        return h.effects

    assert run([0, 1, 2, 3]) == run([3, 1, 0, 2])


def test_no_part_of_the_controller_hides_another_parts_method():
    """The core is the sum of its mixins: a name defined by two parts would silently
    take one of them (the first in the MRO)."""
    owners: dict[str, list[str]] = {}
    for part in controller.Controller.__mro__[:-1]:
        for name in vars(part):
            if not name.startswith("__"):
                owners.setdefault(name, []).append(part.__name__)
    shared = {name: parts for name, parts in owners.items() if len(parts) > 1}
    assert not shared, shared


def test_unknown_event_is_a_type_error():
    with pytest.raises(TypeError):
        controller.Controller(0).step("hello")


def test_config_is_read_from_a_broker_config_by_kafka_names():
    class Cfg:
        unclean_leader_election_enable = True
        leader_imbalance_check_interval_seconds = 7
    cfg = controller.ControllerConfig.from_broker_config(Cfg())
    assert cfg.unclean_leader_election_enable and cfg.leader_imbalance_check_interval_seconds == 7
    assert cfg.auto_leader_rebalance_enable is True


def test_removing_an_entry_from_the_reassignment_znode_cancels_it():
    h = Harness()
    h.add_topic("t", {0: [0, 1]})
    h.start([B0, B1, B2])
    _reassign(h, {("t", 0): [1, 2]})
    assert h.core.assignments["t"][0] == (1, 2, 0)
    h.clear()
    h.zk.nodes.pop(zkdata.REASSIGN_PARTITIONS)
    h.run(controller.ReassignmentRequested({}, -1))
    assert ("t", 0) not in h.core.reassigning
    assert zkdata.decode_assignment("t", h.zk.get(zkdata.topic_path("t"))[0]) == {0: [0, 1]}
    assert 2 not in state(h).isr and state(h).leader == 0
    stop = h.requests(ApiKey.STOP_REPLICA, 2)
    assert stop and stop[0].body["delete_partitions"] is True


def test_a_new_controller_does_not_tell_a_leader_that_lost_its_data_to_lead():
    """Regression (chaos sweep, safe profile, seed 3): broker 0 led t-0 and was the
    controller; a power failure cut its log, it restarted and registered (its
    registration names t-0 as lost) before a new controller was elected. The new
    controller cannot see the bounce (it never knew the old registration): it must not
    send the current state (leader 0) to the replicas, or the followers of that epoch
    truncate to 0's short log. It elects another leader from the ISR first."""
    h = three_brokers(assignment={0: [0, 1, 2]})
    h2 = Harness(broker_id=1, epoch=2)
    h2.zk = h.zk
    lost = controller.Broker(0, "127.0.0.1", 9000, None, 600, frozenset({("t", 0)}))
    h2.start([lost, B1, B2])
    after = state(h2)
    assert after.leader in (1, 2) and after.leader_epoch == 1, after
    assert 0 not in after.isr
    for entry in h2.leader_and_isr_entries(0) + h2.leader_and_isr_entries(1) + \
            h2.leader_and_isr_entries(2):
        assert entry[2] != 0, f"someone was told that broker 0 leads: {entry}"
