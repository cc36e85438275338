"""The catalog of teaching scenarios: the seeds' stories, each on real processes.
(Over 600 lines because it is a catalog: one short generator per story, read top to
bottom; the machinery they share is in ``stage`` and ``run``.)

A scenario is a generator over a ``Play``: it yields a ``Step`` (what is about to happen
and why, in our own words) *before* doing it; the runner shows the narration, waits if
asked to, resumes the generator (which performs the step), then draws the cluster. The
scenario records what it expects with ``play.expect(condition, text)``; the run matches
its prediction when every expectation held.

Sources: seed 003 (the Kafka vs RabbitMQ article: figures 1-20 and its network partition
scenarios 1-8), seeds 000/001/004 and KIP-101 (high-watermark truncation), KIP-101's
scenario 2 (divergent logs after a power failure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from bench.teach import txn_scenarios
from bench.teach.stage import Stage
from bench.teach.steps import Step
from node.client import Producer


@dataclass
class Expectation:
    ok: bool
    text: str


@dataclass
class Scenario:
    name: str
    title: str
    source: str
    prediction: str
    body: Callable[["Play"], Iterator[Step]]
    netns: bool = False


@dataclass
class Play:
    """What a scenario body gets: a way to make stages, the speed, and expectations."""
    make_stage: Callable[..., Stage]
    hold: Callable[[float], None]
    stages: list[Stage] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    expectations: list[Expectation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def stage(self, label: str = "", **kw) -> Stage:
        s = self.make_stage(label=label, **kw)
        self.stages.append(s)
        return s

    def expect(self, ok: bool, text: str) -> bool:
        self.expectations.append(Expectation(bool(ok), text))
        return bool(ok)

    def note(self, text: str) -> None:
        self.notes.append(text)


def _s(*parts: str) -> str:
    return " ".join(parts)


STALL_S = 30.0   # a real client with no acknowledgement for this long has stalled


def _resumes(play: Play, s: Stage, w, more: int, after: str) -> bool:
    """Wait for ``more`` acknowledgements once a fault is over. A real client that does
    not find its way to the new leader is something the scenario shows (a note, and the
    run goes on to its verdict), not a failed run; the native writer must resume."""
    from bench.teach.stage import ScenarioError
    if s.client == "native":
        s.wait_acks(w, more)
        return True
    try:
        s.wait_acks(w, more, timeout_s=STALL_S)
        return True
    except ScenarioError:
        play.note(f"{w.label} stalled {after}: not {more} more acknowledgements for "
                  f"{w.name} in {STALL_S:.0f} s (last error: {w.last_error or 'none'})")
        return False


def _refused(client: str, failed: int, unknown: int) -> int:
    """The writes a client saw refused. The native writer sends once and reports
    NOT_ENOUGH_REPLICAS as a refusal; a real client retries it (Kafka marks it
    retriable) until its delivery timeout and then reports a timeout, which to it is an
    unknown outcome: for it, the refused are the failed and the unknown."""
    return failed if client == "native" else failed + unknown


# ====================================================================== seed 003 stories

def failover(play: Play) -> Iterator[Step]:
    yield Step("Three brokers, three partitions", _s(
        "Topic 'orders' has 3 partitions, each replicated on all 3 brokers (replication",
        "factor 3). Kafka spreads the preferred leaders: each broker leads one partition.",
        "A producer writes with acks=all and min.insync.replicas=1, so writes go on as long",
        "as one replica is alive. Automatic leader rebalancing is off."))
    s = play.stage()
    play.topics = ["orders"]
    s.topic("orders", partitions=3, config={"min.insync.replicas": "1"})
    writers = [s.writer("orders", f"w{p}", partition=p) for p in range(3)]
    for w in writers:
        s.wait_acks(w, 20)
    preferred = {p: s.admin.describe_topics(["orders"])["orders"][p].replicas[0]
                 for p in range(3)}
    play.expect(sorted(preferred.values()) == [0, 1, 2], "one preferred leader per broker")
    first, second, survivor = 2, 1, 0
    yield Step(f"Broker {first} dies", _s(
        f"SIGKILL broker {first}. Its ZooKeeper session expires; the controller elects, for",
        f"the partition broker {first} led, the first live replica of its ISR, and removes",
        f"broker {first} from every ISR. Writes pause for the session timeout, then go on."))
    s.kill(first)
    s.wait(lambda: all(s.state("orders", p).leader not in (first, -1) for p in range(3)),
           f"no partition led by broker {first}")
    yield Step(f"Broker {second} dies too", _s(
        f"SIGKILL broker {second}. Every leadership now piles up on broker {survivor}, the",
        "only broker left; the ISRs shrink to it. With min.insync.replicas=1 it keeps",
        "accepting writes alone."))
    s.kill(second)
    s.wait(lambda: all(s.state("orders", p).leader == survivor for p in range(3)),
           f"broker {survivor} leads everything")
    for w in writers:
        _resumes(play, s, w, 20, f"after broker {second} died")
    play.expect(all(s.state("orders", p).isr == (survivor,) for p in range(3)),
                f"all three ISRs shrank to broker {survivor}")
    yield Step("The brokers come back", _s(
        f"Start brokers {first} and {second} again. They truncate to what the leader has,",
        "fetch the rest and rejoin the ISRs. But leadership stays where it is: broker",
        f"{survivor} leads all three partitions, so one broker carries all the load."))
    s.restart(first)
    s.restart(second)
    s.wait(lambda: all(len(s.state("orders", p).isr) == 3 for p in range(3)), "full ISRs")
    play.expect(all(s.state("orders", p).leader == survivor for p in range(3)),
                "leadership stays unbalanced after the brokers return")
    yield Step("A preferred leader election", _s(
        "kafka-leader-election --election-type preferred: each partition's first assigned",
        "replica takes leadership back (auto.leader.rebalance.enable does the same on a",
        "timer). The load is balanced again."))

    def balanced():
        if all(s.state("orders", p).leader == preferred[p] for p in range(3)):
            return True
        s.admin.elect_leaders("preferred", [("orders", p) for p in range(3)])
        return False
    s.wait(balanced, "the preferred leaders back")
    for w in writers:
        _resumes(play, s, w, 20, "after the preferred election")
    play.expect(True, "each broker leads one partition again")
    for w in writers:
        w.stop()
    lost = sum(s.verdict("orders", p, [writers[p]]).lost for p in range(3))
    play.expect(lost == 0, f"no acknowledged write lost (lost: {lost})")


def acks1_slow_followers(play: Play) -> Iterator[Step]:
    yield Step("acks=1: the leader answers alone", _s(
        "One partition on brokers 0, 1, 2; the producer uses acks=1: the leader",
        "acknowledges a write as soon as it is in its own log, before any follower has it.",
        "replica.lag.time.max.ms is 30 s, so followers that fall behind for a moment stay in",
        "the ISR."))
    s = play.stage(settings={"replica.lag.time.max.ms": "30000",
                             "zookeeper.session.timeout.ms": "6000"})
    play.topics = ["t"]
    controller = s.controller
    leader, *followers = [b for b in s.others(controller)] + [controller]
    s.topic("t", assignment={0: [leader] + followers}, config={"min.insync.replicas": "1"})
    w = s.writer("t", "w", acks=1)
    s.wait_acks(w, 50)
    yield Step("The followers fall behind", _s(
        f"Brokers {followers[0]} and {followers[1]} stop fetching (SIGSTOP: as slow as a",
        "replica can be). The leader keeps acknowledging acks=1 writes that only it has.",
        "They stay in the ISR: they have not been behind for 30 s yet."))
    for f in followers:
        s.pause(f)
    s.wait_acks(w, 100)
    yield Step("The leader dies", _s(
        f"SIGKILL broker {leader}, then the followers wake up. They are still in the ISR, so",
        "the controller elects one of them, cleanly: no unclean election is needed. It",
        "never received the writes the old leader acknowledged alone."))
    s.kill(leader)
    for f in followers:
        s.resume(f)
    s.wait_state("t", lambda st: st.leader in followers, "a follower elected")
    _resumes(play, s, w, 20, "after the leader died")
    yield Step("The old leader returns", _s(
        f"Broker {leader} comes back as a follower and truncates its log to the new",
        "leader's: the acknowledged writes that only it had are gone for good."))
    s.restart(leader)
    s.wait_state("t", lambda st: leader in st.isr, f"broker {leader} back in the ISR")
    w.stop()
    v = s.verdict("t")
    play.expect(v.lost > 0, f"acknowledged writes lost: {v.lost} of {v.acknowledged} "
                            f"(e.g. {v.lost_examples[:2]})")


def acks_all_slow_follower(play: Play) -> Iterator[Step]:
    yield Step("acks=all with a slow follower", _s(
        "One partition on brokers L, F1, F2; acks=all, min.insync.replicas=1,",
        "replica.lag.time.max.ms 3 s, and unclean.leader.election.enable=true for the last",
        "step. acks=all means: acknowledged once every replica in the ISR has it."))
    s = play.stage()
    play.topics = ["t"]
    controller = s.controller
    L, F1, F2 = s.others(controller) + [controller]
    s.topic("t", assignment={0: [L, F1, F2]},
            config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    w = s.writer("t", "w")
    s.wait_acks(w, 50)
    yield Step(f"Follower {F2} becomes slow", _s(
        f"Broker {F2} stops answering (SIGSTOP). acks=all writes wait for it, until the",
        f"leader has not seen it caught up for replica.lag.time.max.ms: then broker {L}",
        f"removes it from the ISR, and writes flow again with ISR [{L}, {F1}]."))
    s.pause(F2)
    s.wait_state("t", lambda st: F2 not in st.isr, f"broker {F2} out of the ISR")
    _resumes(play, s, w, 50, "while the follower was slow")
    yield Step(f"The leader {L} dies", _s(
        f"SIGKILL broker {L}. Broker {F1} is in the ISR and has every acknowledged write:",
        "the controller elects it. Nothing acknowledged is lost: that is what acks=all buys."))
    s.kill(L)
    s.wait_state("t", lambda st: st.leader == F1, f"broker {F1} elected")
    _resumes(play, s, w, 50, "after the leader died")
    v = s.verdict("t")
    play.expect(v.lost == 0, f"after the clean election nothing is lost (lost {v.lost} of "
                             f"{v.acknowledged})")
    yield Step(f"The last ISR member {F1} dies; the slow {F2} wakes up", _s(
        f"SIGKILL broker {F1}, the only replica left in the ISR, and resume broker {F2}.",
        "No ISR member is alive. With unclean leader election enabled, the controller",
        f"elects broker {F2} anyway: it was out of sync, so every write acknowledged since",
        "it fell behind is lost. Without it, the partition would stay offline instead."))
    s.kill(F1)
    s.resume(F2)
    s.wait_state("t", lambda st: st.leader == F2, f"unclean election of broker {F2}")
    _resumes(play, s, w, 20, "after the unclean election")
    w.stop()
    v = s.verdict("t")
    play.expect(v.lost > 0, f"after the unclean election acknowledged writes are lost: "
                            f"{v.lost} of {v.acknowledged}")


def min_insync(play: Play) -> Iterator[Step]:
    yield Step("min.insync.replicas=2", _s(
        "One partition, 3 replicas, acks=all and min.insync.replicas=2: a write is",
        "accepted only while at least 2 replicas are in the ISR. Availability is traded",
        "for safety."))
    s = play.stage()
    play.topics = ["t"]
    controller = s.controller
    L, F1, F2 = s.others(controller) + [controller]
    s.topic("t", assignment={0: [L, F1, F2]}, config={"min.insync.replicas": "2"})
    w = s.writer("t", "w")
    s.wait_acks(w, 50)
    yield Step("Both followers die", _s(
        f"SIGKILL brokers {F1} and {F2}. The ISR shrinks to [{L}], below",
        "min.insync.replicas: the leader refuses acks=all writes with NOT_ENOUGH_REPLICAS."))
    s.kill(F1)
    s.kill(F2)
    s.wait_state("t", lambda st: st.isr == (L,), f"ISR [{L}]")
    refused = _refused(s.client, w.failed, w.unknown)
    s.wait(lambda: _refused(s.client, w.failed, w.unknown) >= refused + 3, "writes refused")
    acked = w.acked
    play.hold(1.0)
    play.expect(w.acked == acked, "no write acknowledged while the ISR is below 2")
    now = _refused(s.client, w.failed, w.unknown)
    how = "" if s.client == "native" else ", retried by the client until they timed out"
    play.expect(now > refused, f"writes refused with NOT_ENOUGH_REPLICAS ({now - refused} "
                               f"so far{how})")
    yield Step(f"Broker {F1} returns", _s(
        f"Broker {F1} catches up and rejoins the ISR: two replicas again, writes are",
        "accepted again."))
    s.restart(F1)
    s.wait_state("t", lambda st: F1 in st.isr, f"broker {F1} in the ISR")
    _resumes(play, s, w, 50, "after the ISR grew back")
    w.stop()
    v = s.verdict("t")
    play.expect(v.lost == 0, f"nothing acknowledged was lost (lost {v.lost} of "
                             f"{v.acknowledged}; refused {v.refused})")


# ====================================================================== truncation

MODES = ("high-watermark", "leader-epoch")


def hw_truncation(play: Play) -> Iterator[Step]:
    yield Step("Two clusters, two truncation modes", _s(
        "The same story runs on two clusters side by side: one truncates like Kafka before",
        "KIP-101 (replication.truncation.mode=high-watermark: a follower that restarts or",
        "changes leader cuts its log to its high watermark), the other like Kafka since",
        "(leader-epoch: it asks the leader where its epoch ended). Replicas A, B, C;",
        "acks=all, min.insync.replicas=2. A follower learns the HW one fetch after the",
        "leader: replica.fetch.wait.max.ms is 30 s here, so the followers' HWs lag."))
    stages = {m: play.stage(m, brokers=4, settings={
        "zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "60000",
        "replica.fetch.wait.max.ms": "30000", "replication.truncation.mode": m})
        for m in MODES}
    play.topics = ["t"]
    cast = {}
    acked = {}
    for m, s in stages.items():
        A, B, C = s.others(s.controller)
        cast[m] = (A, B, C)
        s.topic("t", assignment={0: [A, B, C]}, config={"min.insync.replicas": "2"})
        p = Producer(bootstrap_servers=s.cluster.bootstrap_servers, acks="all")
        acked[m] = {p.send("t", f"m{i}".encode(), partition=0).get(timeout=30).offset:
                    f"m{i}".encode() for i in range(5)}
        p.close()
        last = max(acked[m])
        s.wait(lambda s=s, A=A, last=last: (lambda b: b is not None and
                                            b.high_watermark == last + 1)(s.board(A, "t")),
               "A's HW to cover the last write")
    yield Step("A double failure", _s(
        "The leader A dies. B is elected; C becomes B's follower. In high-watermark mode",
        "C cuts its log to its own HW first, which lags: the last acknowledged write is",
        "gone from C. Then B stops too (paused past its session): C is elected, the only",
        "replica left. In leader-epoch mode C asks B where epoch 0 ended and cuts nothing."))
    import time
    for m, s in stages.items():
        s.kill(cast[m][0])
    time.sleep(1.2)  # B must lose its session at least one zk tick after A does
    for m, s in stages.items():
        s.pause(cast[m][1])
    for m, s in stages.items():
        s.wait_state("t", lambda st, C=cast[m][2]: st.leader == C, "C elected")
    yield Step("What C has", _s(
        "B comes back and follows C. Read the partition from C, now the leader, and",
        "compare with what was acknowledged. (In leader-epoch mode KIP-966's strict min",
        "ISR holds C's HW while C is alone in the ISR: the last write shows once B is",
        "back in it.)"))
    for m, s in stages.items():
        s.resume(cast[m][1])
    for m, s in stages.items():
        if m != "high-watermark":
            C, last = cast[m][2], max(acked[m])
            s.wait(lambda s=s, C=C, last=last: (lambda b: b is not None and
                                                b.high_watermark > last)(s.board(C, "t")),
                   "C's HW to cover the last write (B back in the ISR)")
        data = s.read("t")
        lost = [v.decode() for o, v in acked[m].items() if data.get(o) != v]
        if m == "high-watermark":
            play.expect(bool(lost), f"{m}: acknowledged and lost: {lost}")
        else:
            play.expect(not lost, f"{m}: nothing lost ({lost or 'none'})")


def kip101_power_failure(play: Play) -> Iterator[Step]:
    yield Step("KIP-101 scenario 2, side by side", _s(
        "Replicas A and B of one partition, min.insync.replicas=1, in a high-watermark",
        "cluster and a leader-epoch cluster. A checkpoints its HW every 100 ms; B's last",
        "checkpoint is older (every 60 s), as happens when a power cut comes between two",
        "checkpoints."))
    stages, cast = {}, {}
    for m in MODES:
        # Broker 2's HW checkpoint is the old one (every 60 s); the others' every 100 ms.
        s = play.stage(m, settings={"replication.truncation.mode": m,
                                    "replica.high.watermark.checkpoint.interval.ms": "100"},
                       broker_config={2: {
                           "replica.high.watermark.checkpoint.interval.ms": "60000"}})
        B = 2
        A = [b for b in s.others(B) if b != s.controller][0]
        cast[m] = (A, B)
        stages[m] = s
    play.topics = ["t"]
    for m, s in stages.items():
        A, B = cast[m]
        s.topic("t", assignment={0: [A, B]}, config={"min.insync.replicas": "1"})
        p = Producer(bootstrap_servers=s.cluster.bootstrap_servers, acks="all")
        for v in (b"m1", b"m2"):
            p.send("t", v, partition=0).get(timeout=30)
        p.close()
        ck = s.cluster.broker_dir(A) / "logs" / "replication-offset-checkpoint"
        s.wait(lambda ck=ck: ck.exists() and "t 0 2" in ck.read_text(), "A's HW checkpoint 2")
    yield Step("A dies, then B loses power", _s(
        "A dies; B leads alone. Then B's power fails: its segment files lose everything",
        "that was not flushed (here: m1 and m2). Nothing tells B that it lost committed",
        "records (its HW checkpoint predates them), so it comes back and leads, the only",
        "ISR member, and takes new writes m3 and m4 at offsets 0 and 1."))
    for m, s in stages.items():
        A, B = cast[m]
        s.kill(A)
        s.wait_state("t", lambda st, B=B: st.leader == B, "B leads")
        s.power_failure(B)
        s.restart(B)
        s.wait_state("t", lambda st, B=B: st.leader == B, "B leads again")
        p = Producer(bootstrap_servers=s.cluster.bootstrap_servers, acks="all")
        for v in (b"m3", b"m4"):
            p.send("t", v, partition=0).get(timeout=30)
        p.close()
    yield Step("A returns", _s(
        "A comes back as B's follower. In high-watermark mode it keeps everything below its",
        "HW (2): offsets 0 and 1 hold m1, m2 on A and m3, m4 on B, and the logs never",
        "converge. In",
        "leader-epoch mode A asks B where epoch 0 ended (0 on B) and truncates first."))
    for m, s in stages.items():
        A, B = cast[m]
        s.restart(A)
        s.wait_state("t", lambda st, A=A: A in st.isr, "A in the ISR")
    yield Step("Compare the replicas' files", _s(
        "Stop both clusters and read every replica's segment files below the HW",
        "(LogMatching: below the HW all replicas must hold the same records)."))
    for m, s in stages.items():
        s.stop(["t"])
        divergent = s.divergence("t")
        if m == "high-watermark":
            play.expect(bool(divergent), f"{m}: the replicas diverge below the HW: "
                                         f"{divergent[:2]}")
        else:
            play.expect(not divergent, f"{m}: the replicas agree")


# ====================================================================== partitions

SAFE = {"min.insync.replicas": "2"}
PARTITIONS = {
    1: ("follower|leader", "A follower cut from its leader", _s(
        "The follower cannot fetch; it still sees ZooKeeper. After replica.lag.time.max.ms",
        "the leader removes it from the ISR; writes go on with the other two replicas.",
        "Healed, it catches up and rejoins.")),
    2: ("leader|followers", "The leader cut from all followers", _s(
        "The leader still sees ZooKeeper, so it stays leader; no follower can fetch. It",
        "shrinks the ISR to itself; with min.insync.replicas=2 every acks=all write is now",
        "refused (NOT_ENOUGH_REPLICAS). Nothing acknowledged can be lost.")),
    3: ("follower|zk", "A follower cut from ZooKeeper", _s(
        "The follower's session expires: to the controller it is dead, and it leaves the",
        "ISR, although it can still fetch. Healed, it registers again and rejoins.")),
    4: ("leader|zk", "The leader cut from ZooKeeper", _s(
        "The leader's session expires; the controller elects a follower from the ISR. The",
        "old leader, still reachable by clients, cannot commit anything: its followers now",
        "follow the new leader and it cannot shrink the ISR without ZooKeeper.")),
    5: ("isolate:follower", "A follower fully isolated", _s(
        "It can reach nobody: its session expires and the leader drops it from the ISR.",
        "Writes go on with two replicas.")),
    6: ("isolate:leader", "The leader fully isolated", _s(
        "For a while there are two leaders: the controller elects a new one after the old",
        "one's session expires, while the old one still takes client requests (the",
        "clients here reach every broker). It cannot commit: min.insync.replicas=2 and no",
        "follower fetches from it.")),
    7: ("controller|broker", "The controller cut from a broker", _s(
        "The data path does not involve the controller: leaders, followers and clients go",
        "on. The controller's requests to that broker wait until the link heals.")),
    8: ("controller|zk", "The controller cut from ZooKeeper", _s(
        "Its session expires and it resigns; another broker wins the election with a",
        "higher controller epoch, and brokers ignore the old one's requests from then on.")),
}


def partition_scenario(number: int) -> Callable[[Play], Iterator[Step]]:
    target, title, what = PARTITIONS[number]

    def body(play: Play) -> Iterator[Step]:
        yield Step("A safe configuration, real network links", _s(
            "Every process runs in its own network namespace; the links between them are",
            "veth pairs that can be cut. One partition on 3 brokers, acks=all,",
            "min.insync.replicas=2, unclean election off. The producer reaches every",
            "broker (it sits outside the partition)."))
        s = play.stage(netns=True)
        play.topics = ["t"]
        controller = s.controller
        L, F1, F2 = s.others(controller) + [controller]
        s.topic("t", assignment={0: [L, F1, F2]}, config=SAFE)
        w = s.writer("t", "w", request_timeout_ms=1500, delivery_timeout_ms=3000)
        s.wait_acks(w, 50)
        before = s.state("t")
        ctrl_epoch = s.cluster.zk().get("/controller_epoch")[0]
        links = _links(s, target, L, F1, controller)
        yield Step(f"Scenario {number}: {title}", what + f" (cut: {', '.join(links)})")
        for link in links:
            s.cluster.cut(*link.split("|"))
        hold = 8.0
        if number in (1, 5):
            s.wait_state("t", lambda st: F1 not in st.isr, f"broker {F1} out of the ISR")
        elif number == 2:
            s.wait_state("t", lambda st: st.isr == (L,), "ISR shrunk to the leader")
            refused = w.failed + w.unknown
            s.wait(lambda: w.failed + w.unknown > refused, "writes refused")
            play.expect(s.state("t").leader == L, "the leader stays leader")
        elif number == 3:
            s.wait_state("t", lambda st: F1 not in st.isr, f"broker {F1} out of the ISR")
            play.expect(s.state("t").leader == L, "the leader is unchanged")
        elif number in (4, 6):
            s.wait_state("t", lambda st: st.leader not in (L, -1), "a new leader elected")
        elif number == 8:
            s.wait(lambda: s.controller not in (None, controller), "a new controller")
            play.expect(s.cluster.zk().get("/controller_epoch")[0] != ctrl_epoch,
                        "the controller epoch went up")
        else:
            play.hold(hold)
            play.expect(s.state("t").leader == before.leader and w.acked > 0,
                        "leadership unchanged, writes go on")
        yield Step("Heal", _s(
            "Bring the links back. Every replica catches up and the ISR is full again;",
            "then read the partition and compare it with what was acknowledged."))
        s.cluster.heal()
        s.wait_state("t", lambda st: len(st.isr) == 3, "a full ISR", timeout_s=90)
        _resumes(play, s, w, 20, "after the heal")
        w.stop()
        # The files are compared below the HW: every replica first holds what the leader
        # holds (a follower that fell behind again while the last writes went on, as on
        # a loaded machine, would otherwise lack the tail and count as divergent).
        s.wait(lambda: _caught_up(s, "t", (0, 1, 2)),
               "t-0: every replica at the leader's log end", timeout_s=90)
        v = s.verdict("t")
        s.stop(["t"])
        divergent = s.divergence("t")
        play.expect(v.lost == 0, f"nothing acknowledged was lost (lost {v.lost} of "
                                 f"{v.acknowledged}; refused {v.refused}, unknown {v.unknown})")
        play.expect(not divergent, f"the replicas' files agree below the HW "
                                   f"({len(divergent)} divergent offsets"
                                   f"{_divergent_examples(divergent)})")
    return body


def _caught_up(s: Stage, topic: str, replicas, partition: int = 0) -> bool:
    """Every replica in the ISR, its published LEO the leader's (writes stopped)."""
    st = s.state(topic, partition)
    if st is None or st.leader < 0 or sorted(st.isr) != sorted(replicas):
        return False
    leader = s.board(st.leader, topic, partition)
    if leader is None:
        return False
    for b in replicas:
        row = s.board(b, topic, partition)
        if row is None or row.log_end_offset != leader.log_end_offset:
            return False
    return True


