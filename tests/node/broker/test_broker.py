"""One real broker process driven by a test-side controller (real zk_lite, real kazoo)."""
from __future__ import annotations

import time

import pytest

from node.wire.errors import ErrorCode
from node.wire import protocol
from tests.node.broker.harness import Cluster, wait_for

pytestmark = [pytest.mark.process, pytest.mark.slow]
TOPIC = "t1"


@pytest.fixture
def single(cluster):
    cluster.add_broker(0)
    cluster.create_topic(TOPIC, {0: [0], 1: [0]})
    return cluster


def test_produce_acks_1_then_fetch_reads_it_back(single):
    entry = single.produce(0, TOPIC, 0, [b"a", b"b", b"c"], acks=1)
    assert entry[2] == 0 and entry[3] == 0
    entry = single.produce(0, TOPIC, 0, [b"d"], acks=1)
    assert entry[3] == 3
    head, records = single.fetch(0, TOPIC, 0, 0)
    assert head[2] == 0 and head[3] == 4  # HW = LEO with a single replica
    assert records == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_acks_0_gets_no_response_and_the_records_are_appended(single):
    single.produce(0, TOPIC, 0, [b"x"] * 5, acks=0)
    single.produce(0, TOPIC, 0, [b"y"], acks=0)
    wait_for(lambda: single.list_offset(0, TOPIC, 0, protocol.LATEST_TIMESTAMP)[4] == 6,
             "both acks=0 batches appended")
    # No response was queued for them: the next request's answer is the first to arrive.
    entry = single.produce(0, TOPIC, 0, [b"z"], acks=1)
    assert entry[3] == 6
    assert not single.channel(0).socket.poll(200)


def test_acks_all_with_a_single_replica_completes_at_once(single):
    entry = single.produce(0, TOPIC, 1, [b"v"] * 10, acks=-1)
    assert entry[2] == 0 and entry[3] == 0
    entry = single.produce(0, TOPIC, 1, [b"w"], acks=-1)
    assert entry[2:4] == [0, 10]


