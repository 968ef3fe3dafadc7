"""Declaring a training setting: its check, its CLI spelling and the estimate parts it affects, as field metadata.

A TrainingSettings (or Overhead) field is set to `setting(default, check, ...)` and documented by its attribute
docstring. The CLI flags, validation, the memo keys and docs/settings.md's table all walk `dataclasses.fields`
and read this metadata, so a setting is declared in one place. Pure Python: no torch, transformers or Hub.
"""

from __future__ import annotations

import ast
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from hfmem.errors import InvalidInputError

SETTING = "hfmem.setting"
"""The metadata key of a field's Setting."""

Part = Literal["split", "trainability", "state", "activations"]
PARTS: dict[Part, tuple[Part, ...]] = {
    "split": (),
    "trainability": (),
    "state": ("split",),
    "activations": ("trainability",),
}
"""The memoised parts of an estimate, each with the parts it is computed from: the parameter split (trainable
and frozen counts), trainability (what gets gradients, how LoRA adapters hold their inputs), the model state
per GPU (built on the split) and the activations (built on trainability)."""

Code = Callable[[str], str]
"""How a description writes a literal value: as is (str) for --help, in backticks for docs/settings.md."""

MODEL_PANEL, TRAINING_PANEL, SHARDING_PANEL, TIME_PANEL, SERVING_PANEL, OUTPUT_PANEL = PANELS = (
    "Model", "Training", "Sharding & GPUs", "Time & cost", "Serving (-m serve)", "Output")
"""The groups `hfmem --help` lists its options in, in this order; every setting names the one of its flag."""


class Check(ABC):
    """How one setting's value is checked and normalised, and what it accepts, in words."""

    cli_type: type = str
    """The Python type its flag parses the command line into."""

    @abstractmethod
    def __call__(self, name: str, value: Any) -> Any:
        """The normalised value; InvalidInputError naming `name` if it is not acceptable."""

    @abstractmethod
    def describe(self, code: Code = str) -> str:
        """What it accepts, in words, literals written by `code`."""

    def cli_value(self, value: Any) -> Any:
        """A value (the field's default) as its flag takes it."""
        return value


class Choice(Check):
    """One of `names`, case-insensitive, or one of their aliases: the names are exactly the alias table's values."""

    def __init__(self, names: tuple[str, ...], aliases: dict[str, str] | None = None) -> None:
        stray = sorted(set((aliases or {}).values()) - set(names))
        if stray:
            raise ValueError(f"aliases point outside the choices {names}: {stray}")
        self.names = names
        self.table = {n.lower(): n for n in names} | {a.lower(): n for a, n in (aliases or {}).items()}

    def __call__(self, name: str, value: Any) -> str:
        key = str(value).strip().lower()
        if key not in self.table:
            raise InvalidInputError(f"{name} must be one of {', '.join(self.names)}; got {value!r}.")
        return self.table[key]

    def describe(self, code: Code = str) -> str:
        def one(name: str) -> str:
            also = [alias for alias, target in self.table.items() if target == name and alias != name.lower()]
            return code(name) + (f" ({', '.join(map(code, also))})" if also else "")

        return ", ".join(one(n) for n in self.names)


