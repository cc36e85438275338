"""Producer and consumer error handling against a scripted leader on a real ZeroMQ socket.

The scripted broker speaks node.wire.protocol on a ROUTER socket from a thread and answers
from a per-test handler, so each retry path can be forced deterministically; the real
brokers are exercised in test_client.py.
"""
from __future__ import annotations

import threading
import time

import pytest
import zmq

from node.wire import errors as wire_errors
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.client import (Consumer, KafkaTimeoutError, LogTruncationException, Producer,
                         TopicPartition)
from node.net import context
from shm.batch import build_batch, parse_batches, stamp

class ScriptedBroker:
    """Answers Metadata itself (one topic "t", one partition, led by this broker) and
    InitProducerId (producer id 1000), and hands every other request to ``handler(request) -> (body, frames) | None``."""

    def __init__(self, handler, leader_epoch: int = 3, view: dict | None = None):
        self.handler = handler
        self.leader_epoch = leader_epoch
        self.view = view  # shared {"port": leader port, "epoch": n}, else itself
        self.requests: list[protocol.Request] = []
        # Held while a request is answered: a script changes the broker's state under it,
        # so no answer mixes the state before and after (e.g. a deposed leader's epoch).
        self.lock = threading.Lock()
        self.sock = context().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def count(self, api_key) -> int:
        return sum(1 for r in list(self.requests) if r.api_key == api_key)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            if not self.sock.poll(50):
                continue
            frames = self.sock.recv_multipart()
            with self.lock:
                self._answer(frames)

    def _answer(self, frames) -> None:
        request = protocol.decode_request(frames[1:])
        self.requests.append(request)
        if request.api_key == protocol.ApiKey.METADATA:
            port = self.view["port"] if self.view else self.port
            epoch = self.view["epoch"] if self.view else self.leader_epoch
            answer = ({"brokers": [[0, "127.0.0.1", port, None]], "controller_id": 0,
                       "topics": [["t", 0, [[0, 0, 0, epoch, [0], [0], []]]]]}, ())
        elif request.api_key == protocol.ApiKey.INIT_PRODUCER_ID:    # idempotent producers
            answer = ({"error": 0, "producer_id": 1000,
                       "producer_epoch": request.body["producer_epoch"] + 1}, ())
        else:
            answer = self.handler(request)
        if answer is not None:
            body, out_frames = answer
            self.sock.send_multipart([frames[0]] + protocol.encode_response(
                request.correlation_id, request.api_key, body, out_frames))

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.sock.close(linger=0)


@pytest.fixture
def scripted():
    brokers = []

    def make(handler, **kwargs):
        broker = ScriptedBroker(handler, **kwargs)
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.close()


def produce_answer(request, code, base_offset=0, message=None):
    return ({"partitions": [[t, p, code, base_offset, 0, message]
                            for t, p in request.body["partitions"]]}, ())


def test_not_leader_refreshes_metadata_and_retries(scripted):
    answers = iter([ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_LEADER_OR_FOLLOWER, 0])
    broker = scripted(lambda r: produce_answer(r, next(answers), base_offset=42))
    with Producer(broker.bootstrap, acks="all", retry_backoff_ms=10) as producer:
        meta = producer.send("t", b"x", partition=0).get(10)
    assert meta.offset == 42
    assert broker.count(protocol.ApiKey.PRODUCE) == 3
    assert broker.count(protocol.ApiKey.METADATA) >= 2  # refreshed after NOT_LEADER_OR_FOLLOWER


def test_retries_exhausted_raise_the_broker_error_with_its_message(scripted):
    broker = scripted(lambda r: produce_answer(r, ErrorCode.NOT_ENOUGH_REPLICAS, message="isr 1 < 2"))
    with Producer(broker.bootstrap, acks="all", retries=2, retry_backoff_ms=10) as producer:
        future = producer.send("t", b"x", partition=0)
        with pytest.raises(wire_errors.NotEnoughReplicasError, match="isr 1 < 2"):
            future.get(10)
    assert broker.count(protocol.ApiKey.PRODUCE) == 3  # the first try and 2 retries
    # Three attempts: the failure is not definite (an earlier one could have landed had
    # it timed out), which a checker must know (bench.chaos.worker).
    assert future.attempts == 3


