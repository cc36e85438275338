"""node.client, over minikafka's own wire: the yardstick the Kafka clients are held to.

The producer run is producer-perf-test's (``node.perf.producer``: ``send_many`` per
``batch.size`` of records, default settings: idempotent, acks=all, linger.ms=0), the
consumer run consumer-perf-test's over Fetch (``node.perf.consumer.consume_fetch``), so
these figures are the ones those tools print.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time

from bench.perf.kafka_clients.measure import (ConsumeResult, Pacer, ProduceResult,
                                              ReadClock, RecordClock, future_single_writes)

NAME = "minikafka"
FETCH_SIZE_BYTES = 1024 * 1024      # consumer-perf-test's default --fetch-size
CONSUME_TIMEOUT_MS = 30_000


class Native:
    name = NAME
    wire = "native"

    def check(self) -> None:
        """node.client is part of minikafka: always there."""

    def produce(self, bootstrap: dict, topic: str, records: int, warmup: int,
                record_bytes: int) -> ProduceResult:
        from node.client.producer import RECORD_OVERHEAD_BYTES, Producer
        from node.perf import producer as perf
        producer = Producer(bootstrap_servers=bootstrap["native"], acks="all")
        try:
            partitions = sorted(producer.partitions_for(topic))
            # producer-perf-test's progress lines would break the benchmark's table.
            with contextlib.redirect_stdout(sys.stderr):
                if warmup:
                    perf._produce(producer, _perf_args(topic, warmup, record_bytes),
                                  partitions, perf.BUFFER_MEMORY_DEFAULT,
                                  RECORD_OVERHEAD_BYTES)
                args = _perf_args(topic, records, record_bytes)
                units, stats, end_ns = perf._produce(producer, args, partitions,
                                                     perf.BUFFER_MEMORY_DEFAULT,
                                                     RECORD_OVERHEAD_BYTES)
        finally:
            producer.close(timeout=5)
        summary = stats.summary(end_ns, perf._record_latencies_ms(units))
        return ProduceResult(units, summary, {"acks": "all", "enable.idempotence": "true",
                                              "linger.ms": "0",
                                              "batch.size": str(producer.batch_size)})

    def single_writes(self, bootstrap: dict, topic: str, partition: int, clock: RecordClock,
                      warmup: int, value: bytes, pacer: Pacer) -> dict:
        from node.client.producer import Producer
        producer = Producer(bootstrap_servers=bootstrap["native"], acks="all", linger_ms=0)
        future_single_writes(producer, topic, partition, clock, warmup, value, pacer)
        return {"acks": "all", "linger.ms": "0"}

    def consume(self, bootstrap: dict, topic: str, partitions: list[int], records: int,
                clock: ReadClock) -> ConsumeResult:
        from node.perf.consumer import consume_fetch
        args = argparse.Namespace(topic=topic, messages=records, fetch_size=FETCH_SIZE_BYTES,
                                  timeout=CONSUME_TIMEOUT_MS, from_latest=False)
        entered = time.perf_counter()
        messages, total_bytes, rebalance_ms, _ = consume_fetch(args, bootstrap["native"],
                                                               sorted(partitions), clock)
        # Timed once the leaders and offsets are known (consumer-perf-test's
        # rebalance.time.ms), as the Kafka clients are once connected.
        clock.started = entered + rebalance_ms / 1000
        return ConsumeResult(messages, total_bytes, clock)


def _perf_args(topic: str, records: int, record_bytes: int) -> argparse.Namespace:
    """producer-perf-test's flags for an unthrottled run."""
    return argparse.Namespace(topic=topic, num_records=records, record_size=record_bytes,
                              throughput=-1)
