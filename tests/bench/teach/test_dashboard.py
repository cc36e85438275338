"""The dashboard on a running cluster, in a real browser (Playwright + Debian's
Chromium): the page shows the leader, a kill from its button shows the new leader and
the shrunken ISR, and a scenario plays step by step. Only the holder of the printed
token drives it: other sites' pages (a cross-site POST, a DNS-rebinding name) are
refused and kill nothing, over HTTP and in Chromium. Screenshots go to
.test-artifacts/dashboard/ at the repository's root, for a person to look at."""
from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench.chaos.clients import present
from node.cluster import Cluster
from tests.dashboard_process import Dashboard
from tests.dashboard_process import start_dashboard as _start_dashboard
from tests.dashboard_process import stop_dashboard as _stop

pytestmark = [pytest.mark.process, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
SHOTS = ROOT / ".test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CLIENTS_HERE = present()
CLIENT = "confluent-kafka" if "confluent-kafka" in CLIENTS_HERE else "native"
FAST = {"zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "2000",
        "replica.fetch.wait.max.ms": "100", "auto.leader.rebalance.enable": "false"}


def _request(url: str, body: bytes | None = None, headers: dict | None = None,
             ) -> tuple[int, dict]:
    """(status, JSON answer); a POST when there is a body."""
    request = urllib.request.Request(url, body, headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _post(dashboard: Dashboard, path: str, body: dict, headers: dict | None = None,
          ) -> tuple[int, dict]:
    """A POST as the page sends it: JSON, with the token (``headers`` adds or replaces)."""
    return _request(dashboard.url + path, json.dumps(body).encode(),
                    {"Content-Type": "application/json", **dashboard.auth, **(headers or {})})


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
    dashboard = _start_dashboard("--dir", str(cluster.dir), "--token", "class-demo/1")
    try:
        assert dashboard.token == "class-demo/1"   # --token sets it, quoted in the address
        assert "?token=class-demo%2F1" in dashboard.printed

        def leader_shown():
            status, state = _request(dashboard.url + "state", headers=dashboard.auth)
            snap = state["snapshot"]
            return snap and any(p["topic"] == "t" and p["leader"] == 0
                                for p in snap["partitions"])
        cluster.wait_for(leader_shown, 30, "t-0 with its leader in /state")
        assert dashboard.url.startswith("http://127.0.0.1:")
        status, answer = _post(dashboard, "api/action", {"action": "meteor", "target": 1})
        assert status == 400 and "unknown action" in answer["message"]
        status, answer = _post(dashboard, "api/action", {"action": "kill", "target": 9})
        assert status == 400 and "unknown process id" in answer["message"]
        status, answer = _post(dashboard, "api/next", {})
        assert status == 400 and "no scenario" in answer["message"]
        assert all(cluster.process(b).state() == "alive" for b in cluster.broker_ids)
    finally:
        _stop(dashboard)


def test_a_real_clients_workload_runs_from_the_api_and_a_bad_client_is_refused(cluster):
    """POST /api/workload {"run": true, "client": "confluent-kafka"}: its producer's
    acknowledgements and its consumer's reads grow in /state; an unknown client is a
    400 that starts nothing."""
    from bench.chaos.clients import missing
    if missing("confluent-kafka"):
        pytest.skip(missing("confluent-kafka"))
    dashboard = _start_dashboard("--dir", str(cluster.dir), "--topic", "t")
    try:
        for client, says in (("kafka-go", "unknown client 'kafka-go'"),
                             (7, "client: a name")):
            status, answer = _post(dashboard, "api/workload", {"run": True, "client": client})
            assert status == 400 and says in answer["message"], answer
        assert _request(dashboard.url + "state", headers=dashboard.auth)[1]["workload"] is None

        def state():
            return _request(dashboard.url + "state", headers=dashboard.auth)[1]
        cluster.wait_for(lambda: "confluent-kafka" in state()["clients"], 30,
                         "the client selector's list")
        status, answer = _post(dashboard, "api/workload",
                               {"run": True, "client": "confluent-kafka"})
        assert status == 200 and answer["ok"], answer
        assert answer["workload"]["client"].startswith("confluent-kafka 2.")
        first = cluster.wait_for(lambda: (lambda w: w if w["acknowledged"] >= 20 and
                                          w["read"] >= 20 else None)(state()["workload"]),
                                 60, "acknowledgements and reads")
        grown = cluster.wait_for(
            lambda: (lambda w: w if w["acknowledged"] > first["acknowledged"] + 20 else None)(
                state()["workload"]), 60, "more acknowledgements")
        assert grown["lost"] == 0 and grown["client"] == first["client"]
        status, answer = _post(dashboard, "api/workload", {"run": False})
        assert status == 200 and answer["workload"]["acknowledged"] >= grown["acknowledged"]
        assert "with confluent-kafka" in " ".join(e["text"] for e in state()["timeline"])
    finally:
        _stop(dashboard)


def test_only_the_holder_of_the_token_drives_the_dashboard(cluster):
    """Another tab's cross-site POST, a DNS-rebinding page and a request without the
    token are refused and kill nothing; the page's own request kills."""
    dashboard = _start_dashboard("--dir", str(cluster.dir))
    url, port, auth = dashboard.url, dashboard.port, dashboard.auth
    kill_0 = json.dumps({"action": "kill", "target": 0}).encode()
    try:
        assert dashboard.token and len(dashboard.token) >= 32   # secrets.token_urlsafe
        # another site's "simple" POST (text/plain: no CORS preflight), token or not
        for headers in ({}, auth):
            status, answer = _request(url + "api/action", kill_0,
                                      {"Content-Type": "text/plain",
                                       "Origin": "http://evil.example", **headers})
            assert status == 403 and "Origin" in answer["message"], answer
        for origin in (f"http://127.0.0.1:{port + 1}", "null", f"https://localhost:{port}"):
            status, _ = _post(dashboard, "api/action", {"action": "kill", "target": 0},
                              {"Origin": origin})
            assert status == 403, origin
        # with the token but not JSON (a form, a text/plain fetch): 415
        status, answer = _request(url + "api/action", kill_0,
                                  {"Content-Type": "text/plain", **auth})
        assert status == 415 and "application/json" in answer["message"]
        # without the token, or a wrong one, or the token only in the address of a POST
        for headers, path in (({}, "api/action"), ({"Authorization": "token nope"}, "api/action"),
                              ({}, f"api/action?token={dashboard.token}")):
            status, answer = _request(url + path, kill_0,
                                      {"Content-Type": "application/json", **headers})
            assert status == 401 and "token" in answer["message"], (headers, path)
        for path in ("", "state", "events", "state?token=nope"):
            assert _request(url + path)[0] == 401, path
        # a DNS-rebinding page: its name in Host, refused even with the token
        for host in (f"evil.example:{port}", "evil.example", f"localhost:{port + 1}"):
            status, answer = _request(url + "state", headers={"Host": host, **auth})
            assert status == 403 and "Host" in answer["message"], host
            status, _ = _post(dashboard, "api/action", {"action": "kill", "target": 0},
                              {"Host": host, "Origin": f"http://{host}"})
            assert status == 403, host
        assert all(cluster.process(b).state() == "alive" for b in cluster.broker_ids)

        # reads with the token: the header, or ?token= as the page's address and its stream
        assert _request(url + "state", headers=auth)[0] == 200
        assert _request(url + f"state?token={dashboard.token}")[0] == 200
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            assert _request(url + "state", headers={"Host": host, **auth})[0] == 200
        # the page's own request: JSON, the token, its own Origin
        status, answer = _post(dashboard, "api/action", {"action": "kill", "target": 2},
                               {"Origin": f"http://localhost:{port}"})
        assert status == 200 and answer["ok"], answer
        assert cluster.process(2).state() == "dead"
        assert cluster.process(0).state() == cluster.process(1).state() == "alive"
    finally:
        _stop(dashboard)


def test_no_token_is_for_loopback_only_and_says_what_it_allows(cluster):
    base = [sys.executable, "-m", "bench.cli", "dashboard", "--dir", str(cluster.dir),
            "--port", "0"]
    for extra, says in ((["--no-token", "--host", "0.0.0.0"], "only allowed on a loopback"),
                        (["--no-token", "--token", "x"], "not allowed with"),
                        (["--token", "two words"], "visible ASCII")):
        done = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (extra, done.stderr)
    dashboard = _start_dashboard("--dir", str(cluster.dir), "--no-token")
    try:
        assert dashboard.token is None
        assert "--no-token: any program on this machine" in dashboard.printed
        assert _request(dashboard.url + "state")[0] == 200
        status, answer = _request(dashboard.url + "api/action", b'{"action": "meteor"}',
                                  {"Content-Type": "application/json"})
        assert status == 400 and "unknown action" in answer["message"]
        # other sites' pages are still refused
        status, _ = _request(dashboard.url + "api/action",
                             json.dumps({"action": "kill", "target": 0}).encode(),
                             {"Content-Type": "text/plain", "Origin": "http://evil.example"})
        assert status == 403
        status, _ = _request(dashboard.url + "state",
                             headers={"Host": f"evil.example:{dashboard.port}"})
        assert status == 403
        assert all(cluster.process(b).state() == "alive" for b in cluster.broker_ids)
    finally:
        _stop(dashboard)


def _browser():
    playwright = pytest.importorskip("playwright.sync_api",
                                     reason="playwright is not installed (pip install playwright)")
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return playwright


ATTACK = """<!doctype html><title>other site</title>
<form id="form" method="POST" enctype="text/plain" action="{url}api/action">
<input name='{{"action": "kill", "target": 1, "x": "' value='"}}'></form>
<script>
fetch("{url}api/action", {{method: "POST", mode: "no-cors", body: '{{"action": "kill", "target": 0}}',
                            headers: {{"Content-Type": "text/plain"}}}})
  .then(() => {{ document.title = "sent"; document.getElementById("form").submit(); }});
</script>"""


class _OtherSite(http.server.BaseHTTPRequestHandler):
    """Another site the teacher has open: a page on another local port."""
    page = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args):
        pass


@pytest.mark.browser
def test_pages_of_other_sites_in_the_browser_can_neither_drive_nor_read_it(cluster):
    """In Chromium, without a token (``--no-token``) to leave only the Host, Origin and
    Content-Type checks: another site's form and text/plain fetch POST a kill (no
    preflight), and the dashboard under a rebinding name (mapped to 127.0.0.1) is
    refused. (A rebinding page's own fetch of /state is blocked by Chromium's Private
    Network Access before it leaves; browsers without it send it, with that Host.)"""
    playwright = _browser()
    dashboard = _start_dashboard("--dir", str(cluster.dir), "--no-token")
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type(
        "Attack", (_OtherSite,), {"page": ATTACK.format(url=dashboard.url).encode()}))
    serving = threading.Thread(target=site.serve_forever, daemon=True)
    serving.start()
    rebind = f"http://rebind.test:{dashboard.port}/"
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--host-resolver-rules=MAP rebind.test 127.0.0.1"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{site.server_address[1]}/")
            page.wait_for_url(dashboard.url + "api/action", timeout=30_000)  # the form went
            assert "refused" in page.content()
            answer = page.goto(rebind + "state")
            status, read = answer.status, answer.text()
            browser.close()
        assert status == 403 and "Host 'rebind.test:" in read, (status, read[:200])
        assert all(cluster.process(b).state() == "alive" for b in cluster.broker_ids)
    finally:
        site.shutdown()
        site.server_close()
        _stop(dashboard)


