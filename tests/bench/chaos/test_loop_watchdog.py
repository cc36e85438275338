"""The kafkajs worker's event-loop watchdog (bench/chaos/clients/loop_watchdog.js) and the
kafkajs 2.2.4 stall it found: a fetcher of a stopped runner looping in the microtask
queue, so no timer, signal or write of the worker ran again (the worker's patch,
``idleStoppedRunner``, makes such a fetcher wait instead)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.node.kafka.clients import missing, node_env

CLIENTS = Path(__file__).resolve().parents[3] / "bench" / "chaos" / "clients"
STALLED = -9                # loop_watchdog.js ends a stalled process with SIGKILL
RUN_TIMEOUT_S = 30.0

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

# A loop of promises that settle without I/O: the event loop never turns again.
SPIN = """
const { startWatchdog } = require(%(watchdog)s)
startWatchdog({ name: 'spin', stallMs: 1000 })
process.on('SIGTERM', () => {})     // a stop that would never run anyway
async function settlesAtOnce () { return [] }
async function spinForEver () { while (true) await settlesAtOnce() }
setTimeout(spinForEver, 100)
setTimeout(() => { process.stdout.write('a timer ran\\n'); process.exit(0) }, 3000)
"""

# kafkajs' own fetcher loop over kafkajs' own Runner.fetch, the runner stopped (as after
# consumer.disconnect() while the FetchManager restarted its fetchers): a timer must still
# run and stop the fetcher.
STOPPED_RUNNER = """
const { startWatchdog } = require(%(watchdog)s)
startWatchdog({ name: 'fetcher', stallMs: 2000 })
if (process.argv[2] === 'patched') require(%(worker)s).idleStoppedRunner()
const Runner = require('kafkajs/src/consumer/runner')
const createFetcher = require('kafkajs/src/consumer/fetcher')
const quiet = { debug () {}, info () {}, warn () {}, error () {} }
const logger = { ...quiet, namespace: () => logger }
const runner = Object.create(Runner.prototype)
runner.running = false
runner.logger = logger
runner.consumerGroup = { groupId: 'g', memberId: 'm' }
const fetcher = createFetcher({ nodeId: 0, workerQueue: { push: async () => {} },
  partitionAssignments: new Map(), fetch: nodeId => runner.fetch(nodeId), logger })
fetcher.start()
setTimeout(async () => {
  await fetcher.stop()
  process.stdout.write('stopped\\n')
  process.exit(0)
}, 300)
"""


def run(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.js"
    script.write_text(source % {"watchdog": json.dumps(str(CLIENTS / "loop_watchdog.js")),
                                "worker": json.dumps(str(CLIENTS / "kafkajs_worker.js"))})
    return subprocess.run(["node", str(script), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=node_env())


def stall_events(stdout: str) -> list[dict]:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [e for e in events if e["event"] == "client" and e["kind"] == "error"
            and "event loop stalled" in e["text"]]


@needs_node
def test_a_starved_event_loop_is_named_and_ended(tmp_path):
    result = run(tmp_path, SPIN)
    assert result.returncode == STALLED, result.stdout + result.stderr
    assert "a timer ran" not in result.stdout
    [event] = stall_events(result.stdout)
    assert "spinForEver" in event["text"] and "script.js" in event["text"], event
    assert isinstance(event["time_ns"], int) and event["time_ns"] > 0


@pytest.mark.skipif(missing("kafkajs") is not None, reason=str(missing("kafkajs")))
def test_a_stopped_runners_fetcher_starves_kafkajs_unless_patched(tmp_path):
    unpatched = run(tmp_path, STOPPED_RUNNER)
    assert unpatched.returncode == STALLED, unpatched.stdout + unpatched.stderr
    [event] = stall_events(unpatched.stdout)
    assert "consumer/runner.js" in event["text"] or "consumer/fetcher.js" in event["text"], event
    patched = run(tmp_path, STOPPED_RUNNER, "patched")
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert "stopped" in patched.stdout and not stall_events(patched.stdout)
