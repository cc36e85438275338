"""``minikafka producer-perf-test``: Kafka's ProducerPerformance.

    minikafka producer-perf-test --topic T --num-records N --record-size S \\
        --throughput R --producer-props bootstrap.servers=H:P acks=all batch.size=262144 \\
        [--bootstrap-server H:P] [--samples-out FILE.parquet]

Prints Kafka's progress line every 5 s and Kafka's final line (latency percentiles
with three decimals, see ``node.perf``). The latency of a record is the time from the
moment the tool hands it to the producer to the moment its acknowledgement completes
the future (measured in the producer's I/O thread, monotonic clock).

How records are sent (the "unit" of bookkeeping is one send call):
- Unthrottled (``--throughput -1``) and fast throttled runs use the producer's bulk
  path, ``Producer.send_many``: one call per record batch of ``batch.size`` bytes, to
  the partitions in turn, no per-record Python work. Every record of a batch gets the
  batch's send and acknowledgement time.
- Throttled runs up to ``PER_RECORD_RATE_MAX`` records/s send record by record with
  ``Producer.send`` (the default partitioner chooses the partition, as in Kafka), so
  each record has its own send and acknowledgement time.
- Throttling is Kafka's ThroughputThrottler (``ThroughputThrottler`` below).
- The producer fetches the topic's metadata before the first record is sent (Kafka's
  tool lets the first send wait for it, which shows as a ~100 ms max latency that is
  not produce latency).
- ``buffer.memory`` (Kafka's key, default 32 MiB) bounds the bytes sent and not yet
  acknowledged: the tool waits for the oldest send before going over it.

``--value-format avro --schema-registry HOST:PORT`` writes typed values (not a Kafka
flag; Confluent's Avro tools take the registry as a property): ``PERF_VALUE_SCHEMA``
(the time the value was made, Kafka's payload letters) registered under
``<topic>-value``, in the registry's wire format and exactly ``--record-size`` bytes
long; one value per send call, like Kafka's reused payload.

``--samples-out`` writes one Parquet row per record: ``record`` (its number in send
order), ``send_time`` and ``ack_time`` (UTC timestamps in µs, from the monotonic clock
shifted to the epoch once: Spark reads no ns timestamps), ``partition``, ``offset`` (-1 if it failed),
``latency_ms`` and ``error`` (null when acknowledged).
"""
from __future__ import annotations

import collections
import math
import sys
import time

import numpy as np

from node.paths import absolute_path
from node.perf import results
from node.tools.common import read_properties_file
from node.perf.common import (MB_BYTES, NS_PER_MS, ToolError, add_tool_parser, bootstrap_of,
                              check_topic, parse_props, percentile,
                              positive_int, run_tool)

