"""One member of a consumer group, as its own process, through a real Kafka client.

    python -m bench.perf.kafka_groups.member --client confluent-kafka --protocol consumer \
        --bootstrap H:P --group G --topic T [--session-ms 6000] [--heartbeat-ms 300]
        [--instance-id ID] [--commit none|sync|auto] [--report records|counts]
        [--commit-storm N]

Clients: ``confluent-kafka`` (librdkafka; ``--protocol classic`` or ``consumer``, KIP-848),
``kafka-python`` and ``aiokafka`` (classic only), ``minikafka`` (node.client's Consumer
over the native wire, KIP-848 only; ``--bootstrap`` the native listeners). It subscribes
to one topic from the beginning (auto.offset.reset=earliest) and reads until SIGTERM,
then closes the consumer (the client's clean leave) and exits 0. SIGKILL it to see a
member die.

It tells what happens as JSON lines on stdout, each with ``t`` (time.time(), the moment
it happened) and ``ev``:

- ``{"ev": "ready"}`` once subscribed;
- ``{"ev": "assign", "parts": [...]}``: its whole assignment (partition numbers) after
  every change (eager revoke-all, incremental add or remove, lost);
- ``{"ev": "rec", "p": P, "o": O, "v": "value"}`` per record (``--report records``), or
  ``{"ev": "count", "n": N, "first": T, "last": T}`` every ``COUNT_EVERY_S``
  (``--report counts``, for throughput). SIGUSR1 makes it seek every partition it
  owns to the start and count afresh: ``{"ev": "again", "gen": G}``, then counts with
  ``gen`` G (a group read timed once its rebalances are over);
- ``{"ev": "commit", "p": P, "o": NEXT}``: a synchronous commit the coordinator
  acknowledged (``--commit sync``: after each poll's records, the next offset of each
  partition read; a failed commit is retried while the partition is still owned);
- ``{"ev": "storm", "p": P, "ms": [...]}``: with ``--commit-storm N``, once it owns a
  partition: N synchronous commits of partition P (offsets 1..N, one at a time), each
  one's time from call to return in ms; then it reads on as usual;
- ``{"ev": "error", "msg": "..."}``: an error the client reported (it goes on);
- ``{"ev": "closed"}`` after the clean close.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "minikafka")
PROTOCOLS = ("classic", "consumer")
POLL_S = 0.05
# kafka-python 3.0 drops a JoinGroup+SyncGroup that ends between two polls (its next poll
# finds the join task done and sends a new JoinGroup instead of taking its result). The
# extra JoinGroup is harmless from a follower, but from the group's leader (e.g. a
# restarted static member, which takes over its old id's leadership, as Kafka's
# replaceStaticMember) it rebalances the group. Polls that wait longer leave the join
# task awaited nearly all the time; a poll still returns as soon as records come.
KAFKA_PYTHON_POLL_S = 1.0
# The Python clients log nothing by default (kafka-python adds a NullHandler): their
# warnings, and kafka-python's group coordinator steps (each JoinGroup/SyncGroup and how
# it ended), go to stderr, so a member that hangs shows them in Member.describe().
CLIENT_LOG_LEVEL = logging.WARNING
CLIENT_LOG_LEVELS = {"kafka.coordinator": logging.INFO}
MAX_RECORDS_PER_POLL = 500
COUNT_EVERY_S = 0.1
COMMIT_RETRY_S = 0.1
COMMIT_GIVE_UP_S = 60.0
# A commit failing with one of these is tried again (the coordinator is moving or
# loading); any other error (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS:
# the member must rejoin, which happens in poll) leaves the offsets uncommitted.
RETRY_CODES = frozenset((7, 14, 15, 16))   # REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS,
                                           # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


class Events:
    """The JSON lines on stdout (one writer lock: the clients call back from threads)."""

    def __init__(self, report: str) -> None:
        self.report = report
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.told = 0.0
        self.gen = 0                  # read-again requests served (SIGUSR1)
        self.again = False            # one is pending
        signal.signal(signal.SIGUSR1, self._read_again)

    def _read_again(self, *_) -> None:
        self.again = True

    def take_read_again(self) -> bool:
        """A read-again request is due: the caller seeks its partitions to the start;
        the counts restart (their ``gen`` says which request they follow)."""
        if not self.again:
            return False
        self.again = False
        self.gen += 1
        self.count, self.first, self.last = 0, None, None
        self.emit("again", gen=self.gen)
        return True

    def emit(self, ev: str, **fields) -> None:
        line = json.dumps({"t": time.time(), "ev": ev, **fields})
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def assigned(self, partitions) -> None:
        self.owned |= set(partitions)
        self.emit("assign", parts=sorted(self.owned))

    def revoked(self, partitions) -> None:
        self.owned -= set(partitions)
        self.emit("assign", parts=sorted(self.owned))

    def records(self, records: list[tuple[int, int, bytes | None]]) -> None:
        """(partition, offset, value) read by one poll."""
        if not records:
            self.counts(False)
            return
        now = time.time()
        self.first = self.first or now
        self.last = now
        self.count += len(records)
        if self.report == "records":
            for p, o, v in records:
                self.emit("rec", p=p, o=o, v=None if v is None else v.decode("utf-8", "replace"))
        else:
            self.counts(False)

    def counts(self, force: bool) -> None:
        if self.report == "counts" and (force or time.monotonic() - self.told >= COUNT_EVERY_S):
            self.told = time.monotonic()
            self.emit("count", n=self.count, first=self.first, last=self.last, gen=self.gen)


def _stop_flag() -> list:
    stop: list = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    return stop


def _highest(records) -> dict[int, int]:
    """partition -> the next offset to commit, of one poll's records."""
    top: dict[int, int] = {}
    for p, o, _ in records:
        top[p] = max(top.get(p, -1), o + 1)
    return top


