"""The layers of DESIGN.md, checked on the source: an ``ast`` walk over every module of
the project (imports inside functions count too).

    node.wire  <-  node.core  <-  node.broker
    node.core.groups may use node.kafka.protocol's codecs (Kafka's record schemas).
    node.wire  <-  node.client  <-  node.tools, node.perf, node.cluster  <-  bench
    node.client may use node.core.group (the consumer group's pure rebalance core) and
    node.core.consumer_member and node.core.classic_member (the KIP-848 and classic
    members' pure cores).
    shm and zk_lite never import node; node.core imports no I/O module.
    The controller's parts (node.core.controller.*) import only its events and elections.
    The consumer's parts (node.client.consumer.*) share only its subscription state.
    node never imports bench (node.cli included: bench.cli adds bench's subcommands).
    bench.perf, bench.chaos, bench.analysis  <-  bench.teach (uses bench.chaos)  <-  bench.cli
    The pure cores (node.core, zk_lite's, shm's codecs) use no unseeded randomness.

A new package of ``node`` or ``bench`` must be given its place in ``LAYERS`` or
``BENCH_LAYERS`` before it can land.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("node", "shm", "zk_lite", "bench")

# What each part of node may import from node (its own part always).
_BASE = {"node.wire"}
_CLIENT_SIDE = _BASE | {"node.core", "node.net", "node.local_link", "node.config",
                        "node.client", "node.waiting", "node.paths", "node.ports"}
LAYERS: dict[str, set[str]] = {
    "node.wire": set(),
    "node.core": _BASE,
    # The group coordinator's cores keep __consumer_offsets in Kafka's own record schemas:
    # they use the generated, sans-I/O codecs of node.kafka.protocol (which imports no core).
    "node.core.groups": _BASE | {"node.kafka.protocol", "node.kafka.protocol.codec",
                                 "node.kafka.protocol.messages",
                                 "node.kafka.protocol.coordinator_records"},
    # The transaction coordinator's core: __transaction_state in Kafka's TransactionLog
    # schemas (node.kafka.protocol.txn_records), the group cores' record helpers and hashing.
    "node.core.txn": _BASE | {"node.core.groups", "node.kafka.protocol",
                              "node.kafka.protocol.codec", "node.kafka.protocol.messages",
                              "node.kafka.protocol.txn_records"},
    "node.net": _BASE,
    "node.local_link": _BASE | {"node.net"},
    "node.config": set(),
    "node.waiting": set(),
    "node.http_guard": set(),   # any HTTP surface may use it; it uses nothing of node
    "node.paths": set(),
    "node.ports": set(),        # picking loopback ports for servers; uses nothing of node
    # The broker starts its Kafka listener (one module of node.kafka); its group
    # coordinator's bodies are Kafka's messages as dicts (node.kafka.protocol's classes
    # through node.kafka.dicts).
    "node.broker": _BASE | {"node.core", "node.core.groups", "node.core.txn", "node.net",
                            "node.local_link",
                            "node.config", "node.kafka.listener", "node.kafka.protocol",
                            "node.kafka.dicts"},
    "node.kafka": _BASE,   # Kafka's wire protocol (issue 25): records, codecs
    # Kafka's wire onto the native handlers: the translations see the broker only through
    # their context (node.config's names); the listener lives on the broker's loop.
    "node.kafka.translate": _BASE | {"node.kafka", "node.config"},
    "node.kafka.listener": _BASE | {"node.kafka", "node.kafka.translate", "node.config",
                                    "node.broker"},
    "node.client": _BASE | {"node.net", "node.local_link", "node.waiting", "node.core.group",
                     "node.core.consumer_member", "node.core.classic_member"},
    "node.tools": _CLIENT_SIDE,
    "node.perf": _CLIENT_SIDE | {"node.tools", "node.cluster"},
    "node.cluster": _CLIENT_SIDE | {"node.tools"},
    "node.spark": _CLIENT_SIDE | {"node.tools", "node.perf"},
    "node.demo": _CLIENT_SIDE | {"node.tools", "node.cluster"},
    "node.cli": _CLIENT_SIDE | {"node.tools", "node.perf", "node.cluster"},
    "node": set(),  # node/__init__.py
}
# The controller's parts (node.core.controller, cut along Kafka's controller): each may
# import these modules of its own package, nothing else of it ("core" puts the mixins
# together; the package's __init__ only re-exports).
CONTROLLER = "node.core.controller"
_VOCABULARY = {"events", "elections"}
CONTROLLER_PARTS: dict[str, set[str]] = {
    "events": set(),
    "elections": set(),
    "broker_requests": _VOCABULARY,
    "failover": _VOCABULARY,
    "recovery": _VOCABULARY,
    "topics": _VOCABULARY,
    "rebalance": _VOCABULARY,
    "shutdown": _VOCABULARY,
    "reassignment": _VOCABULARY,
    "deletion": _VOCABULARY,
    "core": _VOCABULARY | {"broker_requests", "failover", "recovery", "topics", "rebalance",
                           "shutdown", "reassignment", "deletion"},
}
# What each package of bench may import from bench and node (its own package always;
# shm and zk_lite are below node, so any part of bench may use them). The packages'
# ``__init__`` docstrings say the same in words.
_BENCH_NODE = _CLIENT_SIDE | {"node.tools", "node.perf", "node.cluster"}
BENCH_LAYERS: dict[str, set[str]] = {
    "bench.perf": _BENCH_NODE,
    "bench.chaos": _BENCH_NODE,
    "bench.analysis": _BENCH_NODE | {"node.spark"},
    "bench.teach": _BENCH_NODE | {"node.http_guard", "bench.chaos"},
    "bench.cli": {"*"},     # the console script: node.cli and every package of bench
    "bench.kafka_clients": {"bench.perf"},  # `python -m bench.kafka_clients`'s entry
    "bench.compaction": {"bench.perf"},     # `python -m bench.compaction`'s entry
    "bench.kafka_groups": {"bench.perf"},   # `python -m bench.kafka_groups`'s entry
    "bench.limits": {"bench.perf"},         # `python -m bench.limits`'s entry
    "bench": set(),         # bench/__init__.py
}
# The pure cores: their behaviour is a function of their inputs, so the simulator and
# the tests can replay them from a seed.
PURE_CORES = {"zk_lite.jute", "zk_lite.errors", "zk_lite.tree", "zk_lite.watches",
              "zk_lite.core", "zk_lite.requests", "zk_lite.session", "zk_lite.txn",
              "shm.batch", "shm.config", "shm.errors", "shm.producer_state", "shm.control",
              "shm.txn_state"}
# Modules a pure core must not import: I/O, clocks, processes, the network.
CORE_FORBIDDEN = {"zmq", "kazoo", "socket", "time", "os", "subprocess", "threading",
                  "select", "signal", "shm", "zk_lite", "posix_ipc", "mmap"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, resolved to a module of the
    project where it names one (``from a.b import c`` is ``a.b.c`` when that is a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                out.append((full if full in MODULES else module, node.lineno))
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _part(module: str) -> str | None:
    """The LAYERS key a module of node belongs to (its longest matching prefix)."""
    best = None
    for key in LAYERS:
        if module == key or module.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    return best


def _project(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def test_every_module_of_node_has_a_layer():
    missing = [m for m in MODULES if m.startswith("node") and _part(m) is None]
    assert not missing, f"give these a place in LAYERS: {missing}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("node")))
def test_node_imports_follow_the_layers(name):
    own = _part(name)
    allowed = LAYERS[own]
    bad = []
    for target, line in GRAPH[name]:
        if not target.startswith("node") or "*" in allowed:
            continue
        part = _part(target)
        if part == own or part in allowed or target in allowed:   # a part, or one module
            continue
        bad.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("node.core")))
def test_pure_cores_import_no_io(name):
    bad = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
           for target, line in GRAPH[name] if target.split(".")[0] in CORE_FORBIDDEN]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", ["shm", "zk_lite"])
def test_storage_and_coordinator_never_import_node(package):
    bad = [f"{MODULES[n].relative_to(ROOT)}:{line} imports {t}"
           for n in MODULES if n.split(".")[0] == package
           for t, line in GRAPH[n] if t.split(".")[0] == "node"]
    assert not bad, "\n".join(bad)


def test_node_never_imports_bench():
    bad = [f"{MODULES[n].relative_to(ROOT)}:{line} imports {t}"
           for n in MODULES if n.split(".")[0] == "node"
           for t, line in GRAPH[n] if t.split(".")[0] == "bench"]
    assert not bad, "\n".join(bad)


def _bench_part(module: str) -> str | None:
    best = None
    for key in BENCH_LAYERS:
        if module == key or module.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    return best


def test_every_module_of_bench_has_a_layer():
    missing = [m for m in MODULES if m.startswith("bench") and _bench_part(m) is None]
    assert not missing, f"give these a place in BENCH_LAYERS: {missing}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("bench")))
def test_bench_imports_follow_the_layers(name):
    own = _bench_part(name)
    allowed = BENCH_LAYERS[own]
    bad = []
    for target, line in GRAPH[name]:
        if target.split(".")[0] not in ("bench", "node") or "*" in allowed:
            continue
        part = _bench_part(target) if target.startswith("bench") else _part(target)
        if part == own or part in allowed or target in allowed:
            continue
        bad.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def _is_pure_core(name: str) -> bool:
    return name == "node.core" or name.startswith("node.core.") or name in PURE_CORES


def _unseeded_randomness(tree: ast.AST) -> list[tuple[str, int]]:
    """(what, line) for each use of randomness that no seed governs: ``random``'s module
    functions (its hidden global generator), ``random.Random()`` without a seed,
    ``random.SystemRandom``, and ``secrets``. A ``random.Random(seed)`` is fine."""
    modules = set()     # names bound to the random module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "random":
                    modules.add(alias.asname or "random")
                elif alias.name == "secrets":
                    found.append(("import secrets", node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module in ("random", "secrets"):
            found += [(f"from {node.module} import {a.name}", node.lineno)
                      for a in node.names if not (node.module == "random" and a.name == "Random")]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr != "Random"):
            found.append((f"{node.value.id}.{node.attr}", node.lineno))
        elif isinstance(node, ast.Call) and not node.args and not node.keywords:
            func = node.func
            if ((isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                 and func.value.id in modules and func.attr == "Random")
                    or (isinstance(func, ast.Name) and func.id == "Random")):
                found.append(("Random() without a seed", node.lineno))
    return found


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _is_pure_core(m)))
def test_pure_cores_use_no_unseeded_randomness(name):
    path = MODULES[name]
    bad = [f"{path.relative_to(ROOT)}:{line} uses {what}"
           for what, line in _unseeded_randomness(ast.parse(path.read_text()))]
    assert not bad, "\n".join(bad)


def test_the_randomness_check_sees_a_global_draw_and_passes_a_seeded_one():
    seeded = "import random\nrng = random.Random(7)\nx = rng.random()\n"
    assert _unseeded_randomness(ast.parse(seeded)) == []
    for planted in ("import random\nx = random.random()\n",
                    "import random as r\nr.shuffle(xs)\n",
                    "from random import choice\n",
                    "import random\nrng = random.Random()\n",
                    "import secrets\n"):
        assert _unseeded_randomness(ast.parse(planted)), planted


def test_bench_does_not_reach_into_the_broker():
    bad = [f"{MODULES[n].relative_to(ROOT)}:{line} imports {t}"
           for n in MODULES if n.split(".")[0] == "bench"
           for t, line in GRAPH[n] if t.startswith("node.broker")]
    assert not bad, "\n".join(bad)


# The broker's request handlers (node.broker.apis, Kafka's KafkaApis) answer through
# KafkaApis.send_response: they know neither the broker's lifecycle nor the transport, so
# another wire can call them. The listener knows no handler and no lifecycle.
_BROKER_SEAMS = {
    "node.broker.apis": ("node.broker.server", "node.broker.socket_server",
                         "node.broker.__main__", "node.net", "node.local_link", "zmq", "kazoo"),
    "node.broker.socket_server": ("node.broker.apis", "node.broker.server",
                                  "node.broker.replica_manager", "kazoo"),
}


# The admin handlers (node.broker.apis.admin) answer by writing the coordinator through
# GuardedZk; they catch kazoo's errors of those writes, and use no kazoo client.
_SEAM_ALLOWED = {"node.broker.apis.admin": ("kazoo.exceptions",)}


def _seam_violations(graph) -> list[str]:
    bad = []
    for name in sorted(graph):
        allowed = [a for part, names in _SEAM_ALLOWED.items()
                   if name == part or name.startswith(part + ".") for a in names]
        for seam, forbidden in _BROKER_SEAMS.items():
            if name != seam and not name.startswith(seam + "."):
                continue
            bad += [f"{name}:{line} imports {t}" for t, line in graph[name]
                    if any(t == f or t.startswith(f + ".") for f in forbidden)
                    and t not in allowed]
    return bad


def test_request_handlers_know_neither_the_lifecycle_nor_the_transport():
    assert "node.broker.apis.kafka_apis" in MODULES and "node.broker.socket_server" in MODULES
    bad = _seam_violations(GRAPH)
    assert not bad, "\n".join(bad)


def test_the_seam_check_sees_a_handler_reaching_into_the_listener(monkeypatch):
    monkeypatch.setitem(GRAPH, "node.broker.apis.produce",
                        GRAPH["node.broker.apis.produce"] + [("node.broker.socket_server", 1)])
    monkeypatch.setitem(GRAPH, "node.broker.socket_server",
                        GRAPH["node.broker.socket_server"] + [("node.broker.apis.fetch", 2)])
    assert len(_seam_violations(GRAPH)) == 2
    monkeypatch.setitem(GRAPH, "node.broker.apis.admin.topics",   # the client, not its errors
                        GRAPH["node.broker.apis.admin.topics"] + [("kazoo.client", 3)])
    monkeypatch.setitem(GRAPH, "node.broker.apis.fetch",          # errors: the admin's only
                        GRAPH["node.broker.apis.fetch"] + [("kazoo.exceptions", 4)])
    assert len(_seam_violations(GRAPH)) == 4


def test_a_package_is_not_imported_by_its_own_submodules():
    """``__init__`` only re-exports: a submodule importing its package is a cycle."""
    bad = []
    for name, path in MODULES.items():
        if path.name == "__init__.py":
            continue
        package = name.rsplit(".", 1)[0]
        if (ROOT / package.replace(".", "/") / "__init__.py").exists() and package != name:
            bad += [f"{path.relative_to(ROOT)}:{line} imports {t}"
                    for t, line in GRAPH[name] if t == package and "." in package]
    assert not bad, "\n".join(bad)


def _cycle() -> list[str] | None:
    """One import cycle among the project's modules, or None. A package's ``__init__``
    re-exporting its own submodules is not an edge (it is how a package offers them)."""
    edges = {}
    for name, imports in GRAPH.items():
        is_init = MODULES[name].name == "__init__.py"
        targets = set()
        for t, _ in imports:
            if not _project(t) or t not in MODULES or t == name:
                continue
            if is_init and t.startswith(name + "."):
                continue
            targets.add(t)
        edges[name] = sorted(targets)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in edges[n]:
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_every_part_of_the_controller_has_a_place():
    found = {m[len(CONTROLLER) + 1:] for m in MODULES if m.startswith(CONTROLLER + ".")}
    assert found == set(CONTROLLER_PARTS), f"give these a place: {found ^ set(CONTROLLER_PARTS)}"


@pytest.mark.parametrize("part", sorted(CONTROLLER_PARTS))
def test_controller_parts_import_only_what_they_may(part):
    name = f"{CONTROLLER}.{part}"
    bad = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
           for target, line in GRAPH[name]
           if (target == CONTROLLER or target.startswith(CONTROLLER + "."))
           and target[len(CONTROLLER) + 1:] not in CONTROLLER_PARTS[part]]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_a_layer_violation_and_a_cycle(monkeypatch):
    """The checks above can fail: a made-up core importing the broker, a controller part
    importing another part, and a cycle."""
    monkeypatch.setitem(MODULES, "node.core.fake", MODULES["node.core.replication"])
    monkeypatch.setitem(GRAPH, "node.core.fake", [("node.broker.server", 1), ("time", 2)])
    with pytest.raises(AssertionError):
        test_node_imports_follow_the_layers("node.core.fake")
    with pytest.raises(AssertionError):
        test_pure_cores_import_no_io("node.core.fake")
    monkeypatch.setitem(GRAPH, f"{CONTROLLER}.topics",
                        GRAPH[f"{CONTROLLER}.topics"] + [(f"{CONTROLLER}.failover", 1)])
    with pytest.raises(AssertionError):
        test_controller_parts_import_only_what_they_may("topics")
    monkeypatch.setitem(GRAPH, "node.cli", GRAPH["node.cli"] + [("bench.chaos.run", 1)])
    with pytest.raises(AssertionError):
        test_node_never_imports_bench()
    monkeypatch.setitem(GRAPH, "bench.perf.sweep",
                        GRAPH["bench.perf.sweep"] + [("bench.teach.stage", 1)])
    with pytest.raises(AssertionError):
        test_bench_imports_follow_the_layers("bench.perf.sweep")
    monkeypatch.setitem(GRAPH, "node.wire.errors", GRAPH["node.wire.errors"] + [("node.core.fake", 1)])
    monkeypatch.setitem(GRAPH, "node.core.fake", [("node.wire.errors", 1)])
    assert _cycle() is not None


# ---------------------------------------------------------------- one batch encoder
# shm.batch is the one record-batch encoder (the producer's small-batch fast path
# included): no other module packs a batch header or its CRC.
_BATCH_STRUCTS = {"HEADER", "CRC", "PRODUCER", "BASE_OFFSET", "LEADER_EPOCH"}


def _batch_packers(tree: ast.AST) -> list[int]:
    """Lines that import shm.batch's header structs or pack through one of them."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "shm.batch" and \
                any(alias.name in _BATCH_STRUCTS for alias in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("pack", "pack_into") and \
                isinstance(node.func.value, ast.Attribute) and \
                node.func.value.attr in _BATCH_STRUCTS:
            lines.append(node.lineno)
    return lines


