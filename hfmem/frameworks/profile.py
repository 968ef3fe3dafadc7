"""A framework profile: the TrainingSettings values a training framework picks when its user says nothing.

Each value carries the URL of the framework's source line that sets it, so a profile is a set of cited facts,
not a guess; what a framework does that no setting expresses yet is listed apart (NOT_MODELLED in its module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def github(repo: str, commit: str) -> str:
    """The blob URL prefix of `repo` ("owner/name") at `commit`: the stem of every Default.source."""
    return f"https://github.com/{repo}/blob/{commit}/"


@dataclass(frozen=True)
class Default:
    """One setting a framework fixes by default, where in its source it does so, and why that changes memory."""

    field: str
    """A TrainingSettings field name."""
    value: Any
    """A value TrainingSettings validates, in its canonical spelling."""
    source: str
    """https://github.com/<owner>/<repo>/blob/<40-hex commit>/<path>#L<n>: the line that sets it."""
    why: str
    """One line: what the framework does there and why it changes memory."""


@dataclass(frozen=True)
class Profile:
    """One framework's defaults: those for every method and those that apply to one method only."""

    name: str
    """The CLI name (--framework NAME)."""
    title: str
    """The framework in words."""
    versions: str
    """The versions (and commits) whose source the defaults were read from."""
    defaults: tuple[Default, ...]
    """Defaults that hold whatever the method."""
    method_defaults: dict[str, tuple[Default, ...]] = field(default_factory=dict)
    """Extra defaults per method ("full", "lora", "qlora"); a field here is never also in `defaults`."""

    def for_method(self, method: str) -> tuple[Default, ...]:
        """Every default that applies when training with `method`."""
        return self.defaults + self.method_defaults.get(method, ())

    def values(self, method: str) -> dict[str, Any]:
        """The defaults for `method` as TrainingSettings keyword arguments."""
        return {d.field: d.value for d in self.for_method(method)}