NAME = "producer-perf-test"
REPORTING_INTERVAL_NS = 5_000 * NS_PER_MS
PER_RECORD_RATE_MAX = 20_000    # records/s; above it, throttled runs use send_many too
SENDS_PER_S_MAX = 1_000         # throttled bulk sends: at most one call per ms
BUFFER_MEMORY_DEFAULT = 32 * 1024 * 1024
WAIT_SLICE_S = 0.2
CALLBACK_GRACE_S = 1.0
PAYLOAD_SEED = 0
PERF_VALUE_SCHEMA = {
    "type": "record", "name": "PerfValue", "namespace": "minikafka.perf",
    "doc": "producer-perf-test's value with --value-format avro.",
    "fields": [{"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
               {"name": "payload", "type": "bytes"}]}

# Kafka producer config -> (Producer keyword, type). bootstrap.servers and buffer.memory
# are the tool's own.
PRODUCER_CONFIGS = {
    "acks": ("acks", str), "linger.ms": ("linger_ms", int), "batch.size": ("batch_size", int),
    "retries": ("retries", int), "request.timeout.ms": ("request_timeout_ms", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "retry.backoff.ms": ("retry_backoff_ms", int), "max.block.ms": ("max_block_ms", int),
    "max.request.size": ("max_request_size", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int), "client.id": ("client_id", str),
    "enable.idempotence": ("enable_idempotence", lambda v: _boolean(v, "enable.idempotence")),
}
TOOL_CONFIGS = ("bootstrap.servers", "buffer.memory")


def _boolean(text: str, key: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"{key} must be true or false")
    return text.strip().lower() == "true"


class ThroughputThrottler:
    """Kafka's ThroughputThrottler: ``should_throttle(amount_so_far, now_ns)`` after each
    send; ``throttle(amount)`` then sleeps off the accumulated deficit once it reaches
    2 ms (sleeping less than that is too imprecise to be worth it)."""

    MIN_SLEEP_NS = 2 * NS_PER_MS

    def __init__(self, target_per_s: float, start_ns: int, *, clock=time.perf_counter_ns,
                 sleep=time.sleep):
        assert target_per_s != 0, "a target of 0 would wait forever"
        self.target_per_s = target_per_s
        self.start_ns = start_ns
        self.sleep_time_ns = 1e9 / target_per_s if target_per_s > 0 else math.inf
        self.sleep_deficit_ns = 0.0
        self.clock = clock
        self.sleep = sleep

    def should_throttle(self, amount_so_far: int, now_ns: int) -> bool:
        if self.target_per_s < 0:
            return False
        elapsed_s = (now_ns - self.start_ns) / 1e9
        return elapsed_s > 0 and amount_so_far / elapsed_s > self.target_per_s

    def throttle(self, amount: int = 1) -> None:
        self.sleep_deficit_ns += amount * self.sleep_time_ns
        if self.sleep_deficit_ns >= self.MIN_SLEEP_NS:
            started = self.clock()
            self.sleep(self.sleep_deficit_ns / 1e9)
            self.sleep_deficit_ns -= self.clock() - started


class _Units:
    """Bookkeeping per send call. Completions are written by the producer's I/O thread
    (item assignment and ``append`` are atomic); everything else by the main thread."""

    def __init__(self):
        self.first_record: list[int] = []
        self.count: list[int] = []
        self.send_ns: list[int] = []
        self.ack_ns: list[int] = []
        self.partition: list[int] = []
        self.base_offset: list[int] = []
        self.error: list = []
        self.done: list[int] = []  # unit numbers in completion order
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()  # monotonic -> UTC

    @classmethod
    def of_records(cls, send_ns: list[int], ack_ns: list[int], partition: list[int],
                   offset: list[int], error: list) -> "_Units":
        """One unit per record, from a run that timed each record itself (another
        client's producer in ``bench.kafka_clients``): the same samples and figures."""
        n = len(send_ns)
        assert len(ack_ns) == len(partition) == len(offset) == len(error) == n
        units = cls()
        units.first_record = list(range(n))
        units.count = [1] * n
        units.send_ns, units.ack_ns = list(send_ns), list(ack_ns)
        units.partition, units.base_offset = list(partition), list(offset)
        units.error = list(error)
        units.done = list(range(n))
        return units

    def add(self, first_record: int, count: int, send_ns: int, partition: int) -> int:
        unit = len(self.count)
        self.first_record.append(first_record)
        self.count.append(count)
        self.send_ns.append(send_ns)
        self.ack_ns.append(0)
        self.partition.append(partition)
        self.base_offset.append(-1)
        self.error.append(None)
        return unit

    def callback(self, unit: int, offset_field: str):
        def on_completion(metadata, exception) -> None:
            self.ack_ns[unit] = time.perf_counter_ns()
            if exception is None:
                self.partition[unit] = metadata.partition
                self.base_offset[unit] = getattr(metadata, offset_field)
            else:
                self.error[unit] = f"{type(exception).__name__}: {exception}"
            self.done.append(unit)
        return on_completion


class _Stats:
    """Kafka's Stats: totals and the current 5 s window, fed in completion order."""

    def __init__(self, record_bytes: int, start_ns: int, out=sys.stdout):
        self.record_bytes = record_bytes
        self.start_ns = start_ns
        self.out = out
        self.count = self.failed = 0
        self.max_latency_ms = 0.0
        self.total_latency_ms = 0.0
        self.first_error = None
        self.seen = 0
        self._new_window(start_ns)

    def _new_window(self, now_ns: int) -> None:
        self.window_start_ns = now_ns
        self.window_count = 0
        self.window_max_ms = 0.0
        self.window_total_ms = 0.0

    def absorb(self, units: _Units) -> None:
        done = units.done
        end = len(done)
        for unit in done[self.seen:end]:
            n = units.count[unit]
            if units.error[unit] is not None:
                self.failed += n
                self.first_error = self.first_error or units.error[unit]
                continue
            latency_ms = (units.ack_ns[unit] - units.send_ns[unit]) / NS_PER_MS
            self.count += n
            self.total_latency_ms += latency_ms * n
            self.max_latency_ms = max(self.max_latency_ms, latency_ms)
            self.window_count += n
            self.window_total_ms += latency_ms * n
            self.window_max_ms = max(self.window_max_ms, latency_ms)
        self.seen = end

    def maybe_report(self, now_ns: int) -> None:
        if now_ns - self.window_start_ns < REPORTING_INTERVAL_NS:
            return
        elapsed_s = (now_ns - self.window_start_ns) / 1e9
        n = self.window_count
        print(f"{n} records sent, {n / elapsed_s:.1f} records/sec "
              f"({n * self.record_bytes / elapsed_s / MB_BYTES:.2f} MB/sec), "
              f"{self.window_total_ms / n if n else 0.0:.1f} ms avg latency, "
              f"{self.window_max_ms:.1f} ms max latency.", file=self.out, flush=True)
        self._new_window(now_ns)

    def summary(self, end_ns: int, latencies_ms: np.ndarray) -> dict:
        """The final line's figures, for the results store."""
        elapsed_s = max(1e-9, (end_ns - self.start_ns) / 1e9)
        ordered = np.sort(latencies_ms)
        figures = {"records": self.count, "failed": self.failed, "seconds": elapsed_s,
                   "records_per_s": self.count / elapsed_s,
                   "mb_per_s": self.count * self.record_bytes / elapsed_s / MB_BYTES,
                   "avg_latency_ms": self.total_latency_ms / self.count if self.count else 0.0,
                   "max_latency_ms": self.max_latency_ms}
        for name, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999)):
            figures[f"{name}_ms"] = percentile(ordered, fraction)
        return figures

    def total_line(self, end_ns: int, latencies_ms: np.ndarray) -> str:
        elapsed_s = max(1e-9, (end_ns - self.start_ns) / 1e9)
        ordered = np.sort(latencies_ms)
        p50, p95, p99, p999 = (percentile(ordered, f) for f in (0.5, 0.95, 0.99, 0.999))
        avg = self.total_latency_ms / self.count if self.count else 0.0
        return (f"{self.count} records sent, {self.count / elapsed_s:f} records/sec "
                f"({self.count * self.record_bytes / elapsed_s / MB_BYTES:.2f} MB/sec), "
                f"{avg:.2f} ms avg latency, {self.max_latency_ms:.2f} ms max latency, "
                f"{p50:.3f} ms 50th, {p95:.3f} ms 95th, {p99:.3f} ms 99th, "
                f"{p999:.3f} ms 99.9th.")


