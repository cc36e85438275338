"""The real Kafka clients the listener's tests drive, which of them are here, and the
cluster they run against.

Clients: confluent-kafka (librdkafka), kafka-python and aiokafka (the ``kafka-clients``
extra), Debian's ``kcat``, and node's ``kafkajs`` (``.ci/run`` installs it with npm into
``.cache/node_modules``; ``MINIKAFKA_NODE_MODULES`` names another directory). A test that
needs a missing one skips with one line saying what is missing and how to get it:
``@needs("kcat")``; ``needs_kafkajs_codec(codec)`` likewise for kafkajs' codec packages.

Clusters: the module-scoped ``kafka_cluster`` fixture (conftest.py) for most tests;
``running_cluster`` (a context manager) for a test that needs its own, with failures
detected in seconds: a real cluster through the supervisor (``node.cluster.Cluster``),
whose brokers each have a Kafka listener (``cluster.kafka_bootstrap_servers``); leaving
it stops every process and checks that nothing is left in /dev/shm. ``create_topic`` makes a topic through the native admin
and waits until the Kafka listeners' metadata shows a leader for each partition.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from node.client import Admin
from node.cluster import Cluster
from shm.names import cluster_objects
from tests.conftest import new_cluster_id

REPO = Path(__file__).resolve().parents[3]
NODE_MODULES = Path(os.environ.get("MINIKAFKA_NODE_MODULES", REPO / ".cache" / "node_modules"))
NODE_SCRIPTS = Path(__file__).resolve().parent / "js"

# Settings that make failures and elections take seconds, not Kafka's minutes.
CLUSTER_CONFIG = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
                  "replica.fetch.wait.max.ms": "50", "auto.leader.rebalance.enable": "false"}
STOP_GRACE_S = 5.0
TOPIC_TIMEOUT_MS = 60_000

_PYTHON_CLIENTS = {"confluent-kafka": "confluent_kafka", "kafka-python": "kafka",
                   "aiokafka": "aiokafka"}
_HOW = {"confluent-kafka": "pip install -e '.[kafka-clients]'",
        "kafka-python": "pip install -e '.[kafka-clients]'",
        "aiokafka": "pip install -e '.[kafka-clients]'",
        "kcat": ".ci/run installs Debian's kcat (apt-get install kcat)",
        "node": "install node (Debian's nodejs)",
        "kafkajs": ".ci/run installs it: npm install --prefix .cache kafkajs"}
KAFKAJS_CODECS = {"none": None, "gzip": None, "snappy": "kafkajs-snappy",
                  "lz4": "kafkajs-lz4", "zstd": "@kafkajs/zstd"}


def missing(client: str) -> str | None:
    """Why ``client`` cannot be used here (one line), or None when it can."""
    if client in _PYTHON_CLIENTS:
        if importlib.util.find_spec(_PYTHON_CLIENTS[client]) is None:
            return f"{client} is not installed ({_HOW[client]})"
        return None
    if client == "kcat":
        return None if shutil.which("kcat") else f"kcat is not installed ({_HOW['kcat']})"
    if client == "kafkajs":
        if shutil.which("node") is None:
            return f"node is not installed ({_HOW['node']}), so kafkajs cannot run"
        if not (NODE_MODULES / "kafkajs" / "package.json").is_file():
            return f"kafkajs is not in {NODE_MODULES} ({_HOW['kafkajs']})"
        return None
    raise ValueError(f"unknown client {client!r}")


def present() -> dict[str, bool]:
    """Which clients this machine has."""
    return {c: missing(c) is None for c in (*_PYTHON_CLIENTS, "kcat", "kafkajs")}


def needs(*clients: str):
    """Skip marker: the test needs every one of ``clients``."""
    reasons = [r for r in map(missing, clients) if r]
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons))


def kafkajs_codec_missing(codec: str) -> str | None:
    package = KAFKAJS_CODECS[codec]
    if package is None or (NODE_MODULES / package / "package.json").is_file():
        return None
    return (f"kafkajs reads {codec} only through the {package} package, not in "
            f"{NODE_MODULES}" + (" (it needs a native build that fails here)"
                                 if codec == "zstd" else f" (npm install --prefix .cache {package})"))


def skip_if_missing(client: str, codec: str | None = None) -> None:
    """Skip the running test (one line) when ``client`` (or kafkajs' ``codec``) is missing."""
    reason = missing(client)
    if reason is None and client == "kafkajs" and codec is not None:
        reason = kafkajs_codec_missing(codec)
    if reason:
        pytest.skip(reason)


def node_env() -> dict[str, str]:
    """The environment ``node`` runs the test scripts in: kafkajs found in NODE_MODULES."""
    return dict(os.environ, NODE_PATH=str(NODE_MODULES), KAFKAJS_NO_PARTITIONER_WARNING="1")


def run_node(script: str, payload: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(NODE_SCRIPTS / script)], input=payload,
                          capture_output=True, text=True, timeout=timeout_s, env=node_env())


# ------------------------------------------------------------------ the cluster
@contextmanager
def running_cluster(directory, cluster_id: str | None = None, brokers: int = 3,
                    config: dict | None = None):
    """A real cluster (every broker with a Kafka listener); stopped and checked for
    leaked shared memory on the way out."""
    cluster_id = cluster_id or new_cluster_id()
    cluster = Cluster.up(directory, brokers=brokers, config={**CLUSTER_CONFIG, **(config or {})},
                         cluster_id=cluster_id)
    try:
        yield cluster
    finally:
        cluster.down(grace_s=STOP_GRACE_S)
        assert cluster_objects(cluster_id) == [], "the cluster leaked shared memory"


def kafka_bootstrap(cluster) -> str:
    return cluster.kafka_bootstrap_servers


def create_topic(cluster, name: str, partitions: int = 1, replication_factor: int = 3,
                 config: dict | None = None, assignment: dict | None = None) -> None:
    """Create a topic (native admin) and wait until every broker's metadata shows a leader
    for each partition."""
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(name, partitions, replication_factor, config=config,
                           replica_assignment=assignment, timeout_ms=TOPIC_TIMEOUT_MS)


def describe_partition(cluster, topic: str, partition: int = 0):
    """The native admin's view of one partition (leader, replicas, isr), or None while no
    broker answers."""
    from node.wire import errors
    try:
        with Admin(cluster.bootstrap_servers, request_timeout_ms=5_000) as admin:
            return admin.describe_topics([topic])[topic][partition]
    except (errors.KafkaError, OSError):
        return None
