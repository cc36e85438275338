"""``pip install .`` as a user does it: the wheel holds every module of the tree and the
files the code reads (package data), and, installed into a fresh virtualenv and run
from outside the checkout, every ``minikafka`` command answers ``--help`` and a cluster
comes up and down in a relative directory, its processes importing the installed code.

The wheel is built the way ``pip install .`` builds it (pip, with build isolation: the
build requirements of pyproject.toml), from a copy of the sources, so the checkout gets
no build/ or egg-info. The fresh virtualenv gets the wheel only (``--no-deps``); its
dependencies come from this interpreter's site-packages through a .pth line (a plain
path: the .pth files there, such as an editable minikafka's finder, are not run)."""
from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from node.paths import CODE_ROOT
from shm.names import cluster_objects
from tests.dashboard_process import start_dashboard, stop_dashboard
from tests.conftest import new_cluster_id
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]
PACKAGES = ("node", "shm", "zk_lite", "bench")
BUILD_TIMEOUT_S = 300


def _tree_files() -> set[str]:
    """Every file of the packages in the checkout (modules and data), as wheel names."""
    return {p.relative_to(CODE_ROOT).as_posix()
            for package in PACKAGES for p in (CODE_ROOT / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CODE_ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(CODE_ROOT / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheels")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    (found,) = out.glob("minikafka-*.whl")
    return found


def test_the_wheel_holds_every_module_and_every_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = _tree_files()
    assert sorted(tree - names) == []
    assert {"bench/teach/static/dashboard.html", "bench/perf/workloads/rate-sweep.yaml",
            "bench/analysis/log4j2-analyze.properties", "node/cluster/supervisor.py",
            "node/paths.py"} <= tree
    assert not [n for n in names if n.startswith("tests/")]
    assert sum(n.endswith(".py") for n in names) == sum(t.endswith(".py") for t in tree)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "minikafka = bench.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel installed, dependencies borrowed (see above)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=120)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], check=True,
                             capture_output=True, text=True).stdout.strip()
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    # After the install: pip must not see (nor offer to replace) this interpreter's own
    # minikafka, an editable install in the directories the .pth names.
    Path(purelib, "minikafka-test-deps.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    return root


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.pop("PYTHONSAFEPATH", None)
    return env


_HELP_OF_EVERY_COMMAND = r"""
import argparse, contextlib, io, json, bench.cli
def walk(parser, words=()):
    yield words
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, words + (name,))
answered, silent = [], []
for words in walk(bench.cli.build_parser()):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            bench.cli.main([*words, "--help"])
    except SystemExit as e:
        (answered if e.code == 0 and "usage:" in out.getvalue() else silent).append(words)
    else:
        silent.append(words)
import bench.analysis.analyze, bench.perf.sweep, bench.teach.dashboard
print(json.dumps({"answered": answered, "silent": silent, "cli": bench.cli.__file__,
                  "data": [str(bench.analysis.analyze.LOG4J_CONFIG), str(bench.perf.sweep.WORKLOADS),
                           str(bench.teach.dashboard.STATIC / "dashboard.html")]}))
"""


def test_the_installed_commands_run_from_outside_the_checkout(venv, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bin_ = venv / "bin"

    def run(*args, timeout_s: float = 120) -> str:
        done = subprocess.run([*map(str, args)], cwd=outside, env=_env(), text=True,
                              capture_output=True, timeout=timeout_s)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    assert "usage: minikafka" in run(bin_ / "minikafka", "--help")
    report = json.loads(run(bin_ / "python", "-c", _HELP_OF_EVERY_COMMAND))
    assert report["silent"] == [] and len(report["answered"]) >= 30, report
    site_packages = Path(report["cli"]).parents[1]
    assert site_packages.is_relative_to(venv), report["cli"]
    assert all(Path(p).exists() and Path(p).is_relative_to(venv) for p in report["data"])
    assert "5 point(s)" in run(bin_ / "minikafka", "bench", "sweep", "rate-sweep",
                               "--results", "r", "--dry-run")

    cluster_id = new_cluster_id()
    out = run(bin_ / "minikafka", "cluster", "up", "--dir", "rel", "--brokers", 3,
              "--cluster-id", cluster_id, "--timeout", 60)
    try:
        assert f"up in {outside / 'rel'}" in out
        status = run(bin_ / "minikafka", "cluster", "status", "--dir", "rel")
        assert status.count(" alive ") == 4, status
        for pid in re.findall(r"pid (\d+)", status):  # each runs the installed code
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert cmdline[0].decode() == str(bin_ / "python"), cmdline
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [e for e in environ if e.startswith(b"PYTHONPATH=")], environ
            assert Path(f"/proc/{pid}/cwd").resolve() == outside / "rel"
        _dashboard_page(bin_ / "minikafka", outside)
    finally:
        done = subprocess.run([str(bin_ / "minikafka"), "cluster", "down", "--dir", "rel",
                               "--grace", "5"], cwd=outside, env=_env(), text=True,
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert cluster_objects(cluster_id) == []
    assert "down" in done.stdout


def _dashboard_page(minikafka: Path, cwd: Path) -> None:
    """The page is package data: the installed dashboard serves it."""
    dashboard = start_dashboard("--dir", "rel", command=[str(minikafka)], cwd=cwd,
                                env=_env())
    try:
        with urllib.request.urlopen(dashboard.page, timeout=30) as r:
            assert r.status == 200 and "<html" in r.read().decode().lower()

        def a_picture():
            with urllib.request.urlopen(dashboard.at("state"), timeout=10) as r:
                return json.loads(r.read())["snapshot"]
        poll_until(a_picture, 30, "a picture of the cluster in /state", interval_s=0.2)
    finally:
        stop_dashboard(dashboard)
