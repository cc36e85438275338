"""The transaction coordinator core (node.core.txn) under a seeded simulation.

One seed decides everything. Simulated producers behave as Kafka's transactional producer:
InitProducerId (now and then with their producer id and epoch: KIP-360), then transactions:
AddPartitionsToTxn / AddOffsetsToTxn, data written to each added partition (the partition
leader first asks the coordinator whether the partition was added: verify_only, KIP-890
part 1, and refuses a producer epoch older than one it has seen), EndTxn commit or abort
(v5, asking for the KIP-890 epoch bump, from most producers; transaction.version 2 on half
the seeds, 0 or 1 on the others: no bump, as the kafka-txn profile). One request in flight per producer; a
request that times out is sent again (a duplicate when the first arrives after all);
CONCURRENT_TRANSACTIONS and load errors are retried; PRODUCER_FENCED ends the producer.
Faults: a second instance of a transactional id starts (the first becomes a zombie that
keeps going with its old epoch), producers pause past their transaction timeout (the
coordinator aborts and fences them) or crash mid-transaction, messages are lost, late or
duplicated (a KIP-890 producer's copy may even arrive after its later requests: the epoch
bump per transaction is what makes that harmless; without it Kafka has no defense, so
without it copies arrive in order), producer ids are now and then not at hand
(retriable), marker writes are delayed, reordered and repeated, transactional ids expire,
epochs start near exhaustion, and the coordinator fails over: a new shard is built by
replaying the records committed so far (the rest is lost with its answers) and loaded()
resends the pending markers.

The coordinator answers a request only once its records (and all before them) are
committed; markers go out then (the shell's rule).

Checked at every step:
- no success for a fenced producer: once a record with (pid, epoch) is committed for a
  transactional id, no request with an older epoch of that id, or an older producer id of
  it, gets a success (except the retry of a KIP-890 EndTxn, answered as done);
- every partition in a marker request was added to that transaction;
- a partition leader never gets a marker of the current coordinator with an epoch older
  than the producer's data there;
- the committed records of each transactional id follow Kafka's state machine.
Checked once the faults stop and everything has settled: every transaction completed
(nothing Ongoing or Prepare*), every data batch on every partition is closed by a marker,
each transaction got only COMMIT or only ABORT markers, a producer told "committed" had its
data committed (and "aborted", aborted), and the records replayed into a new shard give
the coordinator's state exactly.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest

from node.core.groups.hashing import partition_for
from node.core.txn import records
from node.core.txn import shard as shard_mod
from node.core.txn.config import TxnConfig
from node.core.txn.shard import TxnShard
from node.core.txn.state import COMPLETED, PREPARING, VALID_PREVIOUS, TxnMeta, TxnState

SEEDS = 2000
REQUEST_TIMEOUT_MS = 100
FAULTS_END_MS = 1500
SETTLE_MS_MAX = 20_000
EVENTS_MAX = 100_000
TOPICS = {"a": 3, "b": 2}
NONE, FENCED, OLD_FENCED = 0, 90, 47
CONCURRENT, MAPPING, TXN_STATE, LOADING, ABORTABLE = 51, 49, 48, 14, 120
INIT, ADD, OFFSETS, END = 22, 24, 25, 26


@dataclass
class Producer:
    name: str
    tid: str
    end_version: int                    # EndTxn version: 5 asks for the KIP-890 bump
    timeout_ms: int
    txns_wanted: int
    pid: int = -1
    epoch: int = -1
    phase: str = "init"                 # init, idle, adding, writing, ending, done, dead
    in_flight: int | None = None
    request: tuple | None = None        # (api, version, body) being sent (resent on timeout)
    added: set = field(default_factory=set)
    written: set = field(default_factory=set)
    to_write: list = field(default_factory=list)
    commit: bool = True
    txn: int = 0                        # the transaction under way (this producer's count)
    paused_until: int = 0
    kip360: bool = False
    arrives: int = 0                    # when its last request arrives


@dataclass
class Batch:
    records: list
    replies: list                       # (producer, request id, body, meta)
    markers: list
    generation: int


class World:
    def __init__(self, seed: int):
        self.seed, self.rng = seed, random.Random(seed)
        rng = self.rng
        self.config = TxnConfig(
            transaction_state_log_num_partitions=1,
            transaction_version=rng.choice((0, 1, 2, 2)),
            transaction_max_timeout_ms=2000,
            transactional_id_expiration_ms=rng.choice((400, 10**9)),
            transaction_remove_expired_transaction_cleanup_interval_ms=100,
            offsets_topic_num_partitions=2)
        self.now, self.events, self.seq, self.steps = 0, [], itertools.count(), 0
        self.pids = itertools.count(1000)
        self.log: list = []                  # committed (key, value)
        self.uncommitted: list[Batch] = []
        self.generation, self.up, self.last_commit = 0, True, 0
        self.ticks: set = set()              # (generation, time) of the ticks scheduled
        self.producers: dict[str, Producer] = {}
        self.names = itertools.count()
        self.faults = True
        # Oracle state.
        self.committed: dict = {}            # tid -> TxnMeta of its last committed record
        self.old_pids: dict = {}             # tid -> producer ids it used before the current
        self.added: dict = {}                # (tid, pid, start_ms) -> partitions added
        self.partitions: dict = {}           # (topic, p) -> [("data", name, txn, pid, epoch) |
                                             #                ("marker", pid, epoch, commit)]
        self.leader_epoch: dict = {}         # ((topic, p), pid) -> highest epoch seen
        self.leader_coordinator: dict = {}   # ((topic, p), pid) -> highest coordinator epoch
        self.outcomes: dict = {}             # (producer, txn) -> True/False told by EndTxn
        self.markers_out: dict = {}          # marker key -> partitions not yet written
        self.stats = {"commits": 0, "aborts": 0, "fenced": 0, "failovers": 0, "rotations": 0}
        self.core = self.new_core()
        if rng.random() < 0.3:
            self.wear_out()
        self.core.loaded(0)

    def wear_out(self) -> None:
        """The log starts with the ids' epochs near exhaustion (Short.MaxValue - 1): the runs
        go through producer id rotation (InitProducerId) and KIP-890 overflow (EndTxn)."""
        for tid in ("t0", "t1", "t2"):
            state = self.rng.choice((TxnState.EMPTY,) + COMPLETED)
            meta = TxnMeta(tid, next(self.pids), producer_epoch=self.rng.randint(32761, 32766),
                           state=state, timeout_ms=1000, last_update_ms=0,
                           client_tv=2 if state in COMPLETED and self.config.kip890 else 0)
            key, value = records.encode(meta, self.config.log_value_version)
            self.log.append((key, value))
            self.check_record(key, value)
            self.core.replay(len(self.log) - 1, key, value)

    # ----------------------------------------------------------- scheduling
    def at(self, when: int, fn, *args) -> None:
        heapq.heappush(self.events, (when, next(self.seq), fn, args))

    def net(self) -> int | None:
        if self.faults:
            roll = self.rng.random()
            if roll < 0.03:
                return None
            if roll < 0.05:
                return self.rng.randint(REQUEST_TIMEOUT_MS, 2 * REQUEST_TIMEOUT_MS)
        return self.rng.choice((1, 2, 3, 5, 8, 20))

    def step(self) -> None:
        self.steps += 1
        assert self.steps < EVENTS_MAX, f"seed {self.seed}: no end after {EVENTS_MAX} events"
        self.now, _, fn, args = heapq.heappop(self.events)
        fn(*args)

    # ----------------------------------------------------------- the coordinator
    def allocate(self) -> int:
        """The shell's producer id blocks: now and then none at hand (retriable)."""
        if self.faults and self.rng.random() < 0.05:
            raise shard_mod.ProducerIdsUnavailable()
        return next(self.pids)

    def new_core(self) -> TxnShard:
        return TxnShard(0, self.config, self.generation, self.allocate)

    def submit(self, result, replies: list) -> None:
        self.check_markers(result.markers)
        self.last_commit = max(self.last_commit, self.now + self.rng.choice((0, 1, 3, 10)))
        batch = Batch(result.records, replies, result.markers, self.generation)
        self.uncommitted.append(batch)
        self.at(self.last_commit, self.commit, batch)
        deadline = self.core.next_deadline_ms()
        if deadline is not None and (self.generation, max(deadline, self.now)) not in self.ticks:
            self.ticks.add((self.generation, max(deadline, self.now)))
            self.at(max(deadline, self.now), self.tick, self.generation)

    def commit(self, batch: Batch) -> None:
        if batch.generation != self.generation:
            return                                    # lost with the old leader
        assert self.uncommitted.pop(0) is batch, "batches commit in order"
        for key, value in batch.records:
            self.log.append((key, value))
            self.check_record(key, value)
        for producer, request, body in batch.replies:
            delay = self.net()
            if delay is not None:
                self.at(self.now + delay, self.on_reply, producer, request, body)
        for marker in batch.markers:
            self.send_markers(marker, batch.generation)

    def tick(self, generation: int) -> None:
        self.ticks.discard((generation, self.now))
        if generation == self.generation and self.up:
            self.submit(self.core.tick(self.now), [])

    def on_request(self, p: Producer, request: int, api: int, version: int, body: dict) -> None:
        if not self.up:
            reply = shard_mod.error_response(api, body, 16)
            self.reply_at_once(p, request, reply)
            return
        out = self.core.handle(self.now, api, version, body, None)
        reply = out.replies[0].body
        self.check_success(api, body, reply)
        if (api == OFFSETS or api == ADD and version < 4) and _error(api, reply) == NONE:
            meta = self.core.transaction(p.tid)
            key = (p.tid, meta.producer_id, meta.start_ms)
            new = (_add_partitions(body) if api == ADD else
                   {("__consumer_offsets",
                     partition_for("g", self.config.offsets_topic_num_partitions))})
            self.added.setdefault(key, set()).update(new)
        self.submit(out, [(p, request, reply)])

    def reply_at_once(self, p, request, reply) -> None:
        delay = self.net()
        if delay is not None:
            self.at(self.now + delay, self.on_reply, p, request, reply)

    def fail_over(self) -> None:
        self.uncommitted.clear()
        self.generation += 1
        self.stats["failovers"] += 1
        self.up = False
        self.at(self.now + self.rng.choice((5, 30, 100)), self.take_over, self.generation)

    def take_over(self, generation: int) -> None:
        if generation != self.generation:
            return
        self.core = self.new_core()
        for offset, (key, value) in enumerate(self.log):
            self.core.replay(offset, key, value)
        self.up = True
        self.last_commit = self.now
        self.submit(self.core.loaded(self.now), [])

    # ----------------------------------------------------------- markers (the shell's channel)
    def send_markers(self, marker, generation: int) -> None:
        """Each partition's marker is written once or twice (a retry), after its own delay;
        the shell reports the request done when every write has been answered."""
        key = (generation, marker)
        if key in self.markers_out:
            return
        self.markers_out[key] = [0, {}]
        for tp in marker.partitions:
            for _ in range(self.rng.choice((1, 1, 1, 2))):
                self.markers_out[key][0] += 1
                self.at(self.now + self.rng.choice((1, 3, 10, 50, 150)), self.write_marker,
                        key, tp)

    def write_marker(self, key, tp) -> None:
        generation, marker = key
        pid = marker.producer_id
        seen = self.leader_epoch.get((tp, pid), -1)
        # A marker of the old coordinator may come after the new one's and the producer's
        # next transaction: the leader refuses it. The current coordinator's never.
        assert marker.producer_epoch >= seen or generation < self.generation, \
            f"seed {self.seed}: marker {marker} older than epoch {seen} on {tp}"
        out = self.markers_out[key]
        out[0] -= 1
        if marker.producer_epoch < seen:
            out[1][tp] = OLD_FENCED                    # INVALID_PRODUCER_EPOCH
        elif marker.coordinator_epoch < self.leader_coordinator.get((tp, pid), -1):
            out[1][tp] = 52                            # TRANSACTION_COORDINATOR_FENCED
        else:
            self.leader_coordinator[(tp, pid)] = marker.coordinator_epoch
            self.leader_epoch[(tp, pid)] = marker.producer_epoch
            self.partitions.setdefault(tp, []).append(
                ("marker", pid, marker.producer_epoch, marker.commit, generation))
            out[1].setdefault(tp, NONE)
        if out[0] == 0:
            self.at(self.now + self.rng.choice((0, 2, 20)), self.markers_done, key)

    def markers_done(self, key) -> None:
        generation, marker = key
        results = self.markers_out.pop(key)[1]
        if generation != self.generation or not self.up:
            return
        self.submit(self.core.markers_done(self.now, marker.transactional_id,
                                           marker.producer_id, marker.producer_epoch,
                                           results), [])

    # ----------------------------------------------------------- producers
    def start(self, tid: str) -> None:
        if not self.faults:
            return
        n = next(self.names)
        kip890 = self.rng.random() < 0.7
        p = Producer(name=f"p{n}", tid=tid, end_version=5 if kip890 else 3,
                     timeout_ms=self.rng.choice((150, 400, 1500)),
                     txns_wanted=self.rng.randint(1, 6))
        self.producers[p.name] = p
        self.send_init(p)

    def send(self, p: Producer, api: int, version: int, body: dict) -> None:
        p.request = (api, version, body)
        self.resend(p)

    def resend(self, p: Producer) -> None:
        if p.phase in ("done", "dead") or self.busy(p, self.resend):
            return
        request = next(self.seq)
        p.in_flight = request
        api, version, body = p.request
        delay = self.net()
        if delay is not None:
            # One connection: a producer's requests arrive in the order sent (TCP).
            p.arrives = max(p.arrives, self.now + delay)
            self.at(p.arrives, self.on_request, p, request, api, version, body)
            if self.faults and self.rng.random() < 0.02:
                # A copy arrives again: right after (a retry on the same connection) or, for
                # a KIP-890 producer, much later (a retry on a new connection while the
                # first copy waited in the broker: only the per-transaction epoch bump
                # makes such a stale EndTxn harmless; Kafka's TV1 has no defense).
                stale = self.config.kip890 and p.end_version >= 5
                when = self.now + delay + self.rng.choice((30, 150)) if stale else p.arrives
                self.at(when, self.on_request, p, request, api, version, body)
        self.at(self.now + REQUEST_TIMEOUT_MS, self.timed_out, p, request)

    def busy(self, p: Producer, fn, *args) -> bool:
        if self.now < p.paused_until:
            self.at(p.paused_until, fn, p, *args)
            return True
        return False

    def timed_out(self, p: Producer, request: int) -> None:
        if p.in_flight == request and p.phase not in ("done", "dead"):
            self.resend(p)

    def send_init(self, p: Producer) -> None:
        p.phase = "init"
        p.kip360 = p.pid >= 0 and self.rng.random() < 0.5
        body = {"transactional_id": p.tid, "transaction_timeout_ms": p.timeout_ms,
                "producer_id": p.pid if p.kip360 else -1,
                "producer_epoch": p.epoch if p.kip360 else -1}
        self.send(p, INIT, 5, body)

    def next_step(self, p: Producer) -> None:
        """Idle, or in a transaction: add, write, end."""
        if p.phase in ("done", "dead") or self.busy(p, self.next_step):
            return
        rng = self.rng
        if p.phase == "idle" and (p.txn >= p.txns_wanted or not self.faults):
            p.phase = "done"
            return
        if p.phase == "idle" or (p.phase == "writing" and not p.to_write and p.added
                                 and rng.random() < 0.3):
            p.phase = "adding"
            if rng.random() < 0.2:
                self.send(p, OFFSETS, 4, {"transactional_id": p.tid, "producer_id": p.pid,
                                          "producer_epoch": p.epoch, "group_id": "g"})
                return
            tps = [(t, i) for t, n in TOPICS.items() for i in range(n)]
            chosen = rng.sample(tps, rng.randint(1, 2))
            p.to_write = [tp for tp in chosen if tp not in p.written]
            body = {"v3_and_below_transactional_id": p.tid, "v3_and_below_producer_id": p.pid,
                    "v3_and_below_producer_epoch": p.epoch,
                    "v3_and_below_topics": [{"name": t, "partitions": [i]} for t, i in chosen]}
            self.send(p, ADD, 3, body)
            return
        verify = self.config.transaction_partition_verification_enable and self.config.kip890
        if p.phase == "writing" and verify and self.faults and rng.random() < 0.03:
            # A buggy (or late) producer writes to a partition it never added: the leader's
            # verification must refuse it (TRANSACTION_ABORTABLE: the producer aborts).
            stray = [(t, i) for t, n in TOPICS.items() for i in range(n)
                     if (t, i) not in p.added]
            if stray:
                p.to_write.insert(0, rng.choice(stray))
        if p.phase == "writing" and p.to_write:
            tp = p.to_write[0]
            if verify:
                body = {"transactions": [{"transactional_id": p.tid, "producer_id": p.pid,
                                          "producer_epoch": p.epoch, "verify_only": True,
                                          "topics": [{"name": tp[0], "partitions": [tp[1]]}]}]}
                self.send(p, ADD, 5, body)            # the leader's verification
            else:
                self.write(p, tp)
            return
        p.phase = "ending"
        p.commit = rng.random() < 0.7
        self.send(p, END, p.end_version, {"transactional_id": p.tid, "producer_id": p.pid,
                                          "producer_epoch": p.epoch, "committed": p.commit})

    def write(self, p: Producer, tp) -> None:
        """The partition leader appends the producer's data (or refuses an old epoch)."""
        p.to_write.pop(0)
        if p.epoch < self.leader_epoch.get((tp, p.pid), -1):
            self.fenced(p)                            # INVALID_PRODUCER_EPOCH on produce
            return
        self.leader_epoch[(tp, p.pid)] = p.epoch
        self.partitions.setdefault(tp, []).append(("data", p.name, p.txn, p.pid, p.epoch))
        p.written.add(tp)
        self.at(self.now + self.rng.choice((0, 1, 5)), self.next_step, p)

    def fenced(self, p: Producer) -> None:
        p.phase = "dead"
        p.in_flight = None
        self.stats["fenced"] += 1

    def on_reply(self, p: Producer, request: int, body: dict) -> None:
        if p.in_flight != request or p.phase in ("done", "dead"):
            return
        if self.busy(p, self.on_reply, request, body):
            return
        p.in_flight = None
        api = p.request[0]
        error = _error(api, body)
        if error in (CONCURRENT, LOADING, 16, 15):
            self.at(self.now + self.rng.choice((5, 20)), self.resend, p)
            return
        if error in (FENCED, OLD_FENCED):
            self.fenced(p)
            return
        if error in (MAPPING, TXN_STATE, ABORTABLE) and api != INIT:
            if p.phase == "writing" and error == ABORTABLE:
                p.to_write.clear()                     # verification refused: abort
                p.phase = "ending"
                p.commit = False
                self.send(p, END, p.end_version, {"transactional_id": p.tid,
                                                  "producer_id": p.pid,
                                                  "producer_epoch": p.epoch, "committed": False})
                return
            self.new_epoch(p)
            return
        assert error == NONE, f"seed {self.seed}: {p.name} got {error} for {api}: {body}"
        if api == INIT:
            p.pid, p.epoch = body["producer_id"], body["producer_epoch"]
            p.phase = "idle"
            self.next_step(p)
        elif api == ADD and p.request[1] >= 4:         # verified: the leader appends
            self.write(p, p.to_write[0])
        elif api in (ADD, OFFSETS):
            if api == ADD:
                p.added |= _add_partitions(p.request[2])
            p.phase = "writing"
            self.next_step(p)
        else:
            self.outcomes[(p.name, p.txn)] = p.commit
            self.stats["commits" if p.commit else "aborts"] += 1
            if p.end_version >= 5 and body["producer_id"] >= 0:
                p.pid, p.epoch = body["producer_id"], body["producer_epoch"]
            self.end_txn(p)
            p.phase = "idle"
            self.next_step(p)

    def end_txn(self, p: Producer) -> None:
        p.txn += 1
        p.added, p.written, p.to_write = set(), set(), []

    def new_epoch(self, p: Producer) -> None:
        """The transaction is lost (expired id, invalid state): start over with InitProducerId."""
        self.end_txn(p)
        self.send_init(p)

    # ----------------------------------------------------------- faults
    def schedule_faults(self) -> None:
        rng = self.rng
        tids = [f"t{i}" for i in range(rng.randint(1, 3))]
        for tid in tids:
            self.at(rng.randint(0, 100), self.start, tid)
        for _ in range(rng.randint(0, 5)):
            self.at(rng.randint(50, FAULTS_END_MS), self.fault, rng.choice(tids))
        for _ in range(rng.choice((0, 0, 1, 2))):
            self.at(rng.randint(50, FAULTS_END_MS), self.fail_over)

    def fault(self, tid: str) -> None:
        rng = self.rng
        kind = rng.choice(("zombie", "pause", "pause", "crash"))
        live = [p for p in self.producers.values()
                if p.tid == tid and p.phase not in ("done", "dead")]
        if kind == "zombie" or not live:
            self.start(tid)                            # a new instance fences the old one
            return
        p = rng.choice(live)
        if kind == "pause":
            p.paused_until = self.now + rng.choice((50, 200, 600, 1600))
        else:
            p.phase = "dead"                           # crashed; its transaction times out

    # ----------------------------------------------------------- the checks
    def check_success(self, api: int, request: dict, reply: dict) -> None:
        """No success for a fenced producer (see the module's doc)."""
        if api == ADD and "transactions" in request and request["transactions"]:
            for txn, result in zip(request["transactions"], reply["results_by_transaction"]):
                ok = all(r["partition_error_code"] == NONE for t in result["topic_results"]
                         for r in t["results_by_partition"])
                if ok:
                    self.check_live(txn["transactional_id"], txn["producer_id"],
                                    txn["producer_epoch"], api, None)
            return
        if api not in (ADD, OFFSETS, END) or _error(api, reply) != NONE:
            return
        if api == ADD:
            tid, pid, epoch = (request["v3_and_below_transactional_id"],
                               request["v3_and_below_producer_id"],
                               request["v3_and_below_producer_epoch"])
        else:
            tid, pid, epoch = (request["transactional_id"], request["producer_id"],
                               request["producer_epoch"])
        self.check_live(tid, pid, epoch, api, request.get("committed"))

    def check_live(self, tid: str, pid: int, epoch: int, api: int, commit) -> None:
        meta = self.committed.get(tid)
        if meta is None:
            return
        where = f"seed {self.seed}: {tid} ({pid}, {epoch}) api {api} succeeded"
        assert pid not in self.old_pids.get(tid, ()) or (
            api == END and meta.client_tv >= 2 and meta.previous_producer_id == pid), \
            f"{where} after its producer id was replaced: {meta}"
        if pid == meta.producer_id and epoch < meta.producer_epoch:
            retry = (api == END and meta.client_tv >= 2 and epoch == meta.producer_epoch - 1
                     and meta.state in PREPARING + COMPLETED
                     and commit == (meta.state in (TxnState.PREPARE_COMMIT,
                                                   TxnState.COMPLETE_COMMIT)))
            assert retry, f"{where} though epoch {meta.producer_epoch} is committed: {meta}"

    def check_record(self, key, value) -> None:
        tid, meta = records.decode(key, value)
        before = self.committed.get(tid)
        if meta is None:
            self.committed.pop(tid, None)
            if before is not None:
                self.old_pids.setdefault(tid, set()).add(before.producer_id)
            return
        if before is not None:
            assert before.state in VALID_PREVIOUS[meta.state], \
                f"seed {self.seed}: {tid} went {before.state.name} -> {meta.state.name}"
            if before.producer_id != meta.producer_id:
                self.old_pids.setdefault(tid, set()).add(before.producer_id)
                self.stats["rotations"] += 1
            else:
                assert meta.producer_epoch >= before.producer_epoch, \
                    f"seed {self.seed}: {tid} epoch went back: {before} -> {meta}"
        self.committed[tid] = meta

    def check_markers(self, markers) -> None:
        for marker in markers:
            meta = self.core.transaction(marker.transactional_id)
            key = (marker.transactional_id, marker.producer_id, meta.start_ms)
            added = self.added.get(key, set())
            assert set(marker.partitions) <= added, \
                (f"seed {self.seed}: marker {marker} has partitions not added to its "
                 f"transaction ({sorted(added)})")

    def settled(self) -> bool:
        if not self.up or self.uncommitted or self.markers_out:
            return False
        if any(p.phase not in ("done", "dead") for p in self.producers.values()):
            return False
        return all(m.state not in (TxnState.ONGOING,) + PREPARING
                   for m in self.core.txns.values())

    def check_settled(self) -> None:
        # Every data batch is closed by a marker of its producer at an epoch >= its own, and
        # one transaction's batches all get the same outcome, the one its producer was told.
        outcome: dict = {}
        for tp, entries in self.partitions.items():
            open_: dict = {}
            for entry in entries:
                if entry[0] == "data":
                    _, name, txn, pid, epoch = entry
                    open_.setdefault(pid, []).append((name, txn, epoch))
                    continue
                _, pid, epoch, commit, _ = entry
                for name, txn, data_epoch in open_.pop(pid, []):
                    assert data_epoch <= epoch, f"seed {self.seed}: {tp} marker below data"
                    prior = outcome.setdefault((name, txn), commit)
                    assert prior == commit, \
                        f"seed {self.seed}: {name} transaction {txn} both committed and aborted"
            assert not any(open_.values()), \
                f"seed {self.seed}: {tp} has data never closed by a marker: {open_}"
        for key, told in self.outcomes.items():
            if key in outcome:
                assert outcome[key] == told, \
                    f"seed {self.seed}: {key} told commit={told}, markers said {outcome[key]}"
        # The records say it all: replayed, they give the coordinator's state exactly.
        again = TxnShard(0, self.config, self.generation + 1, self.allocate)
        for offset, (key, value) in enumerate(self.log):
            again.replay(offset, key, value)
        assert snapshot(again) == snapshot(self.core), f"seed {self.seed}: replay differs"
        for core in (again, self.core):
            assert core.ongoing == {tid for tid, m in core.txns.items()
                                    if m.state is TxnState.ONGOING}, f"seed {self.seed}"
        for meta in self.core.txns.values():
            assert meta.state in (TxnState.EMPTY,) + COMPLETED, meta


