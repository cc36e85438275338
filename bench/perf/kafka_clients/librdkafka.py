"""confluent-kafka (librdkafka) over Kafka's wire.

- Producer runs: the idempotent producer with librdkafka's default settings
  (``enable.idempotence=true`` implies acks=all; linger.ms 5, its own partitioner).
  One delivery-report callback for the producer (a callback object per record would
  cost the send loop more than ``produce`` itself), served by ``poll(0)`` in the send
  loop and by ``flush()``: the i-th report fills the i-th slot, its latency is
  librdkafka's own (``Message.latency()``: produce() to acknowledgement), its
  acknowledgement time when the report was served, and its send time the difference.
- Single writes: acks=all, ``linger.ms=0``, one ``produce`` then ``poll`` until its
  report, one at a time.
- Consumer runs: ``assign`` at the beginning of every partition (no group: group APIs
  come later), ``consume(num_messages)`` in batches. With its defaults, librdkafka stops
  fetching for ``fetch.queue.backoff.ms`` (1 s) whenever its local queue holds
  ``queued.min.messages`` (100,000) records, i.e. whenever the brokers deliver faster
  than the application reads (librdkafka issue 2879): ``--librdkafka-consumer
  fetch.queue.backoff.ms=10`` measures the Fetch path without that pause.
"""
from __future__ import annotations

import functools
import importlib.util
import time

from bench.perf.kafka_clients.measure import (CONNECT_TIMEOUT_S, FLUSH_TIMEOUT_S, POLL_TIMEOUT_S,
                                              SINGLE_WRITE_TIMEOUT_S, ClientUnavailable,
                                              ConsumeResult, MeasureError, Pacer,
                                              ReadClock, Reader, RecordClock)

NAME = "confluent-kafka"
POLL_EVERY_RECORDS = 1000
CONSUME_BATCH_RECORDS = 10_000
GROUP_ID = "kbench"                  # librdkafka wants one; no group API is used
QUIET = {"log_level": 3}             # errors only: the table is the output


class ConfluentKafka:
    name = NAME
    wire = "kafka"

    def __init__(self) -> None:
        # Consumer properties over librdkafka's defaults (--librdkafka-consumer).
        self.consumer_config: dict[str, str] = {}

    def check(self) -> None:
        if importlib.util.find_spec("confluent_kafka") is None:
            raise ClientUnavailable("not installed (pip install confluent-kafka)")

    def produce_records(self, bootstrap: dict, topic: str, clock: RecordClock, warmup: int,
                        value: bytes) -> dict:
        from confluent_kafka import Producer
        reports = _Reports(clock)
        producer = Producer({"bootstrap.servers": bootstrap["kafka"],
                             "enable.idempotence": True, "on_delivery": reports, **QUIET})
        for _ in range(warmup):
            _produce(producer, topic, value)
        _flush(producer, NAME)
        reports.armed = True
        produce, poll = producer.produce, producer.poll
        for i in range(clock.n):
            try:
                produce(topic, value)
            except BufferError:
                _produce(producer, topic, value)
            if i % POLL_EVERY_RECORDS == 0:
                poll(0)
        _flush(producer, NAME)
        return {"acks": "all", "enable.idempotence": "true"}

    def single_writes(self, bootstrap: dict, topic: str, partition: int, clock: RecordClock,
                      warmup: int, value: bytes, pacer: Pacer) -> dict:
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": bootstrap["kafka"], "acks": "all",
                             "linger.ms": 0, **QUIET})
        for _ in range(warmup):
            producer.produce(topic, value, partition=partition)
            _flush(producer, NAME)
        for i in range(clock.n):
            time.sleep(pacer.delay_s())
            clock.send_ns[i] = time.perf_counter_ns()
            producer.produce(topic, value, partition=partition,
                             on_delivery=functools.partial(_report, clock, i))
            deadline = time.monotonic() + SINGLE_WRITE_TIMEOUT_S
            while clock.ack_ns[i] == 0:
                producer.poll(POLL_TIMEOUT_S)
                if time.monotonic() > deadline:
                    raise MeasureError(f"{NAME}: no delivery report for a single write in "
                                       f"{SINGLE_WRITE_TIMEOUT_S:.0f} s")
            pacer.written()
        _flush(producer, NAME)
        return {"acks": "all", "linger.ms": "0"}

    def consume(self, bootstrap: dict, topic: str, partitions: list[int], records: int,
                clock: ReadClock) -> ConsumeResult:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": bootstrap["kafka"], "group.id": GROUP_ID,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             **QUIET, **self.consumer_config})
        try:
            for p in partitions:    # connected to every leader before the clock starts
                consumer.get_watermark_offsets(TopicPartition(topic, p),
                                               timeout=CONNECT_TIMEOUT_S)
            clock.start()
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            reader = Reader(NAME, records, clock)
            while reader.more():
                batch = consumer.consume(CONSUME_BATCH_RECORDS, POLL_TIMEOUT_S)
                nbytes = 0
                for message in batch:
                    if message.error() is not None:
                        raise MeasureError(f"{NAME}: consume: {message.error()}")
                    nbytes += len(message)
                reader.took(len(batch), nbytes)
        finally:
            consumer.close()
        return reader.result()


class _Reports:
    """The producer's delivery-report callback: once ``armed``, the i-th report fills
    the clock's i-th slot (see the module docstring)."""

    def __init__(self, clock: RecordClock) -> None:
        self.clock = clock
        self.armed = False
        self.served = 0

    def __call__(self, error, message) -> None:
        if not self.armed:
            return
        i = self.served
        if i >= self.clock.n:
            raise MeasureError(f"{NAME}: more delivery reports than records")
        self.served = i + 1
        if error is not None:
            self.clock.failed(i, error)
        else:
            self.clock.acked(i, message.partition(), message.offset())
        latency_s = message.latency()
        self.clock.send_ns[i] = self.clock.ack_ns[i] - int((latency_s or 0.0) * 1e9)


def _report(clock: RecordClock, i: int, error, message) -> None:
    if error is not None:
        clock.failed(i, error)
    else:
        clock.acked(i, message.partition(), message.offset())


def _produce(producer, topic: str, value: bytes, **kwargs) -> None:
    """``produce``, serving reports while librdkafka's queue is full."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(POLL_TIMEOUT_S)


def _flush(producer, name: str) -> None:
    left = producer.flush(FLUSH_TIMEOUT_S)
    if left:
        raise MeasureError(f"{name}: {left} record(s) still unacknowledged after "
                           f"{FLUSH_TIMEOUT_S:.0f} s")
