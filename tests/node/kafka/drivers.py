"""Produce and consume through each real client, in one shape: ``Rec`` in, ``Got`` out.

Every ``produce_*(bootstrap, topic, records, ...)`` sends ``records`` to one partition,
waits until each is acknowledged and returns the offsets the client was told (kcat tells
none: None). Every ``consume_*(bootstrap, topic, partition, count, ...)`` reads from the
beginning (or ``start``) until it has ``count`` records and returns them as ``Got``;
time runs out with an AssertionError naming the client and what it got.

The consumers assign partitions by hand: the group APIs are not offered yet, and
kafkajs' consumer has no manual assignment, so its script fetches through kafkajs' own
broker connection (``js/kafkajs_client.js``).
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from dataclasses import dataclass

from tests.node.kafka.clients import run_node
from tests.waiting import poll_until

TIMEOUT_S = 90.0
POLL_S = 0.5


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple = ()            # ((str, bytes | None), ...)
    timestamp: int | None = None   # CreateTime in ms; None: the client's clock


@dataclass(frozen=True)
class Got:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int

    def same_as(self, rec: Rec) -> bool:
        return ((self.key, self.value, tuple(self.headers)) == (rec.key, rec.value, rec.headers)
                and (rec.timestamp is None or rec.timestamp == self.timestamp))


def sample_records(n: int = 20, *, binary: bool = True, prefix: str = "r") -> list[Rec]:
    """Records that exercise what must survive: null and empty keys, empty values,
    binary bytes, repeated and empty header values, explicit timestamps."""
    base = 1_700_000_000_000
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else (b"" if i % 5 == 1 else f"{prefix}-key-{i % 3}".encode())
        value = b"" if i % 7 == 3 else f"{prefix}-value-{i}-".encode() + b"x" * (i * 13 % 50)
        if binary and i % 4 == 2:
            value += bytes(range(256))[i:i + 40]
        headers = ()
        if i % 3 == 1:
            headers = (("h1", f"one-{i}".encode()), ("h2", b""), ("h1", b"again"))
        out.append(Rec(key, value, headers, base + i * 1000 + (i % 7)))
    return out


def _deadline_check(deadline: float, client: str, got: list, count: int) -> None:
    assert time.monotonic() < deadline, \
        f"{client}: read {len(got)} of {count} records within {TIMEOUT_S:.0f} s: {got[-3:]}"


# ------------------------------------------------------------------ confluent-kafka
def produce_confluent(bootstrap: str, topic: str, records: list[Rec], partition: int = 0,
                      conf: dict | None = None) -> list[int]:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": int(TIMEOUT_S * 1000), **(conf or {})})
    offsets: list = [None] * len(records)
    failures = []

    def report(i):
        def done(err, msg):
            if err is not None:
                failures.append((i, err))
            else:
                offsets[i] = msg.offset()
        return done

    for i, r in enumerate(records):
        producer.produce(topic, value=r.value, key=r.key, partition=partition,
                         timestamp=r.timestamp or 0, headers=list(r.headers) or None,
                         on_delivery=report(i))
        producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    assert left == 0 and not failures, f"confluent-kafka: {left} undelivered, {failures[:3]}"
    return offsets


def confluent_consumer(bootstrap: str, **conf):
    """A librdkafka consumer for manual assignment (confluent-kafka insists on a group.id;
    nothing is committed)."""
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     "auto.offset.reset": "earliest", **conf})


def got_from_confluent(msg) -> Got:
    return Got(msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()),
               msg.timestamp()[1])


def consume_confluent(bootstrap: str, topic: str, partition: int, count: int,
                      start: int | None = None, conf: dict | None = None) -> list[Got]:
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
    consumer = confluent_consumer(bootstrap, **(conf or {}))
    got: list[Got] = []
    try:
        consumer.assign([TopicPartition(topic, partition,
                                        OFFSET_BEGINNING if start is None else start)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count:
            _deadline_check(deadline, "confluent-kafka", got, count)
            msg = consumer.poll(POLL_S)
            if msg is None:
                continue
            if msg.error():
                # Transient errors are retried by librdkafka; anything fatal fails the test.
                assert not msg.error().fatal(), msg.error()
                assert msg.error().code() != KafkaError._MSG_TIMED_OUT, msg.error()
                continue
            got.append(got_from_confluent(msg))
    finally:
        consumer.close()
    return got


# ------------------------------------------------------------------ kafka-python
def produce_kafka_python(bootstrap: str, topic: str, records: list[Rec], partition: int = 0,
                         **config) -> list[int]:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                             request_timeout_ms=30_000, **{"linger_ms": 5, **config})
    try:
        futures = [producer.send(topic, value=r.value, key=r.key, partition=partition,
                                 timestamp_ms=r.timestamp, headers=list(r.headers))
                   for r in records]
        producer.flush(TIMEOUT_S)
        return [f.get(timeout=TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=10)


def consume_kafka_python(bootstrap: str, topic: str, partition: int, count: int,
                         start: int | None = None, **config) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", **config)
    got: list[Got] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count:
            _deadline_check(deadline, "kafka-python", got, count)
            for records in consumer.poll(timeout_ms=int(POLL_S * 1000)).values():
                got += [Got(m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp)
                        for m in records]
    finally:
        consumer.close()
    return got


# ------------------------------------------------------------------ aiokafka
def produce_aiokafka(bootstrap: str, topic: str, records: list[Rec], partition: int = 0,
                     **config) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                    **config)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=r.value, key=r.key, partition=partition,
                                           timestamp_ms=r.timestamp, headers=list(r.headers))
                       for r in records]
            return [(await asyncio.wait_for(f, TIMEOUT_S)).offset for f in futures]
        finally:
            await producer.stop()

    return asyncio.run(run())


def consume_aiokafka(bootstrap: str, topic: str, partition: int, count: int,
                     start: int | None = None, **config) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    **config)
        await consumer.start()
        got: list[Got] = []
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            if start is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, start)
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < count:
                _deadline_check(deadline, "aiokafka", got, count)
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                for records in batches.values():
                    got.extend(Got(m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp)
                               for m in records)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


# ------------------------------------------------------------------ kafkajs (node)
def _hex(b: bytes | None):
    return None if b is None else b.hex()


def _unhex(s: str | None):
    return None if s is None else bytes.fromhex(s)


def _kafkajs(command: dict) -> dict:
    done = run_node("kafkajs_client.js", json.dumps(command), timeout_s=TIMEOUT_S + 30)
    assert done.returncode == 0, f"kafkajs failed ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def produce_kafkajs(bootstrap: str, topic: str, records: list[Rec], partition: int = 0,
                    compression: str = "none", idempotent: bool = False) -> list[int]:
    answer = _kafkajs({
        "op": "produce", "brokers": bootstrap.split(","), "topic": topic, "partition": partition,
        "compression": compression, "idempotent": idempotent,
        "records": [{"key": _hex(r.key), "value": _hex(r.value), "timestamp": r.timestamp,
                     "headers": [[k, _hex(v)] for k, v in r.headers]} for r in records]})
    return answer["offsets"]


def consume_kafkajs(bootstrap: str, topic: str, partition: int, count: int,
                    start: int | None = None) -> list[Got]:
    answer = _kafkajs({"op": "consume", "brokers": bootstrap.split(","), "topic": topic,
                       "partition": partition, "count": count, "start": start or 0,
                       "timeoutMs": int(TIMEOUT_S * 1000)})
    got = [Got(int(m["offset"]), _unhex(m["key"]), _unhex(m["value"]),
               tuple((k, _unhex(v)) for k, v in m["headers"]), int(m["timestamp"]))
           for m in answer["records"]]
    assert len(got) >= count, f"kafkajs: read {len(got)} of {count} records: {answer}"
    return got


# ------------------------------------------------------------------ kcat
def kcat(*args: str, stdin: str | None = None, timeout_s: float = TIMEOUT_S) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, f"kcat {' '.join(args)} failed: {done.stderr[-2000:]}"
    return done.stdout


def produce_kcat(bootstrap: str, topic: str, records: list[Rec], partition: int = 0,
                 headers: tuple = ()) -> list[None]:
    """kcat -P: one line per record, ``key<TAB>value`` (text only; no timestamps); the
    same ``headers`` on every record (kcat's -H)."""
    lines = []
    for r in records:
        assert r.key is not None and r.value is not None, "kcat -P sends text lines"
        lines.append(f"{r.key.decode()}\t{r.value.decode()}")
    args = ["-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", "\t",
            "-X", "acks=all"]
    for k, v in headers:
        args += ["-H", f"{k}={v.decode()}"]
    kcat(*args, stdin="\n".join(lines) + "\n")
    return [None] * len(records)


def consume_kcat(bootstrap: str, topic: str, partition: int, count: int,
                 start: int | None = None) -> list[Got]:
    """kcat -C -e -J from ``start`` (the beginning by default): the records up to the end
    of the partition, as JSON lines (text keys and values); read again until ``count``."""
    def read():
        out = kcat("-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o",
                   "beginning" if start is None else str(start), "-e", "-J", "-c", str(count))
        got = []
        for line in out.splitlines():
            m = json.loads(line)
            h = m.get("headers") or []
            headers = tuple((h[i], None if h[i + 1] is None else h[i + 1].encode())
                            for i in range(0, len(h), 2))
            got.append(Got(m["offset"], None if m["key"] is None else m["key"].encode(),
                           None if m["payload"] is None else m["payload"].encode(),
                           headers, m["ts"]))
        return got if len(got) >= count else None

    return poll_until(read, TIMEOUT_S, f"kcat to read {count} records of {topic}-{partition}",
                      interval_s=POLL_S)


def assert_records(got: list[Got], sent: list[Rec], reader: str, offsets=None) -> None:
    """``got`` is ``sent``, in order, at consecutive offsets (at ``offsets`` when given):
    keys, values, headers and timestamps alike. kafkajs hands headers over as an object
    (one entry per key, repeated keys' values in order): compare grouped by key."""
    assert len(got) == len(sent), (reader, len(got), len(sent))
    if offsets is not None:
        assert [g.offset for g in got] == list(offsets), reader
    else:
        assert [g.offset for g in got] == list(range(got[0].offset, got[0].offset + len(got)))
    for g, r in zip(got, sent):
        if reader == "kafkajs":
            g = Got(g.offset, g.key, g.value, _by_key(g.headers), g.timestamp)
            r = Rec(r.key, r.value, _by_key(r.headers), r.timestamp)
        assert g.same_as(r), f"{reader} read {g}, sent {r}"


def _by_key(headers) -> tuple:
    return tuple(sorted(headers, key=lambda kv: kv[0]))   # stable: values keep their order


def headers_grouped(records: list[Rec]) -> list[Rec]:
    """``records`` with each one's headers grouped by key: what kafkajs can send (its
    headers are an object, so a key's repeated values go out together)."""
    return [Rec(r.key, r.value, _by_key(r.headers), r.timestamp) for r in records]


PRODUCERS = {"confluent-kafka": produce_confluent, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka, "kafkajs": produce_kafkajs}
CONSUMERS = {"confluent-kafka": consume_confluent, "kafka-python": consume_kafka_python,
             "aiokafka": consume_aiokafka, "kafkajs": consume_kafkajs, "kcat": consume_kcat}
