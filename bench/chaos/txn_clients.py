"""The transactional workload's clients (``bench.chaos.txn_worker``): one class per Kafka
client with the same small surface, so the read-process-write loop is written once.

    client = NativeTxnClient(args) | ConfluentTxnClient(args)
    client.poll(max_records) -> [(topic, partition, offset, value), ...]
    client.moved                 # a rebalance happened since it was last cleared
    client.begin(); client.send(topic, partition, value)
    client.send_offsets({(topic, partition): next_offset})
    client.commit(); client.abort()
    client.fatal(e) -> bool      # the producer cannot go on: new_producer()
    client.seek(topic, partition, offset); client.close()
    client.partitions() -> [partition, ...] of the topic

``init_transactions`` is asked until it succeeds (Kafka's advice after a timeout), or
until ``stop`` is set: then ``Stopped``.

- ``NativeTxnClient``: node.client's transactional Producer (issue 28's contract,
  section 5) and a read_committed group Consumer, over the native listener.
- ``ConfluentTxnClient``: confluent-kafka's (librdkafka) transactional producer and a
  read_committed consumer (``subscribe`` with on_assign/on_revoke/on_lost), over the
  brokers' Kafka listener.

Readers (``reader(args)``): a standalone read_committed consumer of every partition.
"""
from __future__ import annotations

import time

from bench.chaos.clients.common import bounded

