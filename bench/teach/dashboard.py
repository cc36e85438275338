"""``minikafka dashboard --dir D [--port P] [--scenario NAME]``: a live web page of a
running cluster, on 127.0.0.1 by default.

The page shows the brokers (alive, paused, killed, isolated; the controller and its
epoch), every partition (leader, leader epoch, ISR, each replica's log as a bar with its
LEO, the committed part below the HW distinct from the rest), a timeline of events
(elections, ISR shrinks and expansions, truncations, controller changes, faults) and a
workload's counters (acknowledged, read, lost so far). Its buttons call the nemesis's
operations: kill, pause, resume, restart, isolate, cut a link, heal. With
``--scenario NAME`` it plays a scenario of the catalog on its own clusters (under
``D``), one step per click, the narration beside the picture.

The server is aiohttp (a maintained asyncio HTTP server with streaming responses): the
picture is pushed to every open page as server-sent events (``GET /events``), five
times a second by default. Every picture is one consistent read (``node.cluster.view``:
a partition is drawn from its leader's single board row, so a follower is never drawn
ahead of its leader). Endpoints: ``GET /`` (the page), ``GET /state`` (the last picture
as JSON), ``GET /events`` (SSE), ``POST /api/action`` ``{"action", "target", "peer"}``,
``POST /api/workload`` ``{"run": true|false, "client": C}``, ``POST /api/next``
(scenario mode). The workload's client is native (in-process, the default) or any real
Kafka client present on the machine (``bench.chaos.clients.present()``, listed in the
state as ``clients``): its producers and its consumer are then worker processes on the
Kafka listeners; a client that is unknown or not installed is refused (400).

Only its user can drive it (``node.http_guard``): every request needs the token printed
with the address at start (``http://127.0.0.1:PORT/?token=T``; ``--token`` sets it),
a Host that names this server, no foreign Origin, and a POST needs
``Content-Type: application/json``. ``--no-token`` drops the token (loopback only).
"""
from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
import threading
import time
from pathlib import Path

HOST = "127.0.0.1"
STATIC = Path(__file__).with_name("static")
TIMELINE_MAX = 300
ACTIONS = ("kill", "pause", "resume", "restart", "isolate", "cut", "heal", "stop")

log = logging.getLogger("minikafka.dashboard")


