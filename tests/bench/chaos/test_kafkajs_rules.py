"""The kafkajs worker's fail/info rule (bench/chaos/clients/kafkajs_worker.js), a pure
core run in node with a stand-in Broker: a send is `fail` only when no Produce request
carrying it reached a broker, or each that did was refused before any append."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

WORKER = Path(__file__).resolve().parents[3] / "bench" / "chaos" / "clients" / "kafkajs_worker.js"
NODE_TIMEOUT_S = 30

# Each attempt kafkajs made for one value: an error type a broker answered (a
# KafkaJSProtocolError), "timeout" (KafkaJSRequestTimeoutError) or "ok".
SCRIPT = r"""
const w = require(process.argv[1])
const cases = JSON.parse(process.argv[2])
class Broker { async produce (request) { return this.answer(request) } }
const tracks = new Map()
w.watchProduce(Broker, tracks)
const protocolError = type => Object.assign(new Error(type), { name: 'KafkaJSProtocolError', type })
;(async () => {
  const out = []
  for (const { attempts, acks } of cases) {
    const track = { key: 'v', attempts: 0, maybe: false }
    tracks.set('v', track)
    for (const answer of attempts) {
      const broker = new Broker()
      broker.answer = async () => {
        if (answer === 'timeout') throw Object.assign(new Error('timed out'), { name: 'KafkaJSRequestTimeoutError' })
        throw protocolError(answer)
      }
      const request = { acks, topicData: [{ topic: 't', partitions: [{ partition: 0, messages: [{ value: Buffer.from('v') }] }] }] }
      await broker.produce(request).catch(() => {})
    }
    out.push(w.failedSendType(track))
  }
  process.stdout.write(JSON.stringify(out))
})()
"""

CASES = [
    # (attempts, acks, expected)
    ([], -1, "fail"),                                          # never reached a broker
    (["NOT_ENOUGH_REPLICAS"], -1, "fail"),                     # refused before the append
    (["NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS"], -1, "fail"),
    # a deposed leader answers an appended acks=all request NOT_LEADER (seed 5's 66)
    (["NOT_LEADER_FOR_PARTITION"], -1, "info"),
    (["NOT_LEADER_FOR_PARTITION", "NOT_ENOUGH_REPLICAS"], -1, "info"),
    (["NOT_LEADER_OR_FOLLOWER"], None, "info"),                # kafkajs' default acks: -1
    (["UNKNOWN_TOPIC_OR_PARTITION"], -1, "info"),
    (["NOT_LEADER_FOR_PARTITION"], 1, "fail"),                 # acks=1 answers right after appending
    (["NOT_ENOUGH_REPLICAS_AFTER_APPEND"], -1, "info"),
    (["timeout", "NOT_ENOUGH_REPLICAS"], -1, "info"),
    (["REQUEST_TIMED_OUT"], -1, "info"),
]


def test_fail_only_when_certainly_not_written():
    cases = [{"attempts": a, "acks": acks} for a, acks, _ in CASES]
    done = subprocess.run(["node", "-e", SCRIPT, str(WORKER), json.dumps(cases)],
                          capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got == [expected for _, _, expected in CASES]


def join_changes(owned: list[int], assignment: list[int]) -> dict:
    script = ("const w = require(process.argv[1]); const [owned, now] = JSON.parse(process.argv[2]);"
              "process.stdout.write(JSON.stringify(w.joinChanges(new Set(owned), now)))")
    done = subprocess.run(["node", "-e", script, str(WORKER), json.dumps([owned, assignment])],
                          capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_join_is_a_new_ownership_of_each_assigned_partition():
    # kafkajs rejoins (JoinGroup + SyncGroup) after a Fetch answered NOT_LEADER, with the
    # same assignment, and reads again from the committed offset (sweep kafkajs seed 3):
    # the kept partition must be assigned anew, or the re-read looks nonmonotonic.
    assert join_changes([1], [1]) == {"revoked": [], "assigned": [1]}
    assert join_changes([1, 2], [2, 0]) == {"revoked": [1], "assigned": [0, 2]}
    assert join_changes([], []) == {"revoked": [], "assigned": []}

    from bench.chaos.checker import Op, check
    rejoin = join_changes([1], [1])["assigned"]
    history = [Op("c1", "ok", "assign", 1, partitions=(1,), generation=3),
               Op("c1", "ok", "poll", 2, reads=((1, 0, b"a"), (1, 1, b"b"))),
               Op("c1", "ok", "assign", 3, partitions=tuple(rejoin), generation=3),
               Op("c1", "ok", "poll", 4, reads=((1, 1, b"b"),))]
    verdict = check(history, {1: [(0, b"a"), (1, b"b")]}, group=True)
    assert verdict.nonmonotonic == []
