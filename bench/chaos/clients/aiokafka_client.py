"""aiokafka as a chaos worker, on its own asyncio loop.

- Producer: ``await send(...)`` paced at ``--rate`` (it returns once the record is in a
  batch); the returned future's done-callback writes ``ok`` (partition, offset) or
  ``info``: aiokafka's errors do not say whether an earlier attempt of the batch may
  have landed. ``fail`` only when ``send()`` itself raised (no metadata, no room in the
  accumulator within request_timeout_ms: never in a batch). At the end
  ``flush()`` up to ``--flush-timeout-s``; what is left is ``info``. aiokafka has no
  delivery timeout (``--delivery-timeout-ms`` is refused).
- Retries: its sender's "Got error produce response" warnings (one per failed Produce
  request or retried batch; aiokafka exposes no counter) as ``client`` retry events
  with our cumulative count; ERROR lines as ``client`` log events.
- Consumer: standalone ``assign`` + ``seek_to_beginning`` (``group_id=None``); with
  ``--group``, ``subscribe`` with a ConsumerRebalanceListener (assigned/revoked;
  aiokafka 0.14 has no lost callback). The member id and generation are read from the
  consumer's coordinator (``_coordinator.member_id``/``generation``: aiokafka has no
  public accessor). Commits: aiokafka calls no commit callback, but its coordinator logs
  each partition's successful commit at DEBUG ("Committed offset %s for partition %s"):
  those become ``commit`` ok ops; "Auto offset commit failed" warnings client errors.
"""
from __future__ import annotations

import asyncio
import logging
import time

from bench.chaos.clients.common import POLL_S, ClientLog, Pacer, value_of
from bench.chaos.clients.events import Emitter, Ownership, Sends, error_text
from bench.chaos.clients.options import UsageError

NAME = "aiokafka"
CLOSE_TIMEOUT_S = 5.0
START_TIMEOUT_S = 30.0
SENDER_LOGGER = "aiokafka.producer.sender"
COORDINATOR_LOGGER = "aiokafka.consumer.group_coordinator"
COMMITTED_LINE = "Committed offset %s for partition %s"


def version() -> str:
    import aiokafka
    return aiokafka.__version__


def _construct(cls, **kw):
    try:
        return cls(**kw)
    except (AssertionError, TypeError, ValueError) as e:
        raise UsageError(f"{NAME} {cls.__name__}: {error_text(e)}") from None


def _is_retry(record) -> bool:
    return record.name == SENDER_LOGGER and str(record.msg).startswith(
        "Got error produce response")


async def _bounded(coro, timeout_s: float, what: str, em: Emitter) -> None:
    try:
        await asyncio.wait_for(coro, timeout_s)
    except asyncio.TimeoutError:
        em.client("log", f"{what} did not return in {timeout_s:g} s")
    except Exception as e:
        em.client("error", f"{what}: {error_text(e)}")


async def produce(args, settings: dict, em: Emitter, stop) -> None:
    from aiokafka import AIOKafkaProducer
    ClientLog(em, _is_retry).attach("aiokafka")
    producer = _construct(AIOKafkaProducer, bootstrap_servers=args.bootstrap, **settings)
    await asyncio.wait_for(producer.start(), START_TIMEOUT_S)
    em.start(NAME, version(), "producer", settings)
    stop.begin()
    sends = Sends(em)
    pacer = Pacer(args.rate, lambda n: value_of(args.name, n))

    def done(value: bytes, future) -> None:
        if future.cancelled():
            sends.failed(value, False, "cancelled")
        elif future.exception() is not None:
            sends.failed(value, False, error_text(future.exception()))
        else:
            md = future.result()
            sends.ok(value, md.partition, md.offset)

    try:
        while True:
            delay = pacer.delay_s()
            if delay > 0:
                await asyncio.sleep(min(delay, POLL_S))
            if stop:
                break
            if delay > 0:
                continue
            value = pacer.next_value(sends)
            try:
                future = await producer.send(args.topic, value, partition=args.partition)
            except Exception as e:     # never reached a batch
                sends.failed(value, True, error_text(e))
                continue
            future.add_done_callback(lambda f, v=value: done(v, f))
    finally:
        await _bounded(producer.flush(), args.flush_timeout_s, "flush", em)
        sends.give_up("no delivery report by the end")
        await _bounded(producer.stop(), CLOSE_TIMEOUT_S, "producer.stop", em)


async def consume(args, settings: dict, em: Emitter, stop) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    group = Ownership(em) if args.group else None

    def committed(record) -> bool:
        if group is None or record.name != COORDINATOR_LOGGER:
            return False
        if record.msg == COMMITTED_LINE and len(record.args) == 2:
            offset, tp = record.args
            if tp.topic == args.topic:
                group.commit([(tp.partition, getattr(offset, "offset", offset))])
            return True
        if str(record.msg).startswith("Auto offset commit failed"):
            em.client("error", record.getMessage())
            return True
        return False

    ClientLog(em, lambda r: False, committed).attach("aiokafka")
    if group is not None:
        logging.getLogger(COORDINATOR_LOGGER).setLevel(logging.DEBUG)
    consumer = _construct(AIOKafkaConsumer, bootstrap_servers=args.bootstrap,
                          group_id=args.group, **settings)
    await asyncio.wait_for(consumer.start(), START_TIMEOUT_S)
    em.start(NAME, version(), "consumer", {"group_id": args.group, **settings}
             if args.group else settings)
    stop.begin()

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            group.revoke([tp.partition for tp in revoked])

        async def on_partitions_assigned(self, assigned):
            coordinator = getattr(consumer, "_coordinator", None)
            group.assign([tp.partition for tp in assigned],
                         member=getattr(coordinator, "member_id", None),
                         generation=int(getattr(coordinator, "generation", -1)))

    try:
        if group is not None:
            consumer.subscribe([args.topic], listener=Listener())
        else:
            parts = [args.partition] if args.partition is not None else \
                sorted(await _partitions(consumer, args.topic, stop))
            consumer.assign([TopicPartition(args.topic, p) for p in parts])
            await consumer.seek_to_beginning()
        while not stop:
            invoked = time.monotonic_ns()
            try:
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            except Exception as e:
                em.poll_failed(invoked, error_text(e))
                await asyncio.sleep(POLL_S)
                continue
            em.poll(invoked, [(m.partition, m.offset, m.value)
                              for batch in batches.values() for m in batch
                              if args.partition is None or m.partition == args.partition])
    finally:
        if group is not None:
            group.revoke_all()
        await _bounded(consumer.stop(), CLOSE_TIMEOUT_S, "consumer.stop", em)


async def _partitions(consumer, topic: str, stop) -> set[int]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        # What consumer.topics() fetches, kept (aiokafka's consumer has no public
        # partition lookup for a topic it has not subscribed to).
        cluster = await consumer._client.fetch_all_metadata()
        parts = cluster.partitions_for_topic(topic)
        if parts:
            return parts
        if stop or time.monotonic() > deadline:
            raise RuntimeError(f"no metadata for topic {topic}")
        await asyncio.sleep(POLL_S)


def run(args, settings: dict, em: Emitter, stop) -> None:
    main = produce if args.role == "producer" else consume
    asyncio.run(main(args, settings, em, stop))
