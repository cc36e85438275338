"""Teaching scenarios of transactions (issue 28), each on real processes, in the
catalog's form (``bench.teach.catalog``: a generator over a ``Play`` that yields a
``Step`` before doing it and records its predictions with ``play.expect``).

- ``txn-zombie``: two instances of one ``transactional.id``. The new instance's
  ``init_transactions`` bumps the epoch: the old instance is fenced, its open
  transaction aborted, its commit refused with ProducerFencedError; a read_committed
  consumer reads the new instance's committed records and the old one's committed ones,
  never the fenced transaction's.
- ``txn-late-write``: Kafka's transaction ordering gap (KIP-890's motivation; Jepsen's
  Bufstream 0.1.0 report, "Kafka transactions"), side by side on two clusters: one
  without KIP-890 (the chaos profile ``kafka-txn``'s broker settings), one with it (the
  defaults). A write of an aborted transaction, delayed in the network, arrives after
  the abort (``bench.chaos.late_write`` sends it by hand with the producer's id, epoch
  and next sequence). Without KIP-890 it hangs the partition's last stable offset, and
  the producer's next transaction commits it: an aborted read, and a lost write.
"""
from __future__ import annotations

from typing import Iterator

from bench.chaos import late_write as lw
from bench.chaos.options import PROFILES, TXN_DEFENCES
from bench.teach.steps import Step

WAIT_S = 60.0
KAFKA_TXN = {k: PROFILES["kafka-txn"]["broker"][k] for k in TXN_DEFENCES}
STALL_S = 2.0        # how long the hanging transaction is watched (before --speed)


def _s(*parts: str) -> str:
    return " ".join(parts)


def _consume(stage, topic: str, level: str, end: int) -> tuple[list[bytes], int]:
    """(values, position) of a native consumer at ``level`` polled until its position
    reaches ``end`` or 3 s pass (a consumer stalled below ``end`` is the story)."""
    import time

    from node.client import Consumer, TopicPartition
    tp = TopicPartition(topic, 0)
    consumer = Consumer(stage.cluster.bootstrap_servers, isolation_level=level,
                        auto_offset_reset="earliest")
    values: list[bytes] = []
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + 3.0
        while True:
            values += [r.value for r in consumer.poll(200)]
            if consumer.position(tp) >= end or time.monotonic() > deadline:
                return values, consumer.position(tp)
    finally:
        consumer.close()


def _read(stage, channel, topic: str, condition, what: str) -> lw.Read:
    """The first read_committed read of ``topic``-0 that meets ``condition``."""
    def attempt():
        r = lw.read_batches(channel, topic, 0, lw.READ_COMMITTED)
        return r if condition(r) else None
    return stage.wait(attempt, what)


def _board_shows_lso(stage, topic: str, offset: int, hw: int) -> None:
    """Wait until the replica-state board (what the step's picture draws) shows the
    leader's last stable offset at ``offset`` and its HW at ``hw`` (the leader publishes
    them on a later turn of its loop than the append), so the picture after the step
    shows the open transaction."""
    from node.cluster.view import snapshot
    from node.waiting import poll_until

    def shown() -> bool:
        parts = snapshot(stage.cluster, [topic]).partitions
        return any(p.lso == offset and p.hw == hw for p in parts)
    poll_until(shown, WAIT_S, f"the board showing {topic}'s last stable offset at {offset}")


def _names(values: list[bytes]) -> str:
    return ", ".join(v.decode() for v in values) or "nothing"


# ====================================================================== txn-zombie