class Model:
    """Everything the page shows, refreshed by ``refresh`` (one consistent read)."""

    def __init__(self, cluster=None, topic: str | None = None):
        self.cluster = cluster
        self.topic = topic
        self.previous = None
        self.timeline: list[dict] = []
        self.snapshot_json: dict | None = None
        self.error: str | None = None
        self.workload = None   # a workload.Workload while one runs
        self.last_counts: dict | None = None
        self.scenario: dict | None = None
        self.stage = None   # scenario mode: the stage whose writers are the workload
        self.seq = 0
        self.lock = threading.Lock()
        self.refresh_ms = 0.0
        self._clients: list[str] | None = None

    def add_event(self, kind: str, text: str) -> None:
        with self.lock:
            self.timeline.append({"t_ms": int(time.time() * 1000), "kind": kind, "text": text})
            del self.timeline[:-TIMELINE_MAX]

    def refresh(self) -> None:
        from node.cluster.view import events, snapshot
        if self.cluster is None:
            self.seq += 1
            return
        started = time.perf_counter()
        try:
            snap = snapshot(self.cluster)
            self.error = None
        except Exception as e:  # the coordinator is down: say so, keep the last picture
            self.error = f"cannot read the cluster: {e}"
            self.seq += 1
            return
        new = events(self.previous, snap)
        self.previous = snap
        with self.lock:
            self.timeline += new
            del self.timeline[:-TIMELINE_MAX]
            self.snapshot_json = snap.to_json()
        self.refresh_ms = (time.perf_counter() - started) * 1000
        self.seq += 1

    def state(self) -> dict:
        with self.lock:
            timeline = list(self.timeline[-60:])
            snap = self.snapshot_json
        counts = self.workload.counts() if self.workload is not None else self.last_counts
        if counts is None and self.stage is not None and self.stage.writers:
            writers = list(self.stage.writers)   # a scenario's own producers
            counts = {"running": True, "topic": ", ".join(sorted({w.topic for w in writers})),
                      "client": writers[0].label,
                      "acknowledged": sum(w.acked for w in writers),
                      "refused": sum(w.failed for w in writers),
                      "unknown": sum(w.unknown for w in writers), "read": None,
                      "lost": None}
        return {"seq": self.seq, "t_ms": int(time.time() * 1000), "snapshot": snap,
                "timeline": timeline, "error": self.error, "workload": counts,
                "scenario": self.scenario, "refresh_ms": round(self.refresh_ms, 1),
                "clients": self._clients or ["native"],
                "netns": self.cluster is not None and self.cluster.mesh is not None,
                "nodes": list(self.cluster.mesh.nodes)
                if self.cluster is not None and self.cluster.mesh is not None else []}

    # ------------------------------------------------------------- controls
    def act(self, action: str, target, peer=None) -> str:
        c = self.cluster
        if c is None:
            raise ValueError("no cluster yet")
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
        name = "coordinator" if str(target) == "zk" else f"broker {target}"
        if action == "kill":
            c.kill(target, "KILL")
            text = f"{name} killed (SIGKILL)"
        elif action == "pause":
            c.kill(target, "STOP")
            text = f"{name} paused (SIGSTOP)"
        elif action == "resume":
            c.kill(target, "CONT")
            text = f"{name} resumed (SIGCONT)"
        elif action == "restart":
            c.start(target, wait=False)
            text = f"{name} started"
        elif action == "stop":
            c.stop(target, grace_s=30)
            text = f"{name} stopped (controlled shutdown)"
        elif action == "isolate":
            pairs = c.isolate(target)
            text = f"{name} isolated: " + ", ".join(f"{a}|{b}" for a, b in pairs)
        elif action == "cut":
            a, b = c.cut(target, peer)
            text = f"link {a} - {b} cut"
        else:
            pairs = c.heal() if target in (None, "", "all") else c.heal(target, peer)
            text = "healed: " + (", ".join(f"{a}-{b}" for a, b in pairs) or "nothing was cut")
        self.add_event("fault", text)
        return text

    def clients(self) -> list[str]:
        """The clients present on this machine (looked up once: it imports them)."""
        if self._clients is None:
            from bench.chaos.clients import present
            self._clients = present()
        return self._clients

    def set_workload(self, run: bool, client: str = "native") -> dict:
        if run:
            from bench.chaos.clients import CLIENTS, missing
            if client not in CLIENTS:
                raise ValueError(f"unknown client {client!r} (one of {', '.join(CLIENTS)})")
            why = missing(client)
            if why is not None:
                raise ValueError(f"client {client} cannot run here: {why}")
        if run and self.cluster is None:
            raise ValueError("no cluster yet")
        if run and self.workload is None:
            from bench.teach.workload import Workload
            topic = self.topic or self._default_topic()
            self.workload = Workload(self.cluster, topic, client)
            self.add_event("workload", f"workload started on {topic} with "
                                       f"{self.workload.label}")
        elif not run and self.workload is not None:
            w, self.workload = self.workload, None
            w.stop()
            self.last_counts = w.counts()
            self.add_event("workload", "workload stopped")
        return self.workload.counts() if self.workload else (self.last_counts or {})

    def _default_topic(self) -> str:
        from node.client import Admin
        admin = Admin(bootstrap_servers=self.cluster.bootstrap_servers)
        try:
            topics = sorted(t for t in admin.list_topics() if not t.startswith("__"))
            if topics:
                return topics[0]
            admin.create_topic("dashboard", 1, min(3, len(self.cluster.broker_ids)),
                               config={"min.insync.replicas": "1"})
            return "dashboard"
        finally:
            admin.close()

    def close(self) -> None:
        if self.workload is not None:
            self.workload.stop()
            self.workload = None
        if self.cluster is not None:
            self.cluster.close()