def _commit_each(events: Events, offsets: dict[int, int], commit, retriable) -> None:
    """Commit ``offsets`` synchronously; retry retriable failures while the partition is
    still owned; others are reported and leave the offsets uncommitted."""
    pending = dict(offsets)
    deadline = time.monotonic() + COMMIT_GIVE_UP_S
    while pending:
        pending = {p: o for p, o in pending.items() if p in events.owned}
        if not pending:
            return
        try:
            commit(pending)
        except Exception as e:   # the client's commit failure, whatever its class
            if not retriable(e) or time.monotonic() > deadline:
                events.emit("error", msg=f"commit {pending} failed: {e}")
                return
            events.emit("error", msg=f"commit retried: {e}")
            time.sleep(COMMIT_RETRY_S)
            continue
        for p, o in pending.items():
            events.emit("commit", p=p, o=o)
        return


def _after_poll(events: Events, args, got: list, commit, retriable, storm: list) -> None:
    """What every synchronous client does with one poll's records: report them, commit
    each (``--commit sync``), and run the commit storm once it owns a partition."""
    events.records(got)
    if got and args.commit == "sync":
        _commit_each(events, _highest(got), commit, retriable)
    if storm and events.owned:
        _storm(events, storm.pop(), commit)


def _storm(events: Events, n: int, commit) -> None:
    """``n`` synchronous commits of the lowest partition owned (offsets 1..n), each timed,
    without polling in between (the client must keep its membership meanwhile)."""
    p = min(events.owned)
    took = []
    for i in range(1, n + 1):
        started = time.perf_counter()
        commit({p: i})
        took.append((time.perf_counter() - started) * 1000)
    events.emit("storm", p=p, ms=took)


# ------------------------------------------------------------------ confluent-kafka
def run_confluent(args, events: Events) -> None:
    from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,
                                 TopicPartition)
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": args.commit == "auto",
            "auto.commit.interval.ms": 100, "enable.auto.offset.store": True,
            "group.protocol": args.protocol, "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 2000}
    if args.protocol == "classic":
        # KIP-848 takes these from the broker (librdkafka refuses them there).
        conf["session.timeout.ms"] = args.session_ms
        conf["heartbeat.interval.ms"] = args.heartbeat_ms
        if args.assignor:
            conf["partition.assignment.strategy"] = args.assignor
    elif args.assignor:
        conf["group.remote.assignor"] = args.assignor
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    fatal: list = []

    def on_error(e) -> None:
        events.emit("error", msg=str(e))
        if e.fatal():
            fatal.append(e)

    consumer = Consumer(conf, error_cb=on_error)
    stop = _stop_flag()
    storm = [args.commit_storm] if args.commit_storm else []

    def on_assign(_, partitions):
        events.assigned(tp.partition for tp in partitions)

    def on_revoke(_, partitions):
        events.revoked(tp.partition for tp in partitions)

    def commit(offsets):
        consumer.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)

    local = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._WAIT_COORD,
             KafkaError._ALL_BROKERS_DOWN}   # librdkafka's own: the coordinator is away

    def retriable(e) -> bool:
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        return err is not None and not err.fatal() and (
            err.retriable() or err.code() in RETRY_CODES or err.code() in local)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_revoke)
    events.emit("ready")
    try:
        while not stop:
            if fatal:   # librdkafka is unusable after a fatal error (close may hang)
                os._exit(2)
            if events.take_read_again():
                for p in sorted(events.owned):
                    consumer.seek(TopicPartition(args.topic, p, OFFSET_BEGINNING))
            got = []
            for msg in consumer.consume(MAX_RECORDS_PER_POLL, POLL_S):
                if msg.error():
                    events.emit("error", msg=str(msg.error()))
                    if msg.error().fatal():
                        os._exit(2)
                    continue
                got.append((msg.partition(), msg.offset(), msg.value()))
            _after_poll(events, args, got, commit, retriable, storm)
    finally:
        events.counts(True)
        consumer.close()
        events.emit("closed")