def snapshot(core: TxnShard) -> dict:
    return {tid: (m.producer_id, m.producer_epoch, m.state, frozenset(m.partitions),
                  m.next_producer_id, m.timeout_ms, m.start_ms, m.client_tv)
            for tid, m in core.txns.items()}


def _error(api: int, body: dict) -> int:
    if api == ADD:
        codes = [r["partition_error_code"] for t in body["results_by_topic_v3_and_below"]
                 for r in t["results_by_partition"]]
        codes += [r["partition_error_code"] for x in body["results_by_transaction"]
                  for t in x["topic_results"] for r in t["results_by_partition"]]
        return next((c for c in codes if c != NONE), body["error_code"])
    return body["error_code"]


def _add_partitions(body: dict) -> set:
    return {(t["name"], i) for t in body.get("v3_and_below_topics", [])
            for i in t["partitions"]}


def simulate(seed: int) -> World:
    world = World(seed)
    world.schedule_faults()
    while world.events and world.events[0][0] <= FAULTS_END_MS:
        world.step()
    world.faults = False
    for p in world.producers.values():
        p.paused_until = min(p.paused_until, FAULTS_END_MS + 100)
    deadline = FAULTS_END_MS + SETTLE_MS_MAX
    while not world.settled():
        assert world.events and world.now < deadline, \
            f"seed {world.seed}: not settled by {deadline} ms"
        world.step()
    world.check_settled()
    return world


