"""The Action and its example workflow pin every action to a commit, keep no token in the checkout, and pass zizmor."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "action.yml", ROOT / "examples" / "workflow.yml"]
PLACEHOLDER = "YOUR-ORG/hfmem@FULL-40-CHARACTER-COMMIT-SHA"
"""The example's reference to a copy the user publishes (docs/action.md: Publishing the Action)."""
PINNED = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}  # v\d+\.\d+\.\d+")


def _uses_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if re.match(r"^\s*(?:- )?uses:", line)]


def test_every_action_is_pinned_to_a_commit_with_its_tag():
    lines = [line for path in FILES for line in _uses_lines(path) if PLACEHOLDER not in line]
    assert lines and all(PINNED.match(line) for line in lines), lines


def test_the_checkout_keeps_no_token_and_permissions_are_minimal():
    example = yaml.safe_load(FILES[1].read_text())
    checkout = next(s for s in example["jobs"]["fit"]["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False
    assert example["permissions"] == {"contents": "read", "pull-requests": "write"}


def test_zizmor_finds_nothing(tmp_path):
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (a test extra)")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    sha = sha if re.fullmatch(r"[0-9a-f]{40}", sha) else "0" * 40  # a clean clone has one; an export may not
    copies = []
    for path in FILES:  # the example as a user has it: their published copy pinned to a commit
        copy = tmp_path / path.name
        copy.write_text(path.read_text().replace(PLACEHOLDER, f"your-org/hfmem@{sha}"))
        copies.append(str(copy))
    result = subprocess.run([zizmor, "--offline", "--no-progress", *copies], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
