"""The native client (node.client over minikafka's native wire): bench.chaos.worker's
workload, as events.

- Producer: one send at a time (``send(...).get()``, up to ``NATIVE_SEND_TIMEOUT_S``),
  with the chaos worker's timeouts (``options.NATIVE_PRODUCER``). ``fail`` only for
  NOT_ENOUGH_REPLICAS on the batch's only attempt (refused before the append, and no
  earlier attempt could have landed); anything else ``info``. ``--value-format avro``
  writes ``CHAOS_VALUE_SCHEMA`` records registered in the schema registry.
- Consumer: every partition (or ``--partition``) assigned and read from the start; with
  ``--group``, ``subscribe`` through the brokers' group coordinator (KIP-848), the
  listener's assigned/revoked/lost as assign/revoke ops, ``member_id()`` as the member.
  node.client reports no commits (its auto-commit's outcome is not exposed): none written.
"""
from __future__ import annotations

import time

from bench.chaos.clients.common import POLL_S, Pacer, value_of
from bench.chaos.clients.events import Emitter, Ownership, Sends, error_text
from bench.chaos.clients.options import NATIVE_SEND_TIMEOUT_S, UsageError

NAME = "native"
CLOSE_TIMEOUT_S = 5.0
POLL_ERROR_PAUSE_S = 0.1
CHAOS_VALUE_SCHEMA = {
    "type": "record", "name": "ChaosValue", "namespace": "minikafka.chaos",
    "doc": "One value of a chaos run's producer: unique per (producer, seq).",
    "fields": [{"name": "producer", "type": "string"},
               {"name": "seq", "type": "long"},
               {"name": "sent", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version
    try:
        return f"node.client (minikafka {dist_version('minikafka')})"
    except PackageNotFoundError:
        return "node.client"


def value_maker(args):
    """n -> the n-th value's bytes (plain text, or Avro registered under
    ``<topic>-value``)."""
    if args.value_format == "plain":
        return lambda n: value_of(args.name, n)
    from node.client.avro import AvroSerializer, SchemaRegistry
    registry = SchemaRegistry(args.schema_registry)
    try:
        serializer = AvroSerializer(registry, CHAOS_VALUE_SCHEMA, f"{args.topic}-value")
        serializer.register()       # now, before the faults start
    finally:
        registry.close()
    return lambda n: serializer({"producer": args.name, "seq": n,
                                 "sent": int(time.time() * 1000)})


def _construct(cls, *a, **kw):
    try:
        return cls(*a, **kw)
    except (TypeError, ValueError) as e:
        raise UsageError(f"native {cls.__name__}: {e}") from None


def produce(args, settings: dict, em: Emitter, stop) -> None:
    from node.client import Producer
    from node.wire.errors import ErrorCode, KafkaError
    make_value = value_maker(args)
    producer = _construct(Producer, bootstrap_servers=args.bootstrap, **settings)
    em.start(NAME, version(), "producer", settings)
    stop.begin()
    sends = Sends(em)
    pacer = Pacer(args.rate, make_value)
    try:
        while not stop.wait(pacer.delay_s()):
            value = pacer.next_value(sends)
            future = None
            try:
                future = producer.send(args.topic, value, partition=args.partition)
                md = future.get(timeout=NATIVE_SEND_TIMEOUT_S)
                sends.ok(value, md.partition, md.offset)
            except Exception as e:  # every failure is recorded; its kind decides the type
                code = getattr(e, "code", None)
                definite = isinstance(e, KafkaError) and code == ErrorCode.NOT_ENOUGH_REPLICAS \
                    and future is not None and future.attempts <= 1
                sends.failed(value, definite, error_text(e))
    finally:
        try:
            producer.close(timeout=min(CLOSE_TIMEOUT_S, args.flush_timeout_s))
        except Exception as e:
            em.client("error", f"close: {error_text(e)}")
        sends.give_up("still outstanding when the producer closed")


def _partitions(args) -> list[int]:
    if args.partition is not None:
        return [args.partition]
    from node.client import Admin
    with Admin(bootstrap_servers=args.bootstrap) as admin:
        return [m.partition for m in admin.describe_topics([args.topic])[args.topic]]


def consume(args, settings: dict, em: Emitter, stop) -> None:
    from node.client import Consumer
    group = None
    if args.group:
        settings = {"group_id": args.group, **settings}
    consumer = _construct(Consumer, bootstrap_servers=args.bootstrap, **settings)
    em.start(NAME, version(), "consumer", settings)
    stop.begin()
    try:
        if args.group:
            group = Ownership(em)
            consumer.subscribe([args.topic], listener=_Listener(group, consumer))
        else:
            consumer.assign([(args.topic, p) for p in _partitions(args)])
            consumer.seek_to_beginning()
        while not stop:
            invoked = time.monotonic_ns()
            try:
                records = consumer.poll(timeout_ms=int(POLL_S * 1000))
            except Exception as e:
                em.poll_failed(invoked, error_text(e))
                stop.wait(POLL_ERROR_PAUSE_S)
                continue
            em.poll(invoked, [(r.partition, r.offset, r.value) for r in records
                              if args.partition is None or r.partition == args.partition])
    finally:
        if group is not None:
            group.revoke_all()      # before close: its leave hands them to others
        try:
            consumer.close()
        except Exception as e:
            em.client("error", f"close: {error_text(e)}")


class _Listener:
    def __init__(self, group: Ownership, consumer) -> None:
        self.group = group
        self.consumer = consumer

    def on_partitions_assigned(self, tps) -> None:
        self.group.assign([tp.partition for tp in tps], member=self.consumer.member_id())

    def on_partitions_revoked(self, tps) -> None:
        self.group.revoke([tp.partition for tp in tps])

    def on_partitions_lost(self, tps) -> None:
        self.group.revoke([tp.partition for tp in tps], lost=True)


def run(args, settings: dict, em: Emitter, stop) -> None:
    (produce if args.role == "producer" else consume)(args, settings, em, stop)