TXN_CALL_TIMEOUT_S = 10.0      # each transactional call's wait
COMMIT_TRIES = 3               # a timed-out (retriable) commit is asked again
INIT_PAUSE_S = 0.2
CLOSE_TIMEOUT_S = 5.0
TRANSACTION_TIMEOUT_MS = 10_000
NATIVE_PRODUCER = {"acks": "all", "request_timeout_ms": 3000, "delivery_timeout_ms": 8000,
                   "retry_backoff_ms": 100, "max_block_ms": 5000, "linger_ms": 0,
                   "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS}
CONFLUENT_PRODUCER = {"request.timeout.ms": "3000", "delivery.timeout.ms": "8000",
                      "linger.ms": "0", "transaction.timeout.ms": str(TRANSACTION_TIMEOUT_MS)}


def transactional_id(name: str) -> str:
    return f"chaos-{name}"


class Stopped(Exception):
    """The worker was asked to stop while its producer was still initialising."""


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    """The topic's partitions (through the native listener: ``bootstrap``)."""
    from node.client import Admin
    with Admin(bootstrap_servers=bootstrap) as admin:
        return sorted(m.partition for m in admin.describe_topics([topic])[topic])


class _Moved:
    """Rebalance callbacks (both clients' names): positions came from elsewhere."""

    def __init__(self) -> None:
        self.moved = True

    def _set(self, *_) -> None:
        self.moved = True

    on_partitions_assigned = on_partitions_revoked = on_partitions_lost = _set
    on_assign = on_revoke = on_lost = _set


class _Listening:
    """What both clients share: ``moved``, set by their rebalance listener (``_Moved``)."""

    listener: _Moved

    @property
    def moved(self) -> bool:
        return self.listener.moved

    @moved.setter
    def moved(self, value: bool) -> None:
        self.listener.moved = value


class NativeTxnClient(_Listening):
    name = "native"

    def __init__(self, args, em, stop) -> None:
        from node.client import Consumer
        self.args, self.em, self.stop = args, em, stop
        self.listener = _Moved()
        self.consumer = Consumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                                 isolation_level="read_committed",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        self.consumer.subscribe([args.topic], listener=self.listener)
        self.producer = None
        self.new_producer()
        self.settings = {"transactional_id": transactional_id(args.name),
                         "isolation_level": "read_committed", **NATIVE_PRODUCER}

    @staticmethod
    def version() -> str:
        from bench.chaos.clients.native import version
        return version()

    def new_producer(self) -> None:
        from node.client import Producer
        if self.producer is not None:
            self._close_producer()
        self.producer = Producer(bootstrap_servers=self.args.bootstrap,
                                 transactional_id=transactional_id(self.args.name),
                                 **NATIVE_PRODUCER)
        _init(self.producer.init_transactions, self.em, self.stop)

    def partitions(self) -> list[int]:
        return partitions_of(self.args.bootstrap, self.args.topic)

    def poll(self, max_records: int) -> list:
        from bench.chaos.clients.common import POLL_S
        return [(r.topic, r.partition, r.offset, r.value) for r in
                self.consumer.poll(timeout_ms=int(POLL_S * 1000), max_records=max_records)]

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.producer.send(topic, value, partition=partition)

    def send_offsets(self, offsets: dict) -> None:
        from node.client.types import TopicPartition
        group = self.consumer.group_metadata() if hasattr(self.consumer, "group_metadata") \
            else self.args.group
        self.producer.send_offsets_to_transaction(
            {TopicPartition(t, p): o for (t, p), o in offsets.items()}, group,
            timeout_s=TXN_CALL_TIMEOUT_S)

    def commit(self) -> None:
        from node.client.types import KafkaTimeoutError
        for attempt in range(COMMIT_TRIES):     # a timed-out call waits on the same
            try:
                self.producer.commit_transaction(timeout_s=TXN_CALL_TIMEOUT_S)
                return
            except KafkaTimeoutError:
                if attempt == COMMIT_TRIES - 1 or self.stop:
                    raise

    def abort(self) -> None:
        self.producer.abort_transaction(timeout_s=TXN_CALL_TIMEOUT_S)

    @staticmethod
    def fatal(e: BaseException) -> bool:
        from node.client.types import KafkaTimeoutError
        if isinstance(e, KafkaTimeoutError):
            return False
        text = f"{type(e).__name__} {e}".upper()
        return "FENCED" in text or "FATAL" in text or type(e).__name__ == "IllegalStateError"

    def seek(self, topic: str, partition: int, offset: int) -> None:
        from node.client.types import TopicPartition
        self.consumer.seek(TopicPartition(topic, partition), offset)

    def _close_producer(self) -> None:
        producer = self.producer
        bounded(lambda: producer.close(timeout=CLOSE_TIMEOUT_S), CLOSE_TIMEOUT_S + 1,
                "producer close", self.em)

    def close(self) -> None:
        self._close_producer()
        bounded(self.consumer.close, CLOSE_TIMEOUT_S, "consumer close", self.em)


class ConfluentTxnClient(_Listening):
    name = "confluent-kafka"

    def __init__(self, args, em, stop) -> None:
        from confluent_kafka import Consumer
        self.args, self.em, self.stop = args, em, stop
        self.listener = _Moved()
        self.consumer = Consumer({"bootstrap.servers": args.bootstrap,
                                  "group.id": args.group,
                                  "isolation.level": "read_committed",
                                  "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([args.topic], on_assign=self.listener.on_assign,
                                on_revoke=self.listener.on_revoke,
                                on_lost=self.listener.on_lost)
        self.producer = None
        self.new_producer()
        self.settings = {"transactional.id": transactional_id(args.name),
                         "isolation.level": "read_committed", **CONFLUENT_PRODUCER}

    @staticmethod
    def version() -> str:
        from bench.chaos.clients.confluent import version
        return version()

    def new_producer(self) -> None:
        from confluent_kafka import Producer
        if self.producer is not None:        # a fatal producer's flush raises its error
            old = self.producer
            bounded(lambda: old.flush(CLOSE_TIMEOUT_S), CLOSE_TIMEOUT_S + 1,
                    "old producer flush", self.em)
        self.producer = Producer({"bootstrap.servers": self.args.bootstrap,
                                  "transactional.id": transactional_id(self.args.name),
                                  **CONFLUENT_PRODUCER})
        _init(lambda timeout_s: self.producer.init_transactions(timeout_s), self.em,
              self.stop)

    def partitions(self) -> list[int]:
        topic = self.args.topic
        metadata = self.consumer.list_topics(topic, timeout=TXN_CALL_TIMEOUT_S)
        return sorted(metadata.topics[topic].partitions)

    def poll(self, max_records: int) -> list:
        from confluent_kafka import KafkaError, KafkaException
        from bench.chaos.clients.common import POLL_S
        out = []
        for m in self.consumer.consume(num_messages=max_records, timeout=POLL_S):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append((m.topic(), m.partition(), m.offset(), m.value()))
        return out

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.producer.produce(topic, value, partition=partition)
        self.producer.poll(0)

    def send_offsets(self, offsets: dict) -> None:
        from confluent_kafka import TopicPartition
        self.producer.send_offsets_to_transaction(
            [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
            self.consumer.consumer_group_metadata(), TXN_CALL_TIMEOUT_S)

    def commit(self) -> None:
        from confluent_kafka import KafkaException
        for attempt in range(COMMIT_TRIES):     # librdkafka: retriable -> call again
            try:
                self.producer.commit_transaction(TXN_CALL_TIMEOUT_S)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or attempt == COMMIT_TRIES - 1 or self.stop:
                    raise

    def abort(self) -> None:
        self.producer.abort_transaction(TXN_CALL_TIMEOUT_S)

    @staticmethod
    def fatal(e: BaseException) -> bool:
        from confluent_kafka import KafkaException
        return isinstance(e, KafkaException) and bool(e.args) and \
            hasattr(e.args[0], "fatal") and e.args[0].fatal()

    def seek(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition
        self.consumer.seek(TopicPartition(topic, partition, offset))

    def close(self) -> None:
        producer = self.producer
        bounded(lambda: producer.flush(CLOSE_TIMEOUT_S), CLOSE_TIMEOUT_S + 1,
                "producer flush", self.em)
        bounded(self.consumer.close, CLOSE_TIMEOUT_S, "consumer close", self.em)


CLIENTS = {"native": NativeTxnClient, "confluent-kafka": ConfluentTxnClient}


def _init(init, em, stop) -> None:
    """init_transactions until it succeeds (Kafka's advice after a timeout: call again);
    ``Stopped`` once ``stop`` is set."""
    while True:
        if stop:
            raise Stopped()
        try:
            init(TXN_CALL_TIMEOUT_S)
            return
        except Exception as e:  # told, then asked again
            em.client("error", f"init_transactions: {type(e).__name__}: {e}")
            time.sleep(INIT_PAUSE_S)


def native_reader(args):
    """A standalone read_committed native consumer of every partition from the start."""
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=args.bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest")
    consumer.assign([(args.topic, p) for p in partitions_of(args.bootstrap, args.topic)])
    consumer.seek_to_beginning()
    return consumer
