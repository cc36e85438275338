"""``--override KEY=VALUE``: a broker property for the cluster a benchmark starts
(repeatable), e.g. ``replica.transport=shm``; shared by ``cluster``, ``latency`` and
``peers``."""
from __future__ import annotations

import argparse


def add_argument(parser: argparse.ArgumentParser, what: str = "a broker property") -> None:
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help=f"{what} (repeatable), e.g. replica.transport=shm")


def parse(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    """{key: value} of ``items``; a malformed one is the parser's usage error."""
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--override {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value
    return overrides