def test_only_shm_batch_packs_record_batch_headers():
    bad = [f"{path.relative_to(ROOT)}:{line}" for name, path in MODULES.items()
           if name != "shm.batch"
           for line in _batch_packers(ast.parse(path.read_text(), filename=str(path)))]
    assert not bad, "a second batch-header packing (use shm.batch):\n" + "\n".join(bad)


def test_the_checker_sees_a_second_header_packing():
    assert _batch_packers(ast.parse("from shm.batch import HEADER, CRC\n")) == [1]
    assert _batch_packers(ast.parse("from shm import batch\n"
                                    "batch.HEADER.pack_into(buf, 0, *fields)\n")) == [2]
    assert _batch_packers(ast.parse("from shm.batch import build_batch\n")) == []


@pytest.mark.parametrize("name", ["shm.log.loader", "shm.log.retention",
                                  "shm.log.producer_snapshots", "shm.log.transactions",
                                  "shm.log.txn_index"])
def test_the_logs_parts_do_not_import_its_core(name):
    """The loader and retention are functions of a Log: the core imports them, never
    the reverse (the cycle test would see it; this names the rule)."""
    assert name in MODULES
    assert not [t for t, _ in GRAPH[name] if t == "shm.log.core" or t == "shm.log"]


# ---------------------------------------------------------------- the consumer's parts
# node.client.consumer, cut along Kafka's consumer: the parts are mixins of api.Consumer
# and share only the partitions' state (subscription); api puts them together, and the
# package's __init__ only re-exports.
CONSUMER = "node.client.consumer"
CONSUMER_PARTS: dict[str, set[str]] = {
    "subscription": set(),
    "fetcher": {"subscription"},
    "offset_fetcher": {"subscription"},
    "validation": {"subscription"},
    "membership": {"subscription"},
    "api": {"subscription", "fetcher", "offset_fetcher", "validation", "membership"},
}


