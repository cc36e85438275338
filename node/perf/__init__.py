"""Kafka's performance tools, as ``minikafka`` subcommands (same flags, same output lines).

- ``producer-perf-test`` (``node.perf.producer``): Kafka's ProducerPerformance.
- ``consumer-perf-test`` (``node.perf.consumer``): Kafka's ConsumerPerformance, over
  Fetch requests or, with ``--local``, through the zero-copy ``shm.local_reader``.
- ``end-to-end-latency`` (``node.perf.latency``): Kafka's EndToEndLatency.

``register(subparsers)`` adds the three to the ``minikafka`` command line (``node.cli``).
The physical limit the figures are a ratio of is ``python -m bench.perf.zmq_limits``.

One deliberate difference from Kafka's lines: Kafka prints latency percentiles in whole
milliseconds (``%d ms 50th``); ours are well below a millisecond, so the same lines
carry them with three decimals (``0.412 ms 50th``). Everything else — words, order,
units (MB = 1024 * 1024 bytes of record payload) — is Kafka's.
"""
from __future__ import annotations

TOOLS = ("producer-perf-test", "consumer-perf-test", "end-to-end-latency")


def register(subparsers) -> None:
    """Add the perf tools' subparsers to ``minikafka``'s ``add_subparsers()`` object."""
    from node.perf import consumer, latency, producer

    for module in (producer, consumer, latency):
        module.register(subparsers)