def txn_zombie(play) -> Iterator:
    from node.client import Producer, ProducerFencedError
    tid, topic = "payments-app", "payments"
    yield Step("A transactional producer", _s(
        f"Instance A of an application starts with transactional.id={tid!r}.",
        "init_transactions asks the transaction coordinator (the leader of the",
        "__transaction_state partition the id hashes to) for a producer id and epoch.",
        "A writes two records to 'payments' in one transaction and commits: the",
        "coordinator writes a COMMIT marker after them on the partition."))
    s = play.stage()
    play.topics = [topic]
    s.topic(topic, config={"min.insync.replicas": "2"})
    a = Producer(s.cluster.bootstrap_servers, transactional_id=tid)
    a.init_transactions(timeout_s=WAIT_S)
    a_id = (a._txn.producer_id, a._txn.producer_epoch)
    a.begin_transaction()
    for v in (b"a-1", b"a-2"):
        a.send(topic, v, partition=0)
    a.commit_transaction(timeout_s=WAIT_S)
    _board_shows_lso(s, topic, 3, 3)      # a-1, a-2 and the COMMIT marker: all stable
    play.note(f"instance A: producer id {a_id[0]}, epoch {a_id[1]}")
    yield Step("A opens a second transaction and stalls", _s(
        "A begins a transaction, writes a-3 and a-4 (acknowledged: they are in the log)",
        "and then stalls before committing, say in a long GC pause or behind a network",
        "fault. The transaction is open: the partition's last stable offset (LSO) stays",
        "at a-3, so read_committed consumers stop before it, while read_uncommitted ones",
        "read on."))
    a.begin_transaction()
    for v in (b"a-3", b"a-4"):
        a.send(topic, v, partition=0).get(timeout=WAIT_S)
    channel = lw.open_channel(s.admin, topic, 0)
    try:
        r = lw.read_batches(channel, topic, 0, lw.READ_COMMITTED)
        _board_shows_lso(s, topic, r.last_stable_offset, r.high_watermark)
        play.expect(r.last_stable_offset < r.high_watermark and r.committed() ==
                    [b"a-1", b"a-2"], f"the open transaction holds the LSO at "
                    f"{r.last_stable_offset} below the HW {r.high_watermark}: "
                    f"read_committed reads {_names(r.committed())}")
        yield Step("Instance B starts with the same transactional.id", _s(
            "An orchestrator thinks A died and starts B with the same id. B's",
            "init_transactions makes the coordinator bump the epoch of the id's producer:",
            "from now on every request of A (the old epoch) is refused. The coordinator",
            "aborts A's open transaction: ABORT markers go to the partitions it wrote,",
            "and a-3, a-4 become aborted records."))
        b = Producer(s.cluster.bootstrap_servers, transactional_id=tid)
        b.init_transactions(timeout_s=WAIT_S)
        b_id = (b._txn.producer_id, b._txn.producer_epoch)
        play.note(f"instance B: producer id {b_id[0]}, epoch {b_id[1]}")
        play.expect(b_id[0] == a_id[0] and b_id[1] > a._txn.producer_epoch,
                    f"B has A's producer id with a higher epoch ({a._txn.producer_epoch} "
                    f"-> {b_id[1]})")
        r = _read(s, channel, topic, lambda r: r.last_stable_offset == r.high_watermark,
                  "A's transaction aborted (the LSO back at the HW)")
        play.expect(r.committed() == [b"a-1", b"a-2"] and (a_id[0], 3) in r.aborted,
                    f"A's open transaction was aborted: read_committed reads "
                    f"{_names(r.committed())}")
        yield Step("The zombie wakes up and commits", _s(
            "A resumes, unaware, and calls commit_transaction. Its EndTxn carries the old",
            "epoch: the coordinator answers PRODUCER_FENCED, and the client raises",
            "ProducerFencedError, a fatal error: A can only close."))
        try:
            a.commit_transaction(timeout_s=WAIT_S)
            fenced = "committed!"
        except ProducerFencedError as e:
            fenced = f"ProducerFencedError: {e}"[:120]
        except Exception as e:  # any other outcome is a wrong prediction, shown
            fenced = f"{type(e).__name__}: {e}"[:120]
        play.expect(fenced.startswith("ProducerFencedError"), f"A's commit: {fenced}")
        a.close(timeout=5)
        yield Step("B does the work", _s(
            "B writes b-1 and b-2 in a transaction and commits. A read_committed consumer",
            "reads A's first transaction and B's, never the zombie's records; a",
            "read_uncommitted consumer reads those too."))
        b.begin_transaction()
        for v in (b"b-1", b"b-2"):
            b.send(topic, v, partition=0)
        b.commit_transaction(timeout_s=WAIT_S)
        b.close(timeout=5)
        r = _read(s, channel, topic, lambda r: r.last_stable_offset == r.high_watermark and
                  len(r.values()) == 6, "B's commit marker")
    finally:
        channel.close()
    committed, _ = _consume(s, topic, "read_committed", r.last_stable_offset)
    uncommitted, _ = _consume(s, topic, "read_uncommitted", r.high_watermark)
    play.expect(committed == [b"a-1", b"a-2", b"b-1", b"b-2"],
                f"read_committed reads {_names(committed)}")
    play.expect(uncommitted == [b"a-1", b"a-2", b"a-3", b"a-4", b"b-1", b"b-2"],
                f"read_uncommitted reads {_names(uncommitted)}")


