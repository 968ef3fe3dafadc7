"""Every relative link in the README, CONTRIBUTING.md, ARCHITECTURE.md and docs/ leads to a file, and its `#anchor`
to a heading of that file as GitHub names it, so moving a section cannot strand a link to it."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")])
REMOVED = ("No", "Pe", "Pf", "Pi", "Ps", "Po", "Pd", "S", "Cc", "Co", "Cf", "Cn", "Z")
"""Unicode categories GitHub's anchor slugs drop (github-slugger's script/generate-regex.mjs): other numbers,
punctuation but `-`, symbols, controls, private use, format, unassigned and separators but the space."""
PARSER = MarkdownIt("commonmark").enable("table")


def slug(text: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, REMOVED characters dropped (letters kept), spaces as -."""
    kept = (ch for ch in text.lower() if ch in " -" or ch.isalpha() or not unicodedata.category(ch).startswith(REMOVED))
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown text; a repeated slug gets -1, -2, ... as github-slugger numbers them."""
    seen: dict[str, int] = {}
    tokens = PARSER.parse(text)
    for opening, inline in zip(tokens, tokens[1:], strict=False):
        if opening.type != "heading_open":
            continue
        words = "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))
        base = result = slug(words)
        while result in seen:
            seen[base] += 1
            result = f"{base}-{seen[base]}"
        seen[result] = 0
    return set(seen)


def targets(text: str) -> list[str]:
    """Every link and image target of a markdown text, code blocks and inline code left out."""
    found = []
    for token in PARSER.parse(text):
        for child in token.children or []:
            if child.type in ("link_open", "image"):
                found.append(str(child.attrs["href" if child.type == "link_open" else "src"]))
    return found


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `page` whose file or `#anchor` does not exist (web and mail links are not checked)."""
    problems = []
    for target in targets(page.read_text(encoding="utf-8")):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        if not path.exists():
            problems.append(f"{target}: no file {name}")
        elif parts.fragment and (path.suffix != ".md" or unquote(parts.fragment) not in anchors(path.read_text())):
            problems.append(f"{target}: no heading #{parts.fragment} in {name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_the_documentation_pages_link_each_other() -> None:
    every = {target.split("#")[0] for page in PAGES for target in targets(page.read_text(encoding="utf-8"))}
    linked = {Path(target).name for target in every if target.endswith(".md")}
    assert {page.name for page in (ROOT / "docs").glob("*.md")} <= linked


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Each chart as a file: `--plot-dir`", "each-chart-as-a-file---plot-dir"),
    ("JSON schema (`--format json`, `schema_version` 6)", "json-schema---format-json-schema_version-6"),
    ("Scanning many models: `hfmem scan`", "scanning-many-models-hfmem-scan"),
    ("Fit ≤ 80 GiB ✓ — 2×H100", "fit--80-gib---2h100"),
    ("Élan vital", "élan-vital"),
])
def test_anchors_follow_githubs_slug_rules(heading: str, anchor: str) -> None:
    assert anchors(f"# {heading}\n") == {anchor}


def test_a_repeated_heading_is_numbered() -> None:
    assert anchors("# Usage\n\n## Usage\n\n### Usage\n") == {"usage", "usage-1", "usage-2"}


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Real heading\n")
    page = tmp_path / "page.md"
    page.write_text("# Here\n\n[ok](other.md#real-heading) [self](#here) [web](https://example.com/x#y)\n\n"
                    "| a | b |\n|---|---|\n| [gone](missing.md) | [bad](other.md#nope) |\n\n"
                    "```\n[in code](nowhere.md)\n```\n![img](pic.png) `[inline](nowhere.md)`\n")
    assert broken(page, tmp_path) == ["missing.md: no file missing.md", "other.md#nope: no heading #nope in other.md",
                                      "pic.png: no file pic.png"]