# ----------------------------------------------------------------- configuration

def producer_settings(props: dict[str, str]) -> tuple[dict, int]:
    """Kafka producer properties -> (Producer keywords, buffer.memory in bytes)."""
    kwargs = {"linger_ms": 0}
    for key, value in props.items():
        if key in PRODUCER_CONFIGS:
            name, kind = PRODUCER_CONFIGS[key]
            try:
                kwargs[name] = kind(value)
            except ValueError:
                raise ToolError(f"invalid value {value!r} for producer config {key}") from None
        elif key not in TOOL_CONFIGS:
            print(f"WARN The configuration '{key}' was supplied but isn't a known config.",
                  file=sys.stderr)
    try:
        buffer_memory = int(props.get("buffer.memory", BUFFER_MEMORY_DEFAULT))
    except ValueError:
        raise ToolError(f"invalid value {props['buffer.memory']!r} for buffer.memory") from None
    if buffer_memory <= 0:
        raise ToolError("buffer.memory must be positive")
    return kwargs, buffer_memory


# ----------------------------------------------------------------- the run

def payload(record_bytes: int, rows: int) -> np.ndarray:
    """Kafka's payload: random upper-case letters (one row reused for every record)."""
    rng = np.random.default_rng(PAYLOAD_SEED)
    row = rng.integers(65, 91, size=record_bytes, dtype=np.uint8)
    return np.ascontiguousarray(np.broadcast_to(row, (rows, record_bytes)))