def test_a_refusal_without_retries_is_one_attempt(scripted):
    broker = scripted(lambda r: produce_answer(r, ErrorCode.NOT_ENOUGH_REPLICAS))
    with Producer(broker.bootstrap, acks="all", retries=0) as producer:
        future = producer.send("t", b"x", partition=0)
        with pytest.raises(wire_errors.NotEnoughReplicasError):
            future.get(10)
    assert future.attempts == 1


def test_a_non_retriable_error_is_raised_at_once(scripted):
    broker = scripted(lambda r: produce_answer(r, ErrorCode.INVALID_REQUEST))
    with Producer(broker.bootstrap, acks=1, retry_backoff_ms=10) as producer:
        future = producer.send("t", b"x", partition=0)
        with pytest.raises(wire_errors.InvalidRequestError):
            future.get(10)
        assert future.failed() and isinstance(future.exception(), wire_errors.InvalidRequestError)
    assert broker.count(protocol.ApiKey.PRODUCE) == 1


def test_delivery_timeout_bounds_a_silent_leader(scripted):
    broker = scripted(lambda r: None)  # never answers a Produce
    with Producer(broker.bootstrap, acks="all", request_timeout_ms=200,
                  delivery_timeout_ms=1000, retry_backoff_ms=10) as producer:
        started = time.monotonic()
        with pytest.raises((wire_errors.RequestTimedOutError, KafkaTimeoutError)):
            producer.send("t", b"x", partition=0).get(30)
        assert time.monotonic() - started < 10
    assert broker.count(protocol.ApiKey.PRODUCE) >= 1


def test_callbacks_and_flush(scripted):
    broker = scripted(lambda r: produce_answer(r, 0, base_offset=7))
    seen = []
    with Producer(broker.bootstrap, acks=1, linger_ms=20) as producer:
        futures = [producer.send("t", b"%d" % i, partition=0) for i in range(3)]
        futures[0].add_callback(lambda meta, exc: seen.append((meta.offset, exc)))
        producer.flush(10)
        assert all(f.done() for f in futures)
        futures[2].add_callback(lambda meta, exc: seen.append((meta.offset, exc)))
    assert seen == [(7, None), (9, None)]
    assert broker.count(protocol.ApiKey.PRODUCE) == 1  # one linger window, one batch


def test_a_send_to_an_idle_producer_goes_out_after_the_linger(scripted):
    broker = scripted(lambda r: produce_answer(r, 0))
    with Producer(broker.bootstrap, acks=1, linger_ms=2) as producer:
        producer.send("t", b"first", partition=0).get(10)   # metadata known
        waits = []
        for i in range(5):
            started = time.monotonic()
            producer.send("t", b"%d" % i, partition=0).get(10)
            waits.append(time.monotonic() - started)
    assert sorted(waits)[2] < 0.3, waits


def fetch_handler(log: list, errors: list):
    """Fetch: serve ``log`` (batches stamped at offsets 0..) after popping ``errors``;
    ListOffsets: earliest 0, latest = end of log."""
    def handle(request):
        if request.api_key == protocol.ApiKey.LIST_OFFSETS:
            end = sum(len(parse_batches(b)[0].values) for b in log)
            return ({"partitions": [[t, p, 0, -1, 0 if ts == protocol.EARLIEST_TIMESTAMP else end]
                                    for t, p, ts in request.body["partitions"]]}, ())
        if request.api_key == protocol.ApiKey.FETCH:
            (topic, partition, offset, epoch, _max) = request.body["partitions"][0]
            if errors:
                return ({"partitions": [[topic, partition, errors.pop(0), -1, -1, -1]]}, [b""])
            data = b"".join(bytes(b) for b in log)
            end = sum(len(parse_batches(b)[0].values) for b in log)
            if offset > end:
                return ({"partitions": [[topic, partition, ErrorCode.OFFSET_OUT_OF_RANGE, end, 0, end]]},
                        [b""])
            return ({"partitions": [[topic, partition, 0, end, 0, end]]},
                    [data if offset < end else b""])
        return None
    return handle


def make_log(values_per_batch):
    log, offset = [], 0
    for values in values_per_batch:
        batch = build_batch(values)
        stamp(batch, offset, 3)
        offset += len(values)
        log.append(batch)
    return log


