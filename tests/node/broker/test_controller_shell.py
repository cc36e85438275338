"""ControllerRunner against a real zk_lite through real kazoo clients. Requests to brokers
are captured by the test's ``send`` (the broker side is tested with real brokers)."""
from __future__ import annotations

import pytest

from node.wire import zkdata
from node.broker.controller_runner import ControllerRunner, decode_election
from node.wire.protocol import ApiKey, Response

from tests.node.broker.zk_helpers import (Loop, StandInConfig, expire_session, make_client,  # noqa: F401
                                   now_ms, register_broker, wait_for, zk_hosts, zk_server)

pytestmark = pytest.mark.process


class Node:
    """One broker as the controller sees it: a kazoo session with a registration, a
    loop, and a runner whose requests land in ``sent``."""

    def __init__(self, make_client, broker_id: int, config=None, answer: bool = True):
        self.broker_id = broker_id
        self.zk = make_client()
        register_broker(self.zk, broker_id)
        self.loop = Loop()
        self.sent: list[tuple[str, int, dict]] = []
        self.answer = answer
        self.runner = ControllerRunner(
            broker_id=broker_id, zk=self.zk, config=config or StandInConfig(broker_id),
            post=self.loop.post, send=self._send, now_ms=now_ms)

    def _send(self, endpoint, api_key, body, on_response):
        self.sent.append((endpoint, api_key, body))
        if self.answer:
            parts = [[e[0], e[1], 0] for e in body.get("partitions", [])]
            on_response(Response(0, api_key, {"error": 0, "partitions": parts}, ()))

    def pump(self):
        self.loop.pump()
        self.runner.tick(now_ms())

    def requests(self, api_key):
        return [(e, b) for e, k, b in self.sent if k == api_key]


@pytest.fixture
def nodes(make_client):
    made: list[Node] = []

    def make(broker_id, **kw):
        node = Node(make_client, broker_id, **kw)
        made.append(node)
        return node

    yield make
    for node in made:
        node.runner.stop()


def create_topic(zk, name, assignment, config=None):
    zk.create(zkdata.topic_config_path(name), zkdata.encode_topic_config(config or {}),
              makepath=True)
    zk.create(zkdata.topic_path(name), zkdata.encode_assignment(assignment), makepath=True)


def read_state(zk, topic, partition):
    try:
        data, stat = zk.get(zkdata.partition_state_path(topic, partition))
    except Exception:
        return None
    return zkdata.decode_partition_state(data, stat.version)


def pumps(*nodes):
    return [n.pump for n in nodes]


def test_one_of_two_runners_wins_and_a_lost_session_elects_the_other_with_a_higher_epoch(
        nodes, zk_hosts, make_client):
    a, b = nodes(0), nodes(1)
    a.runner.start()
    b.runner.start()
    winner = wait_for(lambda: next((n for n in (a, b) if n.runner.active), None),
                      pumps(a, b), what="a controller")
    loser = b if winner is a else a
    assert not loser.runner.active
    first_epoch = winner.runner.epoch
    observer = make_client()
    assert zkdata.decode_controller(observer.get(zkdata.CONTROLLER)[0]) == winner.broker_id
    assert zkdata.decode_controller_epoch(observer.get(zkdata.CONTROLLER_EPOCH)[0]) == first_epoch

    expire_session(zk_hosts, winner.zk)
    wait_for(lambda: loser.runner.active, pumps(a, b), what="fail-over")
    assert loser.runner.epoch == first_epoch + 1
    wait_for(lambda: not winner.runner.active, pumps(a, b), what="old controller resigns")
    assert zkdata.decode_controller(observer.get(zkdata.CONTROLLER)[0]) == loser.broker_id
    # The new controller told the surviving broker its view, with the new epoch.
    assert all(body["controller_epoch"] == first_epoch + 1
               for _, _, body in loser.sent)


