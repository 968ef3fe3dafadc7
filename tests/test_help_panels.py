"""`hfmem --help`, run as a user runs it, lists its options in panels: each option under exactly one panel.

The expected placements are the grouping issue #12 asks for (model, training, sharding & GPUs, time & cost,
output), written out here rather than read from the settings' declarations.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer

from hfmem.cli.main import app
from hfmem.cli.scan import scan_app

PANELS = ("Model", "Training", "Sharding & GPUs", "Time & cost", "Serving (-m serve)", "Output")
EXPECTED = {
    "Model": ("--revision", "--token", "--config", "--framework", "--timeout"),
    "Training": ("--method", "--seq-len", "--batch-size", "--grad-accum", "--dtype", "--optimizer",
                 "--gradient-checkpointing", "--attention", "--lora-rank", "--lora-targets", "--qlora-kernel",
                 "--loss-chunks", "--compile-layers"),
    "Sharding & GPUs": ("--num-gpus", "--zero", "--offload-optimizer", "--offload-params", "--gpu",
                        "--gpus-per-node", "--host-ram-gib", "--cuda-context-gib"),
    "Time & cost": ("--tokens", "--epochs", "--dataset-tokens", "--price", "--rank"),
    "Output": ("--format", "--details", "--html"),
}
PANEL_TOP = re.compile(r"^╭─ (.+?) ─")
OPTION_ROW = re.compile(r"^│\s+(--[a-z][\w-]*)")


def help_page(*command: str) -> str:
    """The help page of the real command line, at a width that keeps each option on one row."""
    env = os.environ | {"COLUMNS": "220"}
    done = subprocess.run([sys.executable, "-m", "hfmem", *command, "--help"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def panels_of(page: str) -> dict[str, list[str]]:
    """Each option's long name -> the panels whose rows start with it."""
    where: dict[str, list[str]] = {}
    panel = None
    for line in page.splitlines():
        if top := PANEL_TOP.match(line):
            panel = top.group(1)
        elif line.startswith("╰"):
            panel = None
        elif panel and (row := OPTION_ROW.match(line)):
            where.setdefault(row.group(1), []).append(panel)
    return where


def long_names(command: typer.Typer) -> set[str]:
    """Every option the command accepts, by its first long spelling."""
    params = typer.main.get_command(command).params
    return {next(o for o in p.opts if o.startswith("--")) for p in params if p.param_type_name == "option"}


def test_every_option_sits_under_exactly_one_panel():
    where = panels_of(help_page())
    assert set(where) == long_names(app) | {"--help"}  # every option is listed, in a panel
    doubled = {name: panels for name, panels in where.items() if len(panels) != 1}
    assert not doubled
    shown = list(dict.fromkeys(p for panels in where.values() for p in panels if p in PANELS))
    assert shown == list(PANELS)  # the titles, in this order
    for panel, names in EXPECTED.items():
        assert {name: where[name][0] for name in names} == dict.fromkeys(names, panel)
    general = {name for name, (panel,) in where.items() if panel not in PANELS}
    assert general == {"--help", "--version"}  # only these two outside the five panels


def test_help_texts_are_shown_as_written():
    """Brackets in a help text are not swallowed as rich markup."""
    page = " ".join(help_page().split())
    assert "org/name[@revision]" in page and "[0, 64)" in page


@pytest.mark.parametrize("panel", ["Training", "Sharding & GPUs", "Time & cost"])
def test_scan_groups_the_shared_estimate_flags_too(panel):
    where = panels_of(help_page("scan"))
    assert {name: where.get(name) for name in EXPECTED[panel]} == {name: [panel] for name in EXPECTED[panel]}
