"""confluent-kafka (librdkafka) over Kafka's wire.

- Producer runs: the idempotent producer with librdkafka's default settings
  (``enable.idempotence=true`` implies acks=all; linger.ms 5, its own partitioner);
  every record has its delivery report, served by ``poll(0)`` in the send loop and by
  ``flush()`` at the end (so a record's acknowledgement time is when the report was
  served: the latencies of this run are an upper bound; its records/s are exact).
- Single writes: acks=all, ``linger.ms=0``, one ``produce`` then ``poll`` until its
  report, one at a time.
- Consumer runs: ``assign`` at the beginning of every partition (no group: group APIs
  come later), ``consume(num_messages)`` in batches.
"""
from __future__ import annotations

import functools
import importlib.util
import time

from bench.perf.kafka_clients.measure import (FLUSH_TIMEOUT_S, POLL_TIMEOUT_S,
                                              SINGLE_WRITE_TIMEOUT_S, ClientUnavailable,
                                              ConsumeResult, MeasureError, Pacer,
                                              RecordClock, CONSUME_IDLE_TIMEOUT_S)

NAME = "confluent-kafka"
POLL_EVERY_RECORDS = 1000
CONSUME_BATCH_RECORDS = 10_000
GROUP_ID = "kbench"                  # librdkafka wants one; no group API is used
QUIET = {"log_level": 3}             # errors only: the table is the output


class ConfluentKafka:
    name = NAME
    wire = "kafka"

    def check(self) -> None:
        if importlib.util.find_spec("confluent_kafka") is None:
            raise ClientUnavailable("not installed (pip install confluent-kafka)")

    def produce_records(self, bootstrap: dict, topic: str, clock: RecordClock, warmup: int,
                        value: bytes) -> dict:
        from confluent_kafka import Producer
        settings = {"enable.idempotence": True}
        producer = Producer({"bootstrap.servers": bootstrap["kafka"], **settings, **QUIET})
        for _ in range(warmup):
            _produce(producer, topic, value)
        _flush(producer, NAME)
        acked = functools.partial(_report, clock)
        send_ns = clock.send_ns
        for i in range(clock.n):
            send_ns[i] = time.perf_counter_ns()
            _produce(producer, topic, value, on_delivery=functools.partial(acked, i))
            if i % POLL_EVERY_RECORDS == 0:
                producer.poll(0)
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
                progress) -> ConsumeResult:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": bootstrap["kafka"], "group.id": GROUP_ID,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             **QUIET})
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            messages = total_bytes = 0
            started = last_read = time.perf_counter()
            while messages < records:
                batch = consumer.consume(CONSUME_BATCH_RECORDS, POLL_TIMEOUT_S)
                now = time.perf_counter()
                if not batch:
                    if now - last_read > CONSUME_IDLE_TIMEOUT_S:
                        raise MeasureError(f"{NAME}: read {messages} of {records} records, "
                                           f"then nothing for {CONSUME_IDLE_TIMEOUT_S:.0f} s")
                    continue
                last_read = now
                for message in batch:
                    error = message.error()
                    if error is not None:
                        raise MeasureError(f"{NAME}: consume: {error}")
                    total_bytes += len(message)
                messages += len(batch)
                progress.update(messages, total_bytes, 0.0)
            seconds = time.perf_counter() - started
        finally:
            consumer.close()
        return ConsumeResult(messages, total_bytes, seconds, progress,
                             {})


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