class ScenarioPlayer:
    """A scenario of the catalog played in a thread, one step per ``next()``."""

    def __init__(self, model: Model, name: str, directory: Path, speed: float,
                 client: str = "native"):
        from bench.teach.catalog import find
        self.model = model
        self.client = client
        self.scenario = find(name)
        self.directory = directory
        self.speed = speed
        self.go = threading.Event()
        self.stopping = threading.Event()
        model.scenario = {"name": self.scenario.name, "title": self.scenario.title,
                          "source": self.scenario.source,
                          "prediction": self.scenario.prediction, "lines": [],
                          "waiting": False, "step": 0, "done": False, "verdict": None}
        self.thread = threading.Thread(target=self._play, name="scenario", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _out(self, text: str) -> None:
        self.model.scenario["lines"].append(text)

    def _gate(self, n, step) -> None:
        s = self.model.scenario
        s["waiting"], s["step"] = True, n
        self.model.add_event("scenario", f"step {n}: {step.title}")
        while not self.go.wait(0.2):
            if self.stopping.is_set():
                return
        self.go.clear()
        s["waiting"] = False

    def _on_stage(self, stage) -> None:
        if self.model.cluster is None:
            self.model.cluster = stage.cluster
            self.model.stage = stage

    def _detach(self) -> None:
        """Before the clusters stop: keep the last picture (of the story's end)."""
        self.model.refresh()
        self.model.cluster = None

    def _play(self) -> None:
        from bench.teach.run import run_scenario
        result = run_scenario(self.scenario, self.directory, speed=self.speed, out=self._out,
                              gate=self._gate, should_stop=self.stopping,
                              on_stage=self._on_stage, before_close=self._detach,
                              show_pictures=False,  # the page draws the picture
                              client=self.client)
        self.model.scenario.update(done=True, waiting=False, verdict={
            "matched": result.matched, "wall_s": round(result.wall_s, 1),
            "expectations": result.expectations, "error": result.error})

    def next(self) -> None:
        self.go.set()

    def stop(self) -> None:
        self.stopping.set()
        self.go.set()
        self.thread.join(timeout=120)


# ----------------------------------------------------------------- the web server

def make_app(model: Model, interval_s: float = 0.2, player: ScenarioPlayer | None = None,
             *, token: str | None, host: str = HOST):
    from aiohttp import web

    from node import http_guard

    async def index(request):
        return web.FileResponse(STATIC / "dashboard.html")

    async def state(request):
        return web.json_response(model.state())

    async def events(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        cond = request.app["changed"]
        last = -1
        try:
            while True:
                async with cond:
                    await cond.wait_for(lambda: model.seq != last)
                last = model.seq
                data = json.dumps(model.state(), default=str)
                await response.write(f"data: {data}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    async def action(request):
        try:
            body = await request.json()
            text = await asyncio.get_running_loop().run_in_executor(
                None, model.act, str(body.get("action", "")), body.get("target"),
                body.get("peer"))
        except Exception as e:  # a bad request or a refused operation: say why
            return web.json_response({"ok": False, "message": str(e)}, status=400)
        return web.json_response({"ok": True, "message": text})

    async def workload(request):
        try:
            body = await request.json()
            client = body.get("client", "native")
            if not isinstance(client, str):
                raise ValueError("client: a name, e.g. \"native\"")
            counts = await asyncio.get_running_loop().run_in_executor(
                None, model.set_workload, bool(body.get("run")), client)
        except Exception as e:
            return web.json_response({"ok": False, "message": str(e)}, status=400)
        return web.json_response({"ok": True, "workload": counts})

    async def next_step(request):
        if player is None:
            return web.json_response({"ok": False, "message": "no scenario is playing"},
                                     status=400)
        player.next()
        return web.json_response({"ok": True})

    async def poller(app):
        loop = asyncio.get_running_loop()
        cond = app["changed"]
        while True:
            started = loop.time()
            await loop.run_in_executor(None, model.refresh)
            async with cond:
                cond.notify_all()
            await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))

    async def on_startup(app):
        app["changed"] = asyncio.Condition()
        app["poller"] = asyncio.create_task(poller(app))
        asyncio.get_running_loop().run_in_executor(None, model.clients)  # for the selector

    async def on_cleanup(app):
        app["poller"].cancel()

    async def on_shutdown(app):
        app["poller"].cancel()

    app = web.Application()
    http_guard.install(app, token=token, host=host)
    app.router.add_get("/", index)
    app.router.add_get("/state", state)
    app.router.add_get("/events", events)
    app.router.add_post("/api/action", action)
    app.router.add_post("/api/workload", workload)
    app.router.add_post("/api/next", next_step)
    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app


TOKEN_BYTES = 24   # secrets.token_urlsafe: 32 characters, as Jupyter's 48 hex digits
NO_TOKEN_WARNING = (
    "dashboard: warning: --no-token: any program on this machine, of any user, can read "
    "the cluster's state and kill, pause and partition its brokers through this page; "
    "web pages of other sites are still refused (Host, Origin and Content-Type checks)")


def _access_error(args) -> str | None:
    """Why the --host/--token/--no-token combination is refused, or None."""
    from node.http_guard import TOKEN_RE, is_loopback
    if args.no_token and not is_loopback(args.host):
        return (f"--no-token is only allowed on a loopback --host (127.0.0.1, localhost, "
                f"::1), not {args.host!r}: anyone who can reach it could kill its brokers")
    if args.token is not None and not TOKEN_RE.fullmatch(args.token):
        return "--token must be 1 to 256 visible ASCII characters (no spaces)"
    return None


def address(host: str, port: int, token: str | None) -> str:
    """The address to open: ``http://HOST:PORT/?token=T`` (127.0.0.1 for a wildcard bind,
    whose own name no Host header may carry)."""
    import ipaddress
    from urllib.parse import quote
    try:
        host = HOST if ipaddress.ip_address(host).is_unspecified else host
    except ValueError:
        pass
    name = f"[{host}]" if ":" in host else host
    return f"http://{name}:{port}/" + (f"?token={quote(token, safe='')}" if token else "")


def add_arguments(parser) -> None:
    from node.paths import absolute_path

    parser.add_argument("--dir", required=True, type=absolute_path,
                        help="a running cluster's directory (with --scenario: where the "
                             "scenario's clusters go)")
    parser.add_argument("--host", default=HOST,
                        help="the address to listen on (default 127.0.0.1; another than a "
                             "loopback address lets other machines reach the page)")
    parser.add_argument("--port", type=int, default=8090, help="0: any free")
    access = parser.add_mutually_exclusive_group()
    access.add_argument("--token", default=None,
                        help="the token every request must carry (default: a random one, "
                             "printed with the address)")
    access.add_argument("--no-token", action="store_true",
                        help="no token (loopback --host only): any program of this machine "
                             "can drive the dashboard")
    parser.add_argument("--topic", default=None, help="the workload's topic (default: the "
                                                      "first topic, or a new 'dashboard')")
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between pictures pushed to the page")
    parser.add_argument("--scenario", default=None, help="play a scenario of the catalog, "
                                                         "one step per click")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--client", default="native",
                        help="with --scenario: the producers' client (as 'scenario run "
                             "--client')")


