"""The Kafka listener on real brokers: what it advertises, Metadata as Kafka's clients see
it, the registration, unsupported APIs and versions, SASL, bad frames, and the order of
answers on one connection."""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install -e '.[kafka-clients]')")
from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient

from node.kafka.protocol import encode_request, RequestHeader
from node.broker.server import set_log_levels
from node.kafka.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                          FetchRequest, JoinGroupRequest, ListOffsetsRequest,
                                          MetadataRequest, SaslHandshakeRequest)
from node.kafka.translate import advertised
from node.wire import zkdata
from node.wire.errors import ErrorCode
from node.waiting import poll_until
from tests.node.kafka.clients import create_topic, running_cluster
from tests.node.kafka.kafka_wire import KafkaWire

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
# What this broker serves, API by API (key: (min, max)); a change here is a change of
# what clients are told, on purpose.
EXPECTED_APIS = {0: (3, 11), 1: (4, 13), 2: (1, 7), 3: (0, 12), 17: (0, 1), 18: (0, 4),
                 22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 36: (0, 2),
                 65: (0, 0), 66: (0, 1)}


def first_kafka(cluster) -> str:
    return cluster.kafka_bootstrap_servers.split(",")[0]


def test_api_versions_advertises_exactly_the_translations(kafka_cluster):
    with KafkaWire(first_kafka(kafka_cluster)) as wire:
        for version in (0, 3, 4):
            response = wire.request(ApiVersionsRequest(client_software_name="t",
                                                       client_software_version="1"), version)
            assert response.error_code == 0
            got = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert got == {key: (lo, hi) for key, lo, hi in advertised()}
    data_path = {key: span for key, span in got.items() if key in EXPECTED_APIS}
    assert data_path == EXPECTED_APIS


def test_api_versions_too_new_gets_a_v0_answer_with_the_keys(kafka_cluster):
    """KIP-511: UNSUPPORTED_VERSION and the key list, in version 0."""
    with KafkaWire(first_kafka(kafka_cluster)) as wire:
        payload = struct.pack(">hhih", 18, 99, 7, 1) + b"x" + b"\x00\x00\x00"
        wire.send_raw(payload)
        frame = wire.receive_frame()
        from node.kafka.protocol import decode_response
        cid, response = decode_response(18, 0, frame)
    assert cid == 7 and response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key for k in response.api_keys} == {key for key, _, _ in advertised()}