# ------------------------------------------------------------------ kafka-python
def run_kafka_python(args, events: Events) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            events.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned):
            events.assigned(tp.partition for tp in assigned)

    config = dict(bootstrap_servers=args.bootstrap.split(","), group_id=args.group,
                  auto_offset_reset="earliest", enable_auto_commit=args.commit == "auto",
                  auto_commit_interval_ms=100, session_timeout_ms=args.session_ms,
                  heartbeat_interval_ms=args.heartbeat_ms, metadata_max_age_ms=2000,
                  max_poll_records=MAX_RECORDS_PER_POLL)
    if args.instance_id:
        config["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(**config)
    stop = _stop_flag()
    storm = [args.commit_storm] if args.commit_storm else []

    def commit(offsets):
        consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1)
                         for p, o in offsets.items()})

    def retriable(e) -> bool:
        return isinstance(e, KafkaError) and (e.retriable or e.errno in RETRY_CODES)

    consumer.subscribe([args.topic], listener=Listener())
    events.emit("ready")
    try:
        while not stop:
            if events.take_read_again():
                consumer.seek_to_beginning(*[TopicPartition(args.topic, p)
                                             for p in sorted(events.owned)])
            polled = consumer.poll(timeout_ms=int(KAFKA_PYTHON_POLL_S * 1000))
            got = [(m.partition, m.offset, m.value)
                   for batch in polled.values()
                   for m in batch]
            _after_poll(events, args, got, commit, retriable, storm)
    finally:
        events.counts(True)
        consumer.close()
        events.emit("closed")


# ------------------------------------------------------------------ aiokafka
def run_aiokafka(args, events: Events) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            events.revoked(tp.partition for tp in revoked)

        async def on_partitions_assigned(self, assigned):
            events.assigned(tp.partition for tp in assigned)

    async def run():
        stop = asyncio.Event()
        storm = [args.commit_storm] if args.commit_storm else []
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        config = dict(bootstrap_servers=args.bootstrap, group_id=args.group,
                      auto_offset_reset="earliest", enable_auto_commit=args.commit == "auto",
                      auto_commit_interval_ms=100, session_timeout_ms=args.session_ms,
                      heartbeat_interval_ms=args.heartbeat_ms, metadata_max_age_ms=2000,
                      max_poll_records=MAX_RECORDS_PER_POLL)
        if args.instance_id:
            config["group_instance_id"] = args.instance_id
        consumer = AIOKafkaConsumer(**config)
        await consumer.start()
        try:
            consumer.subscribe([args.topic], listener=Listener())
            events.emit("ready")
            while not stop.is_set():
                if events.take_read_again():
                    await consumer.seek_to_beginning(*[TopicPartition(args.topic, p)
                                                       for p in sorted(events.owned)])
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                got = [(m.partition, m.offset, m.value)
                       for batch in batches.values() for m in batch]
                events.records(got)
                if got and args.commit == "sync":
                    await _commit_async(consumer, events, _highest(got), TopicPartition,
                                        args.topic, KafkaError)
                if storm and events.owned:
                    p, took = min(events.owned), []
                    for i in range(1, storm.pop() + 1):
                        started = time.perf_counter()
                        await consumer.commit({TopicPartition(args.topic, p): i})
                        took.append((time.perf_counter() - started) * 1000)
                    events.emit("storm", p=p, ms=took)
        finally:
            events.counts(True)
            await consumer.stop()
            events.emit("closed")

    asyncio.run(run())


