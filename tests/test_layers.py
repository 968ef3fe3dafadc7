"""The package's layers: every import inside hfmem points down the stack (ARCHITECTURE.md), never up or sideways."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hfmem"

# Lower number = lower layer. A module may import its own layer's package and any lower layer.
LAYERS = {
    "errors": 0, "units": 0, "constants": 0, "text": 0,
    "hub": 1, "hardware": 1,
    "model": 2,
    "memory": 3, "compute": 3,  # compute: FLOPs and roofline time, beside memory (neither imports the other)
    # serving memory: an engine's reserve and KV capacity, over memory/'s KV cache per token; under the report
    "serving": 3.5,
    "render": 4, "scan": 4, "configs": 4, "frameworks": 4, "reporting": 4,
    "cli": 5, "github": 5,
    "_readme": 6, "api": 6,  # docs/ tables generated from any layer's tables
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


def module_name(path: Path, package: Path) -> str:
    """hfmem/memory/fit.py -> 'hfmem.memory.fit'; a package's __init__.py -> the package's name."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of `package` and the modules of it that it imports, at any depth: `from pkg import name` counts
    as importing the submodule pkg.name when there is one, else the package itself. The top package is left out:
    it is every module's parent, run before any of them, holding only `__version__` and the lazy API names
    (`from hfmem import estimate` inside the package is an import against the layers, test_imports_point_down)."""
    modules = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    del modules[package.name]
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package.name:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in modules}
        graph[name] = (targets & modules.keys()) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            if component:
                found.append(sorted([*component, node]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    """No two modules of hfmem import each other, directly or through others, lazy imports inside functions included:
    a cycle works only while every import in it stays lazy, and hides which module builds on which."""
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path: Path) -> None:
    """A cycle closed by an import inside a function, through a `from package import module`, is found."""
    package = tmp_path / "hfmem"
    (package / "memory").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "memory" / "__init__.py").write_text("")
    (package / "memory" / "a.py").write_text("from hfmem.memory import b\n")
    (package / "memory" / "b.py").write_text("def f():\n    from hfmem.memory.c import g\n")
    (package / "memory" / "c.py").write_text("import hfmem.memory.a\n")
    (package / "memory" / "d.py").write_text("from hfmem.memory.a import x\n")
    assert cycles(import_graph(package)) == [["hfmem.memory.a", "hfmem.memory.b", "hfmem.memory.c"]]


def test_module_names_are_unique() -> None:
    """Each module's file name says its job once in the package: a name in a traceback or an import is unambiguous."""
    seen: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in {"__init__.py", "__main__.py"}:
            seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    repeated = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not repeated, f"module names used more than once: {repeated}"
