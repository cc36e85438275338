"""``minikafka end-to-end-latency``: Kafka's EndToEndLatency.

    minikafka end-to-end-latency --bootstrap-server H:P --topic T --num-messages N \\
        --producer-acks all --record-size S [--fetch-max-wait-ms 0]

One message at a time: send it and wait for its acknowledgement, then poll the
consumer (assigned every partition of the topic, positioned at the end) until the
message comes back; the latency is send to receipt. Prints ``i<TAB>latency_ms`` every
1,000 messages, then Kafka's two lines::

    Avg latency: 0.8123 ms

    Percentiles: 50th = 0.781, 99th = 1.412, 99.9th = 2.950

(percentiles with three decimals, see ``node.perf``). As in Kafka the consumer fetches
with fetch.max.wait.ms=0 (no waiting at the broker: no temporal batching) and the
producer with linger.ms=0. A message that comes back different, or more than one
message, is an error (the topic must have no other producer during the run).
"""
from __future__ import annotations

import time

import numpy as np

from node.paths import absolute_path
from node.perf import results
from node.perf.common import (NS_PER_MS, ToolError, add_tool_parser, bootstrap_of,
                              check_topic, parse_props, percentile, positive_int, run_tool)

NAME = "end-to-end-latency"
POLL_TIMEOUT_MS = 60_000
PROGRESS_EVERY = 1000
SEED = 0


def run(args) -> int:
    props = parse_props(args.producer_props, "--producer-props")
    bootstrap = bootstrap_of(args.bootstrap_server, props)
    if args.producer_acks not in ("all", "-1", "0", "1"):
        raise ToolError(f"--producer-acks must be all, -1, 0 or 1, got {args.producer_acks!r}")
    partitions = sorted(check_topic(bootstrap, args.topic))
    recording = results.Run.start(args.results, NAME, args) if args.results else None

    from node.client.consumer import Consumer
    from node.client.producer import Producer

    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest",
                        fetch_max_wait_ms=args.fetch_max_wait_ms)
    producer = None
    try:
        tps = [(args.topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_end()
        for tp in tps:
            consumer.position(tp)
        producer = Producer(bootstrap_servers=bootstrap, acks=args.producer_acks, linger_ms=0,
                            max_block_ms=10_000)
        latencies_ms, sent_ns = _measure(producer, consumer, args)
    finally:
        if producer is not None:
            producer.close(timeout=5)
        consumer.close()
    print(f"Avg latency: {latencies_ms.mean():.4f} ms\n")
    ordered = np.sort(latencies_ms)
    p50, p99, p999 = (percentile(ordered, f) for f in (0.5, 0.99, 0.999))
    print(f"Percentiles: 50th = {p50:.3f}, 99th = {p99:.3f}, 99.9th = {p999:.3f}", flush=True)
    if recording is not None:
        import pyarrow as pa
        shift = results.epoch_offset_ns()
        received_ns = sent_ns + (latencies_ms * NS_PER_MS).astype(np.int64)
        recording.add_samples("latency", pa.table({
            "message": pa.array(np.arange(len(latencies_ms), dtype=np.int64)),
            "send_time": pa.array((sent_ns + shift) // 1000,
                                  type=pa.timestamp("us", tz="UTC")),
            "receive_time": pa.array((received_ns + shift) // 1000,
                                     type=pa.timestamp("us", tz="UTC")),
            "latency_ms": pa.array(latencies_ms)}))
        cluster, topic = results.describe(bootstrap, args.topic)
        recording.finish(summary={"messages": len(latencies_ms),
                                  "avg_latency_ms": float(latencies_ms.mean()),
                                  "p50_ms": p50, "p99_ms": p99, "p999_ms": p999,
                                  "max_latency_ms": float(ordered[-1])},
                         cluster=cluster, topic=topic)
    return 0


def _measure(producer, consumer, args) -> tuple[np.ndarray, np.ndarray]:
    """Each message's latency (ms) and send time (time.monotonic_ns)."""
    rng = np.random.default_rng(SEED)
    latencies_ms = np.empty(args.num_messages, dtype=np.float64)
    sent_ns = np.empty(args.num_messages, dtype=np.int64)
    for i in range(args.num_messages):
        message = rng.integers(65, 91, size=args.record_size, dtype=np.uint8).tobytes()
        begin = sent_ns[i] = time.monotonic_ns()
        producer.send(args.topic, message).get(timeout=POLL_TIMEOUT_MS / 1000)
        records = []
        deadline = time.monotonic() + POLL_TIMEOUT_MS / 1000
        while not records and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        elapsed_ns = time.monotonic_ns() - begin
        if not records:
            raise ToolError(f"poll() timeout: message {i} did not come back within "
                            f"{POLL_TIMEOUT_MS} ms")
        if records[0].value != message:
            raise ToolError(f"The message read [{records[0].value[:32]!r}...] did not match "
                            f"the message sent [{message[:32]!r}...]")
        if len(records) > 1:
            raise ToolError(f"Only one result was expected during this test. "
                            f"We found [{len(records)}]")
        if i % PROGRESS_EVERY == 0:
            print(f"{i}\t{elapsed_ns / NS_PER_MS}", flush=True)
        latencies_ms[i] = elapsed_ns / NS_PER_MS
    return latencies_ms, sent_ns


def register(subparsers) -> None:
    parser = add_tool_parser(subparsers, NAME, "Kafka's end-to-end latency test", __doc__)
    parser.add_argument("--bootstrap-server", default=None, help="HOST:PORT[,...]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--results", default=None, type=absolute_path, metavar="DIR",
                        help="record the run in the results store DIR (node.perf.results)")
    parser.add_argument("--num-messages", "--num-records", dest="num_messages",
                        type=positive_int, required=True)
    parser.add_argument("--producer-acks", default="all", help="all, 1 or 0 (default all)")
    parser.add_argument("--record-size", "--message-size-bytes", dest="record_size",
                        type=positive_int, default=100)
    parser.add_argument("--fetch-max-wait-ms", type=int, default=0,
                        help="the consumer's fetch.max.wait.ms (Kafka's tool: 0)")
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="PROP=VALUE",
                        help="bootstrap.servers=H:P may be given here instead")
    parser.set_defaults(func=lambda args: run_tool(NAME, run, args))