async def _commit_async(consumer, events: Events, offsets: dict[int, int], tp_class,
                        topic: str, error_class) -> None:
    """``_commit_each`` for aiokafka's coroutine commit."""
    pending = dict(offsets)
    deadline = time.monotonic() + COMMIT_GIVE_UP_S
    while True:
        pending = {p: o for p, o in pending.items() if p in events.owned}
        if not pending:
            return
        try:
            await consumer.commit({tp_class(topic, p): o for p, o in pending.items()})
        except error_class as e:
            if not (e.retriable or getattr(e, "errno", None) in RETRY_CODES) or \
                    time.monotonic() > deadline:
                events.emit("error", msg=f"commit {pending} failed: {e}")
                return
            events.emit("error", msg=f"commit retried: {e!r}")
            await asyncio.sleep(COMMIT_RETRY_S)
            continue
        for p, o in pending.items():
            events.emit("commit", p=p, o=o)
        return


# ------------------------------------------------------------------ node.client
def native_group_support() -> str | None:
    """Why node.client cannot be a member through the brokers' coordinator, or None."""
    import inspect

    from node.client import Consumer
    if "group_protocol" not in inspect.signature(Consumer).parameters:
        return "node.client's Consumer has no broker-coordinated groups (group_protocol)"
    return None


def run_native(args, events: Events) -> None:
    """node.client's Consumer, KIP-848 through the brokers (``--bootstrap``: the native
    listeners)."""
    from node.client import Consumer, TopicPartition

    class Listener:
        def on_partitions_revoked(self, tps):
            events.revoked(tp.partition for tp in tps)

        def on_partitions_assigned(self, tps):
            events.assigned(tp.partition for tp in tps)

        def on_partitions_lost(self, tps):
            events.revoked(tp.partition for tp in tps)

    consumer = Consumer(args.bootstrap, group_id=args.group, auto_offset_reset="earliest",
                        enable_auto_commit=args.commit == "auto", auto_commit_interval_ms=100,
                        group_protocol="consumer", group_remote_assignor=args.assignor,
                        max_poll_records=MAX_RECORDS_PER_POLL)
    stop = _stop_flag()
    storm = [args.commit_storm] if args.commit_storm else []

    def commit(offsets):
        consumer.commit({TopicPartition(args.topic, p): o for p, o in offsets.items()})

    consumer.subscribe([args.topic], listener=Listener())
    events.emit("ready")
    try:
        while not stop:
            if events.take_read_again():
                consumer.seek_to_beginning(*[TopicPartition(args.topic, p)
                                             for p in sorted(events.owned)])
            got = [(r.partition, r.offset, r.value)
                   for r in consumer.poll(timeout_ms=int(POLL_S * 1000))]
            _after_poll(events, args, got, commit, lambda e: getattr(e, "retriable", False),
                        storm)
    finally:
        events.counts(True)
        consumer.close()
        events.emit("closed")


RUN = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python,
       "aiokafka": run_aiokafka, "minikafka": run_native}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.kafka_groups.member",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--protocol", choices=PROTOCOLS, default="classic")
    parser.add_argument("--bootstrap", required=True,
                        help="the Kafka listeners, H:P,H:P (minikafka: the native ones)")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--session-ms", type=int, default=6000,
                        help="session.timeout.ms (classic; KIP-848's is the broker's)")
    parser.add_argument("--heartbeat-ms", type=int, default=300,
                        help="heartbeat.interval.ms (classic; KIP-848's is the broker's)")
    parser.add_argument("--instance-id", default=None, help="group.instance.id (static)")
    parser.add_argument("--assignor", default=None,
                        help="partition.assignment.strategy (classic) or "
                             "group.remote.assignor (consumer)")
    parser.add_argument("--commit", choices=("none", "sync", "auto"), default="none")
    parser.add_argument("--report", choices=("records", "counts"), default="records")
    parser.add_argument("--commit-storm", type=int, default=0, metavar="N",
                        help="N synchronous commits once it owns a partition")
    args = parser.parse_args(argv)
    if args.protocol == "consumer" and args.client in ("kafka-python", "aiokafka"):
        parser.error(f"{args.client} speaks the classic protocol only")
    if args.client == "minikafka" and args.protocol != "consumer":
        parser.error("node.client's groups through the brokers are KIP-848's (--protocol "
                     "consumer)")
    _client_logs()
    RUN[args.client](args, Events(args.report))
    return 0


def _client_logs() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(CLIENT_LOG_LEVEL)
    for name, level in CLIENT_LOG_LEVELS.items():
        logging.getLogger(name).setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
