"""kafka-python as a chaos worker.

- Producer: ``send`` paced at ``--rate``; the future's callback (kafka-python's I/O
  thread) writes ``ok`` with partition and offset, its errback ``info``: kafka-python's
  errors do not say whether an earlier attempt of the batch may have landed (retries,
  request timeouts, expired in-flight batches). ``fail`` only when the record never
  reached a batch: ``send()`` raised (e.g. KafkaTimeoutError waiting ``max_block_ms`` for
  metadata) or returned an already-failed future (its metadata wait failed). At the
  end ``flush(--flush-timeout-s)``; what is left is ``info``.
- Retries: kafka-python keeps only a rate (``record-retry-rate``), so the worker counts
  its sender's "retrying" log lines (one per batch retried) as ``client`` retry events;
  its ERROR log lines become ``client`` log events.
- Consumer: standalone ``assign`` + ``seek_to_beginning`` (``group_id=None``); with
  ``--group``, ``subscribe`` with a ConsumerRebalanceListener (assigned/revoked/lost;
  ``group_metadata()`` gives the member id and generation) and
  ``default_offset_commit_callback`` (its auto-commits: ``commit`` ok, or info with the
  error). The synchronous commit in ``close()`` calls no callback: not reported.
"""
from __future__ import annotations

import time

from bench.chaos.clients.common import POLL_S, ClientLog, Pacer, bounded, value_of
from bench.chaos.clients.events import Emitter, Ownership, Sends, error_text
from bench.chaos.clients.options import UsageError

NAME = "kafka-python"
CLOSE_TIMEOUT_S = 10.0
RETRY_LOGGER = "kafka.producer.sender"
# kafka-python 3.0 drops a JoinGroup+SyncGroup that ends between two polls and sends a new
# JoinGroup (from the group's leader that rebalances the group again); polls that wait
# longer keep its join task awaited (bench.perf.kafka_groups.member saw it). A poll still
# returns as soon as records come.
GROUP_POLL_S = 1.0


def version() -> str:
    import kafka
    return kafka.__version__


def _construct(cls, **kw):
    from kafka.errors import KafkaConfigurationError
    try:
        return cls(**kw)
    except (KafkaConfigurationError, AssertionError, TypeError, ValueError) as e:
        raise UsageError(f"{NAME} {cls.__name__}: {error_text(e)}") from None


def _is_retry(record) -> bool:
    return record.name == RETRY_LOGGER and "retrying" in str(record.msg)


def produce(args, settings: dict, em: Emitter, stop) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError
    ClientLog(em, _is_retry).attach("kafka")
    producer = _construct(KafkaProducer, bootstrap_servers=args.bootstrap.split(","),
                          **settings)
    em.start(NAME, version(), "producer", settings)
    stop.begin()
    sends = Sends(em)
    pacer = Pacer(args.rate, lambda n: value_of(args.name, n))
    try:
        while not stop.wait(pacer.delay_s()):
            value = pacer.next_value(sends)
            try:
                future = producer.send(args.topic, value=value, partition=args.partition)
            except Exception as e:     # refused before it reached a batch
                sends.failed(value, True, error_text(e))
                continue
            if future.is_done and future.failed():   # its metadata wait failed in send()
                sends.failed(value, True, error_text(future.exception))
                continue
            future.add_callback(lambda md, v=value: sends.ok(v, md.partition, md.offset))
            future.add_errback(lambda e, v=value: sends.failed(v, False, error_text(e)))
    finally:
        try:
            producer.flush(timeout=args.flush_timeout_s)
        except KafkaTimeoutError as e:
            em.client("log", f"flush({args.flush_timeout_s:g}): {error_text(e)}")
        sends.give_up("no delivery report by the end")
        bounded(lambda: producer.close(timeout=1), CLOSE_TIMEOUT_S, "producer.close", em)


def consume(args, settings: dict, em: Emitter, stop) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    ClientLog(em, lambda r: False).attach("kafka")
    group = Ownership(em) if args.group else None
    kw = {"bootstrap_servers": args.bootstrap.split(","), "group_id": args.group, **settings}

    def on_commit(offsets, result) -> None:
        mine = [(tp.partition, om.offset) for tp, om in offsets.items()
                if tp.topic == args.topic]
        group.commit(mine, error=error_text(result) if isinstance(result, Exception)
                     else None)

    if group is not None:
        kw["default_offset_commit_callback"] = on_commit
    consumer = _construct(KafkaConsumer, **kw)
    em.start(NAME, version(), "consumer", {"group_id": args.group, **settings}
             if args.group else settings)
    stop.begin()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            group.revoke([tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            meta = consumer.group_metadata()
            group.assign([tp.partition for tp in assigned], member=meta.member_id,
                         generation=meta.generation_id)

        def on_partitions_lost(self, lost):
            group.revoke([tp.partition for tp in lost], lost=True)

    try:
        if group is not None:
            consumer.subscribe([args.topic], listener=Listener())
        else:
            parts = [args.partition] if args.partition is not None else \
                sorted(_partitions(consumer, args.topic, stop))
            consumer.assign([TopicPartition(args.topic, p) for p in parts])
            consumer.seek_to_beginning()
        while not stop:
            invoked = time.monotonic_ns()
            try:
                polled = consumer.poll(timeout_ms=int(
                    (GROUP_POLL_S if group is not None else POLL_S) * 1000))
            except Exception as e:
                em.poll_failed(invoked, error_text(e))
                stop.wait(POLL_S)
                continue
            em.poll(invoked, [(m.partition, m.offset, m.value)
                              for batch in polled.values() for m in batch
                              if args.partition is None or m.partition == args.partition])
    finally:
        if group is not None:
            group.revoke_all()
        bounded(consumer.close, CLOSE_TIMEOUT_S, "consumer.close", em)


def _partitions(consumer, topic: str, stop) -> set[int]:
    """The topic's partitions (kafka-python's metadata may take a few tries)."""
    deadline = time.monotonic() + 30
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return parts
        if stop or time.monotonic() > deadline:
            raise RuntimeError(f"no metadata for topic {topic}")
        stop.wait(POLL_S)


def run(args, settings: dict, em: Emitter, stop) -> None:
    (produce if args.role == "producer" else consume)(args, settings, em, stop)
