"""The idempotent producer (KIP-98 without transactions) on real brokers: the leader's
sequence checks, and a producer whose answers are lost writes every record once."""
from __future__ import annotations

import collections
import threading
import time

import pytest

from node.client import Admin, Consumer, Network, Producer
from node.client.producer.sender import Sender
from node.cluster import Cluster
from node.wire import protocol
from node.wire.errors import ErrorCode
from shm.batch import build_batch
from tests.conftest import new_cluster_id
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

# The session outlives a follower paused until the ISR shrinks (replica.lag.time.max.ms,
# about 3 s; longer under load): a session that expired as the follower woke made it
# register again while the next test created its topic (CI: RF 3 "larger than available
# brokers: 2"). A SIGKILLed leader is replaced after the 10 s instead.
CONFIG = {"zookeeper.session.timeout.ms": "10000", "replica.lag.time.max.ms": "3000",
          "replica.fetch.wait.max.ms": "50", "auto.leader.rebalance.enable": "false",
          "producer.id.expiration.check.interval.ms": "200"}   # 1 day's expiration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("idempotence"), brokers=3, config=CONFIG,
                         cluster_id=new_cluster_id())
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


_names = iter(range(1000))


def _topic(cluster, rf: int, min_isr: int = 1) -> tuple[str, int]:
    name = f"idem{next(_names)}"
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(name, 1, rf, config={"min.insync.replicas": str(min_isr)})
        admin.wait_for(lambda: admin.describe_topics([name])[name][0].leader >= 0, 10_000,
                       "a leader")
        leader = admin.describe_topics([name])[name][0].leader
    return name, leader


def _produce_raw(net, endpoint, topic, batch, acks=-1) -> tuple[int, int]:
    body = {"acks": acks, "timeout_ms": 5000, "partitions": [[topic, 0]]}
    response = net.request(endpoint, protocol.ApiKey.PRODUCE, body, [bytes(batch)])
    _, _, code, base_offset, _, _ = response.body["partitions"][0]
    return code, base_offset


def _batch(pid, epoch, seq, n=2):
    return build_batch([b"r%d" % i for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def test_an_idle_producer_is_forgotten_after_producer_id_expiration_ms(cluster):
    """Kafka's producer-id expiration (the default day, checked every 200 ms here), by
    the batches' timestamps: the leader forgets a producer whose last batch is two days
    old (its next sequence is UNKNOWN_PRODUCER_ID, sequence 0 starts it again), and not
    one writing now."""
    topic, leader = _topic(cluster, 3, min_isr=2)
    endpoint = f"tcp://127.0.0.1:{cluster.broker_ports[leader]}"
    old_ms = int(time.time() * 1000) - 2 * 86_400_000
    net = Network("raw", 10_000)
    try:
        ids = [net.request(endpoint, protocol.ApiKey.INIT_PRODUCER_ID,
                           {"producer_id": -1, "producer_epoch": -1}).body for _ in range(2)]
        (old, old_epoch), (new, new_epoch) = [(i["producer_id"], i["producer_epoch"])
                                              for i in ids]

        def old_batch(seq):
            return build_batch([b"old-%d" % seq], timestamps_ms=old_ms, producer_id=old,
                               producer_epoch=old_epoch, base_sequence=seq)
        assert _produce_raw(net, endpoint, topic, _batch(new, new_epoch, 0))[0] == 0
        assert _produce_raw(net, endpoint, topic, old_batch(0))[0] == 0
        sent = [0]

        def forgotten():
            # each accepted batch is two days old too: the producer stays idle
            code, _ = _produce_raw(net, endpoint, topic, old_batch(sent[0] + 1))
            if code == 0:
                sent[0] += 1
                return False
            assert code == ErrorCode.UNKNOWN_PRODUCER_ID, code
            return True
        poll_until(forgotten, 10, "the two-day-old producer forgotten", interval_s=0.1)
        assert _produce_raw(net, endpoint, topic, old_batch(0))[0] == 0   # starts again
        assert _produce_raw(net, endpoint, topic, _batch(new, new_epoch, 2))[0] == 0
        assert len(_values(cluster, topic)) == 2 + 1 + sent[0] + 1 + 2
    finally:
        net.close()


def _values(cluster, topic: str) -> list[bytes]:
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        end = consumer.end_offsets([(topic, 0)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < sum(end.values()) and time.monotonic() < deadline:
            out += [r.value for r in consumer.poll(200)]
    return out


def test_the_leader_checks_sequences_and_answers_a_retry_with_the_original_offsets(cluster):
    topic, leader = _topic(cluster, 1)
    endpoint = f"tcp://127.0.0.1:{cluster.broker_ports[leader]}"
    net = Network("raw", 10_000)
    try:
        init = net.request(endpoint, protocol.ApiKey.INIT_PRODUCER_ID,
                           {"producer_id": -1, "producer_epoch": -1}).body
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch, 0)) == (0, 0)
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch, 2)) == (0, 2)
        # A retry of either: the original offsets, nothing appended.
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch, 0)) == (0, 0)
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch, 2)) == (0, 2)
        assert len(_values(cluster, topic)) == 4
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch, 7))[0] == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER                       # a gap
        assert _produce_raw(net, endpoint, topic, _batch(pid + 500, 0, 3))[0] == \
            ErrorCode.UNKNOWN_PRODUCER_ID                                # never seen, not 0
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch + 1, 0)) == (0, 4)
        assert _produce_raw(net, endpoint, topic, _batch(pid, epoch, 4))[0] == \
            ErrorCode.INVALID_PRODUCER_EPOCH                             # fenced
        # The state is rebuilt from the log after a restart.
        cluster.kill(leader, "KILL")
        cluster.start(leader)
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = _produce_raw(net, endpoint, topic, _batch(pid, epoch + 1, 0))
            except Exception:       # the connection is being re-made
                answer = None
            if answer is not None and answer[0] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer == (0, 4)
        assert len(_values(cluster, topic)) == 6
    finally:
        net.close()