# ====================================================================== txn-late-write

def txn_late_write(play) -> Iterator:
    from node.client import Producer
    from node.wire.errors import ErrorCode
    topic, tid = "orders", "orders-app"
    modes = {"kafka (KIP-890 off)": KAFKA_TXN, "minikafka (KIP-890 on)": {}}
    yield Step("Two clusters: without and with KIP-890", _s(
        "The same story on two clusters. The first runs Kafka's transaction protocol",
        "without KIP-890 (transaction.partition.verification.enable=false,",
        "transaction.version=0), as Kafka before 3.6/4.0 and Jepsen's Bufstream report",
        "have it: a partition leader takes any transactional write whose producer id,",
        "epoch and sequence are valid. The second has both parts of KIP-890 (the",
        "default): the leader asks the coordinator whether the partition is in the",
        "producer's ongoing transaction, and every transaction ends with a new epoch."))
    stages = {m: play.stage(m, settings=cfg) for m, cfg in modes.items()}
    play.topics = [topic]
    cast: dict = {}
    for m, s in stages.items():
        s.topic(topic, config={"min.insync.replicas": "2"})
        p = Producer(s.cluster.bootstrap_servers, transactional_id=tid)
        plain = Producer(s.cluster.bootstrap_servers, acks="all")
        p.init_transactions(timeout_s=WAIT_S)
        cast[m] = {"p": p, "plain": plain, "channel": lw.open_channel(s.admin, topic, 0)}
    try:
        yield from _late_write_story(play, stages, cast, topic, tid, ErrorCode)
    finally:
        for c in cast.values():
            c["channel"].close()
            for k in ("p", "plain"):
                c[k].close(timeout=5)