class AvroPayload:
    """Values of PERF_VALUE_SCHEMA, exactly ``record_bytes`` long: the payload letters
    are cut to fit around the header and the varint-encoded fields."""

    def __init__(self, registry_address: str | None, topic: str, record_bytes: int):
        from fastavro import parse_schema
        from node.client.avro import RegistryError, SchemaRegistry
        if not registry_address:
            raise ToolError("--value-format avro needs --schema-registry HOST:PORT (the "
                            "coordinator, e.g. the cluster's ZooKeeper address)")
        try:
            with SchemaRegistry(registry_address) as registry:
                self.schema_id = registry.register(f"{topic}-value", PERF_VALUE_SCHEMA)
        except RegistryError as e:
            raise ToolError(str(e)) from None
        self.parsed = parse_schema(PERF_VALUE_SCHEMA)
        self.record_bytes = record_bytes
        self.letters = payload(record_bytes, 1)[0].tobytes()
        self.value(int(time.time() * 1000))     # a size that cannot be made fails now

    def value(self, created_ms: int) -> bytes:
        from node.client.avro import encode
        empty = len(encode(self.schema_id, self.parsed, {"created": created_ms,
                                                         "payload": b""}))
        for length in range(self.record_bytes - empty, self.record_bytes - empty - 4, -1):
            if length < 0:
                break
            out = encode(self.schema_id, self.parsed,
                         {"created": created_ms, "payload": self.letters[:length]})
            if len(out) == self.record_bytes:
                return out
        raise ToolError(f"--record-size {self.record_bytes} cannot hold an Avro value of "
                        f"exactly that size (the smallest is {empty} bytes; just past a "
                        f"length-prefix boundary no size fits: try one byte more or less)")

    def rows(self, n: int) -> np.ndarray:
        row = np.frombuffer(self.value(int(time.time() * 1000)), dtype=np.uint8)
        return np.ascontiguousarray(np.broadcast_to(row, (n, self.record_bytes)))


def run(args) -> int:
    props = {}
    if args.producer_config:
        props.update(read_properties_file(args.producer_config))
    props.update(parse_props(args.producer_props, "--producer-props"))
    bootstrap = bootstrap_of(args.bootstrap_server, props)
    if args.throughput == 0 or args.throughput < -1:
        raise ToolError("--throughput must be -1 (unthrottled) or a positive rate")
    kwargs, buffer_memory = producer_settings(props)
    partitions = sorted(check_topic(bootstrap, args.topic))
    avro = None
    if getattr(args, "value_format", "bytes") == "avro":
        avro = AvroPayload(args.schema_registry, args.topic, args.record_size)
    recording = results.Run.start(args.results, NAME, args) if args.results else None

    from node.client.producer import RECORD_OVERHEAD_BYTES, Producer

    try:
        producer = Producer(bootstrap_servers=bootstrap, **kwargs)
    except ValueError as e:
        raise ToolError(str(e)) from None
    try:
        producer.partitions_for(args.topic)  # metadata before the clock starts (see run)
        units, stats, end_ns = _produce(producer, args, partitions, buffer_memory,
                                        RECORD_OVERHEAD_BYTES, avro)
    finally:
        producer.close(timeout=5)
    latencies = _record_latencies_ms(units)
    print(stats.total_line(end_ns, latencies), flush=True)
    if args.samples_out:
        write_samples(args.samples_out, units, args, props)
    if recording is not None:
        recording.add_samples("produce", samples_table(units, args))
        cluster, topic = results.describe(bootstrap, args.topic)
        cluster["producer_props"] = props
        recording.finish(summary=stats.summary(end_ns, latencies), cluster=cluster,
                         topic=topic)
    if stats.failed:
        raise ToolError(f"{stats.failed} records failed; the first: {stats.first_error}")
    return 0


