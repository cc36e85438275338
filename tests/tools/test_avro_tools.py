"""Typed values from the measuring tools: producer-perf-test and the chaos workload
write Avro values registered in the cluster's schema registry (real processes)."""
from __future__ import annotations

import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from node.client import Admin, Consumer
from node.client.avro import AvroDeserializer, SchemaRegistry
from node.cluster import Cluster
from tests.conftest import new_cluster_id

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("avro-tools"), brokers=1,
                         config={"default.replication.factor": "1"},
                         cluster_id=new_cluster_id())
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("perf", 2, 1)
            admin.create_topic("chaos", 2, 1)
        yield cluster
    finally:
        cluster.down(grace_s=5)


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def _read(cluster, topic: str, n: int, **kwargs) -> list:
    out = []
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest", **kwargs) as c:
        c.assign([(topic, 0), (topic, 1)])
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            out += c.poll(200)
    assert len(out) == n
    return out


def test_producer_perf_test_writes_avro_values_of_the_record_size(cluster):
    started_ms = time.time() * 1000
    result = _cli("producer-perf-test", "--topic", "perf", "--num-records", "3000",
                  "--record-size", "100", "--throughput", "-1", "--bootstrap-server",
                  cluster.bootstrap_servers, "--value-format", "avro",
                  "--schema-registry", cluster.zookeeper)
    assert result.returncode == 0, result.stderr
    assert "3000 records sent" in result.stdout
    raw = _read(cluster, "perf", 3000)
    assert {len(r.value) for r in raw} == {100}
    with SchemaRegistry(cluster.zookeeper) as registry:
        schema_id, version, schema = registry.latest("perf-value")
        assert schema["name"] == "minikafka.perf.PerfValue"
        values = [AvroDeserializer(registry)(r.value) for r in raw]
    ended_ms = time.time() * 1000
    assert all(started_ms - 1 <= v["created"].timestamp() * 1000 <= ended_ms + 1
               for v in values)
    # header 5 bytes, created 6 (a varint), payload length 2 (zigzag(87) > 127), payload
    assert {len(v["payload"]) for v in values} == {100 - 5 - 6 - 2}


@pytest.mark.parametrize("args, words", [
    (["--record-size", "100"], "needs --schema-registry"),
    (["--record-size", "8", "--schema-registry", None], "cannot hold an Avro value"),
])
def test_producer_perf_test_avro_mistakes_are_one_line(cluster, args, words):
    args = [cluster.zookeeper if a is None else a for a in args]
    result = _cli("producer-perf-test", "--topic", "perf", "--num-records", "10",
                  "--throughput", "-1", "--bootstrap-server", cluster.bootstrap_servers,
                  "--value-format", "avro", *args)
    assert result.returncode != 0
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_chaos_workload_writes_typed_unique_values(cluster, tmp_path):
    out = tmp_path / "p0.parquet"
    result = subprocess.run(
        [sys.executable, "-m", "bench.chaos.worker", "--role", "producer", "--name", "p0",
         "--bootstrap", cluster.bootstrap_servers, "--topic", "chaos", "--duration", "1.5",
         "--rate", "100", "--out", str(out), "--value-format", "avro",
         "--schema-registry", cluster.zookeeper], capture_output=True, text=True,
        timeout=60)
    assert result.returncode == 0, result.stderr
    history = pq.read_table(out).to_pylist()
    acked = [row for row in history if row["type"] == "ok"]
    assert len(acked) > 20
    with SchemaRegistry(cluster.zookeeper) as registry:
        decode = AvroDeserializer(registry)
        typed = [decode(row["value"]) for row in acked]
        read = _read(cluster, "chaos", len(acked), value_deserializer=decode)
    assert [(v["producer"], v["seq"]) for v in typed] == [("p0", i) for i in range(len(acked))]
    assert sorted((r.value["producer"], r.value["seq"]) for r in read) == \
        [("p0", i) for i in range(len(acked))]