def _divergent_examples(divergent: list, shown: int = 3) -> str:
    """The first divergent offsets with each replica's value there (or "missing"): what
    a failed LogMatching check needs to be traced (a CI run once found 5 and said no
    more)."""
    if not divergent:
        return ""
    parts = []
    for _, offset, held in divergent[:shown]:
        values = ", ".join(f"broker {b}: " + ("missing" if v is None else repr(v[:24]))
                           for b, v in sorted(held.items()))
        parts.append(f"offset {offset} ({values})")
    return "; first: " + "; ".join(parts)


def _links(s: Stage, target: str, L: int, F1: int, controller: int) -> list[str]:
    nodes = s.cluster.mesh.nodes
    names = {"leader": f"b{L}", "follower": f"b{F1}", "controller": f"b{controller}",
             "zk": "zk"}
    if target.startswith("isolate:"):
        who = names[target.split(":")[1]]
        return [f"{who}|{n}" for n in nodes if n != who]
    a, b = target.split("|")
    if b == "followers":
        return [f"b{L}|b{f}" for f in s.others(L)]
    if b == "broker":
        return [f"{names[a]}|b{F1}"]
    return [f"{names[a]}|{names[b]}"]


def isolated_leader_with_shrunk_isr(play: Play) -> Iterator[Step]:
    yield Step("Scenario 6's variant: a leader alone in its ISR, then isolated", _s(
        "Two topics on the same three brokers with the same leader: 'min1'",
        "(min.insync.replicas=1) and 'min2' (min.insync.replicas=2), both with unclean",
        "leader election enabled. acks=all producers write to both; they reach every",
        "broker."))
    s = play.stage(netns=True, settings={"zookeeper.session.timeout.ms": "6000"})
    play.topics = ["min1", "min2"]
    controller = s.controller
    L, F1, F2 = s.others(controller) + [controller]
    for t, n in (("min1", "1"), ("min2", "2")):
        s.topic(t, assignment={0: [L, F1, F2]}, config={
            "min.insync.replicas": n, "unclean.leader.election.enable": "true"})
    w1 = s.writer("min1", "w1", request_timeout_ms=1500, delivery_timeout_ms=3000)
    w2 = s.writer("min2", "w2", request_timeout_ms=1500, delivery_timeout_ms=3000)
    s.wait_acks(w1, 50)
    s.wait_acks(w2, 50)
    yield Step("The followers fall behind", _s(
        f"Brokers {F1} and {F2} stop (SIGSTOP). After replica.lag.time.max.ms the leader",
        f"shrinks both ISRs to [{L}]. min1 keeps accepting acks=all writes: the ISR is",
        "all it needs. min2 refuses them: one in-sync replica is below 2."))
    s.pause(F1)
    s.pause(F2)
    for t in ("min1", "min2"):
        s.wait_state(t, lambda st: st.isr == (L,), f"ISR [{L}]")
    yield Step("The leader is isolated", _s(
        f"Cut broker {L} from ZooKeeper and from the other brokers, then wake the",
        "followers. The leader's session expires (6 s here); no ISR member is left, so the",
        f"controller elects broker {F1} uncleanly. Broker {L} does not know: it still",
        "takes min1's writes and acknowledges them, alone. Two leaders."))
    for other in ("zk", f"b{F1}", f"b{F2}"):
        s.cluster.cut(f"b{L}", other)
    s.resume(F1)
    s.resume(F2)
    for t in ("min1", "min2"):
        s.wait_state(t, lambda st: st.leader not in (L, -1), "a new (unclean) leader")
    own = s.board(L, "min1")
    before = own.log_end_offset if own is not None else 0
    play.hold(3.0)   # two leaders for a while
    own = s.board(L, "min1")
    after = own.log_end_offset if own is not None else 0
    play.expect(own is not None and int(own.role) == 1 and after > before,
                f"the isolated broker {L} still leads min1 in its own eyes and acknowledges "
                f"writes alone (its log {before} -> {after})")
    yield Step("Heal", _s(
        f"Broker {L} reconnects, learns it no longer leads, and truncates its log to the",
        "new leader's: every min1 write it acknowledged alone is gone. min2 lost nothing:",
        "those writes were refused instead."))
    s.cluster.heal()
    for t in ("min1", "min2"):
        s.wait_state(t, lambda st: L in st.isr, f"broker {L} back in the ISR", timeout_s=90)
    w1.stop()
    w2.stop()
    v1, v2 = s.verdict("min1"), s.verdict("min2")
    play.expect(v1.lost > 0, f"min1: acknowledged writes lost: {v1.lost} of "
                             f"{v1.acknowledged}")
    refused = _refused(s.client, v2.refused, v2.unknown)
    play.expect(v2.lost == 0 and refused > 0,
                f"min2: nothing lost ({v2.lost}); {refused} writes refused instead")


