"""Write `hfmem MODEL --format json` for every fixture model into a folder, to diff a refactor's output.

    python bench/json_snapshot.py BEFORE                   # one JSON file per model
    python bench/json_snapshot.py AFTER --against BEFORE   # the same, then the models whose JSON differs

Models: every `example:` config, every `fixtures/configs/**/config.json` and every repo of
`fixtures/hub` served by the test Hub (`tests/hubserver.py`, with its granted token), so the real
client, the headers and the cross-check run too. The runs are in-process through the CLI's own
`run`, with fresh caches, and failures are kept as their exit code and one-line message, so a
changed refusal shows up as well. Files are compared as parsed JSON (key order aside).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from hubserver import GRANTED_TOKEN, HubServer  # noqa: E402


def models() -> list[str]:
    """Every fixture model as a MODEL argument, in a stable order."""
    examples = sorted(f"example:{p.name}" for p in (ROOT / "hfmem" / "examples").iterdir() if p.is_dir())
    configs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fixtures" / "configs").rglob("config.json"))
    return examples + configs + hub_repos()


def hub_repos() -> list[str]:
    """The test Hub's repo ids (the `main` tree of each `fixtures/hub/<org>/<name>`)."""
    return sorted(f"{org.name}/{repo.name}" for org in (ROOT / "fixtures" / "hub").iterdir() if org.is_dir()
                  for repo in org.iterdir() if repo.is_dir() and "@" not in repo.name)


def snapshot(model: str) -> str:
    """The CLI's JSON for one model (or its exit code and stderr line), as text."""
    from hfmem.cli.main import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run([model, "--format", "json", "--token", GRANTED_TOKEN])
    if code:
        return json.dumps({"exit_code": code, "stderr": err.getvalue().strip()}, indent=2) + "\n"
    return out.getvalue()


def differing(before: Path, after: Path) -> list[str]:
    """Names of the snapshot files whose parsed JSON differs (or that exist on one side only)."""
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})

    def parsed(folder: Path, name: str) -> object:
        path = folder / name
        return json.loads(path.read_text()) if path.exists() else None

    return [n for n in names if parsed(before, n) != parsed(after, n)]


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--against"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    target = Path(argv[0]).resolve()
    before = Path(argv[2]).resolve() if len(argv) == 3 else None
    target.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    os.environ["HFMEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="hfmem-snapshot-")
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hfmem-snapshot-hf-")
    with HubServer(ROOT / "fixtures" / "hub") as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        for model in models():
            name = model.replace(":", "_").replace("/", "__") + ".json"
            (target / name).write_text(snapshot(model))
    if before is None:
        return 0
    changed = differing(before, target)
    print("\n".join(changed) + f"\n{len(changed)} of {len(models())} models differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