class Integer(Check):
    """An integer from `low` up to a bound no real training run reaches."""

    cli_type = int
    HIGH = 1 << 24

    def __init__(self, low: int) -> None:
        self.low = low

    def __call__(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.low:
            raise InvalidInputError(f"{name} must be an integer >= {self.low}; got {value!r}.")
        if value > self.HIGH:
            raise InvalidInputError(f"{name} = {value:,} is beyond any real training run.")
        return value

    def describe(self, code: Code = str) -> str:
        return f"an integer >= {self.low}"


class Number(Check):
    """A number in the half-open range [low, high)."""

    cli_type = float

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def __call__(self, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value < self.high:
            raise InvalidInputError(f"{name} must be in [{self.low:g}, {self.high:g}); got {value!r}.")
        return float(value)

    def describe(self, code: Code = str) -> str:
        return f"a number in [{self.low:g}, {self.high:g})"


class Boolean(Check):
    """True or false (a --name/--no-name flag pair on the command line)."""

    cli_type = bool

    def __call__(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise InvalidInputError(f"{name} must be true or false; got {value!r}.")
        return value

    def describe(self, code: Code = str) -> str:
        return "on or off"


class OrNone(Check):
    """None (the setting's derived default, see its `shown` text) or what `inner` accepts."""

    def __init__(self, inner: Check) -> None:
        self.inner = inner
        self.cli_type = inner.cli_type

    def __call__(self, name: str, value: Any) -> Any:
        return None if value is None else self.inner(name, value)

    def describe(self, code: Code = str) -> str:
        return self.inner.describe(code)


class Parsed(Check):
    """A value read by a parser of its own, given on the command line as text."""

    def __init__(self, parse: Callable[[Any], Any], accepts: str, to_text: Callable[[Any], str] = str) -> None:
        self.parse, self.accepts, self.to_text = parse, accepts, to_text

    def __call__(self, name: str, value: Any) -> Any:
        return self.parse(value)

    def describe(self, code: Code = str) -> str:
        return self.accepts

    def cli_value(self, value: Any) -> str:
        return self.to_text(value)


class Group(Check):
    """A frozen dataclass of settings of its own (its fields are flags of their own, checked one by one)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __call__(self, name: str, value: Any) -> Any:
        if not isinstance(value, self.cls):
            shape = ", ".join(f"{f.name}=..." for f in fields(self.cls))
            raise InvalidInputError(f"{name} must be an {self.cls.__name__}({shape}).")
        return type(value)(**validated_fields(value))

    def describe(self, code: Code = str) -> str:
        return ", ".join(f.name for f in fields(self.cls))


@dataclass(frozen=True)
class Setting:
    """What a field declares besides its default and docstring."""

    check: Check
    flags: tuple[str, ...] = ()
    """Its CLI spellings, long first, where they differ from --field-name."""
    affects: tuple[Part, ...] | None = None
    """The PARTS that read it directly (memo keys include it); None: every part (the safe default); (): none
    (it only enters the final sum)."""
    shown: str | None = None
    """The default in words, where the value does not say it (a None resolved later)."""
    many: bool = False
    """The flag repeats and takes comma-separated lists: the plan estimates each value, the setting holds one."""
    panel: str = ""
    """The PANELS group its flag is listed under in --help ("" only for a Group, whose fields name their own)."""


def setting(default: Any, check: Check, *, flags: tuple[str, ...] = (), affects: tuple[Part, ...] | None = None,
            shown: str | None = None, many: bool = False, panel: str = "") -> Any:
    """A settings field: its default, check and CLI metadata (a Group's default is built from its class)."""
    unknown = set(affects or ()) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown estimate parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if panel not in PANELS and not (isinstance(check, Group) and not panel):
        raise ValueError(f"panel {panel!r}: a setting's flag is listed under one of {', '.join(PANELS)}")
    metadata = {SETTING: Setting(check, flags, affects, shown, many, panel)}
    if isinstance(check, Group):
        return field(default_factory=check.cls, metadata=metadata)
    return field(default=default, metadata=metadata)


def setting_of(f: Field) -> Setting:
    """The Setting a field declares; TypeError for a field declared without `setting(...)`."""
    if SETTING not in f.metadata:
        raise TypeError(f"settings field {f.name!r} must be declared with setting(...)")
    return f.metadata[SETTING]


def validated_fields(obj: Any) -> dict[str, Any]:
    """Every field of a settings dataclass, checked and normalised by its own check."""
    return {f.name: setting_of(f).check(f.name, getattr(obj, f.name)) for f in fields(obj)}


@cache
def _module_tree(path: str) -> ast.Module:
    """A source file's syntax tree, parsed once however many classes it holds."""
    return ast.parse(Path(path).read_text(encoding="utf-8"))


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string right below it in the class body), whitespace collapsed."""
    tree = _module_tree(inspect.getsourcefile(cls))
    body = next(n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    docs = {}
    for node, after in pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    missing = [f.name for f in fields(cls) if f.name not in docs]
    if missing:
        raise TypeError(f"{cls.__name__} fields without a docstring: {', '.join(missing)}")
    return docs


def _inputs(part: Part) -> set[Part]:
    """The part and every part it is computed from."""
    return {part}.union(*(_inputs(p) for p in PARTS[part]))


@cache
def key_fields(cls: type, part: Part) -> tuple[str, ...]:
    """The fields an estimate part (or a part it is built from) reads: what its memo key holds."""
    reads = _inputs(part)
    return tuple(f.name for f in fields(cls) if (a := setting_of(f).affects) is None or reads & set(a))


def memo_key(obj: object, part: Part) -> tuple:
    """The values `part` of an estimate depends on: equal keys, equal results."""
    return tuple(getattr(obj, name) for name in key_fields(type(obj), part))  # type: ignore[arg-type]  # classes hash
