"""The client's pure parts and its network layer (against real ZeroMQ peers in-process)."""
from __future__ import annotations

import time

import pytest
import zmq

from node.wire import errors
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.client import (ClusterMetadata, Network, parse_bootstrap, parse_metadata)
from node.net import context
from node.client.producer import Producer

METADATA_BODY = {
    "brokers": [[0, "127.0.0.1", 9092, None], [1, "127.0.0.1", 9093, "r1"]],
    "controller_id": 1,
    "topics": [["a", 0, [[0, 0, 1, 4, [1, 0], [1, 0], []],
                         [1, 0, -1, 2, [0, 1], [], [0]]]],
               ["missing", 3, []]],
}


def test_parse_bootstrap_accepts_kafka_forms():
    assert parse_bootstrap("127.0.0.1:9092, PLAINTEXT://h:1") == \
        ["tcp://127.0.0.1:9092", "tcp://h:1"]
    assert parse_bootstrap(["tcp://x:2"]) == ["tcp://x:2"]
    for bad in ("", "host", "host:port", ":9092"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_parse_metadata_indexes_leaders_and_errors():
    md = parse_metadata(METADATA_BODY)
    assert md.controller_id == 1 and md.brokers[1].rack == "r1"
    assert md.leader_endpoint("a", 0) == "tcp://127.0.0.1:9093"
    assert md.leader_endpoint("a", 1) is None and md.partition("a", 1).offline
    assert md.partition("a", 0).isr == (1, 0) and md.partition("a", 0).leader_epoch == 4
    assert md.available_partitions("a") == [0] and md.partition_count("a") == 2
    assert md.topic_errors == {"missing": 3} and md.partition_count("missing") is None
    with pytest.raises(protocol.ProtocolError):
        parse_metadata({"brokers": [[0]], "topics": []})


def test_merged_metadata_keeps_other_topics_and_takes_new_brokers():
    old = parse_metadata(METADATA_BODY)
    newer = parse_metadata({"brokers": [[2, "127.0.0.1", 9094, None]], "controller_id": 2,
                            "topics": [["missing", 0, [[0, 0, 2, 0, [2], [2], []]]]]})
    md = old.merged(newer)
    assert set(md.topics) == {"a", "missing"} and md.topic_errors == {}
    assert list(md.brokers) == [2] and md.controller_id == 2
    assert ClusterMetadata().partition_count("a") is None


def test_a_stale_leader_epoch_does_not_replace_a_newer_one():
    """KIP-320: a deposed leader that has not heard of the election yet still says it
    leads (epoch 4); the client already knows epoch 5 (broker 0): it keeps that, so a
    consumer is not sent back to a log that ends before its position. A newer epoch, or
    a partition with other replicas (a re-created topic), is taken."""
    known = parse_metadata(METADATA_BODY).merged(parse_metadata(
        {"brokers": METADATA_BODY["brokers"], "topics": [["a", 0, [[0, 0, 0, 5, [1, 0], [0], []]]]]}))
    assert known.partition("a", 0).leader == 0 and known.partition("a", 0).leader_epoch == 5
    stale = parse_metadata({"brokers": METADATA_BODY["brokers"],
                            "topics": [["a", 0, [[0, 0, 1, 4, [1, 0], [1, 0], []]]]]})
    for keep_others in (True, False):
        md = known.merged(stale, keep_others=keep_others)
        assert md.partition("a", 0).leader == 0 and md.partition("a", 0).leader_epoch == 5
    newer = parse_metadata({"brokers": METADATA_BODY["brokers"],
                            "topics": [["a", 0, [[0, 0, 1, 6, [1, 0], [1, 0], []]]]]})
    assert known.merged(newer).partition("a", 0).leader_epoch == 6
    recreated = parse_metadata({"brokers": METADATA_BODY["brokers"],
                                "topics": [["a", 0, [[0, 0, 1, 0, [0, 1], [0, 1], []]]]]})
    assert known.merged(recreated).partition("a", 0).leader_epoch == 0


@pytest.fixture
def router():
    sock = context().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, f"tcp://127.0.0.1:{port}"
    sock.close(linger=0)


def answer(sock, body_for, timeout_ms=5000):
    assert sock.poll(timeout_ms)
    frames = sock.recv_multipart()
    request = protocol.decode_request(frames[1:])
    sock.send_multipart([frames[0]] + protocol.encode_response(
        request.correlation_id, request.api_key, body_for(request)))
    return request


def test_request_gets_its_response(router):
    sock, endpoint = router
    net = Network("t", 5000)
    try:
        net.send(endpoint, protocol.ApiKey.METADATA, {"topics": None}, context="m")
        answer(sock, lambda r: METADATA_BODY)
        deadline = time.monotonic() + 5
        done = []
        while not done and time.monotonic() < deadline:
            done, _ = net.poll(100)
        assert done[0].context == "m" and done[0].response.body["controller_id"] == 1
    finally:
        net.close()


def test_nobody_listening_fails_fast_with_network_exception():
    sock = context().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(linger=0)  # the port is now closed
    net = Network("t", 30_000)
    try:
        started = time.monotonic()
        with pytest.raises(errors.NetworkException):
            net.request(f"tcp://127.0.0.1:{port}", protocol.ApiKey.METADATA, {"topics": None})
        assert time.monotonic() - started < 5  # not the 30 s request timeout
    finally:
        net.close()


def test_a_peer_that_goes_away_fails_the_requests_in_flight(router):
    sock, endpoint = router
    net = Network("t", 30_000)
    try:
        answer_first = net.send(endpoint, protocol.ApiKey.METADATA, {"topics": None}, context=1)
        assert answer_first
        answer(sock, lambda r: METADATA_BODY)
        deadline = time.monotonic() + 5
        while not net.poll(100)[0] and time.monotonic() < deadline:
            pass
        net.send(endpoint, protocol.ApiKey.METADATA, {"topics": None}, context=2)
        assert sock.poll(5000)
        sock.recv_multipart()  # received, never answered: the broker dies
        sock.close(linger=0)
        started, failed = time.monotonic(), []
        while not failed and time.monotonic() - started < 10:
            failed, _ = net.poll(100)
        assert failed[0].context == 2 and failed[0].error_code == ErrorCode.NETWORK_EXCEPTION
        assert time.monotonic() - started < 5
    finally:
        net.close()


def test_a_silent_peer_times_out(router):
    _, endpoint = router
    net = Network("t", 300)
    try:
        with pytest.raises(errors.RequestTimedOutError):
            net.request(endpoint, protocol.ApiKey.METADATA, {"topics": None})
    finally:
        net.close()


def test_request_first_takes_the_first_answer(router):
    sock, endpoint = router
    dead = context().socket(zmq.ROUTER)
    dead_port = dead.bind_to_random_port("tcp://127.0.0.1")
    dead.close(linger=0)
    net = Network("t", 5000)
    try:
        import threading
        t = threading.Thread(target=answer, args=(sock, lambda r: METADATA_BODY))
        t.start()
        winner, response = net.request_first([f"tcp://127.0.0.1:{dead_port}", endpoint],
                                             protocol.ApiKey.METADATA, {"topics": None})
        t.join()
        assert winner == endpoint and response.body["controller_id"] == 1
        assert net.in_flight == {}
    finally:
        net.close()


def test_request_first_keeps_other_requests_answers_that_come_with_its_own(router):
    """A response to another request (a consumer's fetch) that arrives in the same poll
    as request_first's winner must not be dropped (it was: the fetch then hung until
    its 30 s timeout)."""
    import threading
    sock, endpoint = router
    net = Network("t", 5000)
    try:
        for attempt in range(20):
            net.send(endpoint, protocol.ApiKey.FETCH, {"n": attempt}, context=("fetch", attempt))
            assert sock.poll(5000)
            fetch = sock.recv_multipart()

            def answer_both():     # the metadata answer, then the fetch's, back to back
                assert sock.poll(5000)
                frames = sock.recv_multipart()
                request = protocol.decode_request(frames[1:])
                sock.send_multipart([frames[0]] + protocol.encode_response(
                    request.correlation_id, request.api_key, METADATA_BODY))
                parked = protocol.decode_request(fetch[1:])
                sock.send_multipart([fetch[0]] + protocol.encode_response(
                    parked.correlation_id, parked.api_key, {"partitions": []}))
            t = threading.Thread(target=answer_both)
            t.start()
            net.request_first([endpoint], protocol.ApiKey.METADATA, {"topics": None})
            t.join()
            deadline = time.monotonic() + 5
            seen = []
            while not seen and time.monotonic() < deadline:
                seen = [c.context for c in net.poll(100)[0]]
            assert seen == [("fetch", attempt)], (attempt, seen)
        assert net.in_flight == {}
    finally:
        net.close()


def test_producer_validates_its_configs():
    with pytest.raises(ValueError, match="acks"):
        Producer("127.0.0.1:1", acks=2)
    with pytest.raises(ValueError):
        Producer("nohostport")


def test_producer_against_a_broker_speaking_the_protocol(router):
    """The producer's batching and offsets, with a scripted leader on a real socket."""
    sock, endpoint = router
    port = int(endpoint.rsplit(":", 1)[1])
    metadata = {"brokers": [[0, "127.0.0.1", port, None]], "controller_id": 0,
                "topics": [["t", 0, [[0, 0, 0, 0, [0], [0], []], [1, 0, 0, 0, [0], [0], []]]]]}
    from shm.batch import parse_batches

    with Producer(endpoint, acks=1, linger_ms=0, retry_backoff_ms=10) as producer:
        futures = [producer.send("t", b"v%d" % i, partition=1) for i in range(5)]
        leo, seen = 100, []
        deadline = time.monotonic() + 10
        while not all(f.done() for f in futures) and time.monotonic() < deadline:
            if not sock.poll(100):
                continue
            frames = sock.recv_multipart()
            request = protocol.decode_request(frames[1:])
            if request.api_key == protocol.ApiKey.METADATA:
                body = metadata
            else:
                entries = []
                for (topic, partition), frame in zip(request.body["partitions"], request.frames):
                    batches = parse_batches(frame)
                    seen += [v for b in batches for v in b.values.to_pylist()]
                    entries.append([topic, partition, 0, leo, 0, None])
                    leo += sum(b.record_count for b in batches)
                body = {"partitions": entries}
            sock.send_multipart([frames[0]] + protocol.encode_response(
                request.correlation_id, request.api_key, body))
        assert [f.get(1).offset for f in futures] == [100, 101, 102, 103, 104]
        assert seen == [b"v%d" % i for i in range(5)]
        assert {f.get(1).partition for f in futures} == {1}

