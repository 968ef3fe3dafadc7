"""GPU prices in USD per GPU-hour: the dated default table (prices.json beside this module) and the user's own.

Each default names the public on-demand price list it was read from and when; a price the user gives (--price, the
Action's `prices` input) replaces the default for that GPU. A GPU with neither has no price, so no cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

GIVEN = "given"
"""The origin of a price the user gave (--price GPU=USD or the Action's prices input); a default's is its source."""


@dataclass(frozen=True)
class Price:
    """One GPU's price per GPU-hour and where it came from: given, or the default table's source and date read."""

    usd_per_gpu_hour: float
    origin: str
    """GIVEN, or the default table's key of its source (prices.json `sources`)."""


@lru_cache(maxsize=1)
def price_data() -> dict[str, Any]:
    """prices.json as shipped, read once."""
    return json.loads(resources.files("hfmem.hardware").joinpath("prices.json").read_text(encoding="utf-8"))


def as_of() -> str:
    """The default table's date: every default price was read on it or later."""
    return price_data()["as_of"]


def source(key: str) -> dict[str, str]:
    """A default price's source by its key: the price list's url, title, the date read, and how it was read."""
    return price_data()["sources"][key]


def default_price(gpu_name: str) -> Price | None:
    """The default table's price for a catalogue GPU name, naming its source; None where it has none."""
    entry = price_data()["prices"].get(gpu_name)
    return None if entry is None else Price(entry["usd_per_gpu_hour"], entry["source"])


def prices_for(gpu_names: Iterable[str], given: Mapping[str, float]) -> dict[str, Price]:
    """The price of each named GPU that has one: the given one, else the default table's."""
    out = {}
    for name in gpu_names:
        price = Price(given[name], GIVEN) if name in given else default_price(name)
        if price is not None:
            out[name] = price
    return out
