"""The GPU catalogue (gpus.json beside this module) and user-defined `name=GiB` specs.

`usable_gib` is the device total the driver reports; the fit search compares estimates with it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.units import GB, GIB


@dataclass(frozen=True)
class Gpu:
    """One accelerator: its name, what the vendor states, and the usable memory in GiB."""

    name: str
    usable_gib: float
    vendor_memory: float | None = None
    vendor_unit: str = "GB"
    vendor: str | None = None
    arch: str | None = None
    """The chip generation ("turing", "ampere", "hopper", "cdna3", ...): what it runs (hardware.capabilities)."""
    aliases: tuple[str, ...] = ()
    reported: str | None = None
    user_defined: bool = False

    @property
    def usable_bytes(self) -> int:
        return int(self.usable_gib * GIB)

    @property
    def spec(self) -> str:
        """What names this GPU on the command line: its catalogue name, or `name=GiB` for a user-defined one."""
        return f"{self.name}={self.usable_gib:g}" if self.user_defined else self.name

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["aliases"] = list(self.aliases)
        data["usable_bytes"] = self.usable_bytes
        return data


@lru_cache(maxsize=1)
def catalogue_data() -> dict[str, Any]:
    """gpus.json as shipped, read once (the catalogue here, the vendor specs in hardware.specs)."""
    return json.loads(resources.files("hfmem.hardware").joinpath("gpus.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def catalogue() -> tuple[Gpu, ...]:
    """All GPUs of the shipped catalogue, smallest first."""
    data = catalogue_data()
    gpus = tuple(
        Gpu(name=g["name"], usable_gib=float(g["usable_gib"]), vendor_memory=g.get("vendor_memory"),
            vendor_unit=g.get("vendor_unit", "GB"), vendor=g.get("vendor"), arch=g.get("arch"),
            aliases=tuple(g.get("aliases", ())),
            reported=g.get("reported"))
        for g in data["gpus"]
    )
    return tuple(sorted(gpus, key=lambda g: g.usable_gib))


def catalogue_units() -> str:
    """The catalogue's note on units (vendor GB vs GiB)."""
    return catalogue_data()["units"]


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower())


def find_gpu(name: str) -> Gpu:
    """A catalogue GPU by name or alias (case, spaces, dashes ignored); InvalidInputError if unknown."""
    key = _key(name)
    for gpu in catalogue():
        if key == _key(gpu.name) or key in {_key(a) for a in gpu.aliases}:
            return gpu
    known = ", ".join(g.name for g in catalogue())
    raise InvalidInputError(f"unknown GPU {name!r}; known: {known}; or give a custom one as name=GiB (e.g. mygpu=40); "
                            "`hfmem gpus` lists them with their aliases.")


_SPEC = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9 ._\-]{0,63}?)\s*=\s*"
                   r"(?P<size>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>GiB|GB|G)?\s*$", re.I)


def parse_gpu_spec(spec: str) -> Gpu:
    """Parse `name=GiB` (e.g. "my-card=40" or "my-card=40GiB"); a decimal "GB" suffix is converted to GiB."""
    if not isinstance(spec, str):
        raise InvalidInputError(f"GPU spec must be text like name=GiB; got {spec!r}.")
    match = _SPEC.match(spec)
    if not match:
        raise InvalidInputError(f"bad GPU spec {spec!r}: expected name=GiB, e.g. my-card=40 "
                                "(name: letters, digits, . _ -).")
    size = float(match["size"])
    unit = (match["unit"] or "GiB").lower()
    gib = size * GB / GIB if unit == "gb" else size
    if not math.isfinite(gib) or gib <= 0 or gib > 4096:
        raise InvalidInputError(f"bad GPU spec {spec!r}: memory must be between 0 and 4096 GiB.")
    return Gpu(name=match["name"].strip(), usable_gib=round(gib, 3), vendor_memory=size,
               vendor_unit="GB" if unit == "gb" else "GiB", user_defined=True)


def resolve_gpus(names: list[str] | tuple[str, ...] | None) -> tuple[Gpu, ...]:
    """Catalogue names, aliases or `name=GiB` specs to GPUs; None: the whole catalogue."""
    if not names:
        return catalogue()
    return tuple(parse_gpu_spec(n) if "=" in n else find_gpu(n) for n in names)
