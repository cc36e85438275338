"""confluent-kafka (librdkafka) as a chaos worker.

- Producer: ``produce`` paced at ``--rate`` (librdkafka batches and retries), delivery
  reports through the ``on_delivery`` callback served by ``poll``. A send is ``fail``
  only when ``produce()`` itself refused it (it never entered librdkafka's queue). An
  error in a delivery report is ``info``: none proves the message was never written.
  librdkafka moves the messages of a ProduceRequest that failed or timed out back to
  their partition's queue for a retry (persistence status "possibly persisted", which
  confluent-kafka does not expose; rdkafka_request.c), and that queue is what fails
  with ``_UNKNOWN_PARTITION`` / ``_UNKNOWN_TOPIC`` when the partition or topic leaves
  the metadata (rdkafka_topic.c, rdkafka_broker.c), with ``_PURGE_QUEUE`` when
  ``purge()`` empties it (rdkafka_partition.c) and with ``_MSG_TIMED_OUT``;
  ``_PURGE_INFLIGHT`` is a request in flight. At the end: ``flush(--flush-timeout-s)``,
  then ``purge()`` of what is left, so that every send gets its report.
- ``statistics.interval.ms`` = ``STATS_INTERVAL_MS``: librdkafka's cumulative
  ``txretries`` + ``req_timeouts`` (per broker in its statistics; summed: a timed-out
  ProduceRequest's messages are sent again without counting in txretries) as
  ``client`` retry events when it grows; ``error_cb`` as client errors; its log lines
  (through the ``logger`` setting, served by poll) from WARNING up as client log events.
- Consumer: standalone, every partition assigned at OFFSET_BEGINNING (librdkafka needs a
  ``group.id`` anyway: ``minikafka-chaos-<name>``); with ``--group``, ``subscribe`` with
  on_assign/on_revoke/on_lost (assign/revoke ops, ``memberid()`` as the member;
  librdkafka exposes no generation) and ``on_commit`` (commit ops: ok per committed
  partition, ``info`` with the error otherwise).
"""
from __future__ import annotations

import json
import logging
import time

from bench.chaos.clients.common import POLL_S, ClientLog, Pacer, bounded, value_of
from bench.chaos.clients.events import Emitter, Ownership, Sends
from bench.chaos.clients.options import UsageError

NAME = "confluent-kafka"
STATS_INTERVAL_MS = 1000
CONSUME_MAX = 500
METADATA_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 10.0
PURGE_REPORTS_S = 2.0


def version() -> str:
    import confluent_kafka
    v = confluent_kafka.version()
    v = v[0] if isinstance(v, tuple) else v
    return f"{v} (librdkafka {confluent_kafka.libversion()[0]})"


def delivery_report(sends: Sends):
    """The ``on_delivery`` callback: ``ok`` with the partition and offset, else ``info``
    with the error (no delivery report error is proof the message was not written)."""
    def on_delivery(err, msg) -> None:
        if err is None:
            sends.ok(msg.value(), msg.partition(), msg.offset())
        else:
            sends.failed(msg.value(), False, _error(err))
    return on_delivery


def _error(err) -> str:
    return f"{err.name()}: {err.str()}"


def _callbacks(em: Emitter, stop) -> dict:
    """error_cb and stats_cb (txretries) for a producer or consumer."""
    retries = [0]

    def on_error(err) -> None:
        em.client("error", _error(err) + (" (fatal)" if err.fatal() else ""))
        if err.fatal():
            stop.set()          # librdkafka is unusable after a fatal error

    def on_stats(text: str) -> None:
        try:
            brokers = json.loads(text).get("brokers", {}).values()
            total = sum(int(b.get("txretries", 0)) for b in brokers)
            timeouts = sum(int(b.get("req_timeouts", 0)) for b in brokers)
        except (ValueError, TypeError, AttributeError):
            return
        if total + timeouts > retries[0]:
            retries[0] = total + timeouts
            em.client("retry", f"librdkafka: {total} requests retried (txretries), {timeouts} "
                               f"timed out (req_timeouts; their messages are sent again)",
                      count=total + timeouts)

    # librdkafka's log lines (warnings up) as client log events, and to stderr.
    logger = logging.getLogger("librdkafka")
    logger.setLevel(logging.INFO)
    ClientLog(em, lambda r: False, events_from=logging.WARNING).attach("librdkafka")
    return {"error_cb": on_error, "stats_cb": on_stats, "logger": logger}