def controller_failover(play: Play) -> Iterator[Step]:
    yield Step("The controller", _s(
        "One broker is the controller: it holds /controller in ZooKeeper and makes every",
        "leadership decision, stamped with the controller epoch."))
    s = play.stage()
    play.topics = ["t"]
    old = s.controller
    L = s.others(old)[0]
    s.topic("t", assignment={0: [L] + s.others(L)}, config={"min.insync.replicas": "2"})
    w = s.writer("t", "w")
    s.wait_acks(w, 50)
    epoch = s.cluster.zk().get("/controller_epoch")[0]
    yield Step(f"The controller (broker {old}) dies", _s(
        "SIGKILL it. Its session expires, /controller goes away, and another broker wins",
        "the election with a higher epoch. The data path never stopped: the leader of",
        "'t' is another broker."))
    s.kill(old)
    s.wait(lambda: s.controller not in (None, old), "a new controller")
    play.expect(s.cluster.zk().get("/controller_epoch")[0] != epoch, "the epoch went up")
    _resumes(play, s, w, 50, "after the controller died")
    s.restart(old)
    yield Step(f"A controlled shutdown of the leader {L}", _s(
        f"SIGTERM broker {L}. Before it stops it asks the controller to move its",
        "leaderships; the controller elects another ISR member and only then does the",
        "broker go. Writes barely pause."))
    s.cluster.stop(L, grace_s=30)
    s.wait_state("t", lambda st: st.leader not in (L, -1), "leadership moved")
    _resumes(play, s, w, 50, "after the controlled shutdown")
    gaps = [b.time_ns - a.time_ns for a, b in zip(
        [o for o in w.history() if o.type == "ok"], [o for o in w.history() if o.type == "ok"][1:])]
    play.note(f"longest pause between acknowledgements: {max(gaps) / 1e6:.0f} ms")
    s.restart(L)
    w.stop()
    v = s.verdict("t")
    play.expect(v.lost == 0, f"nothing acknowledged was lost (lost {v.lost} of "
                             f"{v.acknowledged})")


