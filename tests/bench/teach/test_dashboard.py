"""The dashboard on a running cluster, in a real browser (Playwright + Debian's
Chromium): the page shows the leader, a kill from its button shows the new leader and
the shrunken ISR, and a scenario plays step by step. Screenshots go to
.test-artifacts/dashboard/ at the repository's root, for a person to look at."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from node.cluster import Cluster

pytestmark = [pytest.mark.process, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
SHOTS = ROOT / ".test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FAST = {"zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "2000",
        "replica.fetch.wait.max.ms": "100", "auto.leader.rebalance.enable": "false"}


def _start_dashboard(*args) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "node.cli", "dashboard", "--port", "0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line or "")
        if found:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain
            return proc, found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"the dashboard exited: {line}{proc.stdout.read()}")
    proc.kill()
    raise AssertionError("the dashboard did not print its address")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def cluster(tmp_path, cluster_id):
    c = Cluster.up(tmp_path / "c", 3, config=FAST, cluster_id=cluster_id)
    try:
        from node.client import Admin
        with Admin(bootstrap_servers=c.bootstrap_servers) as admin:
            admin.create_topic("t", replica_assignment={0: [0, 1, 2]},
                               config={"min.insync.replicas": "1"})
        yield c
    finally:
        c.down(grace_s=5)


def test_the_state_endpoint_and_a_bad_action_answer_clearly(cluster):
    proc, url = _start_dashboard("--dir", str(cluster.dir))
    try:
        def leader_shown():
            with urllib.request.urlopen(url + "state", timeout=10) as r:
                snap = json.loads(r.read())["snapshot"]
            return snap and any(p["topic"] == "t" and p["leader"] == 0
                                for p in snap["partitions"])
        cluster.wait_for(leader_shown, 30, "t-0 with its leader in /state")
        assert url.startswith("http://127.0.0.1:")
        status, answer = _post(url + "api/action", {"action": "meteor", "target": 1})
        assert status == 400 and "unknown action" in answer["message"]
        status, answer = _post(url + "api/action", {"action": "kill", "target": 9})
        assert status == 400 and "unknown process id" in answer["message"]
        status, answer = _post(url + "api/next", {})
        assert status == 400 and "no scenario" in answer["message"]
        assert all(cluster.process(b).state() == "alive" for b in cluster.broker_ids)
    finally:
        _stop(proc)


def _browser():
    playwright = pytest.importorskip("playwright.sync_api",
                                     reason="playwright is not installed (pip install playwright)")
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return playwright


@pytest.mark.browser
def test_killing_the_leader_from_the_page_shows_the_new_leader_and_the_shrunk_isr(cluster):
    playwright = _browser()
    SHOTS.mkdir(parents=True, exist_ok=True)
    proc, url = _start_dashboard("--dir", str(cluster.dir), "--topic", "t")
    elected = {}
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(url)
            leader = page.get_by_test_id("leader-t-0")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=\"leader-t-0\"]')?.textContent"
                ".includes('broker 0')", timeout=30_000)
            page.get_by_test_id("workload-start").click()
            page.wait_for_function(
                "() => Number(document.querySelector('[data-testid=\"count-acknowledged\"]')"
                "?.textContent) > 50", timeout=30_000)
            page.screenshot(path=str(SHOTS / "1-before-kill.png"), full_page=True)

            def watch():  # when the coordinator's state changed: the election itself
                while "t" not in elected:
                    s = cluster.partition_state("t", 0)
                    if s is not None and s.leader not in (0, -1):
                        elected["t"] = time.monotonic()
                        elected["leader"] = s.leader
                    time.sleep(0.005)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            page.get_by_test_id("kill-0").click()
            page.wait_for_function(
                "() => { const l = document.querySelector('[data-testid=\"leader-t-0\"]')"
                "?.textContent || ''; const i = document.querySelector("
                "'[data-testid=\"isr-t-0\"]')?.textContent || '';"
                " return /broker [12]/.test(l) && !i.includes('0'); }",
                timeout=60_000, polling="raf")
            shown = time.monotonic()
            watcher.join(timeout=10)
            delay_ms = (shown - elected["t"]) * 1000
            assert f"broker {elected['leader']}" in leader.text_content()
            assert page.get_by_test_id("state-0").text_content() == "killed"
            page.wait_for_function(
                "() => Number(document.querySelector('[data-testid=\"count-acknowledged\"]')"
                "?.textContent) > 200", timeout=60_000)
            page.screenshot(path=str(SHOTS / "2-after-kill.png"), full_page=True)
            assert page.get_by_test_id("count-lost").text_content() == "0"
            timeline = page.locator("#timeline").text_content()
            assert "broker 0 killed" in timeline and "leader 0 ->" in timeline
            assert "ISR shrinks" in timeline
            browser.close()
        print(f"page showed the new leader {delay_ms:.0f} ms after the coordinator's state "
              f"changed; screenshots in {SHOTS}")
    finally:
        _stop(proc)


@pytest.mark.browser
def test_a_scenario_plays_step_by_step_beside_the_picture(tmp_path):
    playwright = _browser()
    SHOTS.mkdir(parents=True, exist_ok=True)
    proc, url = _start_dashboard("--dir", str(tmp_path / "scenario"), "--scenario",
                                 "min-insync")
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(url)
            deadline = time.monotonic() + 240
            steps = 0
            while not page.get_by_test_id("verdict").count():
                assert time.monotonic() < deadline, page.get_by_test_id("narration").text_content()
                button = page.get_by_test_id("next")
                if button.count() and button.is_enabled():
                    button.click()
                    steps += 1
                    if steps == 2:
                        page.wait_for_timeout(500)  # let the picture of step 1 arrive
                        page.screenshot(path=str(SHOTS / "3-scenario.png"), full_page=True)
                page.wait_for_timeout(200)
            verdict = page.get_by_test_id("verdict").text_content()
            narration = page.get_by_test_id("narration").text_content()
            page.screenshot(path=str(SHOTS / "4-scenario-verdict.png"), full_page=True)
            browser.close()
        assert steps == 3 and "matches the prediction" in verdict, narration
        assert "NOT_ENOUGH_REPLICAS" in narration and "[as predicted]" in narration
    finally:
        _stop(proc)
    from shm.names import cluster_objects
    ids = [json.loads(f.read_text())["cluster_id"]
           for f in (tmp_path / "scenario").glob("*/cluster.json")]
    assert ids and not any(cluster_objects(i) for i in ids)


def test_top_prints_the_same_picture_once(cluster):
    done = subprocess.run([sys.executable, "-m", "node.cli", "top", "--dir", str(cluster.dir),
                           "--once"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "controller broker" in done.stdout and "t-0" in done.stdout
    assert "leader 0" in done.stdout and "ISR [0, 1, 2]" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "node.cli", "top", "--dir",
                          str(cluster.dir) + "-missing", "--once"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "no such directory" in bad.stderr
