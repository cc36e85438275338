"""One workload process of a chaos run: a producer or a consumer that records every
operation it makes (``bench.chaos.checker.Op``) and writes its history as Parquet.

    python -m bench.chaos.worker --role producer|consumer --name p0 --bootstrap B \\
        --topic T --duration S --out FILE.parquet [--acks all] [--rate R] [--progress F]
        [--value-format avro --schema-registry HOST:PORT]

A producer sends unique values (``<name>-<n>``, or with ``--value-format avro`` the
record ``CHAOS_VALUE_SCHEMA`` {producer, seq, sent} in the registry's wire format, so
the analysis has typed values to read) one at a time at up to ``--rate`` per
second and records ``invoke``, then ``ok`` (partition, offset), ``fail`` (the broker
refused it, NOT_ENOUGH_REPLICAS, on the only attempt) or ``info`` (anything else,
retried refusals included: an earlier attempt may have landed; the outcome is unknown).
A consumer reads every partition from the start and records each poll's records.
History schema (one row per operation): process string, type string, f string,
time_ns int64 (CLOCK_MONOTONIC), value binary, partition int32, offset int64,
error string, reads list<struct<partition int32, offset int64, value binary>>.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

PROGRESS_EVERY_S = 1.0
CHAOS_VALUE_SCHEMA = {
    "type": "record", "name": "ChaosValue", "namespace": "minikafka.chaos",
    "doc": "One value of a chaos run's producer: unique per (producer, seq).",
    "fields": [{"name": "producer", "type": "string"},
               {"name": "seq", "type": "long"},
               {"name": "sent", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def _write(out: str, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    read_type = pa.list_(pa.struct([("partition", pa.int32()), ("offset", pa.int64()),
                                    ("value", pa.binary())]))
    table = pa.table({
        "process": pa.array([r["process"] for r in rows], type=pa.string()),
        "type": pa.array([r["type"] for r in rows], type=pa.string()),
        "f": pa.array([r["f"] for r in rows], type=pa.string()),
        "time_ns": pa.array([r["time_ns"] for r in rows], type=pa.int64()),
        "value": pa.array([r.get("value") for r in rows], type=pa.binary()),
        "partition": pa.array([r.get("partition", -1) for r in rows], type=pa.int32()),
        "offset": pa.array([r.get("offset", -1) for r in rows], type=pa.int64()),
        "error": pa.array([r.get("error") for r in rows], type=pa.string()),
        "reads": pa.array([[{"partition": p, "offset": o, "value": v}
                            for p, o, v in r.get("reads", ())] for r in rows], type=read_type),
    })
    pq.write_table(table, out)


def _progress(path: str | None, ok: int, errors: int) -> None:
    if path:
        with open(path + ".tmp", "w") as f:
            f.write(f"{ok} {errors}\n")
        os.replace(path + ".tmp", path)   # the driver never reads half a line


def value_maker(args):
    """n -> the n-th value's bytes (plain text, or Avro registered under
    ``<topic>-value``)."""
    if args.value_format == "plain":
        return lambda n: f"{args.name}-{n}".encode()
    from node.client.avro import AvroSerializer, SchemaRegistry
    if not args.schema_registry:
        raise SystemExit("--value-format avro needs --schema-registry HOST:PORT")
    registry = SchemaRegistry(args.schema_registry)
    try:
        serializer = AvroSerializer(registry, CHAOS_VALUE_SCHEMA, f"{args.topic}-value")
        serializer.register()       # now, before the faults start
    finally:
        registry.close()
    return lambda n: serializer({"producer": args.name, "seq": n,
                                 "sent": int(time.time() * 1000)})


def produce(args) -> list[dict]:
    from node.client import Producer
    from node.wire.errors import ErrorCode, KafkaError
    make_value = value_maker(args)
    rows = []
    producer = Producer(bootstrap_servers=args.bootstrap, acks=args.acks,
                        request_timeout_ms=3000, delivery_timeout_ms=8000,
                        retry_backoff_ms=100, max_block_ms=5000, linger_ms=0)
    deadline = time.monotonic() + args.duration
    interval = 1.0 / args.rate
    ok = errors = n = 0
    next_progress = time.monotonic()
    try:
        while time.monotonic() < deadline:
            started = time.monotonic()
            value = make_value(n)
            n += 1
            rows.append({"process": args.name, "type": "invoke", "f": "send",
                         "time_ns": time.monotonic_ns(), "value": value})
            future = None
            try:
                future = producer.send(args.topic, value)
                md = future.get(timeout=10)
                rows.append({"process": args.name, "type": "ok", "f": "send",
                             "time_ns": time.monotonic_ns(), "value": value,
                             "partition": md.partition, "offset": md.offset})
                ok += 1
            except Exception as e:  # every failure is recorded; its kind decides the type
                code = getattr(e, "code", None)
                # Refused before the append, and no earlier attempt of it could have
                # landed (one attempt): anything else leaves the outcome unknown.
                definite = isinstance(e, KafkaError) and code == ErrorCode.NOT_ENOUGH_REPLICAS \
                    and future is not None and future.attempts <= 1
                rows.append({"process": args.name, "type": "fail" if definite else "info",
                             "f": "send", "time_ns": time.monotonic_ns(), "value": value,
                             "error": f"{type(e).__name__}: {e}"[:200]})
                errors += 1
            if time.monotonic() >= next_progress:
                _progress(args.progress, ok, errors)
                next_progress += PROGRESS_EVERY_S
            pause = interval - (time.monotonic() - started)
            if pause > 0:
                time.sleep(pause)
    finally:
        try:
            producer.close(timeout=5)
        except Exception:
            pass
    _progress(args.progress, ok, errors)
    return rows


def consume(args) -> list[dict]:
    from node.client import Admin, Consumer
    admin = Admin(bootstrap_servers=args.bootstrap)
    try:
        partitions = [m.partition for m in admin.describe_topics([args.topic])[args.topic]]
    finally:
        admin.close()
    consumer = Consumer(bootstrap_servers=args.bootstrap, auto_offset_reset="earliest")
    rows = []
    deadline = time.monotonic() + args.duration
    read = errors = 0
    try:
        consumer.assign([(args.topic, p) for p in partitions])
        consumer.seek_to_beginning()
        while time.monotonic() < deadline:
            invoked = time.monotonic_ns()
            try:
                records = consumer.poll(timeout_ms=200)
            except Exception as e:
                rows += [{"process": args.name, "type": "invoke", "f": "poll",
                          "time_ns": invoked},
                         {"process": args.name, "type": "info", "f": "poll",
                          "time_ns": time.monotonic_ns(), "error": str(e)[:200]}]
                errors += 1
                time.sleep(0.1)
                continue
            if records:
                rows += [{"process": args.name, "type": "invoke", "f": "poll",
                          "time_ns": invoked},
                         {"process": args.name, "type": "ok", "f": "poll",
                          "time_ns": time.monotonic_ns(),
                          "reads": [(r.partition, r.offset, r.value) for r in records]}]
                read += len(records)
            _progress(args.progress, read, errors)
    finally:
        consumer.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=("producer", "consumer"), required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--progress", default=None)
    parser.add_argument("--value-format", choices=("plain", "avro"), default="plain")
    parser.add_argument("--schema-registry", default=None, metavar="HOST:PORT",
                        help="the coordinator holding the schema registry (avro values)")
    args = parser.parse_args(argv)
    rows = produce(args) if args.role == "producer" else consume(args)
    _write(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
