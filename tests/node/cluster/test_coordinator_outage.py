"""A coordinator outage under load (issue 10, item 1): zk_lite SIGKILLed or SIGSTOPped
for 20 s while clients send Metadata, Produce with acks=1 and acks=all, and Fetch to
every leader (``bench.perf.outage``). As in Kafka, the brokers keep serving what they lead
with the metadata they have; after the coordinator returns, what needs it (creating a
topic, an election) works again within seconds. SIGTERM during an outage still gives a
controlled stop."""
from __future__ import annotations

import signal
import time

import pytest

from bench.perf import outage
from node.cluster import Cluster

pytestmark = [pytest.mark.process, pytest.mark.slow]

OUTAGE_S = 20.0           # longer than the default session timeout (18 s): sessions expire
AFTER_S = 3.0
# The issue asks for 2 s; the margin is for a loaded 2-core CI machine (figures in notes).
CREATE_AFTER_RETURN_S = 4.0


@pytest.mark.parametrize("fault", ["KILL", "STOP"])
def test_brokers_serve_through_a_coordinator_outage_and_recover(tmp_path, cluster_id, fault):
    lines: list[str] = []
    figures = outage.run(tmp_path / "c", fault=fault, outage_s=OUTAGE_S, after_s=AFTER_S,
                         cluster_id=cluster_id, say=lines.append)
    report = "\n".join(lines)
    for op, row in figures["ops"].items():
        ok, total = row["during"]
        assert ok == total, f"{op}: {total - ok} of {total} failed during the outage\n{report}"
        assert total >= 3 * OUTAGE_S, f"{op}: only {total} requests in {OUTAGE_S} s\n{report}"
        assert row["after"][0] > 0, f"{op}: nothing served after the return\n{report}"
    assert figures["create_topic_after_s"] < CREATE_AFTER_RETURN_S, report
    assert figures["controller"] is not None


def test_sigterm_during_a_coordinator_outage_still_stops_the_broker(tmp_path, cluster_id):
    c = Cluster.up(tmp_path / "c", 3, config={"auto.leader.rebalance.enable": "false"},
                   cluster_id=cluster_id)
    try:
        c.kill("zk", "STOP")
        victim = c.process(2)
        started = time.monotonic()
        victim.signal(signal.SIGTERM)
        # Controlled shutdown cannot reach the coordinator (its reads are bounded), gives
        # up after its retries and stops uncleanly, by itself, before any KILL fallback.
        assert victim.wait_dead(15.0), "broker 2 did not stop within 15 s of SIGTERM"
        took = time.monotonic() - started
        log = victim.log_path.read_text(errors="replace")
        assert "broker 2 stopped" in log, log[-2000:]
        assert "proceeding to unclean shutdown" in log, log[-2000:]
        assert took < 15.0
    finally:
        c.kill("zk", "CONT")
        c.down(grace_s=10)
