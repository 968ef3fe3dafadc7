"""One model's full report as a JSON-ready dict: the seam shared by `hfmem MODEL`, `hfmem scan` and the Action."""

from __future__ import annotations

from typing import Any

from hfmem.analysis import analyse
from hfmem.hub import HubSettings
from hfmem.modelref import ModelRef


def build_report(ref: ModelRef, settings: HubSettings) -> dict[str, Any]:
    """Analyse the model and return the documented JSON schema (see README.md)."""
    return analyse(ref, settings).to_dict()