def test_produce_to_an_unknown_partition_is_refused(single):
    assert single.produce(0, TOPIC, 7, [b"v"])[2] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert single.produce(0, "nope", 0, [b"v"])[2] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_multi_partition_produce_is_answered_once_with_every_partition(single):
    from shm import batch as batch_codec
    body = {"acks": -1, "timeout_ms": 5000,
            "partitions": [[TOPIC, 0], [TOPIC, 1], [TOPIC, 9]]}
    frames = [batch_codec.build_batch([b"a", b"b"]), batch_codec.build_batch([b"c"]),
              batch_codec.build_batch([b"d"])]
    response = single.request(0, protocol.ApiKey.PRODUCE, body, frames)
    results = {(t, p): (err, base) for t, p, err, base, _, _ in response.body["partitions"]}
    assert results == {(TOPIC, 0): (0, 0), (TOPIC, 1): (0, 0),
                       (TOPIC, 9): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert not single.channel(0).socket.poll(200)


def test_long_poll_fetch_returns_when_data_arrives(single):
    from node.net import Channel
    consumer = Channel(single.brokers[0].endpoint, client_id="consumer")
    try:
        body = {"replica_id": -1, "max_wait_ms": 10_000, "min_bytes": 1, "max_bytes": 1 << 20,
                "partitions": [[TOPIC, 0, 0, -1, 1 << 20]]}
        started = time.monotonic()
        consumer.send(protocol.ApiKey.FETCH, body)
        assert not consumer.socket.poll(300), "the fetch must be parked while there is no data"
        single.produce(0, TOPIC, 0, [b"hello"], acks=1)
        assert consumer.socket.poll(5000)
        response = consumer.receive_ready()[0]
        assert time.monotonic() - started < 5
        entry = response.body["partitions"][0]
        assert entry[2] == 0 and entry[3] == 1 and len(response.frames[0].bytes) > 0
    finally:
        consumer.close()


def test_long_poll_fetch_returns_empty_after_max_wait(single):
    started = time.monotonic()
    entry, records = single.fetch(0, TOPIC, 0, 0, max_wait_ms=400)
    elapsed = time.monotonic() - started
    assert entry[2] == 0 and records == []
    assert 0.35 <= elapsed < 3, elapsed


def test_fetch_beyond_the_log_end_is_out_of_range(single):
    single.produce(0, TOPIC, 0, [b"a"])
    entry, _ = single.fetch(0, TOPIC, 0, 5)
    assert entry[2] == ErrorCode.OFFSET_OUT_OF_RANGE


def test_list_offsets_earliest_and_latest(single):
    assert single.list_offset(0, TOPIC, 0, protocol.EARLIEST_TIMESTAMP)[2:] == [0, -1, 0]
    assert single.list_offset(0, TOPIC, 0, protocol.LATEST_TIMESTAMP)[2:] == [0, -1, 0]
    single.produce(0, TOPIC, 0, [b"a"] * 7)
    assert single.list_offset(0, TOPIC, 0, protocol.EARLIEST_TIMESTAMP)[4] == 0
    assert single.list_offset(0, TOPIC, 0, protocol.LATEST_TIMESTAMP)[4] == 7
    assert single.list_offset(0, TOPIC, 5, protocol.LATEST_TIMESTAMP)[2] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_comes_from_update_metadata(single):
    body = single.request(0, protocol.ApiKey.METADATA, {"topics": None}).body
    assert body["controller_id"] == single.controller_id
    assert body["brokers"] == [[0, "127.0.0.1", single.brokers[0].port, None]]
    [[name, error, partitions]] = body["topics"]
    assert (name, error) == (TOPIC, 0)
    assert partitions == [[0, 0, 0, 0, [0], [0], []], [1, 0, 0, 0, [0], [0], []]]
    body = single.request(0, protocol.ApiKey.METADATA, {"topics": ["nope"]}).body
    assert body["topics"] == [["nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []]]


def test_stale_controller_epoch_is_refused(single):
    stale = ErrorCode.STALE_CONTROLLER_EPOCH
    single.controller_epoch = 5
    assert single.send_update_metadata()[0]["error"] == 0
    assert single.send_update_metadata(epoch=4)[0]["error"] == stale
    assert single.send_leader_and_isr(TOPIC, [0], epoch=3)[0]["error"] == stale
    body = {"controller_id": 1, "controller_epoch": 2, "delete_partitions": False,
            "partitions": [[TOPIC, 0, -1]]}
    assert single.request(0, protocol.ApiKey.STOP_REPLICA, body).body["error"] == stale
    assert "STALE_CONTROLLER_EPOCH" in single.brokers[0].log()
    # The partitions are untouched: still leader.
    assert single.produce(0, TOPIC, 0, [b"a"])[2] == 0


def test_malformed_requests_get_invalid_request_and_the_broker_keeps_serving(single):
    import msgpack
    channel = single.channel(0)
    invalid = ErrorCode.INVALID_REQUEST
    # A body that is not msgpack, with a readable header.
    channel.socket.send_multipart([msgpack.packb([0, 0, 4242, "evil"]), b"\xc1\xc1\xc1"])
    # A produce whose fields have the wrong types.
    channel.socket.send_multipart([msgpack.packb([0, 0, 4243, "evil"]),
                                   msgpack.packb({"acks": "all", "partitions": 3})])
    # A fetch with missing fields.
    channel.socket.send_multipart([msgpack.packb([1, 0, 4244, "evil"]), msgpack.packb({})])
    # An unknown api key.
    channel.socket.send_multipart([msgpack.packb([999, 0, 4245, "evil"]), msgpack.packb({})])
    # Garbage with no readable correlation id: dropped.
    channel.socket.send_multipart([b"\x00\xff garbage"])
    channel.socket.send_multipart([b"\x93", b"x", b"y"])
    answers = {}
    while len(answers) < 4:
        assert channel.socket.poll(5000)
        frames = channel.socket.recv_multipart()
        response = protocol.decode_response(frames)
        answers[response.correlation_id] = response.body
    assert {cid: body["error"] for cid, body in answers.items()} == \
        dict.fromkeys((4242, 4243, 4244, 4245), invalid)
    # Corrupt batch: CRC mismatch -> CORRUPT_MESSAGE.
    from shm import batch as batch_codec
    batch = batch_codec.build_batch([b"payload"] * 3)
    batch[-1] ^= 0xFF
    body = {"acks": 1, "timeout_ms": 1000, "partitions": [[TOPIC, 0]]}
    entry = single.request(0, protocol.ApiKey.PRODUCE, body, [batch]).body["partitions"][0]
    assert entry[2] == ErrorCode.CORRUPT_MESSAGE
    # A controller request naming a path outside the log dir.
    bad = {"controller_id": 1, "controller_epoch": single.controller_epoch,
           "partitions": [["../../escape", 0, 0, 9, [0], 0, [0], True]], "live_leaders": []}
    assert single.request(0, protocol.ApiKey.LEADER_AND_ISR, bad).body["error"] == invalid
    assert not (single.brokers[0].dir / "escape-0").exists()
    # A produce with a wrong number of batch frames.
    response = single.request(0, protocol.ApiKey.PRODUCE, body, [])
    assert response.body["error"] == invalid
    assert single.brokers[0].alive
    assert single.produce(0, TOPIC, 0, [b"still here"])[2:4] == [0, 0]


def test_oversized_batch_is_refused_with_message_too_large(tmp_path, cluster_id):
    cluster = Cluster(tmp_path, cluster_id)
    try:
        cluster.add_broker(0, message_max_bytes=4096)
        cluster.create_topic(TOPIC, {0: [0]})
        entry = cluster.produce(0, TOPIC, 0, [b"x" * 5000])
        assert entry[2] == ErrorCode.MESSAGE_TOO_LARGE
        assert cluster.produce(0, TOPIC, 0, [b"x" * 100])[2:4] == [0, 0]
    finally:
        cluster.close()


def test_follower_fetch_on_a_leader_with_a_stale_epoch_is_fenced(single):
    entry, _ = single.fetch(0, TOPIC, 0, 0, leader_epoch=5)
    assert entry[2] == ErrorCode.UNKNOWN_LEADER_EPOCH
    single.elect(TOPIC, 0, 0, [0])
    entry, _ = single.fetch(0, TOPIC, 0, 0, leader_epoch=0)
    assert entry[2] == ErrorCode.FENCED_LEADER_EPOCH
    entry, _ = single.fetch(0, TOPIC, 0, 0, leader_epoch=1)
    assert entry[2] == 0


def test_stop_replica_with_delete_removes_the_log(single):
    single.produce(0, TOPIC, 1, [b"a"])
    body = {"controller_id": 1, "controller_epoch": single.controller_epoch,
            "delete_partitions": True, "partitions": [[TOPIC, 1, -1]]}
    assert single.request(0, protocol.ApiKey.STOP_REPLICA, body).body == \
        {"error": 0, "partitions": [[TOPIC, 1, 0]]}
    assert not (single.brokers[0].dir / "logs" / f"{TOPIC}-1").exists()
    assert single.produce(0, TOPIC, 1, [b"a"])[2] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_sigterm_exits_0_and_a_restart_reopens_the_log(single):
    single.produce(0, TOPIC, 0, [b"a", b"b"])
    assert single.brokers[0].stop() == 0
    single.brokers[0].start(single.zk)
    single.send_leader_and_isr(TOPIC, [0, 1])
    # The leader epoch is unchanged, so the restarted broker accepts it (fresh core).
    wait_for(lambda: single.list_offset(0, TOPIC, 0, protocol.LATEST_TIMESTAMP)[4] == 2,
             "reopened")
    _, records = single.fetch(0, TOPIC, 0, 0)
    assert [v for _, v in records] == [b"a", b"b"]


def test_invalid_configuration_exits_2_naming_the_key(tmp_path, cluster_id):
    import subprocess
    import sys
    path = tmp_path / "server.properties"
    path.write_text("broker.id=1\nzookeeper.connect=127.0.0.1:1\nreplica.lag.time.max=5\n")
    done = subprocess.run([sys.executable, "-m", "node.broker", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "replica.lag.time.max: unknown configuration key" in done.stderr


def test_sigkill_then_restart_waits_for_the_old_registration_and_keeps_the_data(
        tmp_path, cluster_id):
    import signal
    cluster = Cluster(tmp_path, cluster_id, tick_time_ms=500)  # sessions up to 10 s
    try:
        broker = cluster.add_broker(0, zookeeper_session_timeout_ms=8000)
        cluster.create_topic(TOPIC, {0: [0]})
        cluster.produce(0, TOPIC, 0, [b"a", b"b", b"c"])
        broker.signal(signal.SIGKILL)
        broker.process.wait()
        broker.killed = True
        broker.start(cluster.zk)
        # The previous session's ephemeral registration had to expire first.
        assert "waiting for it to expire" in broker.log()
        cluster.send_leader_and_isr(TOPIC, [0])
        _, records = cluster.fetch(0, TOPIC, 0, 0)
        assert [v for _, v in records] == [b"a", b"b", b"c"]
        assert cluster.produce(0, TOPIC, 0, [b"d"])[2:4] == [0, 3]
    finally:
        cluster.close()


def test_topic_config_overrides_min_insync_replicas(cluster):
    from node.wire import zkdata
    cluster.zk.create(zkdata.topic_config_path("strict"),
                      zkdata.encode_topic_config({"min.insync.replicas": "2"}), makepath=True)
    cluster.add_broker(0)
    cluster.create_topic("strict", {0: [0]})
    assert cluster.produce(0, "strict", 0, [b"x"], acks=-1)[2] == \
        ErrorCode.NOT_ENOUGH_REPLICAS
    assert cluster.produce(0, "strict", 0, [b"x"], acks=1)[2] == 0


def _pause_past_session_and_wait_registered_again(cluster, broker) -> None:
    """SIGSTOP broker 0 until its coordinator session expired, SIGCONT, and wait until
    it is registered in a new session."""
    import signal
    from node.wire import zkdata
    owner = cluster.zk.exists(zkdata.broker_path(0)).ephemeralOwner
    broker.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: cluster.zk.exists(zkdata.broker_path(0)) is None,
                 "the paused broker's session expired", timeout_s=20)
    finally:
        broker.signal(signal.SIGCONT)
    stat = wait_for(lambda: cluster.zk.exists(zkdata.broker_path(0)), "registered again", 20)
    assert stat.ephemeralOwner != owner


def test_a_broker_paused_past_its_session_registers_again(single):
    broker = single.brokers[0]
    _pause_past_session_and_wait_registered_again(single, broker)
    assert "registering again" in broker.log()
    assert single.produce(0, TOPIC, 0, [b"after"])[2] == 0


def test_a_re_registration_that_failed_is_tried_again_while_connected(cluster, monkeypatch):
    """The coordinator does not answer the first re-registration in the new session
    (here: on purpose, twice): no reconnect comes to ask again, so the broker's tick
    does, until it is registered."""
    from node.broker.server import FAIL_REREGISTRATIONS_ENV
    monkeypatch.setenv(FAIL_REREGISTRATIONS_ENV, "2")
    broker = cluster.add_broker(0)
    monkeypatch.delenv(FAIL_REREGISTRATIONS_ENV)
    _pause_past_session_and_wait_registered_again(cluster, broker)
    assert broker.log().count("re-registration failed (trying again in") == 2, broker.log()


def test_a_session_lost_unseen_is_noticed(cluster, monkeypatch):
    """kazoo's LOST event does not reach the loop (here: dropped on purpose): the broker
    registers again all the same, since what it checks (at the new session's CONNECTED,
    and at every tick) is whether the connected session is the one that registered it,
    not which events came."""
    from node.broker.server import DROP_SESSION_LOST_ENV
    monkeypatch.setenv(DROP_SESSION_LOST_ENV, "1")
    broker = cluster.add_broker(0)
    monkeypatch.delenv(DROP_SESSION_LOST_ENV)
    _pause_past_session_and_wait_registered_again(cluster, broker)
    log = broker.log()
    assert "coordinator session lost" not in log
    # One registration in the new session; before it, only attempts that failed (a
    # loaded machine: a coordinator call that timed out makes the next ones fail at once
    # for a moment, and the tick tries again).
    assert log.count("registering again") == log.count("re-registration failed") + 1, log


def test_stop_replica_with_delete_removes_a_log_this_incarnation_never_opened(single):
    single.produce(0, TOPIC, 1, [b"a"])
    assert single.brokers[0].stop() == 0
    single.brokers[0].start(single.zk)
    body = {"controller_id": 1, "controller_epoch": single.controller_epoch,
            "delete_partitions": True, "partitions": [[TOPIC, 1, -1]]}
    assert single.request(0, protocol.ApiKey.STOP_REPLICA, body).body["partitions"] == \
        [[TOPIC, 1, 0]]
    assert not (single.brokers[0].dir / "logs" / f"{TOPIC}-1").exists()
    assert (single.brokers[0].dir / "logs" / f"{TOPIC}-0").exists()


def test_high_watermarks_are_checkpointed_periodically(tmp_path, cluster_id):
    from shm.checkpoint import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
    cluster = Cluster(tmp_path, cluster_id)
    try:
        broker = cluster.add_broker(0, replica_high_watermark_checkpoint_interval_ms=200)
        cluster.create_topic(TOPIC, {0: [0], 1: [0]})
        cluster.produce(0, TOPIC, 0, [b"a"] * 3)
        cluster.produce(0, TOPIC, 1, [b"a"] * 5)
        path = broker.dir / "logs" / REPLICATION_OFFSET_CHECKPOINT
        wait_for(lambda: path.exists() and OffsetCheckpointFile(str(path)).read() ==
                 {(TOPIC, 0): 3, (TOPIC, 1): 5}, "both HWs checkpointed", 10)
    finally:
        cluster.close()


def test_recovery_points_moved_by_roll_flushes_are_checkpointed_periodically(tmp_path,
                                                                           cluster_id):
    """A roll's background flush moves the recovery point in memory; the broker writes
    the log dir's recovery-point-offset-checkpoint every
    log.flush.offset.checkpoint.interval.ms (Kafka's checkpointLogRecoveryOffsets),
    one write for all its partitions."""
    from shm.checkpoint import RECOVERY_POINT_OFFSET_CHECKPOINT, OffsetCheckpointFile
    cluster = Cluster(tmp_path, cluster_id)
    try:
        broker = cluster.add_broker(0, log_flush_offset_checkpoint_interval_ms=200,
                                    log_segment_bytes=4096)
        cluster.create_topic(TOPIC, {0: [0], 1: [0]})
        for partition in (0, 1):
            for _ in range(4):                  # 4 batches of 2 KiB: rolls at 4 KiB
                cluster.produce(0, TOPIC, partition, [b"v" * 2000])
        path = broker.dir / "logs" / RECOVERY_POINT_OFFSET_CHECKPOINT

        def checkpointed():
            if not path.exists():
                return None
            points = OffsetCheckpointFile(str(path)).read()
            return [points.get((TOPIC, p), 0) for p in (0, 1)]
        wait_for(lambda: (checkpointed() or [0])[0] >= 2 and checkpointed()[1] >= 2,
                 "both partitions' recovery points past their rolled segments", 10)
    finally:
        cluster.close()


def test_fuzzed_requests_never_stop_the_broker(single):
    """Seeded random bodies for every API (wrong types, wrong arities, odd values): each
    gets an answer or is dropped, and the broker keeps serving."""
    import random

    import msgpack
    rng = random.Random(20261122)
    atoms = [None, True, -1, 0, 1, 2**40, -2**40, 3.5, "", "x", TOPIC, b"\x00", [], {},
             [TOPIC, 0], [[TOPIC, 0]], [[TOPIC, 0, 0, -1, 100]], [["", -1]]]

    def value(depth=0):
        if depth < 2 and rng.random() < 0.3:
            return [value(depth + 1) for _ in range(rng.randint(0, 9))]
        return rng.choice(atoms)

    fields = ["acks", "timeout_ms", "partitions", "replica_id", "max_wait_ms", "min_bytes",
              "max_bytes", "topics", "controller_id", "controller_epoch", "live_leaders",
              "brokers", "delete_partitions", "broker_id", "broker_epoch"]
    channel = single.channel(0)
    keys = [k.value for k in protocol.ApiKey
            if k not in (protocol.ApiKey.CONTROLLED_SHUTDOWN,)] + [99]
    for i in range(400):
        api_key = rng.choice(keys)
        body = {f: value() for f in rng.sample(fields, rng.randint(0, len(fields)))}
        if api_key in (protocol.ApiKey.FETCH,):
            body["max_wait_ms"] = 0  # never park: every request is answered at once
        frames = [msgpack.packb([api_key, 0, 10_000 + i, "fuzz"]), msgpack.packb(body)]
        frames += [rng.randbytes(rng.randint(0, 80)) for _ in range(rng.randint(0, 2))]
        channel.socket.send_multipart(frames)
    answered = 0
    while channel.socket.poll(2000):
        channel.socket.recv_multipart()
        answered += 1
    assert answered > 300  # acks=0 produces are not answered
    assert single.brokers[0].alive
    assert "Traceback" not in single.brokers[0].log()
    assert single.produce(0, TOPIC, 0, [b"alive"], acks=1)[2] == 0


def test_mutated_valid_requests_never_stop_the_broker(single):
    """Valid request bodies with one field or one entry element replaced by a random
    value: deeper than random bodies, same rule."""
    import copy
    import random

    import msgpack
    from shm import batch as batch_codec
    rng = random.Random(7)
    epoch = single.controller_epoch
    atoms = [None, True, False, -2, -1, 0, 1, 7, 2**33, -2**40, 0.5, "", "zz", TOPIC, [],
             [0], [0, 0], [1, 2, 3], {}, {"a": 1}]
    templates = {
        protocol.ApiKey.PRODUCE: {"acks": 1, "timeout_ms": 1000, "partitions": [[TOPIC, 0]]},
        protocol.ApiKey.FETCH: {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                         "max_bytes": 1000, "partitions": [[TOPIC, 0, 0, -1, 1000]]},
        protocol.ApiKey.LIST_OFFSETS: {"replica_id": -1, "partitions": [[TOPIC, 0, -1]]},
        protocol.ApiKey.METADATA: {"topics": [TOPIC]},
        protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH: {"replica_id": 1,
                                                  "partitions": [[TOPIC, 0, 0, 0]]},
        protocol.ApiKey.UPDATE_METADATA: {"controller_id": 1, "controller_epoch": epoch,
                                   "brokers": [[0, "127.0.0.1", single.brokers[0].port, None]],
                                   "partitions": [[TOPIC, 0, 0, 0, [0], 0, [0], []]]},
        protocol.ApiKey.LEADER_AND_ISR: {"controller_id": 1, "controller_epoch": epoch,
                                  "partitions": [["fz", 0, 0, 0, [0], 0, [0], True]],
                                  "live_leaders": []},
        protocol.ApiKey.STOP_REPLICA: {"controller_id": 1, "controller_epoch": epoch,
                                "delete_partitions": False, "partitions": [["fz", 0, -1]]},
    }
    channel = single.channel(0)
    batch = bytes(batch_codec.build_batch([b"v"]))
    sent = 0
    for i in range(600):
        api_key = rng.choice(list(templates))
        body = copy.deepcopy(templates[api_key])
        name = rng.choice(list(body))
        if isinstance(body[name], list) and body[name] and isinstance(body[name][0], list) \
                and rng.random() < 0.7:
            entry = body[name][0]
            entry[rng.randrange(len(entry))] = rng.choice(atoms)
        else:
            body[name] = rng.choice(atoms)
        frames = [msgpack.packb([int(api_key), 0, 20_000 + i, "mutant"]), msgpack.packb(body)]
        if api_key == protocol.ApiKey.PRODUCE:
            frames.append(batch)
        channel.socket.send_multipart(frames)
        sent += 1
    answered = 0
    while channel.socket.poll(2000):
        channel.socket.recv_multipart()
        answered += 1
    assert answered >= sent * 0.9  # acks=0 produces are not answered
    assert single.brokers[0].alive
    assert "Traceback" not in single.brokers[0].log()
    single.send_leader_and_isr(TOPIC, [0], epoch=single.controller_epoch + 1000)
    assert single.produce(0, TOPIC, 0, [b"alive"], acks=1)[2] == 0


def test_an_unsupported_version_is_refused_and_api_versions_lists_the_ranges(single):
    """Kafka's manners: UNSUPPORTED_VERSION, not an answer in version 0; ApiVersions says
    what is supported, whatever version it is asked in."""
    channel = single.channel(0)
    for i, api_key in enumerate((protocol.ApiKey.PRODUCE, protocol.ApiKey.METADATA,
                                 protocol.ApiKey.FETCH)):
        cid = 1000 + i
        channel.in_flight[cid] = int(api_key)
        channel.socket.send_multipart(protocol.encode_request(api_key, cid, "t", {"topics": None},
                                                       api_version=99))
        response = None
        while response is None:
            response = next((r for r in channel.receive_ready() if r.correlation_id == cid),
                            None)
            channel.socket.poll(1000)
        assert response.body["error"] == ErrorCode.UNSUPPORTED_VERSION
        assert "version 99" in response.body["error_message"]
    versions = single.request(0, protocol.ApiKey.API_VERSIONS, {})
    ranges = {k: (lo, hi) for k, lo, hi in versions.body["api_keys"]}
    assert versions.body["error"] == 0
    assert ranges[protocol.ApiKey.PRODUCE] == (0, 0)
    assert ranges[protocol.ApiKey.API_VERSIONS] == (0, 0)
    assert protocol.ApiKey.CREATE_TOPICS in ranges and protocol.ApiKey.LEADER_AND_ISR in ranges
    # ... and the broker goes on serving.
    assert single.produce(0, TOPIC, 0, [b"after"], acks=1)[2] == 0


def test_a_too_deep_body_gets_a_message_that_says_why(single):
    deep = b"\x91" * 200_000 + b"\x00"     # 200,000 nested one-element arrays
    channel = single.channel(0)
    channel.socket.send_multipart(
        [protocol.pack([int(protocol.ApiKey.METADATA), 0, 77, "t"]), deep])
    response = None
    channel.in_flight[77] = int(protocol.ApiKey.METADATA)
    while response is None:
        channel.socket.poll(2000)
        response = next((r for r in channel.receive_ready() if r.correlation_id == 77), None)
    assert response.body["error"] == ErrorCode.INVALID_REQUEST
    message = response.body["error_message"]
    assert message.startswith("body is not valid msgpack: ") and \
        len(message) > len("body is not valid msgpack: "), message


def test_a_flood_of_long_polls_from_one_client_does_not_slow_the_others(single):
    """One connection pipelines thousands of fetches that could wait a minute: it gets
    PARKED_FETCHES_PER_CONNECTION_MAX parked and the rest answered at once, and an
    acks=1 write from another client is answered as fast as before."""
    from node.broker import limits
    from node.net import Channel
    flood = Channel(single.brokers[0].endpoint, client_id="flood")
    try:
        body = {"replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 10**9,
                "max_bytes": 1 << 20, "partitions": [[TOPIC, 0, 0, -1, 1 << 20]]}
        count = 2000
        for _ in range(count):
            flood.send(protocol.ApiKey.FETCH, body)
        answers = 0
        deadline = time.monotonic() + 30
        while answers < count - limits.PARKED_FETCHES_PER_CONNECTION_MAX and \
                time.monotonic() < deadline:
            flood.socket.poll(500)
            answers += len(flood.receive_ready())
        assert answers == count - limits.PARKED_FETCHES_PER_CONNECTION_MAX
        started = time.monotonic()
        assert single.produce(0, TOPIC, 1, [b"meanwhile"], acks=1)[2] == 0
        assert time.monotonic() - started < 2.0
    finally:
        flood.close()


def test_a_local_link_message_over_the_limit_is_logged_and_the_link_closed(single):
    """Kafka logs InvalidReceiveException for a request over socket.request.max.bytes;
    the broker names why it cut a local-link client off, and serves on."""
    import socket as socket_
    import struct
    from urllib.parse import urlparse
    from node import local_link
    url = urlparse(single.brokers[0].endpoint)
    link = socket_.socket(socket_.AF_UNIX, socket_.SOCK_STREAM)
    try:
        link.connect(local_link.address(url.hostname, url.port))
        link.sendall(struct.pack("<II", 1, local_link.MESSAGE_BYTES_MAX))   # one huge frame
        link.settimeout(10)
        assert link.recv(1) == b""                                  # closed by the broker
    finally:
        link.close()
    wait_for(lambda: "closing a local link: a message of" in single.brokers[0].log(),
             "the broker says why it closed the link", 10)
    answer = single.request(0, protocol.ApiKey.METADATA, {"topics": None}).body
    assert answer["brokers"]                                         # still serving