def _client(cls, conf: dict):
    from confluent_kafka import KafkaException
    try:
        return cls(conf)
    except (KafkaException, ValueError, TypeError) as e:
        raise UsageError(f"{NAME}: {e}") from None


def produce(args, settings: dict, em: Emitter, stop) -> None:
    from confluent_kafka import KafkaException, Producer
    settings = {"statistics.interval.ms": str(STATS_INTERVAL_MS), **settings}
    sends = Sends(em)
    on_delivery = delivery_report(sends)
    producer = _client(Producer, {"bootstrap.servers": args.bootstrap, **settings,
                                  "on_delivery": on_delivery, **_callbacks(em, stop)})
    em.start(NAME, version(), "producer", settings)
    stop.begin()
    where = {} if args.partition is None else {"partition": args.partition}
    pacer = Pacer(args.rate, lambda n: value_of(args.name, n))
    try:
        while True:
            delay = pacer.delay_s()
            if delay > 0:
                producer.poll(min(delay, POLL_S))
            if stop:
                break
            if delay > 0:
                continue
            value = pacer.next_value(sends)
            try:
                producer.produce(args.topic, value, **where)
            except (BufferError, KafkaException) as e:   # refused: never queued
                sends.failed(value, True, f"{type(e).__name__}: {e}")
            producer.poll(0)
    finally:
        left = producer.flush(args.flush_timeout_s)
        if left:
            em.client("log", f"{left} messages still outstanding after flush("
                             f"{args.flush_timeout_s:g}); purged")
            producer.purge()
            producer.flush(PURGE_REPORTS_S)     # serves the purged messages' reports
        sends.give_up("no delivery report by the end")
        bounded(producer.close, CLOSE_TIMEOUT_S, "producer.close", em)


def consume(args, settings: dict, em: Emitter, stop) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
    group = Ownership(em) if args.group else None
    settings = {"group.id": args.group or f"minikafka-chaos-{args.name}",
                "statistics.interval.ms": str(STATS_INTERVAL_MS), **settings}
    conf = {"bootstrap.servers": args.bootstrap, **settings, **_callbacks(em, stop)}
    if group is not None:
        def on_commit(err, partitions) -> None:
            mine = [tp for tp in partitions if tp.topic == args.topic and tp.offset >= 0]
            if err is not None:         # the whole commit failed (_NO_OFFSET: none to do)
                group.commit([(tp.partition, tp.offset) for tp in mine], error=_error(err))
                return
            group.commit([(tp.partition, tp.offset) for tp in mine if tp.error is None])
            for tp in mine:
                if tp.error is not None:
                    group.commit([(tp.partition, tp.offset)], error=_error(tp.error))
        conf["on_commit"] = on_commit
    consumer = _client(Consumer, conf)
    em.start(NAME, version(), "consumer", settings)
    stop.begin()
    try:
        if group is not None:
            consumer.subscribe(
                [args.topic],
                on_assign=lambda c, tps: group.assign([tp.partition for tp in tps],
                                                      member=c.memberid()),
                on_revoke=lambda c, tps: group.revoke([tp.partition for tp in tps]),
                on_lost=lambda c, tps: group.revoke([tp.partition for tp in tps], lost=True))
        else:
            if args.partition is not None:
                partitions = [args.partition]
            else:
                md = consumer.list_topics(args.topic, timeout=METADATA_TIMEOUT_S)
                partitions = sorted(md.topics[args.topic].partitions)
            consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING)
                             for p in partitions])
        while not stop:
            invoked = time.monotonic_ns()
            try:
                messages = consumer.consume(CONSUME_MAX, POLL_S)
            except KafkaException as e:
                em.poll_failed(invoked, f"KafkaException: {e}")
                continue
            reads = []
            for m in messages:
                if m.error() is not None:
                    em.client("error", _error(m.error()))
                elif args.partition is None or m.partition() == args.partition:
                    reads.append((m.partition(), m.offset(), m.value()))
            em.poll(invoked, reads)
    finally:
        if group is not None:
            group.revoke_all()
        bounded(consumer.close, CLOSE_TIMEOUT_S, "consumer.close", em)


def run(args, settings: dict, em: Emitter, stop) -> None:
    (produce if args.role == "producer" else consume)(args, settings, em, stop)