CATALOG: list[Scenario] = [
    Scenario("failover", "Failover and leader placement", "seed 003, figures 1-6",
             "no loss; leaders pile up on the survivor and stay there until a preferred "
             "election", failover),
    Scenario("acks1", "acks=1, slow followers, then the leader dies", "seed 003, figures 7-12",
             "acknowledged writes are lost", acks1_slow_followers),
    Scenario("acks-all", "acks=all with a slow follower, then unclean election",
             "seed 003, figures 13-18",
             "nothing lost while an ISR member survives; loss after the unclean election",
             acks_all_slow_follower),
    Scenario("min-insync", "min.insync.replicas=2", "seed 003, figures 19-20",
             "writes refused while the ISR is below 2; nothing lost", min_insync),
    Scenario("hw-truncation", "High-watermark truncation after a double failure",
             "seeds 000, 001, 004; KIP-101 scenario 1",
             "loss in high-watermark mode, none in leader-epoch mode", hw_truncation),
    Scenario("kip101-divergence", "Divergent logs after a power failure",
             "KIP-101 scenario 2",
             "the replicas diverge in high-watermark mode, not in leader-epoch mode",
             kip101_power_failure),
    *[Scenario(f"partition-{n}", f"Network partition {n}: {PARTITIONS[n][1]}",
               f"seed 003, partition scenario {n}", "nothing lost (safe configuration)",
               partition_scenario(n), netns=True) for n in sorted(PARTITIONS)],
    Scenario("partition-6-shrunk-isr", "Scenario 6's variant: an isolated leader alone in "
             "its ISR", "seed 003, partition scenario 6",
             "min.insync.replicas=1 loses the writes the isolated leader acknowledged; "
             "min.insync.replicas=2 refuses them", isolated_leader_with_shrunk_isr,
             netns=True),
    Scenario("controller", "Controller fail-over and controlled shutdown",
             "seed 003 (the controller); Kafka's controlled shutdown",
             "a new controller with a higher epoch; leadership moves before the broker "
             "stops; nothing lost", controller_failover),
    Scenario("txn-zombie", "A zombie producer fenced by a new instance of its "
             "transactional.id", "KIP-98 (zombie fencing); issue 28",
             "the new instance fences the old; the zombie's open transaction is aborted and "
             "its commit fails with ProducerFencedError; read_committed sees committed "
             "data only", txn_scenarios.txn_zombie),
    Scenario("txn-late-write", "A transactional write that arrives after its transaction "
             "ended, without and with KIP-890", "KIP-890; Jepsen, Bufstream 0.1.0",
             "without KIP-890 the late write hangs the LSO, then is read as committed "
             "(aborted read) and the next write is lost; with KIP-890 it is refused",
             txn_scenarios.txn_late_write),
]


def find(name: str) -> Scenario:
    for scenario in CATALOG:
        if scenario.name == name:
            return scenario
    raise KeyError(name)