def run(args) -> int:
    from aiohttp import web

    from node.cluster import Cluster, ClusterError
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    if args.interval <= 0 or not 0 <= args.port < 65536:
        print("dashboard: error: --interval must be positive and --port 0..65535",
              file=sys.stderr)
        return 2
    refused = _access_error(args)
    if refused:
        print(f"dashboard: error: {refused}", file=sys.stderr)
        return 2
    token = None if args.no_token else (args.token or secrets.token_urlsafe(TOKEN_BYTES))
    if args.no_token:
        print(NO_TOKEN_WARNING, file=sys.stderr, flush=True)
    player = None
    if args.scenario:
        from bench.teach.catalog import find
        try:
            find(args.scenario)
        except KeyError:
            print(f"dashboard: error: no scenario {args.scenario!r} (see 'minikafka "
                  f"scenario list')", file=sys.stderr)
            return 2
        from bench.teach.run import client_problem
        why = client_problem(args.client)
        if why is not None:
            print(f"dashboard: error: {why}", file=sys.stderr)
            return 2
        Path(args.dir).mkdir(parents=True, exist_ok=True)
        model = Model(None, args.topic)
        player = ScenarioPlayer(model, args.scenario, Path(args.dir), args.speed,
                                args.client)
    else:
        try:
            model = Model(Cluster.open(args.dir), args.topic)
        except ClusterError as e:
            print(f"dashboard: error: {e}", file=sys.stderr)
            return 1
    app = make_app(model, args.interval, player, token=token, host=args.host)

    async def serve():
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        print(f"dashboard on {address(args.host, port, token)} (Ctrl-C to stop)", flush=True)
        if player is not None:
            player.start()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    import signal
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"dashboard: error: cannot listen on {args.host}:{args.port}: {e}",
              file=sys.stderr)
        return 1
    finally:
        if player is not None:
            player.stop()
        model.close()
    return 0

