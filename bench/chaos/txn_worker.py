"""One transactional chaos workload process (clients: ``bench.chaos.txn_clients``, native
or confluent-kafka): JSON-line events on stdout, as ``bench.chaos.clients`` workers
print (start, client, end), plus one ``txn`` event per transaction
(``bench.chaos.txn_history``).

    python -m bench.chaos.txn_worker --role txn|reader [--client native|confluent-kafka] \\
        --name p0 --bootstrap B --topic chaos --duration S [--rate 20] [--writes 3] \\
        [--abort 0.2] [--group chaos-txn] [--seed 0]

- ``txn``: read-process-write. A consumer in ``--group`` (subscribed to ``--topic``,
  read_committed, no auto-commit) polls; a transaction (transactional id
  ``chaos-<name>``) writes ``--writes`` new unique values to distinct random partitions
  of the same topic, sends the polled positions with ``send_offsets_to_transaction``,
  then aborts (probability ``--abort``) or commits. Outcome: ``ok`` once the commit
  returned; ``fail`` when the commit was never asked for (a chosen abort, or an error
  before it: an abort follows); ``info`` when the commit raised (its outcome unknown).
  After anything but ``ok`` the consumer seeks back to where the transaction started
  reading, and the next transaction does not ``continue`` (nor after a rebalance). A
  fenced or fatally failed producer is closed and a new one with the same id started
  (which fences it for good).
- ``reader``: a standalone native read_committed consumer of every partition from the start;
  each poll that returned records is a read-only ``ok`` transaction that continues the
  previous one (not after a poll that raised: the position may have been reset).

Exit 0 after the duration (or SIGTERM / stdin EOF with ``--duration 0``), 2 on a bad
command line.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

from bench.chaos.clients.common import POLL_S, Stop
from bench.chaos.clients.events import Emitter, error_text
from bench.chaos.txn_checker import Txn
from bench.chaos.txn_clients import Stopped
from bench.chaos.txn_history import txn_event

GROUP = "chaos-txn"
MAX_READS = 20                 # records per read-process-write poll
ERROR_PAUSE_S = 0.2


def parser() -> argparse.ArgumentParser:
    from bench.chaos.txn_clients import CLIENTS
    p = argparse.ArgumentParser(prog="python -m bench.chaos.txn_worker",
                                description="a transactional chaos workload process")
    p.add_argument("--role", choices=("txn", "reader"), required=True)
    p.add_argument("--client", choices=sorted(CLIENTS), default="native",
                   help="txn role: the client (readers are native)")
    p.add_argument("--name", required=True)
    p.add_argument("--bootstrap", required=True,
                   help="native listener (native), Kafka listener (confluent-kafka)")
    p.add_argument("--topic", required=True)
    p.add_argument("--duration", type=float, default=0.0)
    p.add_argument("--rate", type=float, default=20.0, help="transactions/s (txn)")
    p.add_argument("--writes", type=int, default=3, help="values per transaction")
    p.add_argument("--abort", type=float, default=0.2, help="probability of an abort")
    p.add_argument("--group", default=GROUP)
    p.add_argument("--seed", type=int, default=0)
    return p


def one_transaction(client, txn_id: str, reads: tuple, writes: tuple, abort: bool,
                    stop=()) -> tuple[str, str | None, bool]:
    """Run one transaction on ``client``: (outcome, error, producer renewed). ``ok``
    once the commit returned; ``fail`` if the commit was never asked for (a chosen
    abort or an error before it; the transaction is then aborted, unless ``stop`` is
    set: the worker is ending, and the coordinator's timeout aborts it); ``info`` if
    the commit raised (it may have happened)."""
    after: dict = {}
    for topic, partition, offset, _ in reads:
        after[(topic, partition)] = offset + 1
    committing = False
    try:
        client.begin()
        for topic, partition, value in writes:
            client.send(topic, partition, value)
        if after:
            client.send_offsets(after)
        if abort:
            client.abort()
            return "fail", None, False
        committing = True
        client.commit()
        return "ok", None, False
    except Stopped:
        raise
    except Exception as e:
        error = error_text(e)
        outcome = "info" if committing else "fail"
        if stop:
            return outcome, error, False
        if not client.fatal(e):
            try:
                client.abort()
                return outcome, error, False
            except Exception as e2:
                error += f"; abort: {error_text(e2)}"
                if not client.fatal(e2):
                    return outcome, error, False
        client.em.client("error", f"{txn_id}: {error}; a new producer")
        client.new_producer()            # fences the old one for good
        return outcome, error, True


def read_process_write(args, em: Emitter, stop: Stop) -> None:
    from bench.chaos.txn_clients import CLIENTS
    rng = random.Random(f"{args.seed}-{args.name}")
    client = CLIENTS[args.client](args, em, stop)     # Stopped: nothing to close
    try:
        partitions = client.partitions()
        em.start(client.name, client.version(), "txn", client.settings)
        stop.begin()
        interval = 1.0 / args.rate
        n = 0
        continues = False
        while not stop.wait(interval):
            start = time.monotonic_ns()
            try:
                reads = tuple(client.poll(MAX_READS))
            except Exception as e:
                em.client("error", f"poll: {error_text(e)}")
                continues = False
                stop.wait(ERROR_PAUSE_S)
                continue
            if client.moved:             # a rebalance since the last transaction
                client.moved = False
                continues = False
            txn_id = f"{args.name}-{n}"
            n += 1
            targets = rng.sample(partitions, min(args.writes, len(partitions)))
            writes = tuple((args.topic, p, f"{txn_id}-{k}".encode())
                           for k, p in enumerate(targets))
            em.write({**txn_event(Txn(txn_id, args.name, "info", writes, reads,
                                      continues=continues, start_ns=start)),
                      "type": "invoke"})
            outcome, error, _ = one_transaction(client, txn_id, reads, writes,
                                                rng.random() < args.abort, stop)
            em.write(txn_event(Txn(txn_id, args.name, outcome, writes, reads,
                                   continues=continues, start_ns=start,
                                   end_ns=time.monotonic_ns()), error))
            _count(em, outcome == "ok", 1)
            continues = outcome == "ok"
            if outcome != "ok":          # back to where this transaction started reading
                first: dict = {}
                for topic, partition, offset, _ in reads:
                    first.setdefault((topic, partition), offset)
                for (topic, partition), offset in first.items():
                    try:
                        client.seek(topic, partition, offset)
                    except Exception as e:   # no longer ours: the group decides
                        em.client("log", f"seek {topic}-{partition}: {error_text(e)}")
    except Stopped:
        pass
    finally:
        client.close()


def _count(em: Emitter, ok: bool, n: int) -> None:
    with em.lock:
        if ok:
            em.ok += n
        else:
            em.errors += n


def read_committed(args, em: Emitter, stop: Stop) -> None:
    from bench.chaos.clients.native import version
    from bench.chaos.txn_clients import native_reader
    consumer = native_reader(args)
    em.start("native", version(), "reader", {"isolation_level": "read_committed"})
    stop.begin()
    n = 0
    continues = False
    try:
        while not stop:
            start = time.monotonic_ns()
            try:
                records = consumer.poll(timeout_ms=int(POLL_S * 1000))
            except Exception as e:
                em.client("error", f"poll: {error_text(e)}")
                continues = False       # the position may have been reset
                stop.wait(ERROR_PAUSE_S)
                continue
            if not records:
                continue
            reads = tuple((r.topic, r.partition, r.offset, r.value) for r in records)
            em.write(txn_event(Txn(f"{args.name}-{n}", args.name, "ok", (), reads,
                                   continues=continues, start_ns=start,
                                   end_ns=time.monotonic_ns())))
            _count(em, True, len(reads))
            n += 1
            continues = True
    finally:
        try:
            consumer.close()
        except Exception as e:
            em.client("error", f"consumer close: {error_text(e)}")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.duration < 0 or args.rate <= 0 or args.writes < 1 or not 0 <= args.abort <= 1:
        print("txn_worker: --duration >= 0, --rate > 0, --writes >= 1, --abort in [0, 1]",
              file=sys.stderr)
        return 2
    stop = Stop(args.duration)
    stop.deadline = None     # the duration counts from begin(): the clients constructed
    em = Emitter(args.name)
    try:
        (read_process_write if args.role == "txn" else read_committed)(args, em, stop)
    except Stopped:
        em.client("log", "stopped before the workload began")
    except Exception as e:
        em.client("error", f"worker failed: {error_text(e)}")
        em.end()
        raise
    em.end()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is told: exit now, as bench.chaos.clients' workers do (a close left
    # blocked on a daemon thread would hold the interpreter's teardown).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
