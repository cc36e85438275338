"""kafka-python and aiokafka over Kafka's wire: the pure-Python clients, with their
default settings and acks=all.

- Producer runs: ``send`` per record; its future's callback (kafka-python's I/O thread,
  aiokafka's event loop) stamps the acknowledgement; ``flush`` at the end.
- Single writes: ``linger_ms=0``, ``send(...).get()`` / ``send_and_wait``, one at a time.
- Consumer runs: no group (``group_id=None``), every partition assigned and read from
  the beginning with ``poll`` / ``getmany``.
"""
from __future__ import annotations

import asyncio
import functools
import importlib.util
import time

from bench.perf.kafka_clients.measure import (FLUSH_TIMEOUT_S, POLL_TIMEOUT_S,
                                              SINGLE_WRITE_TIMEOUT_S, ClientUnavailable,
                                              ConsumeResult, Pacer, ReadClock, Reader,
                                              RecordClock, future_single_writes)

POLL_TIMEOUT_MS = int(POLL_TIMEOUT_S * 1000)


def _check(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ClientUnavailable(f"not installed (pip install {package})")


class KafkaPython:
    name = "kafka-python"
    wire = "kafka"

    def check(self) -> None:
        _check("kafka", "kafka-python")

    def produce_records(self, bootstrap: dict, topic: str, clock: RecordClock, warmup: int,
                        value: bytes) -> dict:
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=bootstrap["kafka"], acks="all")
        try:
            for _ in range(warmup):
                producer.send(topic, value)
            producer.flush(FLUSH_TIMEOUT_S)
            send_ns = clock.send_ns
            for i in range(clock.n):
                send_ns[i] = time.perf_counter_ns()
                future = producer.send(topic, value)
                future.add_callback(functools.partial(_acked, clock, i))
                future.add_errback(functools.partial(clock.failed, i))
            producer.flush(FLUSH_TIMEOUT_S)
        finally:
            producer.close(timeout=5)
        return {"acks": "all"}

    def single_writes(self, bootstrap: dict, topic: str, partition: int, clock: RecordClock,
                      warmup: int, value: bytes, pacer: Pacer) -> dict:
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=bootstrap["kafka"], acks="all",
                                 linger_ms=0)
        future_single_writes(producer, topic, partition, clock, warmup, value, pacer)
        return {"acks": "all", "linger.ms": "0"}

    def consume(self, bootstrap: dict, topic: str, partitions: list[int], records: int,
                clock: ReadClock) -> ConsumeResult:
        from kafka import KafkaConsumer, TopicPartition
        consumer = KafkaConsumer(bootstrap_servers=bootstrap["kafka"], group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.beginning_offsets(tps)   # connected to every leader, untimed
            clock.start()
            consumer.assign(tps)
            consumer.seek_to_beginning()
            reader = Reader(self.name, records, clock)
            while reader.more():
                reader.took(*_counted(consumer.poll(timeout_ms=POLL_TIMEOUT_MS)))
        finally:
            consumer.close()
        return reader.result()


def _counted(polled: dict) -> tuple[int, int]:
    """(records, value bytes) of a poll's {partition: [records]}."""
    count = nbytes = 0
    for records in polled.values():
        count += len(records)
        nbytes += sum(len(r.value) for r in records)
    return count, nbytes


def _acked(clock: RecordClock, i: int, metadata) -> None:
    clock.acked(i, metadata.partition, metadata.offset)


class AioKafka:
    name = "aiokafka"
    wire = "kafka"

    def check(self) -> None:
        _check("aiokafka", "aiokafka")

    def produce_records(self, bootstrap: dict, topic: str, clock: RecordClock, warmup: int,
                        value: bytes) -> dict:
        asyncio.run(self._produce(bootstrap["kafka"], topic, clock, warmup, value))
        return {"acks": "all"}

    async def _produce(self, bootstrap: str, topic: str, clock: RecordClock, warmup: int,
                       value: bytes) -> None:
        from aiokafka import AIOKafkaProducer
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for _ in range(warmup):
                await producer.send(topic, value)
            await asyncio.wait_for(producer.flush(), FLUSH_TIMEOUT_S)
            send_ns = clock.send_ns
            for i in range(clock.n):
                send_ns[i] = time.perf_counter_ns()
                future = await producer.send(topic, value)
                future.add_done_callback(functools.partial(_done, clock, i))
            await asyncio.wait_for(producer.flush(), FLUSH_TIMEOUT_S)
            await asyncio.sleep(0)   # the last done callbacks run
        finally:
            await producer.stop()

    def single_writes(self, bootstrap: dict, topic: str, partition: int, clock: RecordClock,
                      warmup: int, value: bytes, pacer: Pacer) -> dict:
        asyncio.run(self._single_writes(bootstrap["kafka"], topic, partition, clock, warmup,
                                        value, pacer))
        return {"acks": "all", "linger.ms": "0"}

    async def _single_writes(self, bootstrap: str, topic: str, partition: int,
                             clock: RecordClock, warmup: int, value: bytes,
                             pacer: Pacer) -> None:
        from aiokafka import AIOKafkaProducer
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        await producer.start()
        try:
            for _ in range(warmup):
                await asyncio.wait_for(producer.send_and_wait(topic, value,
                                                              partition=partition),
                                       SINGLE_WRITE_TIMEOUT_S)
            for i in range(clock.n):
                await asyncio.sleep(pacer.delay_s())
                clock.send_ns[i] = time.perf_counter_ns()
                metadata = await asyncio.wait_for(
                    producer.send_and_wait(topic, value, partition=partition),
                    SINGLE_WRITE_TIMEOUT_S)
                clock.acked(i, metadata.partition, metadata.offset)
                pacer.written()
        finally:
            await producer.stop()

    def consume(self, bootstrap: dict, topic: str, partitions: list[int], records: int,
                clock: ReadClock) -> ConsumeResult:
        return asyncio.run(self._consume(bootstrap["kafka"], topic, partitions, records,
                                         clock))

    async def _consume(self, bootstrap: str, topic: str, partitions: list[int], records: int,
                       clock: ReadClock) -> ConsumeResult:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            await consumer.beginning_offsets(tps)   # connected to every leader, untimed
            clock.start()
            consumer.assign(tps)
            await consumer.seek_to_beginning()
            reader = Reader(self.name, records, clock)
            while reader.more():
                reader.took(*_counted(await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)))
        finally:
            await consumer.stop()
        return reader.result()


def _done(clock: RecordClock, i: int, future) -> None:
    if future.exception() is not None:
        clock.failed(i, future.exception())
    else:
        metadata = future.result()
        clock.acked(i, metadata.partition, metadata.offset)