def _consumer_violations(part: str) -> list[str]:
    name = f"{CONSUMER}.{part}"
    return [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
            for target, line in GRAPH[name]
            if (target == CONSUMER or target.startswith(CONSUMER + "."))
            and target[len(CONSUMER) + 1:] not in CONSUMER_PARTS[part]]


def test_every_part_of_the_consumer_has_a_place():
    found = {m[len(CONSUMER) + 1:] for m in MODULES if m.startswith(CONSUMER + ".")}
    assert found == set(CONSUMER_PARTS), f"give these a place: {found ^ set(CONSUMER_PARTS)}"


@pytest.mark.parametrize("part", sorted(CONSUMER_PARTS))
def test_consumer_parts_import_only_what_they_may(part):
    bad = _consumer_violations(part)
    assert not bad, "\n".join(bad)


def test_the_consumer_check_sees_a_part_reaching_into_another(monkeypatch):
    monkeypatch.setitem(GRAPH, f"{CONSUMER}.fetcher",
                        GRAPH[f"{CONSUMER}.fetcher"] + [(f"{CONSUMER}.validation", 1)])
    monkeypatch.setitem(GRAPH, f"{CONSUMER}.subscription",
                        GRAPH[f"{CONSUMER}.subscription"] + [(f"{CONSUMER}.api", 2)])
    assert len(_consumer_violations("fetcher")) == 1
    assert len(_consumer_violations("subscription")) == 1