@pytest.mark.parametrize("block", range(4))
def test_transactions_complete_once_and_fenced_producers_never_succeed(block):
    """SEEDS seeds in 4 blocks (parallel workers); a failure names the seed."""
    totals = dict.fromkeys(("commits", "aborts", "fenced", "failovers", "rotations"), 0)
    for seed in range(block, SEEDS, 4):
        world = simulate(seed)
        for k in totals:
            totals[k] += world.stats[k]
    n = SEEDS // 4
    assert totals["commits"] > n and totals["aborts"] > n // 4, totals   # the runs did something
    assert totals["fenced"] > n // 10 and totals["failovers"] > n // 10, totals
    assert totals["rotations"] > n // 20, totals


def _no_epoch_check(self, meta, pid, epoch):
    """Broken on purpose: any epoch of the producer id passes."""
    if meta is None or meta.producer_id != pid:
        return 49
    return 51 if meta.state in PREPARING else NONE


def _fence_without_bump(self, now, meta, fx):
    """Broken on purpose: aborts the transaction but leaves the epoch as it was."""
    self._transit(meta, TxnState.PREPARE_ABORT, now, client_tv=0)
    fx.records.append(self._record(meta))
    self._send_or_complete(now, meta, fx)


def _marker_missing_a_partition(self, meta):
    """Broken on purpose: the marker request leaves out one partition of the transaction."""
    marker = _MARKER(self, meta)
    if len(marker.partitions) < 2:
        return marker
    return type(marker)(marker.transactional_id, marker.producer_id, marker.producer_epoch,
                        marker.commit, marker.coordinator_epoch, marker.partitions[1:])


_MARKER = TxnShard._marker


def _verify_everything(self, tid, pid, epoch, partitions):
    """Broken on purpose: KIP-890's verification says yes to any partition."""
    return {tp: NONE for tp in partitions}


@pytest.mark.parametrize("attribute, broken", [
    ("_validate_producer", _no_epoch_check),
    ("_fence_and_abort", _fence_without_bump),
    ("_marker", _marker_missing_a_partition),
    ("_verify", _verify_everything)], ids=["no-epoch-check", "no-fence-bump",
                                           "marker-misses-partition", "verify-says-yes"])
def test_the_checks_catch_a_broken_coordinator(monkeypatch, attribute, broken):
    monkeypatch.setattr(TxnShard, attribute, broken)
    caught = 0
    for seed in range(120):
        try:
            simulate(seed)
        except AssertionError as e:
            assert f"seed {seed}: " in str(e), e
            caught += 1
    assert caught > 5, caught
