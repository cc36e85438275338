"""Which clients can run here (``missing``/``present``), where kafkajs is found, and the
worker's command line (``worker_command``)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from bench.chaos.clients.options import CLIENTS, argv_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
KAFKAJS_WORKER = HERE / "kafkajs_worker.js"
_MODULES = {"confluent-kafka": "confluent_kafka", "kafka-python": "kafka",
            "aiokafka": "aiokafka"}
_PIP = "pip install -e '.[kafka-clients]'"


def node_modules() -> Path:
    """Where kafkajs is looked for: ``$MINIKAFKA_NODE_MODULES``, else the repository's
    ``.cache/node_modules``, else ``./.cache/node_modules``."""
    if os.environ.get("MINIKAFKA_NODE_MODULES"):
        return Path(os.environ["MINIKAFKA_NODE_MODULES"])
    for base in (REPO, Path.cwd()):
        if (base / ".cache" / "node_modules" / "kafkajs").is_dir():
            return base / ".cache" / "node_modules"
    return REPO / ".cache" / "node_modules"


def missing(client: str) -> str | None:
    """Why ``client`` cannot run here (one line), or None."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r} (one of {', '.join(CLIENTS)})")
    if client == "native":
        return None
    if client in _MODULES:
        if importlib.util.find_spec(_MODULES[client]) is None:
            return f"{client} is not installed ({_PIP})"
        return None
    if shutil.which("node") is None:
        return "node is not installed (Debian's nodejs), so kafkajs cannot run"
    where = node_modules()
    if not (where / "kafkajs" / "package.json").is_file():
        return (f"kafkajs is not in {where} (npm install --prefix .cache kafkajs, or set "
                f"MINIKAFKA_NODE_MODULES)")
    if not KAFKAJS_WORKER.is_file():
        return f"the kafkajs worker {KAFKAJS_WORKER} is missing"
    return None


def present() -> list[str]:
    """The clients that can run here."""
    return [c for c in CLIENTS if missing(c) is None]


def worker_command(client: str, **options) -> list[str]:
    """``sys.executable -m bench.chaos.clients --client C ...`` for ``options`` (role,
    name, bootstrap, topic, duration, rate, partition, acks, idempotence, group, set,
    request_timeout_ms, delivery_timeout_ms, flush_timeout_s, value_format,
    schema_registry; None left out)."""
    return [sys.executable, "-m", "bench.chaos.clients", *argv_for(client, **options)]