@pytest.mark.parametrize("idempotent", [True, False])
def test_retries_after_lost_answers_write_every_record_once(cluster, idempotent):
    """A follower is paused: the leader appends, waits for it, and answers
    REQUEST_TIMED_OUT after the producer's 1 s; the producer sends the batch again.
    Idempotent, each record is in the log once; without idempotence, retried batches
    are written twice (the case this exists for)."""
    topic, leader = _topic(cluster, 3, min_isr=1)
    with Admin(cluster.bootstrap_servers) as admin:
        replicas = admin.describe_topics([topic])[topic][0].replicas
    follower = next(r for r in replicas if r != leader)
    producer = Producer(cluster.bootstrap_servers, acks="all", request_timeout_ms=1000,
                        retry_backoff_ms=50, enable_idempotence=idempotent)
    cluster.kill(follower, "STOP")
    try:
        futures = [producer.send(topic, b"v%d" % i, partition=0) for i in range(20)]
        producer.flush(timeout=60)
        offsets = [f.get(10).offset for f in futures]
    finally:
        cluster.start(follower)         # SIGCONT
        producer.close()
    for b in range(3):                  # whole again before the next test
        cluster.wait_broker_ready(b, 60, peers=[0, 1, 2])
    values = _values(cluster, topic)
    counts = collections.Counter(values)
    assert set(counts) == {b"v%d" % i for i in range(20)}
    if idempotent:
        assert all(n == 1 for n in counts.values()), counts
        assert sorted(offsets) == offsets and len(set(offsets)) == 20
    else:
        assert any(n > 1 for n in counts.values()), "no retry wrote twice: the test " \
                                                    "did not provoke a lost answer"


