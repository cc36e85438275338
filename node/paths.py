"""Where things are: the user's paths, the code's own files, and the code for a child.

Rules:
- A path given on a command line is made absolute once, where the arguments are parsed
  (``absolute_path`` as an argparse ``type``), against the directory the user ran the
  command in. Nothing after that depends on the current directory: the supervisor's
  processes run in their cluster's directory, and a relative path would name another
  file there.
- The code's data files (the dashboard's page, the sweep workloads, the Spark log4j
  config) are package data, found next to the module that reads them (``Path(__file__)``),
  so they are the same in a checkout and in an installed wheel.
- ``CODE_ROOT`` is the directory that holds the packages ``node``, ``shm``, ``zk_lite``
  and ``bench``: the checkout, or site-packages when installed. A child started with
  ``sys.executable -m ...`` must import the same code as its parent: ``child_env`` puts
  ``CODE_ROOT`` first on its ``PYTHONPATH``, unless the interpreter already finds it
  there (an install: a site directory on ``PYTHONPATH`` would come before the standard
  library and could shadow it).
"""
from __future__ import annotations

import os
import site
from pathlib import Path

CODE_ROOT = Path(__file__).resolve().parents[1]


def absolute_path(text: str) -> str:
    """argparse ``type``: ``text`` as an absolute, normalized path (``~`` expanded),
    relative to the current directory. A string, as argparse gives one without a type."""
    if not text:
        raise ValueError("an empty path")  # argparse: "invalid absolute_path value: ''"
    return os.path.abspath(os.path.expanduser(text))


def _site_dirs() -> set[Path]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    dirs.append(site.getusersitepackages())
    return {Path(d).resolve() for d in dirs}


def installed() -> bool:
    """True when the packages are in a site directory of this interpreter (pip install)."""
    return CODE_ROOT in _site_dirs()


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default ``os.environ``) whose ``PYTHONPATH`` finds this code."""
    out = dict(os.environ if env is None else env)
    if installed():
        return out
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    out["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT)] + rest)
    return out