def _produce(producer, args, partitions: list[int], buffer_memory: int, overhead: int,
             avro: AvroPayload | None = None):
    total = args.num_records
    record_bytes = args.record_size
    per_batch = max(1, producer.batch_size // (record_bytes + overhead))
    per_record = 0 < args.throughput <= PER_RECORD_RATE_MAX
    if args.throughput < 0:
        chunk = per_batch
    else:
        chunk = min(per_batch, max(1, math.ceil(args.throughput / SENDS_PER_S_MAX)))
    values = payload(record_bytes, 1 if per_record else chunk)
    value = values[0].tobytes()
    units = _Units()
    start_ns = time.perf_counter_ns()
    stats = _Stats(record_bytes, start_ns)
    throttler = ThroughputThrottler(args.throughput, start_ns)
    outstanding: collections.deque = collections.deque()  # (unit, future, bytes)
    late: list = []  # (unit, future): done, but the callback had not run when we looked
    outstanding_bytes = 0
    sent = 0
    turn = 0
    while sent < total:
        k = 1 if per_record else min(chunk, total - sent)
        send_ns = time.perf_counter_ns()
        if avro is not None:    # a new value per send call: its creation time
            values = avro.rows(1 if per_record else chunk)
            value = values[0].tobytes()
        if per_record:
            future = producer.send(args.topic, value)
            unit = units.add(sent, 1, send_ns, -1)
            future.add_callback(units.callback(unit, "offset"))
        else:
            partition = partitions[turn % len(partitions)]
            turn += 1
            (future,) = producer.send_many(args.topic, values[:k], partition=partition)
            unit = units.add(sent, k, send_ns, partition)
            future.add_callback(units.callback(unit, "base_offset"))
        outstanding.append((unit, future, k * record_bytes))
        outstanding_bytes += k * record_bytes
        sent += k
        while outstanding and (outstanding[0][1].done() or outstanding_bytes > buffer_memory):
            oldest_unit, oldest, nbytes = outstanding[0]
            if not oldest.done():
                _wait(oldest)
                continue
            outstanding.popleft()
            outstanding_bytes -= nbytes
            if not units.ack_ns[oldest_unit]:
                late.append((oldest_unit, oldest))
        if throttler.should_throttle(sent, send_ns):
            throttler.throttle(k)
        stats.absorb(units)
        stats.maybe_report(time.perf_counter_ns())
    while outstanding:
        oldest_unit, oldest, _ = outstanding[0]
        if _wait(oldest):
            outstanding.popleft()
            if not units.ack_ns[oldest_unit]:
                late.append((oldest_unit, oldest))
        stats.absorb(units)
        stats.maybe_report(time.perf_counter_ns())
    end_ns = time.perf_counter_ns()
    _settle_late(units, late)
    stats.absorb(units)
    return units, stats, end_ns


def _settle_late(units: _Units, late: list) -> None:
    """Complete the units whose future is done but whose callback did not run within
    ``CALLBACK_GRACE_S`` (a callback added just as the future completes can be lost
    by the client; its acknowledgement time is then the time we noticed)."""
    deadline = time.monotonic() + CALLBACK_GRACE_S
    while late and len(units.done) < len(units.count) and time.monotonic() < deadline:
        time.sleep(0.001)
    for unit, future in late:
        if units.ack_ns[unit]:
            continue
        exception = future.exception()
        metadata = None if exception is not None else future.get(timeout=0)
        field = "offset" if hasattr(metadata, "offset") else "base_offset"
        units.callback(unit, field)(metadata, exception)


def _wait(future) -> bool:
    """Wait a slice for a future; True once it is done (acknowledged or failed)."""
    try:
        future.get(timeout=WAIT_SLICE_S)
    except Exception:  # noqa: BLE001 - failures are counted from the callback
        pass
    return future.done()


def _record_latencies_ms(units: _Units) -> np.ndarray:
    counts = np.asarray(units.count, dtype=np.int64)
    ok = np.asarray([e is None for e in units.error], dtype=bool)
    latency = (np.asarray(units.ack_ns, dtype=np.int64) -
               np.asarray(units.send_ns, dtype=np.int64)) / NS_PER_MS
    return np.repeat(latency[ok], counts[ok])


def samples_table(units: _Units, args):
    """One row per record (the results store's ``produce`` kind)."""
    import pyarrow as pa

    counts = np.asarray(units.count, dtype=np.int64)
    n = int(counts.sum())
    starts = np.asarray(units.first_record, dtype=np.int64)
    within = np.arange(n, dtype=np.int64) - np.repeat(starts, counts)
    base = np.asarray(units.base_offset, dtype=np.int64)
    failed = np.asarray([e is not None for e in units.error], dtype=bool)
    offsets = np.where(np.repeat(failed, counts), -1, np.repeat(base, counts) + within)
    send = np.repeat(np.asarray(units.send_ns, dtype=np.int64), counts)
    ack = np.repeat(np.asarray(units.ack_ns, dtype=np.int64), counts)
    shift = units.epoch_offset_ns
    table = pa.table({
        "record": pa.array(np.repeat(starts, counts) + within),
        # Microseconds: Spark reads no nanosecond Parquet timestamps (latency_ms keeps
        # the nanoseconds).
        "send_time": pa.array((send + shift) // 1000, type=pa.timestamp("us", tz="UTC")),
        "ack_time": pa.array((ack + shift) // 1000, type=pa.timestamp("us", tz="UTC")),
        "partition": pa.array(np.repeat(np.asarray(units.partition, dtype=np.int32), counts)),
        "offset": pa.array(offsets),
        "latency_ms": pa.array((ack - send) / NS_PER_MS),
        "bytes": pa.array(np.full(n, args.record_size, dtype=np.int32)),
        "error": pa.array(np.repeat(np.asarray(units.error, dtype=object), counts),
                          type=pa.string()),
    })
    assert table.num_rows == n == args.num_records
    return table


def write_samples(path: str, units: _Units, args, props: dict) -> None:
    import pyarrow.parquet as pq

    table = samples_table(units, args)
    metadata = {"tool": NAME, "topic": args.topic, "num_records": str(args.num_records),
                "record_size": str(args.record_size), "throughput": str(args.throughput),
                "producer_props": " ".join(f"{k}={v}" for k, v in sorted(props.items()))}
    table = table.replace_schema_metadata(metadata)
    try:
        pq.write_table(table, path)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e}") from None


# ----------------------------------------------------------------- command line

def register(subparsers) -> None:
    parser = add_tool_parser(subparsers, NAME, "Kafka's producer performance test",
                             __doc__)
    parser.add_argument("--topic", required=True, help="produce messages to this topic")
    parser.add_argument("--num-records", type=positive_int, required=True,
                        help="number of messages to produce")
    parser.add_argument("--record-size", type=positive_int, required=True,
                        help="message size in bytes")
    parser.add_argument("--throughput", type=float, required=True,
                        help="throttle to about THROUGHPUT messages/sec; -1: no throttling")
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="PROP=VALUE",
                        help="producer configs (Kafka keys), e.g. bootstrap.servers=H:P acks=all")
    parser.add_argument("--producer.config", dest="producer_config", default=None, type=absolute_path,
                        metavar="CONFIG-FILE", help="producer config properties file")
    parser.add_argument("--bootstrap-server", default=None,
                        help="HOST:PORT[,...] (overrides bootstrap.servers)")
    parser.add_argument("--results", default=None, type=absolute_path, metavar="DIR",
                        help="record the run in the results store DIR (run.json and "
                             "per-record samples as Parquet; node.perf.results)")
    parser.add_argument("--value-format", choices=("bytes", "avro"), default="bytes",
                        help="avro: typed values (PERF_VALUE_SCHEMA) registered in the "
                             "schema registry of --schema-registry")
    parser.add_argument("--schema-registry", default=None, metavar="HOST:PORT",
                        help="the coordinator holding the schema registry")
    parser.add_argument("--samples-out", default=None, type=absolute_path, metavar="FILE",
                        help="write every record's send/ack time, partition and offset "
                             "as Parquet")
    parser.set_defaults(func=lambda args: run_tool(NAME, run, args))
