"""A transactional write that arrives after its transaction ended: the gap in Kafka's
transaction protocol that KIP-890 closes (its motivation; Jepsen's Bufstream 0.1.0
report, "Kafka transactions").

A produce of a transaction is delayed in the network (a request the client gave up on,
or the first copy of one it retried) and reaches the partition leader after the
coordinator wrote the transaction's marker there. Before KIP-890 nothing ties a
transactional batch to the transaction it belongs to: the batch carries only the
producer's id, epoch and sequence, and those are still valid, so the leader appends it
and it opens a new "transaction" of that producer on the partition, one the coordinator
knows nothing of:

- no marker ever ends it: the last stable offset stays below it (a *hanging
  transaction*): ``read_committed`` consumers of the partition stop there;
- or the same producer's next transaction writes the partition and commits: the marker
  ends the hanging one too, and the late write of the earlier, perhaps aborted,
  transaction is committed (an *aborted read*).

KIP-890 part 1 (``transaction.partition.verification.enable``): the leader asks the
coordinator whether the partition is in the producer's ongoing transaction before it
takes the first transactional batch of one; part 2 (``transaction.version`` 2): the
epoch goes up at every transaction's end, so the late batch's epoch is fenced.

``last_transactional_batch`` finds, in a partition's log, the newest data batch of a
transactional producer (its id, epoch and last sequence); ``send_late_write`` sends a
hand-built batch with that producer's id, epoch and next sequence over the native wire,
as the delayed request would have arrived (``tests/bench/chaos/test_late_write.py`` and
the ``txn-late-write`` teaching scenario drive them step by step).

The chaos fault ``late-write`` (``inject``, run by ``bench.chaos.nemesis``): in the
last ``TAIL_OFFSETS`` of a random partition, a producer whose newest batch is the ABORT
marker of a transaction (``aborted_candidate``) gets that transaction's records there
delivered again, with its epoch, its next sequence and its transactional id (from
ListTransactions): a retried produce whose first copy is still on its way looks so.
The workload's checker then sees what follows: without KIP-890, the producer's next
transaction to write the partition is answered as a retry of the late batch (its own
record lost) and, if it commits, the aborted records are read as committed.
"""
from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from node.net import Channel
from node.wire import protocol
from shm import batch

FETCH_MAX_BYTES = 1 << 20
REQUEST_TIMEOUT_MS = 30_000
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
SEQUENCE_WRAP = 2**31              # sequences wrap to 0 past 2**31 - 1, as Kafka's


@dataclass(frozen=True)
class Producer:
    """A transactional producer as one partition's log knows it."""
    producer_id: int
    epoch: int
    last_sequence: int       # of its newest data batch on the partition

    @property
    def next_sequence(self) -> int:
        return (self.last_sequence + 1) % SEQUENCE_WRAP


@dataclass(frozen=True)
class Outcome:
    """The leader's answer to the late write: 0 and its offset, or an error code."""
    error: int
    offset: int
    message: str = ""

    @property
    def accepted(self) -> bool:
        return self.error == 0


def leader_endpoint(admin, topic: str, partition: int) -> str:
    """The native endpoint of the partition's leader (ValueError if none)."""
    meta = admin.describe_topics([topic])[topic][partition]
    if meta.leader < 0:
        raise ValueError(f"{topic}-{partition} has no leader")
    brokers = {b.broker_id: b for b in admin.describe_cluster().brokers}
    b = brokers[meta.leader]
    return f"tcp://{b.host}:{b.port}"


@dataclass
class Read:
    """A partition read from offset 0: its high watermark and last stable offset as of
    the last fetch, the aborted transactions the fetches listed, and the batches."""
    high_watermark: int
    last_stable_offset: int
    aborted: list            # [(producer_id, first_offset)] (read_committed only)
    batches: list            # [(batch header, [values])]

    def values(self) -> list[bytes]:
        """Every data value, as a read_uncommitted consumer returns them."""
        return [v for h, vs in self.batches if not h.attributes & batch.ATTR_CONTROL
                for v in vs]

    def committed(self) -> list[bytes]:
        """What a read_committed consumer keeps (``committed_values``)."""
        return committed_values(self.batches, self.aborted)


def read_batches(channel, topic: str, partition: int, isolation: int = READ_UNCOMMITTED
                 ) -> Read:
    """The partition from offset 0 to its high watermark (read_uncommitted) or its
    last stable offset (read_committed)."""
    return read_batches_from(channel, topic, partition, 0, isolation)