def _late_write_story(play, stages: dict, cast: dict, topic: str, tid: str, ErrorCode):
    kafka, safe = list(stages)
    yield Step("Transaction 1 writes t1-a and aborts", _s(
        "The producer begins a transaction and writes t1-a. It also sent a second write",
        "of the transaction, t1-late, but that request is stuck in the network (the",
        "client gave up on it, or retried it and the first copy is still on its way).",
        "The application aborts: the coordinator writes ABORT markers. On the kafka",
        "cluster the producer keeps its epoch; on minikafka the abort gives it a new one."))
    for m, s in stages.items():
        c = cast[m]
        c["p"].begin_transaction()
        c["p"].send(topic, b"t1-a", partition=0).get(timeout=WAIT_S)
        c["p"].abort_transaction(timeout_s=WAIT_S)
        c["producer"] = lw.last_transactional_batch(c["channel"], topic, 0)
        s.wait(lambda c=c: lw.transaction_ended(c["channel"], topic, 0,
                                                 c["producer"].producer_id),
               "the ABORT marker on the partition")
        play.note(f"{m}: transaction 1 by producer id {c['producer'].producer_id}, epoch "
                  f"{c['producer'].epoch}; the epoch after the abort: "
                  f"{c['p']._txn.producer_epoch}")
    yield Step("The late write arrives", _s(
        "t1-late reaches the partition leader now, after the abort marker: one",
        "transactional batch with the producer's id, the epoch of transaction 1 and",
        "the partition's next sequence number for it."))
    for m, s in stages.items():
        c = cast[m]
        c["late"] = lw.send_late_write(c["channel"], topic, 0, c["producer"], [b"t1-late"],
                                       transactional_id=tid)
    late_k, late_s = cast[kafka]["late"], cast[safe]["late"]
    play.expect(late_k.accepted, f"{kafka}: the leader appended t1-late at offset "
                                 f"{late_k.offset}: it opened a new transaction there")
    play.expect(late_s.error in (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH,
                                 ErrorCode.TRANSACTION_ABORTABLE),
                f"{safe}: refused with "
                f"{ErrorCode(late_s.error).name if late_s.error else 'nothing (accepted!)'}")
    yield Step("Another application writes; read_committed consumers stall", _s(
        "A plain producer writes 'after' to the same partition. On the kafka cluster",
        "t1-late's transaction is open and nobody will end it: the coordinator has no",
        "record of it, so no timeout aborts it. The last stable offset hangs at t1-late",
        "(a hanging transaction): read_committed consumers read nothing past it, not",
        "even 'after'. On minikafka nothing hangs."))
    for m, s in stages.items():
        c = cast[m]
        c["after"] = c["plain"].send(topic, b"after", partition=0).get(timeout=WAIT_S).offset
        c["between"] = _read(s, c["channel"], topic,
                             lambda r, c=c: r.high_watermark > c["after"], "'after' committed")
    play.hold(STALL_S)
    for m, s in stages.items():
        c = cast[m]
        r = lw.read_batches(c["channel"], topic, 0, lw.READ_COMMITTED)
        values, position = _consume(s, topic, "read_committed", r.high_watermark)
        c["stalled"] = (r, values, position)
    r, values, position = cast[kafka]["stalled"]
    _board_shows_lso(stages[kafka], topic, r.last_stable_offset, r.high_watermark)
    play.expect(r.last_stable_offset == late_k.offset < r.high_watermark and
                position == late_k.offset and b"after" not in values,
                f"{kafka}: the LSO hangs at {r.last_stable_offset} (HW {r.high_watermark}); "
                f"a read_committed consumer stops at offset {position} and reads "
                f"{_names(values)}")
    r, values, position = cast[safe]["stalled"]
    play.expect(r.last_stable_offset == r.high_watermark and values == [b"after"],
                f"{safe}: the LSO is the HW ({r.high_watermark}); read_committed reads "
                f"{_names(values)}")
    yield Step("The producer's next transaction writes the partition and commits", _s(
        "Transaction 2 writes t2-b to the partition and commits. On the kafka cluster",
        "t2-b has the same epoch and sequence as t1-late: the leader takes it for a",
        "retry of t1-late and answers with t1-late's offset without appending it. The",
        "COMMIT marker then ends the hanging transaction: t1-late, a write of the",
        "ABORTED transaction 1, becomes committed (an aborted read), and the",
        "acknowledged t2-b is nowhere (a lost write). On minikafka t2-b has the new",
        "epoch and is appended."))
    for m, s in stages.items():
        c = cast[m]
        c["p"].begin_transaction()
        c["t2-b"] = c["p"].send(topic, b"t2-b", partition=0).get(timeout=WAIT_S).offset
        c["p"].commit_transaction(timeout_s=WAIT_S)
        r = _read(s, c["channel"], topic, lambda r, c=c: r.last_stable_offset ==
                  r.high_watermark > c["after"] + 1, "transaction 2's COMMIT marker")
        c["end"] = _consume(s, topic, "read_committed", r.high_watermark)[0]
        c["log"] = lw.read_batches(c["channel"], topic, 0).values()
    k = cast[kafka]
    play.expect(k["t2-b"] == late_k.offset and b"t2-b" not in k["log"],
                f"{kafka}: t2-b acknowledged at offset {k['t2-b']}, t1-late's; the log "
                f"holds {_names(k['log'])}")
    play.expect(b"t1-late" in k["end"] and b"t2-b" not in k["end"],
                f"{kafka}: read_committed reads {_names(k['end'])}: t1-late of the aborted "
                f"transaction (aborted read), not t2-b (lost)")
    sf = cast[safe]
    play.expect(sf["end"] == [b"after", b"t2-b"],
                f"{safe}: read_committed reads {_names(sf['end'])}")
