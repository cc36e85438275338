"""Every scenario of the catalog runs on real processes and meets its prediction (the
partition scenarios need root for network namespaces and skip without it); acks1 also
with a real client's producer (confluent-kafka), whose run tells what it saw."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bench.teach.catalog import CATALOG
from node.cluster import netns

pytestmark = [pytest.mark.process, pytest.mark.slow]
NO_NETNS = netns.available()
# What a scenario's run must also say (beyond matching its prediction).
WORDS = {"txn-zombie": ("ProducerFencedError", "last stable offset 3: an open transaction",
                        "read_committed reads a-1, a-2, b-1, b-2"),
         "txn-late-write": ("refused with INVALID_PRODUCER_EPOCH", "(aborted read)",
                            "a read_committed consumer stops at offset 2",
                            "last stable offset 2: an open transaction")}


def scenario(*args, timeout=300, stdin=None):
    return subprocess.run([sys.executable, "-m", "bench.cli", "scenario", *args],
                          capture_output=True, text=True, timeout=timeout, input=stdin)


@pytest.mark.parametrize("name", [s.name for s in CATALOG])
def test_the_scenario_meets_its_prediction(name, tmp_path):
    entry = next(s for s in CATALOG if s.name == name)
    if entry.netns and NO_NETNS:
        pytest.skip(f"{name}: {NO_NETNS}")
    stepped = name == "min-insync"   # one scenario also runs with --step (Enter per step)
    done = scenario("run", name, "--dir", str(tmp_path / name), "--speed", "2",
                    *(["--step"] if stepped else []), stdin="\n" * 10 if stepped else None)
    out = done.stdout
    if stepped:
        assert "[Enter] to run step 3" in out, out
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "outcome matches the prediction" in out and "NOT as predicted" not in out
    assert out.count("\nstep ") >= 2 and "leader epoch" in out and "ISR" in out
    for words in WORDS.get(name, ()):
        assert words in out, (words, out[-3000:])
    if entry.netns:
        import json
        ids = [json.loads(p.read_text())["cluster_id"]
               for p in (tmp_path / name).glob("*/cluster.json")]
        assert ids and all(netns.leftovers(i) == [] for i in ids)


def test_acks1_with_confluent_kafka_loses_what_it_acknowledged_and_says_so(tmp_path):
    from bench.chaos.clients import missing
    if missing("confluent-kafka"):
        pytest.skip(missing("confluent-kafka"))
    import confluent_kafka
    done = scenario("run", "acks1", "--dir", str(tmp_path / "acks1"), "--speed", "2",
                    "--client", "confluent-kafka")
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "outcome matches the prediction" in out and "NOT as predicted" not in out
    version = confluent_kafka.version()   # a string in 2.16; (string, int) before
    version = f"confluent-kafka {version if isinstance(version, str) else version[0]}"
    # after each step, what the client saw; at the end, its belief against the log
    assert out.count(f"{version}") >= 4, out
    assert f"{version}" in out and "delivery reports ok since the last step" in out
    end = out[out.index(f"what {version}"):]
    import re
    found = re.search(r"acknowledged (\d+), of which lost (\d+)", end)
    assert found and 0 < int(found.group(2)) < int(found.group(1)), end
    assert "send errors:" in end or "the client reported:" in end, end   # the failover
    # the verdict's count is the narration's count
    assert f"acknowledged writes lost: {found.group(2)} of" in out, out[-3000:]


def test_a_divergence_names_its_first_offsets_and_what_each_replica_holds():
    from bench.teach.catalog import _divergent_examples
    assert _divergent_examples([]) == ""
    text = _divergent_examples([(0, 65, {0: b"w-65", 2: None}), (0, 66, {0: b"a", 2: b"b"}),
                                (0, 67, {0: b"c", 2: None}), (0, 68, {0: b"d", 2: None})])
    assert text == ("; first: offset 65 (broker 0: b'w-65', broker 2: missing); "
                    "offset 66 (broker 0: b'a', broker 2: b'b'); "
                    "offset 67 (broker 0: b'c', broker 2: missing)")


def test_the_list_names_every_scenario_and_its_prediction():
    done = scenario("list", timeout=60)
    assert done.returncode == 0
    for s in CATALOG:
        assert s.name in done.stdout and s.prediction in done.stdout


@pytest.mark.parametrize("args, words", [
    (("run", "nonsense"), "no scenario 'nonsense'"),
    (("run", "failover", "--speed", "0"), "--speed must be positive"),
    (("run", "acks1", "--client", "kafka-go"), "no client 'kafka-go' (one of native,"),
])
def test_bad_use_is_one_line_and_exit_2(args, words):
    done = scenario(*args, timeout=60)
    assert done.returncode == 2 and words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_client_not_installed_is_one_line_and_exit_2(tmp_path):
    import os
    env = {**os.environ, "MINIKAFKA_NODE_MODULES": str(tmp_path / "no-modules")}
    done = subprocess.run([sys.executable, "-m", "bench.cli", "scenario", "run", "acks1",
                           "--client", "kafkajs"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert "--client kafkajs:" in done.stderr and "not" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
