"""pr_configs: which local config files the Action reports on, and their base versions from git."""

import subprocess
from pathlib import Path

import pytest

from hfmem.github import pr_configs
from hfmem.errors import InvalidInputError


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text('{"v": 1}')
    (tmp_path / "b.json").write_text('{"v": 1}')
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "base")
    base = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "a" / "config.json").write_text('{"v": 2}')
    (tmp_path / "c.json").write_text('{"v": 3}')
    return tmp_path, base


def test_changed_and_added_only(repo):
    root, base = repo
    files, why = pr_configs.collect(["**/*.json"], root, base)
    assert why is None
    assert [(f.path, f.status, f.base) for f in files] == [("a/config.json", "modified", b'{"v": 1}'), ("c.json", "added", None)]


def test_without_a_pull_request_every_match(repo):
    root, _ = repo
    files, why = pr_configs.collect(["*.json", "a/*.json"], root, None)
    assert why == "not a pull request" and [f.path for f in files] == ["a/config.json", "b.json", "c.json"]
    assert {f.status for f in files} == {"no-base"}


def test_reasons_for_no_diff(repo, monkeypatch):
    root, _ = repo
    assert "is not in this clone" in pr_configs.collect(["*.json"], root, "e" * 40)[1]
    monkeypatch.setattr(pr_configs.shutil, "which", lambda name: None)
    assert pr_configs.collect(["*.json"], root, "e" * 40)[1] == "git is not installed"


@pytest.mark.parametrize("pattern", ["../*.json", "/etc/*.json", "a/../../x.json"])
def test_globs_stay_in_the_workspace(repo, pattern):
    with pytest.raises(InvalidInputError, match="relative to the workspace"):
        pr_configs.collect([pattern], repo[0], None)


def test_base_sha_is_validated(repo):
    with pytest.raises(InvalidInputError, match="not a commit id"):
        pr_configs.collect(["*.json"], repo[0], "--output=/tmp/x")


def test_directory_link_loops_are_not_followed(repo):
    """`configs/loop -> .` twice made glob.glob walk about 2^40 paths; the walk now ends, links not descended."""
    import threading

    root, _ = repo
    (root / "a" / "loop").symlink_to(root / "a")
    (root / "a" / "back").symlink_to(root)
    result: list = []
    walker = threading.Thread(target=lambda: result.append(pr_configs.match_configs(["**/*.json"], root)), daemon=True)
    walker.start()
    walker.join(timeout=30)
    assert result, "the glob walk did not finish"
    assert [rel for rel, _ in result[0]] == ["a/config.json", "b.json", "c.json"]


def test_hidden_parts_match_only_when_named(repo):
    root, _ = repo
    (root / ".cache").mkdir()
    (root / ".cache" / "config.json").write_text("{}")
    assert ".cache/config.json" not in [rel for rel, _ in pr_configs.match_configs(["**/*.json"], root)]
    assert [rel for rel, _ in pr_configs.match_configs([".cache/*.json"], root)] == [".cache/config.json"]


def test_too_many_matches_stop_the_walk(repo, monkeypatch):
    root, _ = repo
    monkeypatch.setattr(pr_configs, "MAX_CONFIGS", 2)
    with pytest.raises(InvalidInputError, match="more than 2 files"):
        pr_configs.match_configs(["**/*.json"], root)
