"""What a reader gathers from one parsed file: settings with the key each came from, and every key it looked at.

A reader walks the file's mapping through a `Draft`: typed getters that name the file and key path in their
one-line errors, `set` for a TrainingSettings value, `know` for keys that do not change memory and `unmodelled`
for keys that do but that hfmem cannot model. Whatever leaf the reader never touched is `unknown()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from hfmem.errors import InvalidInputError

OFF_WORDS = frozenset({"", "none", "no", "false", "off", "null"})
"""Strings that mean "not enabled" in these files (accelerate writes `downcast_bf16: 'no'`, DeepSpeed `"none"`)."""


class Linked(NamedTuple):
    """A file a config names (its DeepSpeed JSON), parsed; or the same settings written inline."""

    prefix: str
    """Put before its key paths: "the/file.json:" as the config names it, or "deepspeed." when inline."""
    data: dict


def shown(value: Any) -> str:
    """A value as an error message quotes it: its repr, cut short (a hostile file may hold a huge list)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def active(value: Any) -> bool:
    """Whether a key's value turns its feature on: not absent, false, zero, empty or an off word."""
    if isinstance(value, str):
        return value.strip().lower() not in OFF_WORDS
    return value not in (None, False, 0) and value != [] and value != {}


def leaves(data: dict, prefix: str = "") -> Iterator[str]:
    """Every key path of a nested mapping down to its non-mapping values (an empty mapping is a leaf)."""
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from leaves(value, path + ".")
        else:
            yield path


def covered(path: str, known: Iterable[str]) -> bool:
    """Whether a key path is one of `known` or lies under one of them."""
    return any(path == k or path.startswith(k + ".") for k in known)


class Draft:
    """The settings gathered from one file (or a file it names), and the key paths its reader has accounted for."""

    def __init__(self, data: dict, label: str, prefix: str = "") -> None:
        """`label` names the file in errors; `prefix` goes before the key paths recorded (a linked file's name)."""
        self.data, self.label, self.prefix = data, label, prefix
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.seen: set[str] = set()
        self.flagged: list[str] = []
        self.extra_unknown: list[str] = []
        self.unresolved: dict[str, str] = {}
        """Key paths whose value the file does not settle, each with why (a variable it never assigns, an
        interpolation, a launch too small for its layout): left to hfmem's defaults or the flags."""
        self.architecture: dict[str, int] = {}
        """The model's dimensions as the file states them (Architecture field -> value), checked against the model's
        once it is known."""

    # -- reading -------------------------------------------------------------------------------------------
    def fail(self, path: str, expected: str, value: Any) -> InvalidInputError:
        """The one-line error for a value of the wrong shape at `path`."""
        return InvalidInputError(f"{self.label}: {self.prefix}{path} must be {expected}; got {shown(value)}.")

    def raw(self, path: str) -> Any:
        """The value at a dotted key path (None when absent). A value read counts as accounted for; a mapping does
        not (its reader walks its keys), so what it holds that nobody reads stays unknown."""
        node: Any = self.data
        walked: list[str] = []
        for part in path.split("."):
            if node is None:
                break
            if not isinstance(node, dict):
                raise self.fail(".".join(walked), "a mapping", node)
            walked.append(part)
            node = node.get(part)
        if not isinstance(node, dict) or not node:
            self.seen.add(path)
        return node

    def integer(self, path: str) -> int | None:
        """An integer value (an integral float from JSON's 1e9 spelling too); None when absent."""
        value = self.raw(path)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, "an integer", value)
        return value

    def number(self, path: str) -> float | None:
        """An integer or float value; None when absent."""
        value = self.raw(path)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, "a number", value)
        return float(value)

    def boolean(self, path: str) -> bool | None:
        """true/false (or those words as strings, as CLI-written files have them); None when absent."""
        value = self.raw(path)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
            return value.strip().lower() == "true"
        raise self.fail(path, "true or false", value)

    def text(self, path: str) -> str | None:
        """A string value; None when absent."""
        value = self.raw(path)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(path, "a string", value)
        return value

    def names(self, path: str) -> list[str] | None:
        """A list of names, or one comma- or space-separated string of them; None when absent."""
        value = self.raw(path)
        if value is None:
            return None
        if isinstance(value, str):
            return [n for n in value.replace(",", " ").split() if n]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()]
        raise self.fail(path, "a list of names", value)

    def mapping(self, path: str) -> dict | None:
        """A nested mapping (its keys are walked by the caller); None when absent."""
        value = self.raw(path)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(path, "a mapping", value)
        return value

    # -- recording -----------------------------------------------------------------------------------------
    def set(self, field: str, value: Any, path: str) -> None:
        """A TrainingSettings value and the key path it came from."""
        self.values[field] = value
        self.sources[field] = self.prefix + path

    def given_or(self, field: str, value: Any, fallback: Any, path: str) -> None:
        """The file's value for `path`, or where it is silent the framework's `fallback`, its source marked so."""
        if value is None:
            self.set(field, fallback, f"{path} (default)")
        else:
            self.set(field, value, path)

    def default(self, field: str, value: Any, path: str) -> None:
        """The framework's own default for a key the file leaves out, where it differs from hfmem's."""
        if field not in self.values:
            self.values[field] = value
            self.sources[field] = f"{self.prefix}{path} (default)"

    def know(self, *paths: str) -> None:
        """Key paths (and everything under them) that do not change memory."""
        self.seen.update(paths)

    def unmodelled(self, path: str) -> None:
        """A key that changes memory in a way hfmem cannot model."""
        self.seen.add(path)
        if self.prefix + path not in self.flagged:
            self.flagged.append(self.prefix + path)

    def unresolved_value(self, path: str, why: str) -> None:
        """A key whose value the file does not settle: nothing is set from it, and the note says why."""
        self.seen.add(path)
        self.unresolved.setdefault(self.prefix + path, why)

    def unmodelled_if_active(self, *paths: str) -> None:
        """Each key that is present and turned on is unmodelled; off, it is known."""
        for path in paths:
            if active(self.raw(path)):
                self.unmodelled(path)

    def unmodelled_unless(self, path: str, *harmless: Any) -> None:
        """The key is unmodelled when present with a value other than the ones hfmem assumes."""
        value = self.raw(path)
        if value is not None and value not in harmless:
            self.unmodelled(path)

    def absorb(self, other: Draft) -> None:
        """Take a linked file's draft in: its values win (a DeepSpeed JSON's numbers run over "auto")."""
        self.values.update(other.values)
        self.sources.update(other.sources)
        self.flagged += [k for k in other.flagged if k not in self.flagged]
        self.extra_unknown += [other.prefix + k for k in other.unknown()]

    def unknown(self) -> tuple[str, ...]:
        """Key paths of the file the reader never accounted for, in file order."""
        own = tuple(p for p in leaves(self.data) if not covered(p, self.seen))
        return own + tuple(self.extra_unknown)