def test_a_retried_frame_of_more_batches_than_the_leader_remembers_is_written_once(
        cluster, monkeypatch):
    """Kafka's leader remembers a producer's last five batches (NumBatchesToRetain). A
    producer whose id came late (CI: its InitProducerId went to the paused follower and
    timed out) had 20 one-record batches queued for one partition; sent as one frame and
    retried after a lost answer, a leader that knew five batches saw the first as older
    and refused the frame OUT_OF_ORDER_SEQUENCE_NUMBER, and the new epoch that followed
    wrote all 20 again (CI: every record twice or three times). The leader remembers
    runs of batches appended back to back now, so the retried frame of 20 is one run it
    knows, and answered with its offsets."""
    topic, leader = _topic(cluster, 3, min_isr=1)
    with Admin(cluster.bootstrap_servers) as admin:
        replicas = admin.describe_topics([topic])[topic][0].replicas
    follower = next(r for r in replicas if r != leader)
    held = threading.Event()
    held.set()
    real_ready = Sender.producer_id_ready
    senders = []

    def producer_id_ready(self, now):       # the id comes late: nothing is sent before
        senders.append(self) if not senders else None
        return False if held.is_set() else real_ready(self, now)
    monkeypatch.setattr(Sender, "producer_id_ready", producer_id_ready)
    producer = Producer(cluster.bootstrap_servers, acks="all", request_timeout_ms=1000,
                        retry_backoff_ms=50, batch_size=1)     # one record per batch
    cluster.kill(follower, "STOP")
    try:
        futures = [producer.send(topic, b"w%d" % i, partition=0) for i in range(20)]
        poll_until(lambda: senders and sum(len(q) for q in senders[0].queues.values()) == 20,
                   10, "20 batches queued")
        held.clear()
        producer.flush(timeout=60)
        offsets = [f.get(10).offset for f in futures]
    finally:
        held.clear()
        cluster.start(follower)         # SIGCONT
        producer.close()
    for b in range(3):
        cluster.wait_broker_ready(b, 60, peers=[0, 1, 2])
    counts = collections.Counter(_values(cluster, topic))
    assert counts == {b"w%d" % i: 1 for i in range(20)}, counts
    assert offsets == list(range(20))


def test_a_leader_killed_mid_stream_duplicates_nothing(cluster, monkeypatch):
    """acks=all, RF 3, min.insync 2: the leader is SIGKILLed while a producer sends;
    batches in flight are retried at the new leader, which knows their sequences from
    replication: every acknowledged record once, in order."""
    topic, leader = _topic(cluster, 3, min_isr=2)
    producer = Producer(cluster.bootstrap_servers, acks="all", request_timeout_ms=2000,
                        retry_backoff_ms=50, linger_ms=0)
    retried_at: list[float] = []         # a spy: the sender's retry decisions, timed
    real_retry_or_fail = Sender.retry_or_fail

    def retry_or_fail(self, tp, batches, e, now):
        retried_at.append(time.monotonic())
        return real_retry_or_fail(self, tp, batches, e, now)
    monkeypatch.setattr(Sender, "retry_or_fail", retry_or_fail)
    stop = threading.Event()
    acked: list[bytes] = []
    acked_at: list[float] = []
    errors: list[BaseException] = []

    def send() -> None:
        i = 0
        while not stop.is_set():
            value = b"k%d" % i
            try:
                producer.send(topic, value, partition=0).get(30)
                acked.append(value)
                acked_at.append(time.monotonic())
            except Exception as e:       # surfaced below
                errors.append(e)
            i += 1

    sender = threading.Thread(target=send)
    sender.start()
    killed = False
    try:
        poll_until(lambda: len(acked) >= 200 or errors, 60, "200 acknowledgements")
        assert not errors, errors[:3]
        killed_at = time.monotonic()
        cluster.kill(leader, "KILL")
        killed = True
        n = len(acked)
        poll_until(lambda: len(acked) >= n + 300 or errors, 60,
                   "300 acknowledgements after the kill")
    finally:
        stop.set()
        sender.join(60)
        producer.close()
        if killed:
            cluster.start(leader)
    assert not sender.is_alive(), "the sender is stuck"
    assert not errors, errors[:3]
    # Mid-stream: acknowledgements before the kill and after it, and the record in
    # flight at the kill failed at the dead leader and was sent again.
    assert acked_at[0] < killed_at < acked_at[-1]
    assert any(t > killed_at for t in retried_at), "nothing was retried after the kill"
    values = _values(cluster, topic)
    counts = collections.Counter(values)
    assert all(counts[v] == 1 for v in acked), [v for v in acked if counts[v] != 1][:5]
    positions = [values.index(v) for v in acked]
    assert positions == sorted(positions)