def test_topic_creation_produces_partition_states_and_leader_and_isr(nodes, make_client):
    a, b = nodes(0), nodes(1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    admin = make_client()
    create_topic(admin, "orders", {0: [0, 1], 1: [1, 0]})
    wait_for(lambda: read_state(admin, "orders", 1), pumps(a), what="partition states")
    s0, s1 = read_state(admin, "orders", 0), read_state(admin, "orders", 1)
    assert (s0.leader, s0.leader_epoch, s0.isr) == (0, 0, (0, 1))
    assert (s1.leader, s1.leader_epoch, s1.isr) == (1, 0, (1, 0))
    assert s0.controller_epoch == a.runner.epoch
    wait_for(lambda: a.requests(ApiKey.LEADER_AND_ISR), pumps(a))
    endpoints = {e for e, _ in a.requests(ApiKey.LEADER_AND_ISR)}
    assert endpoints == {"tcp://127.0.0.1:19000", "tcp://127.0.0.1:19001"}


def test_broker_death_moves_leadership_through_the_coordinator(nodes, make_client):
    a = nodes(0)
    admin = make_client()
    b_session = make_client()
    register_broker(b_session, 1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    create_topic(admin, "t", {0: [1, 0]})
    wait_for(lambda: read_state(admin, "t", 0), pumps(a))
    assert read_state(admin, "t", 0).leader == 1
    b_session.stop()                       # broker 1's registration goes
    wait_for(lambda: read_state(admin, "t", 0).leader == 0, pumps(a), what="re-election")
    s = read_state(admin, "t", 0)
    assert s.isr == (0,) and s.leader_epoch == 1


def test_zombie_controller_writes_are_fenced_by_the_epoch_check(nodes, make_client):
    a = nodes(0)
    admin = make_client()
    b_session = make_client()
    register_broker(b_session, 1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    create_topic(admin, "t", {0: [1, 0]})
    wait_for(lambda: read_state(admin, "t", 0), pumps(a))
    before = read_state(admin, "t", 0)
    # Another controller got elected meanwhile (as after a pause of this one).
    data, stat = admin.get(zkdata.CONTROLLER_EPOCH)
    admin.set(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(
        zkdata.decode_controller_epoch(data) + 1), version=stat.version)
    b_session.stop()                       # the zombie tries to elect a new leader
    wait_for(lambda: not a.runner.active, pumps(a), what="zombie resigns")
    assert read_state(admin, "t", 0) == before


def test_controlled_shutdown_answers_after_moving_leadership(nodes, make_client):
    a, b = nodes(0), nodes(1)
    admin = make_client()
    a.runner.start()
    b.runner.start()
    wait_for(lambda: a.runner.active or b.runner.active, pumps(a, b))
    controller = a if a.runner.active else b
    other = b if controller is a else a
    create_topic(admin, "t", {0: [other.broker_id, controller.broker_id]})
    wait_for(lambda: read_state(admin, "t", 0), pumps(a, b))
    replies = []
    controller.runner.handle_controlled_shutdown(
        {"broker_id": other.broker_id, "broker_epoch": -1}, replies.append)
    wait_for(lambda: replies, pumps(a, b))
    assert replies[0] == {"error": 0, "remaining_partitions": []}
    assert read_state(admin, "t", 0).leader == controller.broker_id
    # Not the controller, malformed: clear errors, no exception.
    other.runner.handle_controlled_shutdown({"broker_id": 0}, replies.append)
    other.runner.handle_controlled_shutdown({"broker_id": "x"}, replies.append)
    assert replies[1]["error"] == 41 and replies[2]["error"] == 42


def test_isr_change_notification_is_consumed_and_published(nodes, make_client):
    a = nodes(0)
    admin = make_client()
    b_session = make_client()
    register_broker(b_session, 1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    create_topic(admin, "t", {0: [0, 1]})
    wait_for(lambda: read_state(admin, "t", 0), pumps(a))
    state = read_state(admin, "t", 0)
    # The leader shrinks its ISR (conditional update) and notifies, as brokers do.
    admin.set(zkdata.partition_state_path("t", 0), zkdata.encode_partition_state(
        zkdata.PartitionState(0, state.leader_epoch, (0,), state.controller_epoch)),
        version=state.zk_version)
    admin.create(zkdata.ISR_CHANGE_PREFIX, zkdata.encode_partition_list([("t", 0)]), sequence=True)
    a.sent.clear()

    def published():
        return any(body["partitions"] and body["partitions"][0][4] == [0]
                   for _, body in a.requests(ApiKey.UPDATE_METADATA))
    wait_for(published, pumps(a), what="UpdateMetadata with the new ISR")
    wait_for(lambda: admin.get_children(zkdata.ISR_CHANGE_NOTIFICATION) == [], pumps(a))


def test_preferred_election_znode_is_acted_on_and_deleted(nodes, make_client):
    a = nodes(0)
    admin = make_client()
    b_session = make_client()
    register_broker(b_session, 1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    create_topic(admin, "t", {0: [1, 0]})
    wait_for(lambda: read_state(admin, "t", 0), pumps(a))
    b_session.stop()
    wait_for(lambda: read_state(admin, "t", 0).leader == 0, pumps(a))
    b_session2 = make_client()
    register_broker(b_session2, 1)
    state = read_state(admin, "t", 0)
    wait_for(lambda: read_state(admin, "t", 0).leader_epoch == state.leader_epoch, pumps(a))
    # Broker 1 catches up: the leader adds it back to the ISR.
    admin.set(zkdata.partition_state_path("t", 0), zkdata.encode_partition_state(
        zkdata.PartitionState(0, state.leader_epoch, (0, 1), state.controller_epoch)),
        version=state.zk_version)
    admin.create(zkdata.ISR_CHANGE_PREFIX, zkdata.encode_partition_list([("t", 0)]), sequence=True)
    wait_for(lambda: admin.get_children(zkdata.ISR_CHANGE_NOTIFICATION) == [], pumps(a))
    admin.create(zkdata.PREFERRED_REPLICA_ELECTION, zkdata.encode_partition_list([("t", 0)]))
    wait_for(lambda: read_state(admin, "t", 0).leader == 1, pumps(a), what="preferred leader")
    wait_for(lambda: admin.exists(zkdata.PREFERRED_REPLICA_ELECTION) is None, pumps(a))


def test_stop_deletes_controller_znode_and_another_takes_over(nodes, make_client):
    a, b = nodes(0), nodes(1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    b.runner.start()
    a.runner.stop()
    assert not a.runner.active
    wait_for(lambda: b.runner.active, pumps(a, b), what="take-over after a clean stop")
    assert b.runner.epoch == a.runner.epoch + 1


def test_election_znode_decoding():
    assert decode_election(b"").partitions is None
    got = decode_election(
        zkdata.encode_partition_list([("t", 1), ("t", 0)], election_type="unclean"), 3)
    assert got.partitions == (("t", 0), ("t", 1)) and got.election_type == "unclean"
    assert got.zk_version == 3
    with pytest.raises(zkdata.ZkDataError):
        decode_election(b"[1]")


def _admin(zk, api_key, body):
    from node.broker.apis.admin import handle_admin_request
    return handle_admin_request(api_key, body, zk=zk, config=StandInConfig())


def test_admin_requests_drive_the_controller_create_reassign_elect_delete(nodes, make_client):
    a = nodes(0)
    sessions = [make_client(), make_client()]
    for i, s in zip((1, 2), sessions):
        register_broker(s, i)
    admin = make_client()
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    resp = _admin(admin, ApiKey.CREATE_TOPICS, {
        "topics": [["x", 3, 2, None, {}]], "timeout_ms": 1000, "validate_only": False})
    assert resp["topics"][0][1] == 0
    wait_for(lambda: all(read_state(admin, "x", p) for p in range(3)), pumps(a))
    assert [read_state(admin, "x", p).leader for p in range(3)] == [0, 1, 2]

    # More partitions: the controller initializes the new one.
    _admin(admin, ApiKey.CREATE_PARTITIONS, {"topics": [["x", 4, None]], "timeout_ms": 1})
    wait_for(lambda: read_state(admin, "x", 3), pumps(a), what="state of the new partition")

    # Reassign x-0 from [0, 1] to [2, 1]; the leader (0) reports 2 in the ISR.
    _admin(admin, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "partitions": [["x", 0, [2, 1]]], "timeout_ms": 1})
    wait_for(lambda: zkdata.decode_assignment("x", admin.get(zkdata.topic_path("x"))[0])[0]
             == [2, 1, 0],
             pumps(a), what="RS = TRS + ORS")
    s = read_state(admin, "x", 0)
    admin.set(zkdata.partition_state_path("x", 0), zkdata.encode_partition_state(
        zkdata.PartitionState(s.leader, s.leader_epoch, s.isr + (2,), s.controller_epoch)),
        version=s.zk_version)
    admin.create(zkdata.ISR_CHANGE_PREFIX, zkdata.encode_partition_list([("x", 0)]), sequence=True)
    wait_for(lambda: zkdata.decode_assignment("x", admin.get(zkdata.topic_path("x"))[0])[0]
             == [2, 1],
             pumps(a), what="reassignment completes")
    wait_for(lambda: admin.exists(zkdata.REASSIGN_PARTITIONS) is None, pumps(a))
    s = read_state(admin, "x", 0)
    assert s.leader in (2, 1) and set(s.isr) <= {1, 2}
    assert _admin(admin, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"partitions": None}) == \
        {"error": 0, "partitions": []}

    # Preferred election for everything: x-0's preferred replica is now 2.
    _admin(admin, ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": None,
                                         "timeout_ms": 1})
    wait_for(lambda: admin.exists(zkdata.PREFERRED_REPLICA_ELECTION) is None, pumps(a))
    assert read_state(admin, "x", 0).leader == 2

    # Delete: every replica confirms (the test's send answers), then the znodes go.
    _admin(admin, ApiKey.DELETE_TOPICS, {"topics": ["x"], "timeout_ms": 1})
    wait_for(lambda: admin.exists(zkdata.topic_path("x")) is None, pumps(a), what="deletion")
    wait_for(lambda: admin.exists(zkdata.delete_topic_path("x")) is None, pumps(a))
    assert admin.exists(zkdata.topic_config_path("x")) is None
    stops = [b for _, b in a.requests(ApiKey.STOP_REPLICA) if b["delete_partitions"]]
    assert stops


def test_topic_config_override_enables_unclean_election_of_an_offline_partition(
        nodes, make_client):
    a = nodes(0)
    admin = make_client()
    b_session = make_client()
    register_broker(b_session, 1)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    create_topic(admin, "t", {0: [1, 0]})
    wait_for(lambda: read_state(admin, "t", 0), pumps(a))
    s = read_state(admin, "t", 0)
    admin.set(zkdata.partition_state_path("t", 0), zkdata.encode_partition_state(
        zkdata.PartitionState(1, s.leader_epoch, (1,), s.controller_epoch)), version=s.zk_version)
    admin.create(zkdata.ISR_CHANGE_PREFIX, zkdata.encode_partition_list([("t", 0)]), sequence=True)
    wait_for(lambda: admin.get_children(zkdata.ISR_CHANGE_NOTIFICATION) == [], pumps(a))
    b_session.stop()
    wait_for(lambda: read_state(admin, "t", 0).leader == -1, pumps(a), what="offline")
    _, stat = admin.get(zkdata.topic_config_path("t"))
    admin.set(zkdata.topic_config_path("t"), zkdata.encode_topic_config(
        {"unclean.leader.election.enable": "true"}), version=stat.version)
    wait_for(lambda: read_state(admin, "t", 0).leader == 0, pumps(a), what="unclean election")
    assert read_state(admin, "t", 0).isr == (0,)


def test_an_isr_shrink_while_the_controller_starts_is_not_lost(nodes, make_client):
    """A leader shrinks its ISR and notifies while a new controller is reading the
    partition states (the old controller died as the follower stopped fetching: both
    happen after one timeout). The new controller must publish the shrunken ISR; it
    used to drain (and delete) that notification after reading the older state."""
    admin = make_client()
    create_topic(admin, "t", {0: [0, 1]})
    path = zkdata.partition_state_path("t", 0)
    admin.create(path, zkdata.encode_partition_state(zkdata.PartitionState(0, 0, (0, 1), 0)),
                 makepath=True)
    b_session = make_client()
    register_broker(b_session, 1)
    a = nodes(0)
    read_states = a.runner._read_states
    shrunk = []

    def read_then_shrink(partitions):
        states = read_states(partitions)
        if not shrunk:          # the leader's conditional update and its notification
            _, stat = admin.get(path)
            admin.set(path, zkdata.encode_partition_state(
                zkdata.PartitionState(0, 0, (0,), 0)), version=stat.version)
            admin.create(zkdata.ISR_CHANGE_PREFIX, zkdata.encode_partition_list([("t", 0)]),
                         sequence=True)
            shrunk.append(True)
        return states

    a.runner._read_states = read_then_shrink
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))

    def published():
        return any(body["partitions"] and body["partitions"][0][4] == [0]
                   for _, body in a.requests(ApiKey.UPDATE_METADATA))
    wait_for(published, pumps(a), what="UpdateMetadata with the shrunken ISR")
    assert shrunk


def test_a_watch_whose_read_failed_is_read_again_and_no_topic_goes_unseen(nodes, make_client):
    """A coordinator call that timed out makes the shell refuse calls for a while
    (GuardedZk's suspect window). A watch that fires then cannot re-read nor re-arm:
    dropped, every topic created afterwards went unseen for the rest of the term (CI:
    CreateTopics answered REQUEST_TIMED_OUT, the topic never got a leader). The handler
    runs again until its read succeeds; a topic whose own read failed is read again."""
    from node.broker.coordinator import CoordinatorUnavailable
    a = nodes(0)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    admin = make_client()
    guarded = a.runner.zk
    refused = guarded.refused
    guarded._suspect_until = float("inf")            # every call refused at once
    create_topic(admin, "late", {0: [0]})
    wait_for(lambda: guarded.refused > refused, pumps(a), what="the watch's read refused")
    assert read_state(admin, "late", 0) is None
    guarded._suspect_until = 0.0
    assert wait_for(lambda: read_state(admin, "late", 0), pumps(a), what="late led").leader == 0
    # The children watch is armed again: a topic created now is seen too.
    create_topic(admin, "later", {0: [0]})
    wait_for(lambda: read_state(admin, "later", 0), pumps(a), what="later led")

    # Only the new topic's own read fails (once): it is read again as an unseen topic.
    real_get, failed = guarded.get, []

    def get(path, watch=None):
        if path == zkdata.topic_path("last") and not failed:
            failed.append(path)
            raise CoordinatorUnavailable("test: the topic's read fails once")
        return real_get(path, watch=watch)
    guarded.get = get
    create_topic(admin, "last", {0: [0]})
    wait_for(lambda: read_state(admin, "last", 0), pumps(a), what="last led")
    assert failed


def test_an_active_controller_whose_controller_watch_read_failed_reads_it_again(
        nodes, make_client):
    """/controller is deleted (an operator moving the controller) while the active
    controller's calls are refused: its handler reads again once they pass, sees the
    znode gone, and a new election bumps the epoch (before, the watch was gone and the
    controller never noticed)."""
    a = nodes(0)
    a.runner.start()
    wait_for(lambda: a.runner.active, pumps(a))
    epoch = a.runner.epoch
    admin = make_client()
    guarded = a.runner.zk
    refused = guarded.refused
    guarded._suspect_until = float("inf")
    admin.delete(zkdata.CONTROLLER)
    wait_for(lambda: guarded.refused > refused, pumps(a), what="the watch's read refused")
    guarded._suspect_until = 0.0
    wait_for(lambda: a.runner.active and a.runner.epoch == epoch + 1, pumps(a),
             what="a new election after the read")
    assert zkdata.decode_controller(admin.get(zkdata.CONTROLLER)[0]) == 0