def test_metadata_lists_kafka_endpoints_cluster_id_controller_and_topic_ids(kafka_cluster,
                                                                           kafka_topic):
    expected = {b: kafka_cluster.kafka_address(b) for b in kafka_cluster.broker_ids}
    with KafkaWire(first_kafka(kafka_cluster)) as wire:
        response = wire.request(MetadataRequest(topics=None), 12)
        missing = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="no-such-topic")]), 12)
        unknown_id = uuid.uuid4()
        by_id = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            topic_id=unknown_id, name=None)]), 12)
    assert {b.node_id: f"{b.host}:{b.port}" for b in response.brokers} == expected
    assert response.cluster_id == kafka_cluster.cluster_id
    assert response.controller_id == kafka_cluster.controller_id()
    topic = next(t for t in response.topics if t.name == kafka_topic)
    assert topic.error_code == 0 and topic.topic_id.int != 0
    # The id is the one stored in the topic znode, as Kafka stores it.
    data, _ = kafka_cluster.zk().get(zkdata.topic_path(kafka_topic))
    assert zkdata.topic_id_uuid(json.loads(data)["topic_id"]) == topic.topic_id
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]
    for p in topic.partitions:
        assert p.error_code == 0 and p.leader_id in p.isr_nodes and len(p.replica_nodes) == 3
        assert p.leader_epoch >= 0 and p.offline_replicas == []
    assert [t.error_code for t in missing.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert [(t.error_code, t.topic_id) for t in by_id.topics] == [
        (ErrorCode.UNKNOWN_TOPIC_ID, unknown_id)]


def test_registration_lists_both_endpoints_as_kafka_does(kafka_cluster):
    data, _ = kafka_cluster.zk().get(zkdata.broker_path(0))
    value = json.loads(data)
    native = kafka_cluster.broker_address(0)
    assert value["endpoints"] == [f"PLAINTEXT://{native}",
                                  f"KAFKA://{kafka_cluster.kafka_address(0)}"]
    assert value["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT",
                                                       "KAFKA": "PLAINTEXT"}
    assert f"{value['host']}:{value['port']}" == native


def test_confluent_kafka_and_kcat_list_the_cluster(kafka_cluster, kafka_topic):
    admin = AdminClient({"bootstrap.servers": kafka_cluster.kafka_bootstrap_servers})
    md = admin.list_topics(timeout=20)
    assert md.cluster_id == kafka_cluster.cluster_id
    assert {b: f"{m.host}:{m.port}" for b, m in md.brokers.items()} == {
        b: kafka_cluster.kafka_address(b) for b in kafka_cluster.broker_ids}
    assert len(md.topics[kafka_topic].partitions) == 3
    out = subprocess.run(["kcat", "-L", "-b", first_kafka(kafka_cluster), "-t", kafka_topic],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f'topic "{kafka_topic}" with 3 partitions' in out.stdout
    for b in kafka_cluster.broker_ids:
        assert f"broker {b} at {kafka_cluster.kafka_address(b)}" in out.stdout


def test_cluster_status_shows_each_brokers_kafka_address(kafka_cluster):
    out = subprocess.run([sys.executable, "-m", "node.cli", "cluster", "status", "--dir",
                          str(kafka_cluster.dir)], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for b in kafka_cluster.broker_ids:
        line = next(l for l in out.stdout.splitlines() if l.startswith(f"broker {b} "))
        assert f"kafka {kafka_cluster.kafka_address(b)}" in line


def test_unsupported_api_or_version_is_answered_as_kafka(kafka_cluster):
    with KafkaWire(first_kafka(kafka_cluster)) as wire:
        # A version not served (ListOffsets v0, Kafka's old offsets list) parses: its
        # error response, per partition.
        old = wire.request(ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1,
                                                        max_num_offsets=1)])]), 0)
        assert [p.error_code for t in old.topics for p in t.partitions] == [
            ErrorCode.UNSUPPORTED_VERSION]
        # Fetch v15 parses but is not served: every partition says so.
        fetch = wire.request(FetchRequest(max_wait_ms=0, topics=[FetchRequest.FetchTopic(
            topic_id=uuid.uuid4(), partitions=[FetchRequest.FetchPartition(partition=0)])]), 15)
        assert fetch.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [p.error_code for t in fetch.responses for p in t.partitions] == [
            ErrorCode.UNSUPPORTED_VERSION]
        # The connection still serves.
        assert wire.request(MetadataRequest(topics=[]), 9).controller_id >= 0
    with KafkaWire(first_kafka(kafka_cluster)) as wire:
        # An API key Kafka does not have: Kafka closes the connection.
        wire.send_raw(struct.pack(">hhih", 999, 0, 1, -1))
        assert wire.closed_by_broker()