@pytest.mark.browser
def test_killing_the_leader_from_the_page_shows_the_new_leader_and_the_shrunk_isr(cluster):
    """The workload writes through confluent-kafka (picked in the page) when present."""
    playwright = _browser()
    SHOTS.mkdir(parents=True, exist_ok=True)
    dashboard = _start_dashboard("--dir", str(cluster.dir), "--topic", "t")
    elected = {}
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(dashboard.page)
            leader = page.get_by_test_id("leader-t-0")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=\"leader-t-0\"]')?.textContent"
                ".includes('broker 0')", timeout=30_000)
            # the workload through a real client when one is here: picked in the selector
            page.wait_for_function(
                "() => document.querySelectorAll('[data-testid=\"workload-client\"] option')"
                ".length >= %d" % len(CLIENTS_HERE), timeout=30_000)
            page.get_by_test_id("workload-client").select_option(CLIENT)
            page.get_by_test_id("workload-start").click()
            page.wait_for_function(
                "() => Number(document.querySelector('[data-testid=\"count-acknowledged\"]')"
                "?.textContent) > 50", timeout=30_000)
            assert f"writing with {CLIENT}" in page.get_by_test_id(
                "workload-client-now").text_content()
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
        _stop(dashboard)


@pytest.mark.browser
def test_a_scenario_plays_step_by_step_beside_the_picture(tmp_path):
    playwright = _browser()
    SHOTS.mkdir(parents=True, exist_ok=True)
    dashboard = _start_dashboard("--dir", str(tmp_path / "scenario"), "--scenario",
                                 "min-insync")
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(dashboard.page)
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
        _stop(dashboard)
    from shm.names import cluster_objects
    ids = [json.loads(f.read_text())["cluster_id"]
           for f in (tmp_path / "scenario").glob("*/cluster.json")]
    assert ids and not any(cluster_objects(i) for i in ids)


def test_top_prints_the_same_picture_once(cluster):
    done = subprocess.run([sys.executable, "-m", "bench.cli", "top", "--dir", str(cluster.dir),
                           "--once"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "controller broker" in done.stdout and "t-0" in done.stdout
    assert "leader 0" in done.stdout and "ISR [0, 1, 2]" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "bench.cli", "top", "--dir",
                          str(cluster.dir) + "-missing", "--once"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "no such directory" in bad.stderr
