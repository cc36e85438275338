"""``__consumer_offsets`` stays bounded under a commit storm because it is compacted.

One real client (confluent-kafka, else kafka-python) commits one partition's offset
synchronously ``STORM`` times: ``STORM`` records with one key in the group's
``__consumer_offsets`` partition. The topic is created compact, with small segments
(``offsets.topic.segment.bytes``) and a cleaner that looks every 100 ms; while the storm
runs and after it, every replica's sealed segments stay within a few segments, far
below what the storm wrote. The latest commit survives the cleaning: OffsetFetch gives
it, and again from another broker after the coordinator's SIGKILL (the new coordinator
loads the compacted log, holes and all).
"""
from __future__ import annotations

import os

import pytest

from bench.perf.kafka_groups.group import owned_by, python_member
from tests.node.kafka.clients import create_topic, missing, running_cluster
from tests.node.kafka.groups import (GROUPS_CONFIG, JOIN_TIMEOUT_S, OFFSETS_TOPIC,
                                     committed_offsets, coordinator_of, new_name)
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]
SEGMENT_BYTES = 8192
STORM = 2000
# Sealed bytes of a replica, at any time: what rolls during a cleaner's backoff and one
# clean, with room for a loaded machine. The storm writes over 100 B a commit.
SEALED_BOUND_BYTES = 12 * SEGMENT_BYTES
SETTLED_BOUND_BYTES = 3 * SEGMENT_BYTES
CONFIG = {**GROUPS_CONFIG, "offsets.topic.num.partitions": "1",
          "offsets.topic.segment.bytes": str(SEGMENT_BYTES), "log.cleaner.backoff.ms": "100"}
STORM_TIMEOUT_S = 120.0


def _sealed_bytes(cluster, broker: int) -> int:
    """Bytes of a replica's sealed ``__consumer_offsets-0`` segments (the active one,
    preallocated, left out); 0 before the partition exists there."""
    d = cluster.broker_dir(broker) / "logs" / f"{OFFSETS_TOPIC}-0"
    try:
        logs = sorted(p for p in os.listdir(d) if p.endswith(".log"))
    except FileNotFoundError:
        return 0
    return sum(os.path.getsize(d / p) for p in logs[:-1] if os.path.exists(d / p))


def _end_offset(cluster) -> int:
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        tp = (OFFSETS_TOPIC, 0)
        return list(consumer.end_offsets([tp], timeout_ms=10_000).values())[0]
    finally:
        consumer.close()


def test_offsets_topic_stays_bounded_under_a_commit_storm(tmp_path, cluster_id):
    kind = "kafka-python" if missing("confluent-kafka") else "confluent-classic"
    if missing("kafka-python") and kind == "kafka-python":
        pytest.skip("neither confluent-kafka nor kafka-python is installed")
    with running_cluster(tmp_path / "c", cluster_id, config=CONFIG) as cluster:
        topic, group = new_name("gc"), new_name("gc")
        create_topic(cluster, topic, 1, 3)
        client = "confluent-kafka" if kind == "confluent-classic" else "kafka-python"
        member = python_member("storm", client, cluster.kafka_bootstrap_servers, group, topic,
                               commit_storm=STORM)
        peak = {b: 0 for b in cluster.broker_ids}

        def sample():
            for b in cluster.broker_ids:
                peak[b] = max(peak[b], _sealed_bytes(cluster, b))
        try:
            owned_by([member], [0], JOIN_TIMEOUT_S)
            took = poll_until(lambda: member.storm, STORM_TIMEOUT_S, f"{STORM} commits",
                              interval_s=0.05, each=[sample],
                              error=lambda m: AssertionError(f"{m}: {member.describe()}"))
            assert len(took) == STORM
        finally:
            member.stop()

        written = _end_offset(cluster)
        assert written >= STORM, f"{OFFSETS_TOPIC}-0 ends at {written} after {STORM} commits"
        poll_until(lambda: all(_sealed_bytes(cluster, b) <= SETTLED_BOUND_BYTES
                               for b in cluster.broker_ids), 60,
                   "every replica's sealed segments to be cleaned",
                   error=lambda m: AssertionError(
                       f"{m}: {[_sealed_bytes(cluster, b) for b in cluster.broker_ids]} B"))
        assert max(peak.values()) <= SEALED_BOUND_BYTES, \
            f"sealed bytes peaked at {peak} during the storm ({written} records written)"
        assert committed_offsets(cluster, group, topic, [0]) == {0: STORM}

        coordinator = coordinator_of(cluster, group, 1)
        cluster.kill(coordinator, "KILL")
        poll_until(lambda: coordinator_of(cluster, group, 1) not in (None, coordinator), 60,
                   "another broker to coordinate the group")
        after = poll_until(lambda: committed_offsets(cluster, group, topic, [0]), 60,
                           "the new coordinator to answer OffsetFetch")
        assert after == {0: STORM}, "the compacted log lost the latest commit"
