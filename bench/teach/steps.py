"""A scenario's step: what is about to happen and why, in our own words (the catalog's
scenarios and ``txn_scenarios`` yield them; ``run`` shows them). Its own module so a
scenario module beside the catalog need not import the catalog that lists it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Step:
    title: str
    text: str