def last_transactional_batch(channel, topic: str, partition: int,
                             producer_id: int | None = None) -> Producer | None:
    """The producer of the newest transactional data batch on the partition (of
    ``producer_id`` if given), or None."""
    for header, _ in reversed(read_batches(channel, topic, partition).batches):
        if not header.attributes & batch.ATTR_TRANSACTIONAL or \
                header.attributes & batch.ATTR_CONTROL:
            continue
        if producer_id is not None and header.producer_id != producer_id:
            continue
        last = (header.base_sequence + header.record_count - 1) % SEQUENCE_WRAP
        return Producer(header.producer_id, header.producer_epoch, last)
    return None


def transaction_ended(channel, topic: str, partition: int, producer_id: int) -> bool:
    """Whether the producer's newest batch on the partition is a marker (the coordinator
    answers EndTxn before its markers are written: a late write must come after)."""
    for header, _ in reversed(read_batches(channel, topic, partition).batches):
        if header.producer_id == producer_id:
            return bool(header.attributes & batch.ATTR_CONTROL)
    return False


def send_late_write(channel, topic: str, partition: int, producer: Producer,
                    values: list[bytes], transactional_id: str | None = None) -> Outcome:
    """Send ``values`` as one transactional batch of ``producer`` with its next sequence,
    acks=all, to the partition's leader (``channel``)."""
    assert values, "a late write has at least one record"
    data = batch.build_batch(values, producer_id=producer.producer_id,
                             producer_epoch=producer.epoch,
                             base_sequence=producer.next_sequence, transactional=True)
    body = {"acks": -1, "timeout_ms": 10_000, "partitions": [[topic, partition]]}
    if transactional_id is not None:
        body["transactional_id"] = transactional_id
    answer = channel.request(protocol.ApiKey.PRODUCE, body, [data],
                             timeout_ms=REQUEST_TIMEOUT_MS).body["partitions"][0]
    # [topic, partition, error, base_offset, log_start, message]
    return Outcome(int(answer[2]), int(answer[3]), str(answer[5] or "") if len(answer) > 5
                   else "")


def committed_values(batches, aborted: list) -> list[bytes]:
    """What a read_committed consumer keeps of ``batches`` ((header, values) pairs in
    offset order): the native consumer's own filter (Kafka's rule: control batches
    dropped, a producer's data from an aborted transaction's first offset to its marker)."""
    from node.client.consumer.fetcher import AbortedFilter
    kept = AbortedFilter(aborted)
    out = []
    for header, values in batches:
        if header.attributes & batch.ATTR_CONTROL:
            kept.control(header)
        elif not kept.drops(header):
            out += values
    return out


def open_channel(admin, topic: str, partition: int, client_id: str = "late-write") -> Channel:
    return Channel(leader_endpoint(admin, topic, partition), client_id=client_id)


# ---------------------------------------------------------------- the chaos fault
TAIL_OFFSETS = 400          # how far back from the HW the fault looks for an abort
ATTEMPT_PAUSE_S = 0.05      # between attempts when no candidate or a race
REFUSALS = {47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE",
            120: "TRANSACTION_ABORTABLE"}   # KIP-890's answers to a late write


def _tail(channel, topic: str, partition: int) -> Read:
    """The partition's last ``TAIL_OFFSETS`` offsets (read_uncommitted) with the
    aborted transactions listed for them (a read_committed fetch)."""
    first = read_batches_from(channel, topic, partition, 0, READ_UNCOMMITTED, limit=1)
    start = max(0, first.high_watermark - TAIL_OFFSETS)
    data = read_batches_from(channel, topic, partition, start, READ_UNCOMMITTED)
    committed = read_batches_from(channel, topic, partition, start, READ_COMMITTED)
    data.aborted = committed.aborted
    return data


def read_batches_from(channel, topic: str, partition: int, offset: int, isolation: int,
                      limit: int | None = None) -> Read:
    """``read_batches`` from ``offset``, at most ``limit`` fetches."""
    out, aborted, fetches = [], [], 0
    while True:
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                "max_bytes": FETCH_MAX_BYTES, "isolation_level": isolation,
                "partitions": [[topic, partition, offset, -1, FETCH_MAX_BYTES]]}
        response = channel.request(protocol.ApiKey.FETCH, body, timeout_ms=REQUEST_TIMEOUT_MS)
        entry = response.body["partitions"][0]
        fetches += 1
        if entry[2]:
            raise ValueError(f"fetch {topic}-{partition}: error {entry[2]}")
        aborted += [(int(pid), int(first)) for pid, first in entry[-1]
                    if (int(pid), int(first)) not in aborted]
        frame = response.frames[0] if response.frames else b""
        data = frame.bytes if hasattr(frame, "bytes") else bytes(frame)
        batches = list(batch.parse_batches(data))
        for b in batches:
            out.append((b.header, [v for _, _, _, v in b.records()]))
        if not batches or (limit is not None and fetches >= limit):
            return Read(int(entry[3]), int(entry[-2]), aborted, out)
        offset = batches[-1].header.last_offset + 1


