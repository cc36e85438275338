"""The kafkajs worker (bench/chaos/clients/kafkajs_worker.js) against a real cluster: its
producer's delivery reports, its standalone and group consumers reading them back, the
fail/info rule, and bad flags (issue 27's client contract, section 1)."""
from __future__ import annotations

import base64
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from node.tools.groups_broker import BrokerGroups
from node.waiting import poll_until
from tests.node.kafka.clients import create_topic, missing, node_env, running_cluster

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(missing("kafkajs") is not None, reason=str(missing("kafkajs")))]

WORKER = Path(__file__).resolve().parents[3] / "bench" / "chaos" / "clients" / "kafkajs_worker.js"
TOPIC = "js"
PARTITIONS = 3
READ_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0


class Worker:
    """One worker process; its stdout events parsed on a thread."""

    def __init__(self, *args: str, log: Path) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen(["node", str(WORKER), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=node_env())
        self.events: list[dict] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def ops(self, f: str, type_: str | None = None) -> list[dict]:
        return [e for e in list(self.events) if e["event"] == "op" and e["f"] == f
                and (type_ is None or e["type"] == type_)]

    def reads(self) -> list[tuple[int, int, bytes]]:
        return [(p, o, base64.b64decode(v)) for e in self.ops("poll", "ok") for p, o, v in e["reads"]]

    def finish(self) -> int:
        """Close stdin (the stop), wait for the exit and the last event."""
        try:
            self.proc.stdin.close()
            code = self.proc.wait(EXIT_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.reader.join(EXIT_TIMEOUT_S)
            self.log.close()
        return code


def run(*args: str, timeout_s: float = 60.0) -> tuple[int, list[dict], str]:
    done = subprocess.run(["node", str(WORKER), *args], capture_output=True, text=True,
                          timeout=timeout_s, env=node_env(), stdin=subprocess.DEVNULL)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("kafkajs-worker"),
                         config={"group.initial.rebalance.delay.ms": "0"}) as c:
        create_topic(c, TOPIC, partitions=PARTITIONS)
        yield c


@pytest.fixture(scope="module")
def produced(cluster):
    """A producer worker's ~2 s of acks=all sends: (events, {(partition, offset): value})."""
    code, events, err = run("--client", "kafkajs", "--role", "producer", "--name", "p0",
                            "--bootstrap", cluster.kafka_bootstrap_servers, "--topic", TOPIC,
                            "--duration", "2", "--rate", "100", "--acks", "all")
    assert code == 0, err
    oks = [e for e in events if e["event"] == "op" and e["type"] == "ok"]
    return events, {(e["partition"], e["offset"]): base64.b64decode(e["value"]) for e in oks}


def test_the_producer_reports_each_send_once_with_distinct_offsets(produced):
    events, written = produced
    assert events[0]["event"] == "start" and events[0]["client"] == "kafkajs"
    assert events[0]["settings"] == {"send.acks": -1} and events[0]["version"].startswith("2.")
    assert events[-1]["event"] == "end"
    ops = [e for e in events if e["event"] == "op"]
    invoked = [e["value"] for e in ops if e["type"] == "invoke"]
    completed = [e["value"] for e in ops if e["type"] != "invoke"]
    assert len(invoked) >= 50 and sorted(invoked) == sorted(completed)
    assert all(e["type"] == "ok" for e in ops if e["type"] != "invoke"), ops
    assert len(written) == len(invoked), "two sends reported one offset"
    assert {p for p, _ in written} == set(range(PARTITIONS)), "keyless sends spread"
    assert sorted(written.values()) == sorted(f"p0-{n}".encode() for n in range(len(invoked)))
    assert events[-1]["ok"] == len(invoked) and events[-1]["errors"] == 0
    times = [e["time_ns"] for e in ops]
    assert all(isinstance(t, int) for t in times) and times == sorted(times)


def test_the_standalone_consumer_reads_every_partition_from_the_start(cluster, produced, tmp_path):
    _, written = produced
    worker = Worker("--role", "consumer", "--name", "c0", "--bootstrap",
                    cluster.kafka_bootstrap_servers, "--topic", TOPIC, log=tmp_path / "c0.log")
    try:
        poll_until(lambda: len(worker.reads()) >= len(written), READ_TIMEOUT_S, "every record read")
    finally:
        code = worker.finish()
    assert code == 0
    reads = worker.reads()
    assert {(p, o): v for p, o, v in reads} == written and len(reads) == len(written)
    assert "groupId" not in worker.events[0]["settings"]   # no group behind it
    assert not worker.ops("assign") and worker.events[-1]["event"] == "end"
    assert worker.events[-1]["ok"] == len(written)


def test_a_group_consumer_reports_its_assignment_and_commits(cluster, produced, tmp_path):
    _, written = produced
    # a short fetch wait: kafkajs' disconnect waits out the fetch in flight (5 s by default)
    worker = Worker("--role", "consumer", "--name", "g0", "--group", "js-group", "--bootstrap",
                    cluster.kafka_bootstrap_servers, "--topic", TOPIC,
                    "--set", "maxWaitTimeInMs=500", log=tmp_path / "g0.log")
    try:
        poll_until(lambda: len(worker.reads()) >= len(written), READ_TIMEOUT_S, "every record read")
    finally:
        code = worker.finish()
    assert code == 0
    assert {(p, o): v for p, o, v in worker.reads()} == written
    assert worker.events[0]["settings"]["maxWaitTimeInMs"] == 500
    [assign] = worker.ops("assign")
    assert assign["partitions"] == list(range(PARTITIONS)) and assign["generation"] >= 1
    assert assign["member"].startswith("minikafka-chaos-g0")
    committed = {p: o for e in worker.ops("commit", "ok") for p, o in e["offsets"]}
    ends = {p: max(o for q, o in written if q == p) + 1 for p in range(PARTITIONS)}
    assert committed == ends, "kafkajs commits the offset after the last record read"
    last_ops = [e for e in worker.events if e["event"] == "op"]
    assert last_ops[-1]["f"] == "revoke" and last_ops[-1]["partitions"] == list(range(PARTITIONS))
    assert worker.events[-1]["event"] == "end"


def test_a_group_member_still_joining_at_its_stop_exits_at_once(cluster, produced, tmp_path):
    """A member whose JoinGroup waits (another member, SIGSTOPped, does not rejoin: the
    join waits for it up to its rebalance timeout) stops at its stop, exit 0; it used to
    wait in kafkajs' run() until the stop's backstop ended it with exit 1, 25 s later."""
    args = ["--role", "consumer", "--group", "js-stuck", "--bootstrap",
            cluster.kafka_bootstrap_servers, "--topic", TOPIC, "--set", "maxWaitTimeInMs=500"]
    first = Worker(*args, "--name", "s0", log=tmp_path / "s0.log")
    second = None
    try:
        poll_until(lambda: first.ops("assign"), READ_TIMEOUT_S, "the first member's assignment")
        first.proc.send_signal(signal.SIGSTOP)
        second = Worker(*args, "--name", "s1", log=tmp_path / "s1.log")
        with BrokerGroups(cluster.bootstrap_servers) as groups:
            poll_until(lambda: groups.describe("js-stuck").state == "PreparingRebalance",
                       READ_TIMEOUT_S, "the second member's JoinGroup to wait")
        started = time.monotonic()
        code = second.finish()
        took = time.monotonic() - started
        assert code == 0, (tmp_path / "s1.log").read_text()[-2000:]
        assert took < 12, f"the stop took {took:.1f} s"
        assert not second.ops("assign") and second.events[-1]["event"] == "end"
    finally:
        first.proc.send_signal(signal.SIGCONT)
        first.finish()
        if second is not None and second.proc.poll() is None:
            second.finish()


def test_refused_on_every_attempt_is_fail_and_unanswered_at_the_deadline_is_info(cluster):
    """min.insync.replicas above the replicas: the broker refuses every attempt before
    appending (fail); a send still unanswered at --delivery-timeout-ms is info."""
    create_topic(cluster, "js-refused", replication_factor=1, config={"min.insync.replicas": "2"})
    code, events, err = run("--role", "producer", "--name", "p1", "--bootstrap",
                            cluster.kafka_bootstrap_servers, "--topic", "js-refused",
                            "--duration", "0.5", "--rate", "4", "--set", "retry.retries=1",
                            "--set", "retry.initialRetryTime=50")
    assert code == 0, err
    ends = [e for e in events if e["event"] == "op" and e["type"] != "invoke"]
    assert ends and all(e["type"] == "fail" and "in-sync replicas" in e["error"] for e in ends)
    assert any(e["event"] == "client" and e["kind"] == "retry" for e in events)

    # idempotent: kafkajs retries the refusals forever, so only the deadline ends a send
    code, events, err = run("--role", "producer", "--name", "p2", "--bootstrap",
                            cluster.kafka_bootstrap_servers, "--topic", "js-refused",
                            "--duration", "0.5", "--rate", "4", "--idempotence", "on",
                            "--delivery-timeout-ms", "200", "--flush-timeout-s", "0.5")
    assert code == 0, err
    ends = [e for e in events if e["event"] == "op" and e["type"] != "invoke"]
    assert ends and all(e["type"] == "info" and "DeliveryTimeout" in e["error"] for e in ends)
    assert "worker deadline" in events[0]["settings"]["delivery.timeout.ms"]


def test_the_launcher_runs_it_as_the_kafkajs_client(cluster, tmp_path):
    """``python -m bench.chaos.clients --client kafkajs`` execs this worker: a producer and
    a standalone consumer through ``WorkerStream``, stopped by closing stdin."""
    from bench.chaos.clients import WorkerStream, worker_command
    create_topic(cluster, "js-launcher", partitions=2)
    common = {"bootstrap": cluster.kafka_bootstrap_servers, "topic": "js-launcher"}
    env = dict(node_env(), MINIKAFKA_NODE_MODULES=node_env()["NODE_PATH"])
    with WorkerStream(worker_command("kafkajs", role="producer", name="lp", rate=50,
                                     acks="all", idempotence=True, **common),
                      log_path=tmp_path / "lp.log", env=env) as producer:
        poll_until(lambda: producer.acked >= 20, READ_TIMEOUT_S, "20 acknowledged sends")
        assert producer.stop() == 0
    assert producer.client_info["client"] == "kafkajs"
    assert producer.client_info["settings"]["idempotent"] is True
    sent = {(op.partition, op.offset): op.value for op in producer.history() if op.type == "ok"}
    assert producer.failed == producer.unknown == 0 and len(sent) == producer.acked
    with WorkerStream(worker_command("kafkajs", role="consumer", name="lc", **common),
                      log_path=tmp_path / "lc.log", env=env) as consumer:
        poll_until(lambda: consumer.read >= len(sent), READ_TIMEOUT_S, "every record read")
        assert consumer.stop() == 0
    read = {(p, o): v for op in consumer.history() if op.f == "poll" for p, o, v in op.reads}
    assert read == sent and consumer.end_info["ok"] == len(sent)


@pytest.mark.parametrize("args, says", [
    (["--role", "producer", "--name", "p", "--topic", "t"], "--bootstrap is required"),
    (["--role", "reader", "--name", "p", "--bootstrap", "h:1", "--topic", "t"], "--role must be"),
    (["--role", "producer", "--name", "p", "--bootstrap", "h:1", "--topic", "t", "--rate", "x"],
     "--rate needs a number"),
    (["--role", "producer", "--name", "p", "--bootstrap", "h:1", "--topic", "t", "--acks", "2"],
     "--acks must be"),
    (["--role", "producer", "--name", "p", "--bootstrap", "h:1", "--topic", "t", "--acks", "1",
      "--idempotence", "on"], "needs --acks all"),
    (["--role", "producer", "--name", "p", "--bootstrap", "h:1", "--topic", "t", "--colour"],
     "unknown flag"),
    (["--role", "producer", "--name", "p", "--bootstrap", "h:1", "--topic", "t", "--set", "x"],
     "--set needs key=value"),
    (["--role", "producer", "--name", "p", "--bootstrap", "h:1", "--topic", "t", "--value-format",
      "avro"], "native-only"),
])
def test_bad_flags_exit_2_with_one_clear_line(args, says):
    code, events, err = run(*args, timeout_s=30)
    assert code == 2 and events == [] and says in err.splitlines()[0]