def test_sasl_is_not_offered_and_clients_say_so(kafka_cluster):
    with KafkaWire(first_kafka(kafka_cluster)) as wire:
        answer = wire.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
    errors = []
    producer = Producer({"bootstrap.servers": first_kafka(kafka_cluster),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "u", "sasl.password": "p",
                         "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "librdkafka reported nothing"
    # What librdkafka says against Kafka's own PLAINTEXT listener.
    assert any("SASL PLAIN mechanism handshake failed" in e.str() and
               "Request not valid in current SASL state" in e.str() for e in errors), \
        [e.str() for e in errors]


def test_malformed_frame_closes_only_that_connection(kafka_cluster, kafka_topic):
    address = first_kafka(kafka_cluster)
    log = kafka_cluster.processes["0"].log_path
    with KafkaWire(address) as good, KafkaWire(address) as bad, KafkaWire(address) as big:
        assert good.request(MetadataRequest(topics=None), 1).brokers
        # A Metadata v1 whose topic array claims more topics than the frame holds.
        bad.send_raw(struct.pack(">hhih", 3, 1, 5, 1) + b"x" + struct.pack(">i", 1000))
        assert bad.closed_by_broker()
        # A frame larger than socket.request.max.bytes (Kafka's default, 100 MiB).
        big.sock.sendall(struct.pack(">i", 104857600 + 1) + b"\x00" * 16)
        assert big.closed_by_broker()
        assert good.request(MetadataRequest(topics=None), 1).brokers
    lines = [l for l in log.read_text().splitlines() if "kafka listener: closing" in l]
    assert lines and "127.0.0.1:" in lines[-1]
    # Another client still works end to end.
    md = AdminClient({"bootstrap.servers": address}).list_topics(timeout=20)
    assert kafka_topic in md.topics


def test_answers_come_in_request_order_behind_a_parked_fetch(kafka_cluster, kafka_topic):
    """A long-poll Fetch parked in the purgatory holds back the Metadata answer sent after
    it on the same connection, as Kafka serves one request per connection at a time."""
    address = first_kafka(kafka_cluster)
    with KafkaWire(address) as wire:
        md = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=kafka_topic)]), 9)
        leader = next(p.leader_id for p in md.topics[0].partitions if p.partition_index == 0)
    with KafkaWire(kafka_cluster.kafka_address(leader)) as wire:
        started = time.monotonic()
        fetch_cid = wire.send(FetchRequest(max_wait_ms=700, min_bytes=1, max_bytes=1 << 20,
                                           topics=[FetchRequest.FetchTopic(
                                               topic=kafka_topic, partitions=[
                                                   FetchRequest.FetchPartition(
                                                       partition=0, fetch_offset=0,
                                                       partition_max_bytes=1 << 20)])]), 11)
        metadata_cid = wire.send(MetadataRequest(topics=[]), 9)
        first_cid, fetch = wire.receive(1, 11)
        waited = time.monotonic() - started
        second_cid, _ = wire.receive(3, 9)
    assert (first_cid, second_cid) == (fetch_cid, metadata_cid)
    assert waited >= 0.6, "the fetch was not parked"
    assert fetch.responses[0].partitions[0].error_code == 0


def test_cluster_up_prints_the_kafka_bootstrap_servers(tmp_path, cluster_id):
    """On a line of its own; a cluster made before brokers had a Kafka listener (no
    kafka_brokers in cluster.json) gets one when it is brought up again."""
    directory = tmp_path / "c"

    def cluster(*args):
        return subprocess.run([sys.executable, "-m", "node.cli", "cluster", *args, "--dir",
                               str(directory)], cwd=REPO, capture_output=True, text=True,
                              timeout=120)

    def kafka_line(up) -> str:
        assert up.returncode == 0, up.stderr
        lines = [l for l in up.stdout.splitlines() if l.startswith("kafka bootstrap servers: ")]
        assert len(lines) == 1
        return lines[0].split(": ", 1)[1]

    try:
        address = kafka_line(cluster("up", "--brokers", "1", "--cluster-id", cluster_id))
        with KafkaWire(address) as wire:
            answer = wire.request(MetadataRequest(topics=None), 12)
        assert [f"{b.host}:{b.port}" for b in answer.brokers] == [address]
        assert cluster("down", "--grace", "5").returncode == 0
        spec_path = directory / "cluster.json"
        spec = json.loads(spec_path.read_text())
        del spec["kafka_brokers"]                   # as a cluster made before
        spec_path.write_text(json.dumps(spec))
        again = kafka_line(cluster("up"))
        assert again, "no Kafka listener after up"
        with KafkaWire(again) as wire:
            assert wire.request(MetadataRequest(topics=None), 12).brokers[0].port == \
                int(again.rsplit(":", 1)[1])
    finally:
        cluster("down", "--grace", "5")