def transactional_ids(admin) -> dict[int, str]:
    """{producer id: transactional id} of every transaction the coordinators know
    (ListTransactions to every broker: each answers for the shards it leads). A delayed
    produce carries its transactional id, which KIP-890's verification needs."""
    out: dict[int, str] = {}
    for b in admin.describe_cluster().brokers:
        with closing(Channel(f"tcp://{b.host}:{b.port}", client_id="chaos-late-write")) as ch:
            answer = ch.request(protocol.ApiKey.LIST_TRANSACTIONS,
                                {"state_filters": [], "producer_id_filters": []},
                                timeout_ms=REQUEST_TIMEOUT_MS).body
            for t in answer.get("transaction_states") or ():
                out[int(t["producer_id"])] = str(t["transactional_id"])
    return out


def aborted_candidate(read: Read) -> tuple[Producer, list[bytes]] | None:
    """A producer whose newest batch in ``read`` is the marker of an aborted
    transaction whose data is in ``read`` too: (the producer as of that transaction's
    last data batch, that transaction's values on the partition). The newest such."""
    newest: dict[int, int] = {}
    for i, (header, _) in enumerate(read.batches):
        if header.producer_id >= 0:
            newest[header.producer_id] = i
    for pid, first in sorted(read.aborted, key=lambda a: -a[1]):
        i = newest.get(pid)
        if i is None or not read.batches[i][0].attributes & batch.ATTR_CONTROL:
            continue
        mine = [(h, vs) for h, vs in read.batches[:i]
                if h.producer_id == pid and h.base_offset >= first]
        if not mine or mine[0][0].base_offset != first or \
                any(h.attributes & batch.ATTR_CONTROL for h, _ in mine):
            continue        # its marker is not the producer's newest batch
        data = mine
        last = data[-1][0]
        producer = Producer(pid, last.producer_epoch,
                            (last.base_sequence + last.record_count - 1) % SEQUENCE_WRAP)
        return producer, [v for _, vs in data for v in vs]
    return None


def inject(admin, topic: str, partitions: list[int], rng, deadline_s: float, stop,
           clock) -> tuple[str, str]:
    """The chaos fault ``late-write``: until ``deadline_s`` (``clock()``'s time) or
    ``stop`` is set, look in a random partition for a transactional producer whose
    latest transaction there was aborted and has nothing after it, and send that
    transaction's records again as its delayed write (its epoch, the next sequence).
    (target, what happened): appended at offset N, refused with KIP-890's error, or
    no chance (a race with the producer each time, or no aborted transaction)."""
    tried, answers = 0, []
    while clock() < deadline_s and not stop.is_set():
        partition = rng.choice(partitions)
        try:
            with closing(open_channel(admin, topic, partition, "chaos-late-write")) as ch:
                found = aborted_candidate(_tail(ch, topic, partition))
                if found is not None:
                    producer, values = found
                    tried += 1
                    tid = transactional_ids(admin).get(producer.producer_id)
                    outcome = send_late_write(ch, topic, partition, producer, values,
                                              transactional_id=tid)
                    what = (f"producer {producer.producer_id} epoch {producer.epoch} "
                            f"sequence {producer.next_sequence}, {len(values)} record(s)")
                    if outcome.accepted:
                        return (f"{topic}-{partition}",
                                f"late write appended at offset {outcome.offset} ({what})")
                    if outcome.error in REFUSALS:
                        return (f"{topic}-{partition}", f"late write refused "
                                f"{REFUSALS[outcome.error]} ({what})")
                    answers.append(str(outcome.error))
        except Exception as e:   # a leader moving, a broker down: try again
            answers.append(type(e).__name__)
        stop.wait(ATTEMPT_PAUSE_S)
    return (topic, f"no late write landed ({tried} sent, raced with their producer; "
                   f"answers {', '.join(sorted(set(answers))) or 'none'})")