# ---------------------------------------------------------------- packages cut in parts
# The supervisor's Cluster is its module plus mixins (node.cluster.*), and the admin
# requests are one module per family behind one table (node.broker.apis.admin.*): each
# part may import only the parts named here (its vocabulary), never the module that puts
# them together, so the parts read (and change) one at a time.
PARTS: dict[str, dict[str, set[str]]] = {
    "node.cluster": {
        "process": set(),
        "layout": {"process"},
        "namespaces": {"layout", "process", "netns"},
        "faults": {"process", "netns"},
        "inspection": {"layout", "process"},
        "supervisor": {"process", "layout", "namespaces", "faults", "inspection"},
    },
    "node.broker.apis.admin": {
        "common": set(),
        "configs": {"common"},
        "topics": {"common", "configs"},
        "elections": {"common"},
        "reassignments": {"common"},
        "producer_ids": {"common"},
        "alter_configs": {"common", "configs"},
        "dispatch": {"configs", "topics", "elections", "reassignments", "producer_ids",
                     "alter_configs"},
    },
}


def _part_violations(package: str, part: str) -> list[str]:
    name = f"{package}.{part}"
    others = set(PARTS[package]) - {part}
    return [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
            for target, line in GRAPH[name]
            if target.startswith(package + ".")
            and target[len(package) + 1:].split(".")[0] in others
            and target[len(package) + 1:].split(".")[0] not in PARTS[package][part]]


@pytest.mark.parametrize("package,part", sorted((pkg, part) for pkg, parts in PARTS.items()
                                                for part in parts))
def test_parts_import_only_what_they_may(package, part):
    assert f"{package}.{part}" in MODULES
    bad = _part_violations(package, part)
    assert not bad, "\n".join(bad)


def test_the_admin_parts_are_all_named():
    found = {m.rsplit(".", 1)[1] for m in MODULES if m.startswith("node.broker.apis.admin.")}
    named = set(PARTS["node.broker.apis.admin"])
    assert found == named, f"give these a place in PARTS: {found ^ named}"


def test_the_parts_check_sees_a_mixin_importing_the_whole(monkeypatch):
    monkeypatch.setitem(GRAPH, "node.cluster.faults",
                        GRAPH["node.cluster.faults"] + [("node.cluster.supervisor", 1)])
    monkeypatch.setitem(GRAPH, "node.broker.apis.admin.common",
                        GRAPH["node.broker.apis.admin.common"] + [("node.broker.apis.admin.topics", 2)])
    assert _part_violations("node.cluster", "faults")
    assert _part_violations("node.broker.apis.admin", "common")
    assert not _part_violations("node.cluster", "layout")
