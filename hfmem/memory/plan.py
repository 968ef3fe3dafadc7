"""One model's full report as a JSON-ready dict: the seam shared by `hfmem MODEL`, `hfmem scan` and the Action.

The report is the model's analysis (architecture, parameters, cross-check) plus, for a Plan
(training settings, methods, GPUs), one estimate per method and the fit matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hfmem.model.load import ModelReport, SettingsSource, analyse
from hfmem.hardware.gpus import Gpu
from hfmem.hub.modelref import ModelRef
from hfmem.memory.settings import METHODS, TrainingSettings


@dataclass(frozen=True)
class Plan:
    """What to estimate: one set of training settings, the methods to compare and the GPUs (() = catalogue)."""

    training: TrainingSettings = field(default_factory=TrainingSettings)
    methods: tuple[str, ...] = METHODS
    gpus: tuple[Gpu, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"training": self.training.to_dict(), "methods": list(self.methods),
                "gpus": [g.to_dict() for g in self.gpus] or "catalogue"}


def build_report(ref: ModelRef, settings: SettingsSource, plan: Plan | None = None, *,
                 curves: bool = False) -> dict[str, Any]:
    """Analyse the model and return the documented JSON schema (see README.md)."""
    return with_estimates(analyse(ref, settings), plan or Plan(), curves=curves)


def with_estimates(result: ModelReport, plan: Plan, *, curves: bool = False) -> dict[str, Any]:
    """The analysis as a dict, plus `warnings[]`, `estimates[]` (one per method) and `fit[]` (method x GPU);
    with `curves`, also `curves` (memory against sequence length and micro-batch, hfmem.memory.curves)."""
    from hfmem.memory.curves import memory_curves
    from hfmem.memory.estimate import estimate
    from hfmem.memory.fit import fit_matrix
    from hfmem.memory.warnings import warnings_for
    from hfmem.hardware.gpus import catalogue

    arch, inventory = result.architecture, result.inventory
    training = plan.training.validated()
    estimates = [estimate(arch, inventory, replace(training, method=m).validated()).to_dict() for m in plan.methods]
    fits = fit_matrix(arch, inventory, training, plan.gpus or catalogue(), plan.methods)
    report = result.to_dict() | {"plan": plan.to_dict(), "warnings": warnings_for(arch, result.config, training, fits),
                                 "estimates": estimates, "fit": [f.to_dict() for f in fits]}
    if curves:
        report["curves"] = memory_curves(arch, inventory, training, plan.methods)
    return report
