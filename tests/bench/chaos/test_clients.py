"""bench.chaos.clients' workers against one real cluster, per installed client: a
producer (acks all) whose every ``ok`` has a distinct offset, a standalone consumer and
a group consumer that read back everything acknowledged, the group's assign/revoke/commit
reports, clean stops (the duration, SIGTERM, stdin's EOF) and exit 2 on bad flags."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from bench.chaos.checker import Op
from bench.chaos.clients import WorkerStream, missing, worker_command
from node.waiting import poll_until
from tests.conftest import new_cluster_id
from tests.node.kafka.clients import create_topic, running_cluster

PYTHON_CLIENTS = ("native", "confluent-kafka", "kafka-python", "aiokafka")
PARTITIONS = 3
RATE = 100
PRODUCE_S = 2.0
MIN_ACKED = 20                      # of RATE * PRODUCE_S: the native producer sends one at a time
ACKED_BEFORE_SIGTERM = 150          # duration-0 producers are stopped by SIGTERM after this
SIGTERM_CLIENTS = ("confluent-kafka", "aiokafka")
READ_TIMEOUT_S = 30.0
COMMIT_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 20.0
# Auto-commits every 200 ms so the group test sees the client's commit reports.
FAST_COMMITS = {"confluent-kafka": {"auto.commit.interval.ms": 200},
                "kafka-python": {"auto_commit_interval_ms": 200},
                "aiokafka": {"auto_commit_interval_ms": 200},
                "native": {"auto_commit_interval_ms": 200}}
# The checker's Op with the group fields (partitions, offsets, member, generation); until
# then the group checks are the reads and the assign ops' presence.
GROUP_FIELDS = {"partitions", "offsets"} <= {f.name for f in dataclasses.fields(Op)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("clients"), new_cluster_id()) as c:
        yield c


def _sends(stream, type_: str) -> list[Op]:
    return [o for o in stream.history() if o.f == "send" and o.type == type_]


def _read(stream) -> set[tuple]:
    return {(p, o, v) for op in stream.history() if op.f == "poll" and op.type == "ok"
            for p, o, v in op.reads}


@contextmanager
def _workload(client: str, cluster, logs):
    """One client's producer, standalone consumer and group consumer, run together and
    stopped; their streams and what the producer acknowledged."""
    topic = f"workers-{client}"
    create_topic(cluster, topic, partitions=PARTITIONS)
    common = {"topic": topic, "bootstrap": cluster.bootstrap_servers if client == "native"
              else cluster.kafka_bootstrap_servers}
    c0 = WorkerStream(worker_command(client, role="consumer", name="c0", **common),
                      log_path=logs / "c0.log")
    g0 = WorkerStream(worker_command(client, role="consumer", name="g0", group=f"g-{client}",
                                     set=FAST_COMMITS[client], **common),
                      log_path=logs / "g0.log")
    sigterm = client in SIGTERM_CLIENTS
    p0 = WorkerStream(worker_command(client, role="producer", name="p0", acks="all",
                                     rate=RATE, duration=0 if sigterm else PRODUCE_S,
                                     **common),
                      log_path=logs / "p0.log")
    out = SimpleNamespace(client=client, p0=p0, c0=c0, g0=g0, logs=logs)
    try:
        if sigterm:
            poll_until(lambda: p0.acked >= ACKED_BEFORE_SIGTERM or p0.returncode is not None,
                       READ_TIMEOUT_S, f"{client}: {ACKED_BEFORE_SIGTERM} acks")
            p0.proc.send_signal(signal.SIGTERM)
        out.p0_rc = p0.wait(PRODUCE_S + STOP_TIMEOUT_S)
        acked = {(o.partition, o.offset, o.value) for o in _sends(p0, "ok")}
        out.acked = acked
        for stream in (c0, g0):
            poll_until(lambda: acked <= _read(stream) or stream.returncode is not None,
                       READ_TIMEOUT_S, f"{client}: a consumer reading all {len(acked)} acks")
        if client != "native" and GROUP_FIELDS:
            poll_until(lambda: any(o.f == "commit" and o.type == "ok" for o in g0.history()),
                       COMMIT_TIMEOUT_S, f"{client}: a commit report")
        started = time.monotonic()
        out.c0_rc = c0.stop(STOP_TIMEOUT_S)      # stdin's EOF (duration 0)
        out.c0_stop_s = time.monotonic() - started
        out.g0_rc = g0.stop(STOP_TIMEOUT_S)
        yield out
    finally:
        for stream in (p0, c0, g0):
            if stream.returncode is None:
                stream.stop(STOP_TIMEOUT_S)


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("client", PYTHON_CLIENTS)
def test_workers_write_read_back_and_report_the_group(client, cluster, tmp_path):
    why = missing(client)
    if why:
        pytest.skip(why)
    with _workload(client, cluster, tmp_path) as workload:
        _check_producer(workload)
        _check_standalone_consumer(workload)
        _check_group_consumer(workload)
        if client != "native":      # node.client does not report its commits
            _check_commits(workload)


def _tail(workload, name: str) -> str:
    return (workload.logs / f"{name}.log").read_text(errors="replace")[-2000:]


def _check_producer(workload):
    """Every send acknowledged once, at a distinct offset."""
    p0 = workload.p0
    assert workload.p0_rc == 0, _tail(workload, "p0")
    assert p0.client_info["client"] == workload.client and p0.client_info["version"]
    assert p0.client_info["settings"]["acks"] == "all"
    assert p0.end_info is not None and p0.end_info["ok"] == p0.acked, p0.end_info
    invoked = [o.value for o in _sends(p0, "invoke")]
    oks = _sends(p0, "ok")
    assert p0.acked >= MIN_ACKED and len(oks) == p0.acked, (p0.end_info, p0.client_events)
    # A healthy cluster: every send acknowledged (none failed or unknown), each once.
    assert len(invoked) == len(set(invoked)) == p0.acked, (p0.failed, p0.unknown,
                                                           p0.last_error)
    assert len({(o.partition, o.offset) for o in oks}) == len(oks)
    assert {o.partition for o in oks} <= set(range(PARTITIONS))
    assert set(invoked) == {o.value for o in oks}
    assert all(v.startswith(b"p0-") for v in invoked)


def _check_standalone_consumer(workload):
    """It reads back everything acknowledged and stops promptly at stdin's EOF."""
    c0 = workload.c0
    assert workload.acked and workload.acked <= _read(c0)
    assert workload.c0_rc == 0 and c0.end_info is not None, _tail(workload, "c0")
    assert workload.c0_stop_s < 10, "stdin's EOF should stop it promptly"
    assert c0.client_info["settings"].get("auto.offset.reset",
                                          c0.client_info["settings"].get(
                                              "auto_offset_reset")) == "earliest"
    polls = [o for o in c0.history() if o.f == "poll"]
    assert polls and all(o.type in ("invoke", "ok") for o in polls), [
        o.error for o in polls if o.type == "info"]
    assert [o.type for o in polls] == ["invoke", "ok"] * (len(polls) // 2)


def _check_group_consumer(workload):
    """It is assigned every partition, reads everything and revokes all at its end."""
    g0 = workload.g0
    assert workload.g0_rc == 0 and g0.end_info is not None, _tail(workload, "g0")
    assert workload.acked <= _read(g0)
    ops = g0.history()
    assigns = [o for o in ops if o.f == "assign"]
    assert assigns and all(o.type == "ok" for o in assigns)
    if not GROUP_FIELDS:
        return
    assert set().union(*(o.partitions for o in assigns)) == set(range(PARTITIONS))
    owned: set = set()
    for o in ops:
        if o.f == "assign":
            assert not owned & set(o.partitions), "assigned what it owned"
            owned |= set(o.partitions)
        elif o.f == "revoke":
            assert set(o.partitions) <= owned
            owned -= set(o.partitions)
    assert not owned, "a stopping member revokes everything it owns"
    assert ops[-1].f in ("revoke", "commit")    # the close's commit may follow the revoke
    if workload.client in ("confluent-kafka", "kafka-python", "native"):
        assert all(o.member for o in assigns), "these clients expose the member id"
    if workload.client in ("kafka-python", "aiokafka"):
        assert all(o.generation >= 1 for o in assigns), "these expose the generation"


def _check_commits(workload):
    """The client's commit reports: next offsets to read, of what it read."""
    if not GROUP_FIELDS:
        return
    commits = [o for o in workload.g0.history() if o.f == "commit"]
    assert commits and all(o.type == "ok" for o in commits)
    top = {}
    for p, o, _ in _read(workload.g0):
        top[p] = max(top.get(p, -1), o)
    for op in commits:
        for p, offset in op.offsets:
            assert 0 <= offset <= top[p] + 1, (op, top)   # the next offset to read


def _worker(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.chaos.clients", *argv],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


BASE = ["--role", "producer", "--name", "p0", "--bootstrap", "127.0.0.1:9", "--topic", "t"]


@pytest.mark.process
@pytest.mark.parametrize("argv,message", [
    (["--client", "kafka-python", *BASE, "--acks", "2"], "invalid choice"),
    (["--client", "java", *BASE], "invalid choice"),
    (["--client", "aiokafka", *BASE, "--delivery-timeout-ms", "5"], "no delivery timeout"),
    (["--client", "kafka-python", *BASE, "--value-format", "avro"], "native-only"),
    (["--client", "kafka-python", *BASE, "--set", "no_such_setting=1"], "no_such_setting"),
    (["--client", "confluent-kafka", *BASE, "--set", "no.such.property=1"],
     "no.such.property"),
    (["--client", "confluent-kafka", *BASE, "--acks", "1", "--idempotence", "on"],
     "idempotence"),
])
def test_bad_flags_exit_2_with_a_clear_message(argv, message):
    client = argv[1]
    if client != "java" and missing(client):
        pytest.skip(missing(client))
    done = _worker(*argv)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert '"event"' not in done.stdout       # refused before starting


@pytest.mark.process
def test_a_missing_client_exits_2_with_missings_line(tmp_path):
    done = _worker("--client", "kafkajs", *BASE,
                   env={"MINIKAFKA_NODE_MODULES": str(tmp_path / "none")})
    assert done.returncode == 2
    assert "kafkajs" in done.stderr and ("not installed" in done.stderr or
                                         "is not in" in done.stderr or
                                         "missing" in done.stderr)
