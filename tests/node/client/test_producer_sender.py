"""The producer's sender state on the retry path, driven directly (no I/O thread, no
network: only the bookkeeping of in-flight requests is under test)."""
from __future__ import annotations

import threading
import time

from node.client.metadata import ClusterMetadata
from node.client.network import Completion
from node.client.producer import Producer
from node.client.producer.accumulator import ProducerBatch, RecordAccumulator
from node.client.producer.futures import ProduceRequestResult
from node.client.producer.sender import Sender
from node.wire.errors import ErrorCode


class _Net:
    """Records what the sender asks of the network."""

    def __init__(self):
        self.cancelled = []

    def cancel(self, endpoint, cid):
        self.cancelled.append((endpoint, cid))


def _sender() -> tuple[Sender, Producer]:
    p = Producer.__new__(Producer)          # no I/O thread: the test is the I/O thread
    p._lock, p._done = threading.Lock(), threading.Condition()
    p._accumulator = RecordAccumulator(p._lock, batch_size=16384, linger_s=0.0)
    p._accumulator.incomplete, p._metadata_wanted = 1, False
    p.retries, p.retry_backoff_s, p.delivery_timeout_s = 10, 0.0, 60.0
    p.idempotent = False                    # its subject is retries and abandons
    p._metadata = ClusterMetadata()
    return Sender(p, _Net()), p


def test_a_failure_of_an_abandoned_request_does_not_queue_its_batches_twice():
    sender, p = _sender()
    tp = ("t", 0)
    batch = ProducerBatch(tp, b"x", 1, ProduceRequestResult("t", 0), created_s=0.0)
    batch.sent_epoch = 3
    context = ("produce", [(tp, [batch])])
    sender.produce_in_flight[id(context)] = ("tcp://a:1", 7, context, 0.0)
    sender.muted.add(tp)

    class Moved:   # fresh metadata: a newer leader epoch for the partition
        def partition(self, topic, partition):
            return type("PM", (), {"leader": 1, "leader_epoch": 4})()
    sender.abandon_moved(Moved(), now=1.0)
    assert list(sender.queues[tp]) == [batch] and sender.net.cancelled == [("tcp://a:1", 7)]
    # The dropped connection's failure of that same request, from the same poll:
    sender.on_produce(Completion("tcp://a:1", context, None, ErrorCode.NETWORK_EXCEPTION,
                                 "connection lost"))
    assert list(sender.queues[tp]) == [batch], "queued twice: sent twice, counted twice"
    assert p._accumulator.incomplete == 1 and not batch.result.done


def test_a_completion_of_a_request_in_flight_still_retries_it():
    sender, p = _sender()
    tp = ("t", 0)
    batch = ProducerBatch(tp, b"x", 1, ProduceRequestResult("t", 0), created_s=time.monotonic())
    context = ("produce", [(tp, [batch])])
    sender.produce_in_flight[id(context)] = ("tcp://a:1", 7, context, 0.0)
    sender.on_produce(Completion("tcp://a:1", context, None, ErrorCode.NETWORK_EXCEPTION,
                                 "connection lost"))
    assert list(sender.queues[tp]) == [batch] and batch.attempts == 1