def test_consumer_refreshes_metadata_on_fenced_epoch_and_sends_the_epoch(scripted):
    errors = [ErrorCode.FENCED_LEADER_EPOCH]
    broker = scripted(fetch_handler(make_log([[b"a", b"b"], [b"c"]]), errors), leader_epoch=3)
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                  retry_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got += consumer.poll(100)
    assert [(r.offset, r.value) for r in got] == [(0, b"a"), (1, b"b"), (2, b"c")]
    fetches = [r for r in broker.requests if r.api_key == protocol.ApiKey.FETCH]
    assert all(r.body["partitions"][0][3] == 3 for r in fetches)  # current_leader_epoch
    assert broker.count(protocol.ApiKey.METADATA) >= 2


def test_consumer_skips_records_before_its_position_inside_a_batch(scripted):
    broker = scripted(fetch_handler(make_log([[b"a", b"b", b"c", b"d"]]), []))
    with Consumer(broker.bootstrap, fetch_max_wait_ms=50) as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(("t", 0), 2)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += consumer.poll(100)
        assert [(r.offset, r.value) for r in got] == [(2, b"c"), (3, b"d")]
        assert consumer.position(("t", 0)) == 4


def test_consumer_out_of_range_applies_auto_offset_reset(scripted):
    broker = scripted(fetch_handler(make_log([[b"a"], [b"b"]]), []))
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as c:
        c.assign([("t", 0)])
        c.seek(("t", 0), 50)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += c.poll(100)
        assert [r.offset for r in got] == [0, 1]
    with Consumer(broker.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=50) as c:
        c.assign([("t", 0)])
        c.seek(("t", 0), 50)
        with pytest.raises(wire_errors.OffsetOutOfRangeError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                c.poll(100)


def test_poll_max_records_keeps_the_rest_for_the_next_poll(scripted):
    broker = scripted(fetch_handler(make_log([[b"%d" % i for i in range(10)]]), []))
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as c:
        c.assign([("t", 0)])
        first = []
        deadline = time.monotonic() + 10
        while not first and time.monotonic() < deadline:
            first = c.poll(100, max_records=4)
        rest = []
        while len(rest) < 6 and time.monotonic() < deadline:
            rest += c.poll(100)
    assert [r.offset for r in first] == [0, 1, 2, 3]
    assert [r.offset for r in rest] == list(range(4, 10))


def test_a_newer_leader_epoch_ends_the_backoff_early(scripted):
    state = {"produces": 0}
    holder = {}

    def handle(request):
        state["produces"] += 1
        if state["produces"] == 1:
            holder["broker"].leader_epoch += 1  # leadership moved (to the same address)
            return produce_answer(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return produce_answer(request, 0, base_offset=5)

    broker = holder["broker"] = scripted(handle)
    with Producer(broker.bootstrap, acks="all", retry_backoff_ms=3000,
                  metadata_backoff_ms=10) as producer:
        producer.send("t", b"warm-up-metadata", partition=0)  # not awaited
        started = time.monotonic()
        meta = producer.send("t", b"x", partition=0).get(10)
        assert time.monotonic() - started < 2.5  # not the 3 s backoff
    assert meta.offset >= 5


def test_consumer_resumes_at_once_when_the_leader_epoch_moves(scripted):
    log = make_log([[b"a"]])
    errors = [ErrorCode.FENCED_LEADER_EPOCH]
    holder = {}
    inner = fetch_handler(log, errors)

    def handle(request):
        if request.api_key == protocol.ApiKey.FETCH and errors:
            holder["broker"].leader_epoch += 1
        return inner(request)

    broker = holder["broker"] = scripted(handle)
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                  retry_backoff_ms=3000, metadata_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        consumer.position(("t", 0))
        started = time.monotonic()
        got = []
        while not got and time.monotonic() - started < 10:
            got = consumer.poll(100)
        assert [r.value for r in got] == [b"a"]
        assert time.monotonic() - started < 2.5


def test_consumer_leaves_a_silent_leader_when_metadata_names_another(scripted):
    """A SIGSTOPped leader keeps its TCP connection: its fetch hangs. After the fetch's
    max wait (+1 s) the consumer checks metadata and reads from the new leader."""
    view = {}
    silent = scripted(lambda r: None, view=view)  # answers Metadata only
    log = make_log([[b"a"], [b"b"]])
    serving = scripted(fetch_handler(log, []), view=view)
    view.update(port=silent.port, epoch=3)
    with Consumer(silent.bootstrap, fetch_max_wait_ms=50, request_timeout_ms=30_000,
                  retry_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(("t", 0), 0)
        assert consumer.poll(200) == []  # the fetch to the silent leader is in flight
        view.update(port=serving.port, epoch=4)
        started = time.monotonic()
        got = []
        while len(got) < 2 and time.monotonic() - started < 20:
            got += consumer.poll(100)
        assert [r.value for r in got] == [b"a", b"b"]
        assert time.monotonic() - started < 5  # not the 30 s request timeout


def test_producer_leaves_a_silent_leader_when_metadata_names_another(scripted):
    """A Produce to a paused leader is abandoned (and retried at the new leader) once
    metadata shows a newer leader epoch, long before the request timeout."""
    view = {}
    silent = scripted(lambda r: None, view=view)
    serving = scripted(lambda r: produce_answer(r, 0, base_offset=11), view=view)
    view.update(port=silent.port, epoch=3)
    with Producer(silent.bootstrap, acks="all", request_timeout_ms=30_000,
                  retry_backoff_ms=10) as producer:
        future = producer.send("t", b"x", partition=0)
        deadline = time.monotonic() + 10
        while silent.count(protocol.ApiKey.PRODUCE) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        view.update(port=serving.port, epoch=4)
        started = time.monotonic()
        assert future.get(20).offset == 11
        assert time.monotonic() - started < 5  # not the 30 s request timeout
    assert serving.count(protocol.ApiKey.PRODUCE) == 1


def poll_until(consumer, n, timeout_s=10.0):
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += consumer.poll(100)
    return [(r.offset, r.value) for r in got]


def deposed_leader_script(answers: list):
    """Serves a, b, c (leader epoch 3) until ``depose()``: then the leader epoch is 4,
    the next Fetch is answered FENCED_LEADER_EPOCH and the log is a (epoch 3) then x, y
    (epoch 4): b and c were a deposed leader's tail. OffsetForLeaderEpoch is answered
    from ``answers`` (code, epoch, end offset), the last one repeated."""
    log = make_log([[b"a", b"b"], [b"c"]])
    errors: list = []
    holder = {}
    inner = fetch_handler(log, errors)

    def handle(request):
        if request.api_key == protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH:
            code, epoch, end = answers.pop(0) if len(answers) > 1 else answers[0]
            return ({"partitions": [[t, p, code, epoch, end]
                                    for t, p, _current, _epoch in request.body["partitions"]]},
                    ())
        return inner(request)

    def depose():  # the fetch in flight, if any, is answered FENCED or from a, b, c
        with holder["broker"].lock:     # one step, between two answers
            errors.append(ErrorCode.FENCED_LEADER_EPOCH)
            holder["broker"].leader_epoch = 4
            new = make_log([[b"a"]]) + [build_batch([b"x", b"y"])]
            stamp(new[1], 1, 4)
            log[:] = new

    return holder, handle, depose


def test_a_fenced_fetch_validates_the_position_and_truncates_it_to_the_divergence(
        scripted, caplog):
    """KIP-320: the consumer read b, c from a leader that was then deposed. The fetch
    answered FENCED_LEADER_EPOCH makes it refresh metadata (epoch 4), ask the new leader
    where epoch 3 ends (1) and go back there, rather than reset or skip to offset 3."""
    holder, handle, depose = deposed_leader_script([(0, 3, 1)])
    broker = holder["broker"] = scripted(handle, leader_epoch=3)
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                  retry_backoff_ms=10, metadata_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        assert poll_until(consumer, 3) == [(0, b"a"), (1, b"b"), (2, b"c")]
        depose()
        with caplog.at_level("INFO", logger="minikafka.consumer"):
            assert poll_until(consumer, 2) == [(1, b"x"), (2, b"y")]
        assert consumer.position(("t", 0)) == 3
    asked = [r.body for r in broker.requests
             if r.api_key == protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH]
    assert asked == [{"replica_id": -1, "partitions": [["t", 0, 4, 3]]}]
    assert "Truncation detected for partition t-0 at offset 3, resetting offset to the " \
           "first offset known to diverge 1" in caplog.text
    assert broker.count(protocol.ApiKey.LIST_OFFSETS) == 1  # the first position only: no reset


def test_without_a_reset_policy_poll_raises_log_truncation_until_the_caller_seeks(scripted):
    holder, handle, depose = deposed_leader_script([(0, 3, 1)])
    broker = holder["broker"] = scripted(handle, leader_epoch=3)
    tp = TopicPartition("t", 0)
    with Consumer(broker.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=50,
                  retry_backoff_ms=10, metadata_backoff_ms=10) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert len(poll_until(consumer, 3)) == 3
        depose()
        for _ in range(2):  # raised again by the next poll
            with pytest.raises(LogTruncationException) as raised:
                poll_until(consumer, 1)
            assert raised.value.divergent_offsets == {tp: 1}
            assert raised.value.offset_out_of_range_partitions == {tp: 3}
            assert isinstance(raised.value, wire_errors.OffsetOutOfRangeError)
        consumer.seek(tp, raised.value.divergent_offsets[tp])
        assert poll_until(consumer, 2) == [(1, b"x"), (2, b"y")]


def test_a_validation_answered_unknown_leader_epoch_is_retried_after_a_metadata_refresh(
        scripted):
    """A new leader that has not yet heard of its epoch answers UNKNOWN_LEADER_EPOCH:
    the consumer refreshes metadata and asks again; a position the leader's log covers
    is kept (a clean election: x and y follow at 3 and 4)."""
    log = make_log([[b"a", b"b"], [b"c"]])
    errors: list = []
    answers = [(ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1), (0, 3, 3)]
    inner = fetch_handler(log, errors)

    def handle(request):
        if request.api_key == protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH:
            code, epoch, end = answers.pop(0) if len(answers) > 1 else answers[0]
            return ({"partitions": [["t", 0, code, epoch, end]]}, ())
        return inner(request)

    broker = scripted(handle, leader_epoch=3)
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                  retry_backoff_ms=10, metadata_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        assert len(poll_until(consumer, 3)) == 3
        refreshes = broker.count(protocol.ApiKey.METADATA)
        errors.append(ErrorCode.FENCED_LEADER_EPOCH)  # before x, y: no fetch sees them
        broker.leader_epoch = 4                      # before the FENCED answer is read
        new = build_batch([b"x", b"y"])
        stamp(new, 3, 4)
        log.append(new)
        assert poll_until(consumer, 2) == [(3, b"x"), (4, b"y")]
    assert broker.count(protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH) == 2
    assert broker.count(protocol.ApiKey.METADATA) >= refreshes + 2


def test_a_validation_a_silent_leader_leaves_unanswered_moves_on_with_metadata(scripted):
    """The new leader is paused (its OffsetForLeaderEpoch hangs); when metadata names a
    third leader, the consumer validates there, long before the request timeout."""
    view = {}
    log = make_log([[b"a"], [b"b"]])
    errors: list = []
    old = scripted(fetch_handler(log, errors), view=view)
    silent = scripted(lambda r: None, view=view)
    c = build_batch([b"c"])
    stamp(c, 2, 5)

    def third_leader(request):
        if request.api_key == protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return ({"partitions": [["t", 0, 0, 3, 2]]}, ())
        return fetch_handler(log + [c], [])(request)

    third = scripted(third_leader, view=view)
    view.update(port=old.port, epoch=3)
    with Consumer(old.bootstrap, fetch_max_wait_ms=50, request_timeout_ms=30_000,
                  retry_backoff_ms=10, metadata_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(("t", 0), 0)
        assert poll_until(consumer, 2) == [(0, b"a"), (1, b"b")]
        errors.append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        view.update(port=silent.port, epoch=4)
        deadline = time.monotonic() + 10
        while silent.count(protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH) == 0:
            assert time.monotonic() < deadline, "the consumer asks the new leader"
            assert consumer.poll(50) == []
        view.update(port=third.port, epoch=5)
        started = time.monotonic()
        assert poll_until(consumer, 1, timeout_s=20) == [(2, b"c")]
        assert time.monotonic() - started < 5  # not the 30 s request timeout
    assert silent.count(protocol.ApiKey.FETCH) == 0
    asked = [r.body["partitions"] for r in third.requests
             if r.api_key == protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH]
    assert asked == [[["t", 0, 5, 3]]]
