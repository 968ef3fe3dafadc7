"""Declared shapes of the JSON hfmem reads back from its cache, and the check that a value has one.

A cache is input like any other (a shared home directory, a CI cache restored from another job): each entry kind
declares its shape next to the data it holds, and a value that does not match, or nests too deeply, is not used.

A spec is `str` or `bool` (exactly that JSON type), `COUNT` (an integer in [0, 2**62), never a bool), `JSON`
(any JSON value within the depth bound), a dict (an object with exactly these keys, each matching its spec),
a one-element list (a list whose items match it), a tuple (a list of exactly these items), `Map(spec)` (an object
whose values match it), `Nullable(spec)` or `OneOf(names)` (a string among them).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 16
"""Objects and lists nested deeper than this are refused: a cached config sits two levels inside its entry and
hfmem refuses configs nested deeper than 8 (model.guard.MAX_DEPTH)."""
COUNT = "count"
"""A non-negative integer below 2**62 (the bound the safetensors header checks use)."""
JSON = "json"
"""Any JSON value, nested at most MAX_DEPTH deep in all."""


@dataclass(frozen=True)
class Map:
    """An object with string keys whose every value matches `value`."""

    value: Any


@dataclass(frozen=True)
class Nullable:
    """null, or a value matching `spec`."""

    spec: Any


@dataclass(frozen=True)
class OneOf:
    """A string among `names`."""

    names: Collection[str]


def matches(value: Any, spec: Any, depth: int = 0) -> bool:
    """Whether `value` (as json.loads returns it) has the shape `spec` declares, within MAX_DEPTH."""
    if depth > MAX_DEPTH:
        return False
    if spec is COUNT:
        return type(value) is int and 0 <= value < 1 << 62
    if spec is str or spec is bool:
        return type(value) is spec
    if spec is JSON:
        return _shallow(value, MAX_DEPTH - depth)
    if isinstance(spec, Nullable):
        return value is None or matches(value, spec.spec, depth)
    if isinstance(spec, OneOf):
        return type(value) is str and value in spec.names
    if isinstance(spec, Map):
        return type(value) is dict and all(matches(item, spec.value, depth + 1) for item in value.values())
    if isinstance(spec, dict):
        return (type(value) is dict and value.keys() == spec.keys()
                and all(matches(value[key], item, depth + 1) for key, item in spec.items()))
    if isinstance(spec, list):
        return type(value) is list and all(matches(item, spec[0], depth + 1) for item in value)
    if isinstance(spec, tuple):
        return (type(value) is list and len(value) == len(spec)
                and all(matches(item, part, depth + 1) for item, part in zip(value, spec, strict=True)))
    raise TypeError(f"not a schema spec: {spec!r}")


def _shallow(value: Any, levels: int) -> bool:
    """Whether no object or list inside `value` lies more than `levels` deep (iterative: any depth is safe)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= levels:
                return False
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return True
