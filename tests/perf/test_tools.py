"""The perf tools against a real 2-broker cluster: their lines parse as Kafka's, the
samples file holds one row per record, the zero-copy and Fetch consumers agree, and
every wrong use is one line on stderr with a non-zero exit.

One cluster serves the module (starting brokers is the slow part); each test uses its
own topic so counts do not depend on test order.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.perf.zkservers import free_port
from node.client.admin import Admin
from node.cluster import Cluster
from shm.names import cleanup_cluster, cluster_objects
from tests.conftest import new_cluster_id

pytestmark = pytest.mark.process

TOOL_TIMEOUT_S = 120
NUMBER = r"[0-9]+(?:\.[0-9]+)?"
PROGRESS_LINE = re.compile(
    rf"^(\d+) records sent, ({NUMBER}) records/sec \(({NUMBER}) MB/sec\), ({NUMBER}) ms avg "
    rf"latency, ({NUMBER}) ms max latency\.$")
TOTAL_LINE = re.compile(
    rf"^(\d+) records sent, ({NUMBER}) records/sec \(({NUMBER}) MB/sec\), ({NUMBER}) ms avg "
    rf"latency, ({NUMBER}) ms max latency, ({NUMBER}) ms 50th, ({NUMBER}) ms 95th, "
    rf"({NUMBER}) ms 99th, ({NUMBER}) ms 99\.9th\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUMER_LINE = re.compile(
    rf"^({TIME}), ({TIME}), ({NUMBER}), ({NUMBER}), (\d+), ({NUMBER}), (\d+), (\d+), "
    rf"({NUMBER}), ({NUMBER})$")
SAMPLE_COLUMNS = ["record", "send_time", "ack_time", "partition", "offset", "latency_ms",
                  "bytes", "error"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cid = new_cluster_id()
    c = Cluster.up(tmp_path_factory.mktemp("perf") / "cluster", 2, cluster_id=cid)
    try:
        yield c
    finally:
        c.down(grace_s=10)
        leaked = cluster_objects(cid)
        cleanup_cluster(cid)
        assert not leaked, f"shared memory left behind: {leaked}"


def create_topic(cluster, name: str, partitions: int = 4) -> str:
    admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topic(name, partitions, 1)
    finally:
        admin.close()
    return name


def minikafka(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True,
                          text=True, timeout=TOOL_TIMEOUT_S)


def produce(cluster, topic: str, records: int, *extra: str) -> subprocess.CompletedProcess:
    result = minikafka("producer-perf-test", "--topic", topic, "--num-records", str(records),
                       "--record-size", "100", "--producer-props",
                       f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1", *extra)
    assert result.returncode == 0, result.stderr
    return result


def sample_rows(path) -> dict:
    """The samples as lists; timestamps as int µs since the epoch (no pandas here)."""
    table = pq.read_table(path)
    assert table.column_names == SAMPLE_COLUMNS
    assert table.schema.field("send_time").type == pa.timestamp("us", tz="UTC")
    for name in ("send_time", "ack_time"):
        i = table.column_names.index(name)
        table = table.set_column(i, name, table.column(name).cast(pa.int64()))
    return table.to_pydict()


def total_line(stdout: str) -> re.Match:
    lines = stdout.strip().splitlines()
    for line in lines[:-1]:
        assert PROGRESS_LINE.match(line), line
    match = TOTAL_LINE.match(lines[-1])
    assert match, lines[-1]
    return match


def consumer_line(stdout: str) -> re.Match:
    header, line = stdout.strip().splitlines()
    assert header == CONSUMER_HEADER
    match = CONSUMER_LINE.match(line)
    assert match, line
    return match


def test_producer_perf_test_prints_kafka_lines_and_one_sample_row_per_record(cluster, tmp_path):
    topic = create_topic(cluster, "bulk")
    samples = tmp_path / "samples.parquet"
    result = produce(cluster, topic, 3000, "batch.size=16384", "--throughput", "-1",
                     "--samples-out", str(samples))
    match = total_line(result.stdout)
    assert int(match.group(1)) == 3000
    p50, p95, p99, p999 = (float(match.group(i)) for i in (6, 7, 8, 9))
    # max is printed with 2 decimals, the percentiles with 3: 2.5549 prints as 2.55 and 2.555
    assert 0 < p50 <= p95 <= p99 <= p999 <= float(match.group(5)) + 0.0051

    rows = sample_rows(samples)
    assert rows["record"] == list(range(3000))
    assert all(e is None for e in rows["error"])
    assert all(a >= s for s, a in zip(rows["send_time"], rows["ack_time"]))
    assert set(rows["partition"]) == {0, 1, 2, 3}  # the bulk path goes round the partitions
    placed = set(zip(rows["partition"], rows["offset"]))
    assert len(placed) == 3000  # one offset per record, none twice
    for p in range(4):
        offsets = sorted(o for q, o in placed if q == p)
        assert offsets == list(range(len(offsets)))


def test_throttled_producer_sends_record_by_record_at_the_rate(cluster, tmp_path):
    topic = create_topic(cluster, "throttled")
    samples = tmp_path / "samples.parquet"
    produce(cluster, topic, 300, "--throughput", "1000", "--samples-out", str(samples))
    rows = sample_rows(samples)
    assert rows["record"] == list(range(300))
    sent = sorted(rows["send_time"])
    span_s = (sent[-1] - sent[0]) / 1e6   # µs timestamps
    assert 0.2 <= span_s <= 3.0, span_s  # about 0.3 s at 1,000 records/s
    assert len(set(rows["send_time"])) == 300  # each record sent on its own


def test_local_and_fetch_consumers_count_the_same_records(cluster):
    topic = create_topic(cluster, "consumed")
    produce(cluster, topic, 5000, "batch.size=16384", "--throughput", "-1")
    fetch = minikafka("consumer-perf-test", "--bootstrap-server", cluster.bootstrap_servers,
                      "--topic", topic, "--messages", "5000", "--timeout", "5000")
    local = minikafka("consumer-perf-test", "--dir", str(cluster.dir), "--local", "--topic",
                      topic, "--messages", "5000", "--timeout", "5000")
    assert fetch.returncode == 0, fetch.stderr
    assert local.returncode == 0, local.stderr
    over_fetch, zero_copy = consumer_line(fetch.stdout), consumer_line(local.stdout)
    assert int(over_fetch.group(5)) == int(zero_copy.group(5)) == 5000
    assert float(over_fetch.group(3)) == float(zero_copy.group(3)) == round(
        5000 * 100 / 1024 / 1024, 4)


def test_consumer_perf_test_stops_at_the_timeout_when_messages_run_out(cluster):
    topic = create_topic(cluster, "short", partitions=2)
    produce(cluster, topic, 100, "--throughput", "-1")
    result = minikafka("consumer-perf-test", "--bootstrap-server", cluster.bootstrap_servers,
                       "--topic", topic, "--messages", "1000", "--timeout", "500")
    assert result.returncode == 0, result.stderr
    assert int(consumer_line(result.stdout).group(5)) == 100
    assert "WARNING: Exiting before consuming the expected number of messages" in result.stderr


def test_end_to_end_latency_prints_average_and_percentiles(cluster):
    topic = create_topic(cluster, "e2e", partitions=2)
    result = minikafka("end-to-end-latency", "--bootstrap-server", cluster.bootstrap_servers,
                       "--topic", topic, "--num-messages", "30", "--producer-acks", "all",
                       "--record-size", "100")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line]
    assert re.match(rf"^0\t{NUMBER}$", lines[0])
    avg = re.match(rf"^Avg latency: ({NUMBER}) ms$", lines[-2])
    pct = re.match(rf"^Percentiles: 50th = ({NUMBER}), 99th = ({NUMBER}), "
                   rf"99\.9th = ({NUMBER})$", lines[-1])
    assert avg and pct, lines
    assert 0 < float(pct.group(1)) <= float(pct.group(2)) <= float(pct.group(3))


def test_bench_limits_prints_one_json_line():
    result = subprocess.run([sys.executable, "-m", "bench.perf.zmq_limits", "--frame-bytes", "65536",
                             "--seconds", "0.3"], capture_output=True, text=True,
                            timeout=TOOL_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.strip().splitlines()
    figures = json.loads(line)
    assert figures["frame_bytes"] == 65536
    assert figures["frames"] > 0 and figures["mb_per_s"] > 0 and figures["frames_per_s"] > 0


def _unreachable() -> str:
    return f"127.0.0.1:{free_port()}"


ERROR_CASES = {
    "producer wrong flag": (("producer-perf-test", "--topic", "x", "--num-records", "1",
                             "--record-size", "1", "--throughput", "-1", "--bogus"), 2),
    "consumer wrong flag": (("consumer-perf-test", "--topic", "x", "--messages", "1",
                             "--bogus"), 2),
    "e2e wrong flag": (("end-to-end-latency", "--topic", "x", "--num-messages", "1",
                        "--bogus"), 2),
    "producer missing flag": (("producer-perf-test", "--topic", "x"), 2),
    "producer unreachable": (("producer-perf-test", "--topic", "x", "--num-records", "1",
                              "--record-size", "1", "--throughput", "-1", "--producer-props",
                              "bootstrap.servers={unreachable}"), 1),
    "consumer unreachable": (("consumer-perf-test", "--bootstrap-server", "{unreachable}",
                              "--topic", "x", "--messages", "1"), 1),
    "e2e unreachable": (("end-to-end-latency", "--bootstrap-server", "{unreachable}",
                         "--topic", "x", "--num-messages", "1"), 1),
    "producer unknown topic": (("producer-perf-test", "--topic", "nope", "--num-records", "1",
                                "--record-size", "1", "--throughput", "-1",
                                "--bootstrap-server", "{cluster}"), 1),
    "consumer unknown topic": (("consumer-perf-test", "--bootstrap-server", "{cluster}",
                                "--topic", "nope", "--messages", "1"), 1),
    "e2e unknown topic": (("end-to-end-latency", "--bootstrap-server", "{cluster}",
                           "--topic", "nope", "--num-messages", "1"), 1),
    "local without dir": (("consumer-perf-test", "--bootstrap-server", "{cluster}",
                           "--topic", "nope", "--messages", "1", "--local"), 1),
    "local with a bad dir": (("consumer-perf-test", "--dir", "/nonexistent/perf", "--topic",
                              "nope", "--messages", "1", "--local"), 1),
    "producer bad props": (("producer-perf-test", "--topic", "x", "--num-records", "1",
                            "--record-size", "1", "--throughput", "-1", "--producer-props",
                            "acks"), 1),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_a_wrong_use_is_one_line_on_stderr_and_a_nonzero_exit(cluster, case):
    args, status = ERROR_CASES[case]
    args = [a.format(unreachable=_unreachable(), cluster=cluster.bootstrap_servers)
            for a in args]
    result = minikafka(*args)
    assert result.returncode == status, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "error" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_the_tools_record_their_runs_in_one_results_store(cluster, tmp_path):
    """--results: one folder per run, readable as one dataset per sample kind (the
    Hive-style run_id= folders are what Spark reads), with run.json describing each."""
    import pyarrow.dataset as ds

    store = tmp_path / "results"
    topic = create_topic(cluster, "stored", partitions=2)
    produce(cluster, topic, 500, "--throughput", "-1", "--results", str(store))
    produce(cluster, topic, 200, "--throughput", "1000", "--results", str(store))
    consumed = minikafka("consumer-perf-test", "--bootstrap-server", cluster.bootstrap_servers,
                         "--topic", topic, "--messages", "700", "--timeout", "5000",
                         "--results", str(store))
    assert consumed.returncode == 0, consumed.stderr
    e2e = minikafka("end-to-end-latency", "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", topic, "--num-messages", "20", "--producer-acks", "all",
                    "--record-size", "100", "--results", str(store))
    assert e2e.returncode == 0, e2e.stderr

    runs = sorted((store / "runs").iterdir())
    assert len(runs) == 4 and all(r.name.startswith("run_id=") for r in runs)
    described = [json.loads((r / "run.json").read_text()) for r in runs]
    by_tool = {}
    for d in described:
        by_tool.setdefault(d["tool"], []).append(d)
        assert d["machine"]["cores"] >= 1 and d["start_time"] <= d["end_time"]
        assert d["topic"]["name"] == topic and d["topic"]["partitions"] == 2
        for path in d["samples"].values():
            assert (store / path).is_file()
    assert sorted(by_tool) == ["consumer-perf-test", "end-to-end-latency",
                               "producer-perf-test"]
    produced = ds.dataset(store / "samples" / "produce", partitioning="hive").to_table()
    assert produced.num_rows == 700
    per_run = {}
    for run_id, latency, size in zip(produced["run_id"].to_pylist(),
                                     produced["latency_ms"].to_pylist(),
                                     produced["bytes"].to_pylist()):
        per_run[run_id] = per_run.get(run_id, 0) + 1
        assert latency >= 0 and size == 100
    assert sorted(per_run.values()) == [200, 500]
    summaries = sorted(d["summary"]["records"] for d in by_tool["producer-perf-test"])
    assert summaries == [200, 500]
    consume = ds.dataset(store / "samples" / "consume", partitioning="hive").to_table()
    assert sum(consume["records"].to_pylist()) == 700
    assert sum(consume["bytes"].to_pylist()) == 700 * 100
    latency = ds.dataset(store / "samples" / "latency", partitioning="hive").to_table()
    assert latency.num_rows == 20
    sent = latency["send_time"].cast(pa.int64()).to_pylist()
    received = latency["receive_time"].cast(pa.int64()).to_pylist()
    assert all(r >= s for s, r in zip(sent, received))
    assert not list(store.rglob("*.tmp"))


def test_an_unwritable_results_store_is_one_line_and_nothing_is_sent(cluster, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    topic = create_topic(cluster, "unstored", partitions=1)
    result = minikafka("producer-perf-test", "--topic", topic, "--num-records", "10",
                       "--record-size", "10", "--throughput", "-1", "--bootstrap-server",
                       cluster.bootstrap_servers, "--results", str(blocker / "results"))
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "--results" in result.stderr