def test_advertised_listeners_are_what_clients_are_told(tmp_path, cluster_id):
    """advertised.listeners (port 0 there: the port bound) reaches the registration and
    every Metadata answer; the listener itself stays where listeners put it."""
    from node.cluster import Cluster
    with Cluster.up(tmp_path / "c", brokers=1, cluster_id=cluster_id,
                    config={"advertised.listeners": "KAFKA://localhost:0"}) as cluster:
        address = cluster.kafka_address(0)
        port = int(address.rsplit(":", 1)[1])
        with KafkaWire(address) as wire:
            answer = wire.request(MetadataRequest(topics=None), 12)
        assert [(b.host, b.port) for b in answer.brokers] == [("localhost", port)]
        value = json.loads(cluster.zk().get(zkdata.broker_path(0))[0])
        assert value["endpoints"][1] == f"KAFKA://localhost:{port}"


def test_connections_dropped_mid_frame_leave_the_broker_serving(kafka_cluster):
    """Incomplete frames are counted against the listener's budget while buffered and
    released when their connection goes, however it goes: closed by the client, or by
    the broker for a bad frame after a partial one."""
    address = first_kafka(kafka_cluster)
    for round_ in range(3):
        wires = [KafkaWire(address) for _ in range(10)]
        for i, wire in enumerate(wires):
            wire.sock.sendall(struct.pack(">i", 8 << 20) + b"\x00" * (1 << 20))
            if i % 2:   # the rest of the frame, then a frame over the limit: closed
                wire.sock.sendall(b"\x00" * ((8 << 20) - (1 << 20)) +
                                  struct.pack(">i", 104857600 + 1))
        for i, wire in enumerate(wires):
            if i % 2:
                assert wire.closed_by_broker()
            wire.close()
        with KafkaWire(address) as fresh:
            assert fresh.request(MetadataRequest(topics=None), 1).brokers
    assert kafka_cluster.processes["0"].pid() is not None


def test_the_request_log_names_each_request_its_time_and_error(tmp_path, cluster_id,
                                                               monkeypatch):
    """MINIKAFKA_LOG_LEVELS=kafka.request.logger=DEBUG turns on Kafka's request log: a line
    per answered request (API, version, correlation id, client id, peer, time, top-level
    error) and one per request a closed connection left unanswered."""
    monkeypatch.setenv("MINIKAFKA_LOG_LEVELS", "kafka.request.logger=DEBUG")
    with running_cluster(tmp_path / "c", cluster_id, brokers=1) as c:
        create_topic(c, "logged", replication_factor=1)
        with KafkaWire(c.kafka_bootstrap_servers) as wire:
            wire.request(MetadataRequest(topics=None), 12)
            wire.request(JoinGroupRequest(group_id="", session_timeout_ms=10_000,
                                          protocol_type="consumer"), 5)
            wire.send(FetchRequest(max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20,
                                   topics=[FetchRequest.FetchTopic(
                                       topic="logged", partitions=[FetchRequest.FetchPartition(
                                           partition=0, fetch_offset=0,
                                           partition_max_bytes=1 << 20)])]), 11)
        log = c.dir / "broker-0.log"
        poll_until(lambda: "Unanswered at the connection's close: Fetch v11" in
                   log.read_text(errors="replace"), 15, "the unanswered fetch logged")
        text = log.read_text(errors="replace")
    assert re.search(r"Completed request: Metadata v12 \(correlation id \d+, client id "
                     r"'[^']*'\) from 127\.0\.0\.1:\d+, [\d.]+ ms\n", text), text[-3000:]
    # (INVALID_GROUP_ID; NOT_COORDINATOR while __consumer_offsets, made on demand, loads)
    assert re.search(r"Completed request: JoinGroup v5 \(correlation id \d+, .*ms, error "
                     r"(INVALID_GROUP_ID|NOT_COORDINATOR|COORDINATOR_LOAD_IN_PROGRESS)\n",
                     text), text[-3000:]



@pytest.mark.parametrize("text", ["kafka.request.logger", "=DEBUG", "a=LOUD", "a=DEBUG,b"])
def test_a_bad_log_levels_value_is_refused_with_its_item(text):
    with pytest.raises(ValueError, match="is not name=LEVEL"):
        set_log_levels(text)
