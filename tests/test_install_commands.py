"""The README's two first-screen commands take torch's CPU build everywhere, and .ci/run installs what they do."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
FIRST_SCREEN = 24
"""Lines a 24-row terminal or a browser's first view shows of the README."""


def _first_screen_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [line for line in text.split("```bash", 1)[1].split("```", 1)[0].splitlines()
            if line.startswith("python3 -m venv")]


def test_both_commands_install_torchs_cpu_build_first():
    commands = _first_screen_commands()
    assert len(commands) == 2
    for command in commands:
        steps = [s.strip() for s in command.split("&&")]
        torch_step = next(i for i, s in enumerate(steps) if s.startswith("pip install torch=="))
        assert CPU_INDEX in steps[torch_step]
        assert torch_step < next(i for i, s in enumerate(steps) if re.match(r"pip install (-e )?[.\"]", s))


def test_both_commands_are_on_the_first_screen_with_their_durations():
    """A fresh reader sees both commands in the first 24 lines, each under a comment giving its measured time."""
    screen = (ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN]
    starts = [i for i, line in enumerate(screen) if line.startswith("python3 -m venv")]
    assert len(starts) == 2 and all(re.search(r"\b\d+ min \d+ s\b", screen[i - 1]) for i in starts)
    assert ["example:" in screen[starts[0]], "pytest" in screen[starts[1]]] == [True, True]
    assert not any("retr" in line.lower() or "pip warns" in line for line in screen), "pip's retries are not news here"


def test_ci_installs_and_runs_the_readme_test_command():
    test_command = _first_screen_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text()
    for step in test_command.split("&&")[2:]:  # past the venv and its activation
        words = step.split()
        ci_line = next((line for line in ci.splitlines() if line.split("#")[0].split() and
                        [w for w in line.split("#")[0].split() if w != "-q"] == words), None)
        assert ci_line is not None, f".ci/run lacks the README's step: {step.strip()}"
