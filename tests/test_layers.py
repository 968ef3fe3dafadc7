"""The package's layers: every import inside hfmem points down the stack (ARCHITECTURE.md), never up or sideways."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hfmem"

# Lower number = lower layer. A module may import its own layer's package and any lower layer.
LAYERS = {
    "errors": 0, "units": 0, "constants": 0,
    "hub": 1, "hardware": 1,
    "model": 2,
    "memory": 3, "compute": 3,  # compute: FLOPs and roofline time, beside memory (neither imports the other)
    "render": 4, "scan": 4, "configs": 4, "frameworks": 4, "reporting": 4,
    "cli": 5, "github": 5,
    "_readme": 6, "api": 6,  # README sections generated from any layer's tables
    "entry": 6,  # the programs' entry points: Ctrl-C caught before the cli and github layers load
}
TOP_LEVEL = {"__init__", "__main__"}


def layer_of(module: str) -> str:
    """'hfmem.memory.fit' -> 'memory'; 'hfmem.errors' -> 'errors'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports(path: Path) -> list[tuple[int, str]]:
    """Every hfmem module a file imports, at any depth (lazy imports inside functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hfmem":
            if node.module == "hfmem":
                found += [(node.lineno, f"hfmem.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "hfmem"]
    return found


def test_every_module_belongs_to_a_layer() -> None:
    names = {p.stem if p.parent == PACKAGE else p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py")}
    assert names - TOP_LEVEL <= set(LAYERS), f"modules outside any layer: {sorted(names - TOP_LEVEL - set(LAYERS))}"


def test_imports_point_down() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if own in TOP_LEVEL:
            continue
        for line, module in imports(path):
            other = layer_of(module)
            if other == "__version__" or other == own:
                continue
            if other not in LAYERS or LAYERS[other] >= LAYERS[own]:
                wrong.append(f"{rel}:{line} ({own}) imports {module} ({other})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The walker finds lazy imports inside functions, so a violation hidden in a function is caught."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from hfmem.render.table import render\n    import hfmem.cli.main\n")
    assert [m for _, m in imports(sample)] == ["hfmem.render.table", "hfmem.cli.main"]