SENSOR = {"type": "record", "name": "Reading", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def test_console_tools_write_json_lines_as_avro_and_print_them_back(cluster, tmp_path):
    import json
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic("readings", 1, 1)
    schema_file = tmp_path / "reading.avsc"
    schema_file.write_text(json.dumps(SENSOR))
    lines = [{"sensor": f"s{i}", "celsius": 20.5 + i, "at": 1_764_072_000_000 + i}
             for i in range(5)]
    produced = subprocess.run(
        [sys.executable, "-m", "node.cli", "console-producer", "--bootstrap-server",
         cluster.bootstrap_servers, "--topic", "readings", "--property",
         f"schema.registry={cluster.zookeeper}", f"value.schema.file={schema_file}"],
        input="".join(json.dumps(line) + "\n" for line in lines), capture_output=True,
        text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = _cli("console-consumer", "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", "readings", "--from-beginning", "--max-messages", "5",
                    "--property", f"schema.registry={cluster.zookeeper}", "print.offset=true")
    assert consumed.returncode == 0, consumed.stderr
    printed = [line.split("\t", 1) for line in consumed.stdout.splitlines()]
    assert [int(o.removeprefix("Offset:")) for o, _ in printed] == list(range(5))
    values = [json.loads(v) for _, v in printed]
    assert [(v["sensor"], v["celsius"]) for v in values] == \
        [(x["sensor"], x["celsius"]) for x in lines]
    assert values[0]["at"].startswith("2025-11-25T12:00:00")
    # A line that does not match the schema: one line naming it, nothing half-sent.
    bad = subprocess.run(
        [sys.executable, "-m", "node.cli", "console-producer", "--bootstrap-server",
         cluster.bootstrap_servers, "--topic", "readings", "--property",
         f"schema.registry={cluster.zookeeper}", f"value.schema={json.dumps(SENSOR)}"],
        input='{"sensor": "x", "celsius": "warm", "at": 0}\n', capture_output=True,
        text=True, timeout=60)
    assert bad.returncode != 0
    assert "line 1 does not match the schema" in bad.stderr
    # Plain bytes read as Avro: the consumer names the offset instead of skipping it.
    with subprocess.Popen([sys.executable, "-m", "node.cli", "console-producer",
                           "--bootstrap-server", cluster.bootstrap_servers, "--topic",
                           "readings"], stdin=subprocess.PIPE, text=True) as plain:
        plain.communicate("not avro\n", timeout=60)
    refused = _cli("console-consumer", "--bootstrap-server", cluster.bootstrap_servers,
                   "--topic", "readings", "--from-beginning", "--max-messages", "6",
                   "--timeout-ms", "5000", "--property", f"schema.registry={cluster.zookeeper}")
    assert refused.returncode != 0
    assert "readings-0 offset 5" in refused.stderr and "not an Avro value" in refused.stderr
    assert refused.stdout.count("\n") == 5


def test_the_schemas_tool_registers_lists_and_shows(cluster, tmp_path):
    import json
    schema_file = tmp_path / "s.avsc"
    schema_file.write_text(json.dumps(SENSOR))
    zk = ["--zookeeper", cluster.zookeeper]
    registered = _cli("schemas", *zk, "--register", "--subject", "tool-value",
                      "--schema-file", str(schema_file))
    assert registered.returncode == 0, registered.stderr
    schema_id = int(registered.stdout.split()[3])
    assert registered.stdout.strip() == \
        f"Registered schema id {schema_id} as version 1 of subject tool-value"
    assert "tool-value" in _cli("schemas", *zk, "--list").stdout.split()
    assert _cli("schemas", *zk, "--describe", "--subject", "tool-value").stdout == \
        f"SUBJECT\tVERSION\tID\ntool-value\t1\t{schema_id}\n"
    assert json.loads(_cli("schemas", *zk, "--id", str(schema_id)).stdout) == SENSOR
    assert json.loads(_cli("schemas", *zk, "--subject", "tool-value").stdout) == SENSOR
    for args, words in ((["--id", "4242"], "no schema with id 4242"),
                        (["--subject", "tool-value", "--version", "7"], "no version 7"),
                        (["--describe"], "subject"),
                        (["--register", "--subject", "x", "--schema-file", "/nonexistent"],
                         "No such file")):
        failed = _cli("schemas", *zk, *args)
        assert failed.returncode != 0 and words in failed.stderr, (args, failed.stderr)
        assert len(failed.stderr.strip().splitlines()) == 1
